#!/usr/bin/env bash
# Idempotently install what scripts/vm/run.sh needs to boot a cgroup-v2 guest.
#
#   - qemu-system-x86 (Debian bookworm's package; it ships qemu-system-x86_64),
#     busybox-static, cpio, xz-utils, zstd, procps, jq, erofs-utils: installed with apt-get
#     (--no-install-recommends), only those missing.
#   - Debian's guest kernel (linux-image-amd64 -> linux-image-<abi>-amd64) is NOT
#     installed into this host: `apt-get install linux-image-amd64` here would pull
#     initramfs-tools, udev and a systemd upgrade. Instead the .deb is fetched with
#     `apt-get download` and unpacked with `dpkg-deb -x` under build/vm/kernel/,
#     which runs no maintainer scripts and touches nothing outside build/vm/.
#
# Prints the kernel path and its modules directory on success.
# Env: VM_BUILD (default <repo>/build/vm), VM_KERNEL_PKG (default: what
# linux-image-amd64 depends on).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
build=${VM_BUILD:-$repo/build/vm}
mkdir -p "$build"

need_apt=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || need_apt+=(qemu-system-x86)
{ [ -x /bin/busybox ] && /bin/busybox --list 2>/dev/null | grep -x switch_root >/dev/null \
  && dpkg -s busybox-static >/dev/null 2>&1; } || need_apt+=(busybox-static)
command -v cpio >/dev/null 2>&1 || need_apt+=(cpio)
command -v gzip >/dev/null 2>&1 || need_apt+=(gzip)
command -v dpkg-deb >/dev/null 2>&1 || need_apt+=(dpkg)
command -v xz >/dev/null 2>&1 || need_apt+=(xz-utils)
command -v zstd >/dev/null 2>&1 || need_apt+=(zstd)
command -v pkill >/dev/null 2>&1 || need_apt+=(procps)
command -v jq >/dev/null 2>&1 || need_apt+=(jq)   # smoke.sh edits runc's config.json
command -v mkfs.erofs >/dev/null 2>&1 || need_apt+=(erofs-utils)   # the vm backend's read-only images

apt_updated=0
apt_update() {
  if [ "$apt_updated" = 0 ]; then
    apt-get update -qq
    apt_updated=1
  fi
}

if [ "${#need_apt[@]}" -gt 0 ]; then
  echo "deps: apt-get install ${need_apt[*]}" >&2
  apt_update
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" \
    >"$build/apt.log" 2>&1 || { cat "$build/apt.log" >&2; exit 1; }
fi

# Resolve the versioned kernel package behind linux-image-amd64.
pkg=${VM_KERNEL_PKG:-}
if [ -z "$pkg" ]; then
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}' || true)
  if [ -z "$pkg" ]; then
    apt_update
    pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  fi
fi
[ -n "$pkg" ] || { echo "deps: cannot resolve linux-image-amd64" >&2; exit 1; }
kver=${pkg#linux-image-}

kroot=$build/kernel/$kver
if [ ! -f "$kroot/.complete" ]; then
  echo "deps: fetching $pkg (unpacked under $kroot, not installed)" >&2
  rm -rf "$kroot" "$build/debs/$pkg"
  mkdir -p "$build/debs/$pkg" "$kroot"
  # (as root, apt's _apt sandbox user could not write here: download as root)
  ( cd "$build/debs/$pkg" && dl() { apt-get -q -o APT::Sandbox::User=root download "$pkg" >&2; } && { dl || { apt_update; dl; }; } )
  deb=$(ls "$build/debs/$pkg"/*.deb | head -n1)
  dpkg-deb -x "$deb" "$kroot"
  # keep what the guest needs: the kernel, its config and modules; drop the .deb
  rm -rf "$build/debs/$pkg"
  mods=$kroot/lib/modules/$kver
  [ -d "$mods" ] || mods=$kroot/usr/lib/modules/$kver
  [ -f "$kroot/boot/vmlinuz-$kver" ] && [ -d "$mods" ] || { echo "deps: unexpected package layout" >&2; exit 1; }
  touch "$kroot/.complete"
fi

# The bzImage is XZ-compressed, and decompressing it under TCG takes ~3 s of
# every boot. Unpack the ELF vmlinux once; qemu boots it directly through its
# PVH entry (CONFIG_PVH=y), which halves the boot time.
vmlinux=$kroot/boot/vmlinux-$kver
if [ ! -s "$vmlinux" ]; then
  bz=$kroot/boot/vmlinuz-$kver
  for magic in '\xfd7zXZ\x00:xz -dc --single-stream' '\x28\xb5\x2f\xfd:zstd -qdc' '\x1f\x8b\x08:gzip -dc'; do
    pat=${magic%%:*} dec=${magic#*:}
    for off in $(LC_ALL=C grep -obUaP "$pat" "$bz" | cut -d: -f1); do
      if tail -c +"$((off + 1))" "$bz" | $dec > "$vmlinux.tmp" 2>/dev/null || [ -s "$vmlinux.tmp" ]; then
        if [ "$(head -c 4 "$vmlinux.tmp" | od -An -c | tr -d ' ')" = '177ELF' ]; then
          mv "$vmlinux.tmp" "$vmlinux"; break 2
        fi
      fi
    done
  done
  rm -f "$vmlinux.tmp"
fi
if [ -s "$vmlinux" ]; then
  ln -sfn "kernel/$kver/boot/vmlinux-$kver" "$build/vmlinux"
else
  echo "deps: could not unpack vmlinux; run.sh will boot the (slower) bzImage" >&2
  rm -f "$build/vmlinux"
fi
mods=$kroot/lib/modules/$kver
[ -d "$mods" ] || mods=$kroot/usr/lib/modules/$kver
ln -sfn "kernel/$kver/boot/vmlinuz-$kver" "$build/vmlinuz"
if [ -s "$vmlinux" ]; then echo "kernel=$vmlinux"; else echo "kernel=$kroot/boot/vmlinuz-$kver"; fi
echo "modules=$mods"

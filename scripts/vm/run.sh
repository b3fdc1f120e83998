#!/usr/bin/env bash
# Run a command inside a throwaway cgroup-v2 Linux guest (qemu microvm) and
# bring its results back. See README.md beside it.
#
# usage: scripts/vm/run.sh --out DIR [--payload DIR] [--kernel PATH [--kver V] [--modules DIR]]
#          [--timeout SECS] [--boot-timeout SECS] [--cmd-timeout SECS]
#          [--mem MIB] [--accel auto|kvm|tcg] [--retries N] [--env K=V]...
#          [--module NAME]... [--transport disk|serial] [--out-size MIB]
#          [--tsc-khz KHZ] [--keep] [--quiet] [--debug] -- CMD [ARG...]
#
# Results in --out DIR: out/ (the guest's /out), stdout, stderr, exit_code,
# guest.txt (kernel, controllers), console.log, run.env (timings, accel,
# attempts). The script prints CMD's stdout/stderr to its own and exits with
# CMD's exit code; 124 if CMD hit its timeout in the guest; 125 if no result
# came back (boot hang, crash) after the retries.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${VM_BUILD:-$repo/build/vm}

kernel= kver= modules_dir= payload= out= timeout=300 boot_timeout=60 cmd_timeout=
mem=512 accel=${VM_ACCEL:-auto} retries=1 transport=disk out_size=256 keep=0 quiet=0
debug=${VM_DEBUG:-0} tsc_khz=${VM_TSC_KHZ:-}
envs=() extra_modules=()
default_modules=(virtio_mmio virtio_blk virtio_console overlay loop ext4 crc32c_generic veth)

die() { echo "vm/run.sh: $*" >&2; exit 125; }
note() { [ "$quiet" = 1 ] || echo "vm: $*" >&2; }
usage() { sed -n '2,/^set /p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2; exit 125; }

while [ $# -gt 0 ]; do
  case "$1" in
    --kernel) kernel=$2; shift 2 ;;
    --modules) modules_dir=$2; shift 2 ;;
    --kver) kver=$2; shift 2 ;;
    --payload) payload=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --boot-timeout) boot_timeout=$2; shift 2 ;;
    --cmd-timeout) cmd_timeout=$2; shift 2 ;;
    --mem) mem=$2; shift 2 ;;
    --accel) accel=$2; shift 2 ;;
    --retries) retries=$2; shift 2 ;;
    --env) envs+=("$2"); shift 2 ;;
    --module) extra_modules+=("$2"); shift 2 ;;
    --transport) transport=$2; shift 2 ;;
    --out-size) out_size=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --quiet) quiet=1; shift ;;
    --debug) debug=1; shift ;;
    --tsc-khz) tsc_khz=$2; shift 2 ;;
    -h|--help) usage ;;
    --) shift; break ;;
    *) echo "vm/run.sh: unknown argument: $1" >&2; usage ;;
  esac
done
[ $# -gt 0 ] || { echo "vm/run.sh: no command after --" >&2; usage; }
[ -n "$out" ] || { echo "vm/run.sh: --out DIR is required" >&2; usage; }
case "$accel" in auto|kvm|tcg) ;; *) die "--accel must be auto, kvm or tcg" ;; esac
case "$transport" in disk|serial) ;; *) die "--transport must be disk or serial" ;; esac
for n in "$timeout" "$boot_timeout" "$mem" "$retries" "$out_size"; do
  [[ "$n" =~ ^[0-9]+$ ]] || die "not a number: $n"
done
# The guest kills CMD (whole payload cgroup) a little before the host watchdog,
# so a slow command still returns its partial results instead of a retry.
[ -n "$cmd_timeout" ] || cmd_timeout=$(( timeout > 60 ? timeout - 30 : timeout * 2 / 3 ))
[ "$(id -u)" = 0 ] || die "must run as root (mknod for /dev/console in the initramfs)"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 missing: run scripts/vm/deps.sh"
[ -x /bin/busybox ] || die "/bin/busybox missing: run scripts/vm/deps.sh"
command -v cpio >/dev/null || die "cpio missing: run scripts/vm/deps.sh"

# --- kernel and its modules ---------------------------------------------------
if [ -z "$kernel" ]; then
  for k in "$build/vmlinux" "$build/vmlinuz"; do
    [ -e "$k" ] && { kernel=$(readlink -f "$k"); break; }
  done
  [ -n "$kernel" ] || die "no kernel: run scripts/vm/deps.sh or pass --kernel"
fi
[ -f "$kernel" ] || die "kernel not found: $kernel"
# The version comes from the file name (vmlinuz-VER, vmlinux-VER) unless --kver.
kver=${kver:-$(basename "$kernel")}; kver=${kver#vmlinu[xz]-}
if [ -z "$modules_dir" ]; then
  kdir=$(cd "$(dirname "$kernel")/.." && pwd)
  for d in "$kdir/lib/modules/$kver" "$kdir/usr/lib/modules/$kver" "/lib/modules/$kver"; do
    [ -d "$d/kernel" ] && { modules_dir=$d; break; }
  done
fi
[ -n "$modules_dir" ] && [ -d "$modules_dir" ] || die "no modules for $kver (pass --modules DIR)"

# Resolve module dependencies from each .ko's .modinfo (depends=, softdep pre:),
# dependencies first. No kmod needed on the host.
declare -A modpath=() seen=()
order=()
index_modules() {
  local f n
  while IFS= read -r f; do
    n=$(basename "$f"); n=${n%%.ko*}; n=${n//-/_}
    modpath[$n]=$f
  done < <(find "$modules_dir/kernel" -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst')
}
modinfo_field() { # file field
  local f=$1
  case "$f" in
    *.xz) xz -dc "$f" ;; *.zst) zstd -dc "$f" ;; *) cat "$f" ;;
  esac | tr '\0' '\n' | sed -n "s/^$2=//p" 2>/dev/null
}
resolve() {
  local n=${1//-/_} f d
  [ -z "${seen[$n]:-}" ] || return 0
  seen[$n]=1
  f=${modpath[$n]:-}
  if [ -z "$f" ]; then
    grep -qE "/${n//_/[-_]}\.ko" "$modules_dir/modules.builtin" 2>/dev/null \
      || note "module $n: not found for $kver (skipped)"
    return 0
  fi
  for d in $(modinfo_field "$f" softdep | sed -n 's/.*pre: *//p' | tr ' ' '\n' | sed 's/^crypto-//'); do
    [ -n "${modpath[${d//-/_}]:-}" ] && resolve "$d"
  done
  for d in $(modinfo_field "$f" depends | tr ',' ' '); do resolve "$d"; done
  order+=("$n")
}

# --- initramfs ----------------------------------------------------------------
# base.cpio (busybox, init scripts, modules) is cached by content; the payload
# part is built per run; the kernel unpacks the concatenation. Uncompressed:
# decompression is the slow part under TCG and guest RAM is plentiful.
mkdir -p "$build/cache" "$build/runs"
sha() { sha256sum | cut -c1-16; }
build_base() {
  local key stage f
  key=$( { echo "$kver v1"; cat "$here/guest/init" "$here/guest/init2"; sha256sum /bin/busybox;
           printf '%s\n' "${default_modules[@]}" "${extra_modules[@]}"; echo "$modules_dir"; } | sha)
  base_cpio=$build/cache/base-$kver-$key.cpio
  [ -s "$base_cpio" ] && { touch "$base_cpio"; return 0; }
  index_modules
  local m
  for m in "${default_modules[@]}" "${extra_modules[@]}"; do resolve "$m"; done
  stage=$(mktemp -d "$build/cache/stage.XXXXXX")
  mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,etc/vm,proc,sys,dev,tmp,run,root,out,payload,newroot,lib/modules,mnt}
  cp /bin/busybox "$stage/bin/busybox"
  while IFS= read -r f; do
    f=${f#/}
    [ "$f" = bin/busybox ] || [ -e "$stage/$f" ] || ln -s /bin/busybox "$stage/$f"
  done < <(/bin/busybox --list-full)
  install -m 0755 "$here/guest/init" "$stage/init"
  install -m 0755 "$here/guest/init2" "$stage/sbin/vm-init2"
  : > "$stage/lib/modules/load.order"
  for m in "${order[@]}"; do
    f=${modpath[$m]}
    case "$f" in
      *.xz) xz -dc "$f" > "$stage/lib/modules/$m.ko" ;;
      *.zst) zstd -qdc "$f" > "$stage/lib/modules/$m.ko" ;;
      *) cp "$f" "$stage/lib/modules/$m.ko" ;;
    esac
    echo "$m" >> "$stage/lib/modules/load.order"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$stage/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$stage/etc/group"
  echo custody-vm > "$stage/etc/hostname"
  mknod -m 600 "$stage/dev/console" c 5 1
  mknod -m 666 "$stage/dev/null" c 1 3
  local tmp
  tmp=$(mktemp "$build/cache/base.tmp.XXXXXX")
  ( cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet ) > "$tmp"
  mv "$tmp" "$base_cpio"   # atomic: concurrent runs may build the same key
  rm -rf "$stage"
  # drop bases of older init scripts/module lists unused for a day
  find "$build/cache" -maxdepth 1 -name 'base-*.cpio' -mtime +1 ! -name "$(basename "$base_cpio")" -delete 2>/dev/null || true
  note "built $(basename "$base_cpio") ($(du -h "$base_cpio" | cut -f1), modules: ${order[*]})"
}

q() { local s=${1//\'/\'\\\'\'}; printf "'%s'" "$s"; }

build_payload() { # dest-cpio payload-dir-or-empty cmd...
  local dest=$1 pdir=$2; shift 2
  local stage f l a kv
  stage=$(mktemp -d "$work/stage.XXXXXX")
  mkdir -p "$stage/etc/vm" "$stage/payload"
  [ -z "$pdir" ] || cp -a "$pdir/." "$stage/payload/"
  # Dynamically linked executables in the payload (e.g. runc built with
  # libseccomp) get their host shared libraries at the same paths.
  while IFS= read -r -d '' f; do
    [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
    while IFS= read -r l; do
      [ -e "$l" ] || continue
      mkdir -p "$stage$(dirname "$l")"
      [ -e "$stage$l" ] || cp -L "$l" "$stage$l"
    done < <(ldd "$f" 2>/dev/null | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) (.*/\1/p')
  done < <(find "$stage/payload" -type f -perm -u+x -print0)
  {
    printf 'set --'
    for a in "$@"; do printf ' %s' "$(q "$a")"; done
    printf '\n'
  } > "$stage/etc/vm/cmd"
  : > "$stage/etc/vm/env"
  for kv in "${envs[@]}"; do
    [[ "$kv" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "bad --env: $kv"
    printf 'export %s=%s\n' "${kv%%=*}" "$(q "${kv#*=}")" >> "$stage/etc/vm/env"
  done
  printf 'VM_TRANSPORT=%s\nVM_CMD_TIMEOUT=%s\nVM_KVER=%s\n' "$transport" "$cmd_timeout" "$kver" > "$stage/etc/vm/params"
  ( cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet ) > "$dest"
  rm -rf "$stage"
}

# --- TSC frequency for TCG guests ------------------------------------------------
# Under TCG the guest TSC ticks at the host TSC rate, but microvm has no HPET or
# ACPI PM timer, so the guest calibrates it against the PIT, which fails when
# TCG is slow or the host is busy ("tsc: Unable to calibrate against PIT"); the
# boot then hangs silently (seen in 4 of 8 boots). Passing tsc_early_khz= (the
# host's TSC rate) skips the calibration.
host_tsc_khz() {
  local v
  if [ -r /sys/devices/system/cpu/cpu0/tsc_freq_khz ]; then
    cat /sys/devices/system/cpu/cpu0/tsc_freq_khz; return 0
  fi
  grep -qw constant_tsc /proc/cpuinfo || return 0
  v=$(dmesg 2>/dev/null | sed -n 's/.*tsc: Refined TSC clocksource calibration: \([0-9.]*\) MHz.*/\1/p' | tail -n1)
  [ -n "$v" ] || v=$(dmesg 2>/dev/null | sed -n 's/.*tsc: Detected \([0-9.]*\) MHz.*/\1/p' | tail -n1)
  [ -n "$v" ] || v=$(awk -F': *' '/^cpu MHz/{print $2; exit}' /proc/cpuinfo)
  [ -n "$v" ] && awk -v m="$v" 'BEGIN{printf "%d\n", m*1000}'
}
[ -n "$tsc_khz" ] || tsc_khz=$(host_tsc_khz || true)
[ -z "$tsc_khz" ] || [[ "$tsc_khz" =~ ^[0-9]+$ ]] || die "bad --tsc-khz: $tsc_khz"

# --- one boot -----------------------------------------------------------------
qpid= qdir=
kill_qemu() { # the qemu we started (pidfile), then its wrapper subshell
  [ -n "$qpid" ] || return 0
  local p
  if [ -s "$qdir/qemu.pid" ]; then
    p=$(cat "$qdir/qemu.pid")
    # only if it is still our wrapper's child
    if [ "$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null)" = "$qpid" ]; then kill -KILL "$p" 2>/dev/null || true; fi
  fi
  kill -0 "$qpid" 2>/dev/null && { pkill -KILL -P "$qpid" 2>/dev/null || true; }
  wait "$qpid" 2>/dev/null || true
  qpid=
}
cleanup() {
  kill_qemu
  if [ "$keep" = 0 ] && [ -n "${work:-}" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { echo "${EPOCHREALTIME/,/.}"; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.2f", b-a}'; }
older() { awk -v a="$1" -v b="$(now)" -v t="$2" 'BEGIN{exit !(b-a>t)}'; }

# boot ACCEL INITRD DIR BOOT_TIMEOUT TIMEOUT -> sets a_status (ok|boot-hang|
# timeout|qemu-exit|no-result), a_wall, a_boot; results unpacked in DIR/res.
boot() {
  local acc=$1 initrd=$2 dir=$3 bto=$4 to=$5 t0 cpu img con booted=0 done_=0
  mkdir -p "$dir"
  con=$dir/console.log; img=$dir/out.img
  : > "$con"; rm -f "$img"; truncate -s "${out_size}M" "$img"
  if [ "$acc" = kvm ]; then cpu=host; else cpu=max; fi
  local append="console=ttyS0 rdinit=/init panic=-1 reboot=t tsc=reliable no_timer_check random.trust_cpu=on cryptomgr.notests i8042.noaux i8042.nokbd 8250.nr_uarts=1"
  # Under TCG no guest instruction runs on the host's CPU: the guest's
  # speculative-execution mitigations guard nothing there. Under KVM they stay.
  if [ "$acc" = tcg ]; then append="$append mitigations=off"; fi
  if [ "$acc" = tcg ] && [ -n "$tsc_khz" ] && [ "$tsc_khz" != 0 ]; then append="$append tsc_early_khz=$tsc_khz"; fi
  if [ "$debug" = 1 ]; then append="$append earlyprintk=ttyS0 loglevel=7 printk.time=1"; else append="$append quiet loglevel=4"; fi
  t0=$(now)
  # qemu runs under a subshell so that its death by a signal (it aborts on
  # some KVM hosts) is not reported by bash; it is killed through its pidfile.
  rm -f "$dir/qemu.pid"
  (
    qemu-system-x86_64 -M microvm -accel "$acc" -cpu "$cpu" -m "$mem" -smp 1 \
      -nodefaults -no-user-config -display none -monitor none -no-reboot \
      -pidfile "$dir/qemu.pid" -serial "file:$con" \
      -kernel "$kernel" -initrd "$initrd" -append "$append" \
      -drive "if=none,id=out,file=$img,format=raw" -device virtio-blk-device,drive=out
    echo "qemu exit status $?"
  ) </dev/null >"$dir/qemu.log" 2>&1 &
  qpid=$!
  qdir=$dir
  a_status=
  while :; do
    if ! kill -0 "$qpid" 2>/dev/null; then break; fi
    if [ $booted = 0 ] && grep -q '@@CUSTODY-VM init-start' "$con"; then
      booted=1; a_boot=$(elapsed "$t0")
    fi
    if grep -q '@@CUSTODY-VM DONE' "$con"; then done_=1; break; fi
    if [ $booted = 0 ] && older "$t0" "$bto"; then a_status=boot-hang; break; fi
    if older "$t0" "$to"; then a_status=timeout; break; fi
    sleep 0.1
  done
  if [ $done_ = 1 ]; then  # let the guest power off; its data is already written
    local i=0
    while kill -0 "$qpid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  fi
  kill_qemu
  a_wall=$(elapsed "$t0")
  [ $booted = 1 ] || a_boot=
  grep -q '@@CUSTODY-VM DONE' "$con" && done_=1
  if [ -z "$a_status" ]; then
    if [ $done_ = 1 ]; then a_status=ok; else a_status=qemu-exit; fi
  fi
  [ "$a_status" = ok ] || return 0
  # unpack the result
  rm -rf "$dir/res"; mkdir -p "$dir/res"
  if grep -q '@@CUSTODY-VM RESULT transport=disk' "$con"; then
    tar -C "$dir/res" -xf "$img" 2>"$dir/untar.log" || { a_status=no-result; return 0; }
  elif grep -q '^@@CUSTODY-VM BEGIN transport=serial' "$con"; then
    local want got
    want=$(tr -d '\r' < "$con" | sed -n 's/^@@CUSTODY-VM BEGIN .*sha256=\([0-9a-f]*\).*/\1/p' | tail -n1)
    tr -d '\r' < "$con" | awk '/^@@CUSTODY-VM BEGIN /{on=1; buf=""; next} /^@@CUSTODY-VM END/{on=0; last=buf} on{buf=buf $0 "\n"} END{printf "%s", last}' \
      | grep -E '^[A-Za-z0-9+/=]+$' | base64 -d > "$dir/result.tgz" 2>/dev/null || true
    got=$(sha256sum < "$dir/result.tgz" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then note "serial result corrupt (sha256 mismatch)"; a_status=no-result; return 0; fi
    tar -C "$dir/res" -xzf "$dir/result.tgz" || { a_status=no-result; return 0; }
  else
    a_status=no-result; return 0
  fi
  [ -f "$dir/res/meta/exit_code" ] || a_status=no-result
}

# --- accelerator --------------------------------------------------------------
# KVM is used only if a quick probe boot passes: nested KVM here can assert on
# an MSR or spin silently. The verdict is cached per host boot.
accel_was_auto=0
pick_accel() {
  [ "$accel" = auto ] || return 0
  accel_was_auto=1
  if [ ! -w /dev/kvm ]; then accel=tcg; return 0; fi
  local bootid cache
  bootid=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo none)
  cache=$build/cache/accel-$kver-$bootid
  if [ -s "$cache" ]; then accel=$(cat "$cache"); return 0; fi
  note "probing KVM (one short boot)..."
  build_payload "$work/probe.cpio" "" true
  cat "$base_cpio" "$work/probe.cpio" > "$work/probe.initrd"
  boot kvm "$work/probe.initrd" "$work/probe" 15 30
  if [ "$a_status" = ok ]; then accel=kvm; else accel=tcg; fi
  note "KVM probe: $a_status -> $accel"
  echo "$accel" > "$cache"
}

# --- main ---------------------------------------------------------------------
[ -z "$payload" ] || [ -d "$payload" ] || die "payload is not a directory: $payload"
work=$(mktemp -d "$build/runs/run.XXXXXX")
build_base
pick_accel
build_payload "$work/payload.cpio" "$payload" "$@"
cat "$base_cpio" "$work/payload.cpio" > "$work/initrd"
note "initrd $(du -h "$work/initrd" | cut -f1), kernel $kver, accel $accel, timeout ${timeout}s (cmd ${cmd_timeout}s)"

attempt=0 history=()
while :; do
  attempt=$((attempt+1))
  boot "$accel" "$work/initrd" "$work/a$attempt" "$(( boot_timeout < timeout ? boot_timeout : timeout ))" "$timeout"
  history+=("$attempt:$a_status:${a_wall}s")
  note "attempt $attempt: $a_status in ${a_wall}s (init after ${a_boot:-?}s)"
  [ "$a_status" = ok ] && break
  [ "$attempt" -le "$retries" ] || break
  if [ "$accel" = kvm ] && [ "$accel_was_auto" = 1 ]; then
    note "KVM boot failed; retrying under TCG"; accel=tcg
  fi
done

mkdir -p "$out"
rm -f "$out"/console.attempt*.log
last=$work/a$attempt
cp "$last/console.log" "$out/console.log"
for ((i = 1; i < attempt; i++)); do  # keep the failed boots' consoles
  cp "$work/a$i/console.log" "$out/console.attempt$i.log"
done
cp "$last/qemu.log" "$out/qemu.log"
{
  echo "status=$a_status"
  echo "accel=$accel"
  echo "kernel=$kver"
  echo "attempts=$attempt"
  echo "history=${history[*]}"
  echo "wall_seconds=$a_wall"
  echo "init_seconds=${a_boot:-}"
} > "$out/run.env"
if [ "$a_status" != ok ]; then
  echo "vm/run.sh: no result from the guest after $attempt attempt(s): ${history[*]}; see $out/console.log" >&2
  exit 125
fi
results="stdout stderr exit_code guest.txt cmd_start_uptime cmd_end_uptime timed_out"
for f in out $results; do rm -rf "${out:?}/$f"; done  # no stale files from an earlier run
mv "$last/res/out" "$out/out"
for f in $results; do
  if [ -e "$last/res/meta/$f" ]; then mv "$last/res/meta/$f" "$out/$f"; fi
done
rc=$(cat "$out/exit_code")
{
  echo "guest_cmd_seconds=$(awk -v a="$(cat "$out/cmd_start_uptime")" -v b="$(cat "$out/cmd_end_uptime")" 'BEGIN{printf "%.2f", b-a}')"
  echo "exit_code=$rc"
  [ -e "$out/timed_out" ] && echo "timed_out=1"
} >> "$out/run.env"
[ "$quiet" = 1 ] || { cat "$out/stdout"; cat "$out/stderr" >&2; }
if [ -e "$out/timed_out" ]; then exit 124; fi
exit "$rc"

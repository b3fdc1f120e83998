#!/usr/bin/env bash
# The vm backend at the production tier, qualified where production is
# possible: inside a cgroup-v2 Linux guest booted by scripts/vm/run.sh,
# where custodyd's QEMUs (nested, under TCG) get cgroup v2 leaves. It runs
# the backend's own host-cgroup tests there (the production tier's
# legitimate case, against real QEMU), then `custody qualify --backend vm
# --tier production`, and brings back the signed row, its log and the
# guest's platform description (for custody gate --platform FILE).
#
# usage: scripts/vm/vm-production.sh OUTDIR [--tests-only]
# (env: VM_TESTS, the tests' -test.run pattern; VM_TEST_BOOT_TIMEOUT, the
# boot timeout those tests give nested guests; VM_PRODUCTION_TIMEOUT)
# Run as root from the repo root, after make build.
set -euo pipefail
OUT=${1:?usage: vm-production.sh OUTDIR [--tests-only]}
TESTS_ONLY=${2:-}
ROOT=$(pwd)
BIN=$ROOT/bin
PAYLOAD=$ROOT/build/vm/vm-production-payload
VMOUT=$ROOT/build/vm/vm-production
export PATH=/usr/local/go/bin:$PATH
SECONDS=0

kernel=$(readlink -f build/vm/vmlinux)
kver=${kernel##*/vmlinux-}
modules=$(dirname "$(dirname "$kernel")")/lib/modules/$kver
qemu=$(command -v qemu-system-x86_64)
qemu_mods=/usr/lib/x86_64-linux-gnu/qemu
[ -f "$qemu_mods/accel-tcg-x86_64.so" ] || { echo "vm-production: no $qemu_mods/accel-tcg-x86_64.so (Debian's qemu-system-x86)" >&2; exit 1; }

rm -rf "$PAYLOAD" "$VMOUT"
mkdir -p "$PAYLOAD/bin" "$PAYLOAD/sysroot/usr/bin" "$PAYLOAD/sysroot$qemu_mods" "$PAYLOAD/sysroot/usr/share/qemu" "$OUT"
cp "$BIN/custody" "$BIN/custodyd" "$BIN/custody-runc" "$BIN/custody-gate" "$BIN/custody-probe" \
	"$BIN/custody-vminit" "$BIN/custody-vmstage" "$PAYLOAD/bin/"
# QEMU and what it loads at its start (the TCG accelerator module, the
# microvm firmware), at the paths it looks for them; mkfs.erofs makes the
# guests' input images. run.sh copies their shared libraries.
cp "$qemu" "$PAYLOAD/sysroot/usr/bin/"
cp "$qemu_mods/accel-tcg-x86_64.so" "$PAYLOAD/sysroot$qemu_mods/"
cp /usr/share/qemu/bios-microvm.bin /usr/share/qemu/qboot.rom /usr/share/qemu/pvh.bin /usr/share/qemu/linuxboot_dma.bin "$PAYLOAD/sysroot/usr/share/qemu/"
cp "$(command -v mkfs.erofs)" "$PAYLOAD/sysroot/usr/bin/"
ln "$kernel" "$PAYLOAD/vmlinux" 2>/dev/null || cp "$kernel" "$PAYLOAD/vmlinux"
# The modules the init may load, in the order of their pin's manifest (the
# VM how-to lists them).
mods="kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_mmio.ko kernel/drivers/block/virtio_blk.ko kernel/drivers/char/virtio_console.ko kernel/crypto/crc32c_generic.ko kernel/lib/libcrc32c.ko kernel/fs/erofs/erofs.ko kernel/fs/overlayfs/overlay.ko"
for m in $mods; do
	mkdir -p "$PAYLOAD/modules/$(dirname "$m")"
	cp "$modules/$m" "$PAYLOAD/modules/$m"
done
mods_sum=$(cd "$PAYLOAD/modules" && for m in $mods; do sha256sum "$m"; done | sha256sum | cut -d' ' -f1)
sum() { sha256sum "$1" | cut -d' ' -f1; }
cat > "$PAYLOAD/vm.yaml" <<EOF
vm:
  qemu: {path: /usr/bin/qemu-system-x86_64, sha256: $(sum "$qemu")}
  kernel: {path: /payload/vmlinux, sha256: $(sum "$kernel")}
  modules: {path: /payload/modules, sha256: $mods_sum}
  init: {path: /payload/bin/custody-vminit, sha256: $(sum "$BIN/custody-vminit")}
  stage: {path: /payload/bin/custody-vmstage, sha256: $(sum "$BIN/custody-vmstage")}
  accel: tcg
EOF
# The backend's host-cgroup tests, compiled here, run there.
CGO_ENABLED=1 go test -c -o "$PAYLOAD/vm.test" ./backend/vm

# Progress on the guest's console (the host can read it while the guest
# runs): every 20 s, the guest's uptime and the launches whose QEMU holds
# a cgroup v2 leaf now.
guest='set -u
cp -a sysroot/. /
echo $$ > /sys/fs/cgroup/cgroup.procs
while sleep 20; do echo "@@progress $(cut -d" " -f1 /proc/uptime) $(ls -d /sys/fs/cgroup/custody-vm-* 2>/dev/null | sed "s,.*/,," | tr "\n" " ")"; done > /dev/console 2>&1 &
export CUSTODY_VM_TEST_BOOT_TIMEOUT=${VM_TEST_BOOT_TIMEOUT:-3m} CUSTODY_VM_KERNEL=/payload/vmlinux CUSTODY_VM_MODULES=/payload/modules CUSTODY_VMINIT=/payload/bin/custody-vminit CUSTODY_VMSTAGE=/payload/bin/custody-vmstage
s=$(cut -d" " -f1 /proc/uptime)
./vm.test -test.v -test.count=1 -test.timeout 40m -test.run "$VM_TESTS" > /out/tests.log 2>&1
trc=$?
e=$(cut -d" " -f1 /proc/uptime)
echo "tests rc=$trc seconds=$s..$e" > /out/times
grep -E "^(--- |ok|FAIL|PASS)|^ +[a-z_]+_test.go:" /out/tests.log | sed "s/^/@@tests /" > /dev/console
grep -E "^(--- |ok|FAIL|PASS)" /out/tests.log
[ "$TESTS_ONLY" = 1 ] && exit $trc
s=$(cut -d" " -f1 /proc/uptime)
bin/custody qualify --backend vm --vm-config vm.yaml --tier production --timeout 120m --runtime bin/custody-runc --custodyd bin/custodyd \
	--probe bin/custody-probe --busybox /bin/busybox --out /out/row.json > /out/qualify.log 2>&1
rc=$?
e=$(cut -d" " -f1 /proc/uptime)
echo "qualify rc=$rc seconds=$s..$e" >> /out/times
sed "s/^/@@qualify /" /out/qualify.log > /dev/console
bin/custody gate --platform this --backend vm --vm-config vm.yaml --runtime bin/custody-runc --print-platform > /out/platform.json
tail -n 5 /out/qualify.log
[ $trc = 0 ] && exit $rc
exit $trc'
# VM_PRODUCTION_TIMEOUT bounds the whole guest (seconds); what the guest
# wrote under /out by then still comes back.
to=${VM_PRODUCTION_TIMEOUT:-$([ "$TESTS_ONLY" = --tests-only ] && echo 2400 || echo 9000)}
scripts/vm/run.sh --payload "$PAYLOAD" --out "$VMOUT" --mem 3072 --timeout "$to" --cmd-timeout $((to - 60)) --quiet \
	--env VM_TEST_BOOT_TIMEOUT="${VM_TEST_BOOT_TIMEOUT:-3m}" --env VM_TESTS="${VM_TESTS:-^(TestProductionTier|TestQEMUStartsInItsCgroup)\$}" --env TESTS_ONLY=$([ "$TESTS_ONLY" = --tests-only ] && echo 1 || echo 0) -- sh -c "$guest" || rc=$?
cp -r "$VMOUT/out/." "$OUT/"
cp "$VMOUT/run.env" "$OUT/"
echo "vm-production: ${SECONDS}s on the host; $(tr '\n' ' ' < "$OUT/times" 2>/dev/null)"
exit "${rc:-0}"

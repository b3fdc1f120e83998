#!/usr/bin/env bash
# make qualify-vm: two signed qualification rows in build/matrix — the
# development tier on this (cgroup v1 hybrid) host, and the production tier
# inside a real cgroup-v2 Linux guest booted with QEMU — an HTML matrix,
# and the release gate checked both ways; in the same guest boot, custodyd
# installed by make install and run by systemd (Delegate=yes, Type=notify)
# reaches the production tier from its leaf cgroup (build/matrix/guest-service).
# Run as root from the repo root.
set -euo pipefail
SECONDS=0
ROOT=$(pwd)
BIN=$ROOT/bin
MATRIX=$ROOT/build/matrix
VMOUT=$ROOT/build/vm/qualify
PAYLOAD=$ROOT/build/vm/qualify-payload
export PATH=/usr/local/go/bin:$PATH

scripts/vm/deps.sh
rm -rf "$MATRIX" "$VMOUT" "$PAYLOAD"
mkdir -p "$MATRIX" "$PAYLOAD/bin"

echo "== development tier on this host"
"$BIN/custody" qualify --tier development --runtime "$BIN/custody-runc" --custodyd "$BIN/custodyd" \
	--probe "$BIN/custody-probe" --out "$MATRIX/host-development.json" > "$MATRIX/host-development.log"
tail -n 3 "$MATRIX/host-development.log"

echo "== production tier in a cgroup-v2 guest (QEMU; several minutes under TCG)"
cp "$BIN/custody" "$BIN/custodyd" "$BIN/custody-runc" "$BIN/custody-gate" "$BIN/custody-probe" "$PAYLOAD/bin/"
# Then custodyd as a systemd service (scripts/vm/service-guest.sh): what
# make install puts under /, and Debian's systemd and systemctl to run it.
command -v systemctl >/dev/null && [ -x /lib/systemd/systemd ] || {
	echo "qualify-vm: the service check needs Debian's systemd package (apt-get install systemd)" >&2; exit 1; }
make -s -o build install DESTDIR="$PAYLOAD/install" PREFIX=/usr/local > /dev/null
# The guest's RAM holds the initramfs twice: the installed binaries are
# hard links to bin/'s (cpio keeps one copy of a linked file).
for f in bin/custody bin/custodyd lib/custody/custody-runc lib/custody/custody-gate; do
	cmp -s "$PAYLOAD/install/usr/local/$f" "$PAYLOAD/bin/${f##*/}" || {
		echo "qualify-vm: make install's $f is not bin/${f##*/}" >&2; exit 1; }
	ln -f "$PAYLOAD/bin/${f##*/}" "$PAYLOAD/install/usr/local/$f"
done
mkdir -p "$PAYLOAD/systemd"
cp /lib/systemd/systemd "$(command -v systemctl)" "$PAYLOAD/systemd/"
cp scripts/vm/service-guest.sh "$PAYLOAD/"
# custodyd may only use cgroup-v2 controllers from a cgroup without
# processes of its own, so the guest command leaves run.sh's leaf cgroup
# for the root first (the host-side --timeout still bounds the guest).
scripts/vm/run.sh --payload "$PAYLOAD" --out "$VMOUT" --timeout 1200 --quiet -- sh -c \
	'echo $$ > /sys/fs/cgroup/cgroup.procs && bin/custody qualify --tier production --runtime bin/custody-runc --custodyd bin/custodyd --probe bin/custody-probe --busybox /bin/busybox --out /out/row.json > /out/qualify.log 2>&1; rc=$?; bin/custody gate --platform this --runtime bin/custody-runc --print-platform > /out/platform.json; tail -n 5 /out/qualify.log; sh service-guest.sh > /out/service.log 2>&1; cat /out/service/result; exit $rc'
cp "$VMOUT/out/row.json" "$MATRIX/guest-production.json"
cp "$VMOUT/out/qualify.log" "$MATRIX/guest-production.log"
rm -rf "$MATRIX/guest-service"
cp -r "$VMOUT/out/service" "$MATRIX/guest-service"
cp "$VMOUT/out/service.log" "$MATRIX/guest-service/"
if ! grep -qx 'DONE' "$MATRIX/guest-service/result" || grep -q '^FAIL' "$MATRIX/guest-service/result"; then
	echo "qualify-vm: custodyd as a systemd service failed in the guest (see $MATRIX/guest-service)" >&2
	exit 1
fi

# Trust the runner keys the rows name (each qualify runs a fresh private
# runner); a release gate would pin them out of band, in the trust file
# custody verify reads (custody trust export writes one). A trust file
# names issuer keys too; the gate reads none, so a throwaway one stands in.
openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl ec -pubout 2>/dev/null > "$MATRIX/issuer-unused.pub"
python3 - "$MATRIX" <<'PY'
import json, sys
d = sys.argv[1]
with open(f"{d}/trust.yaml", "w") as out:
    out.write("apiVersion: custody.dev/v1alpha1\nkind: Trust\nrunners:\n")
    seen = set()
    for name in ("host-development", "guest-production"):
        row = json.load(open(f"{d}/{name}.json"))
        pem = row["runnerPublicKey"].strip().replace("\n", "\n      ")
        if pem in seen:
            continue
        seen.add(pem)
        out.write(f"  - name: {name}\n    publicKeyPEM: |\n      {pem}\n")
    pem = open(f"{d}/issuer-unused.pub").read().strip().replace("\n", "\n      ")
    out.write(f"issuers:\n  - name: unused\n    publicKeyPEM: |\n      {pem}\n")
PY
trust=(--trust "$MATRIX/trust.yaml")
"$BIN/custody" gate --matrix "$MATRIX" --html "$MATRIX/index.html" "${trust[@]}"

echo "== gate: production on this host must be refused (no passing production row for it)"
if "$BIN/custody" gate --matrix "$MATRIX" --platform this --runtime "$BIN/custody-runc" --tier production "${trust[@]}"; then
	echo "qualify-vm: the gate admitted production on a host without a production row" >&2
	exit 1
fi
echo "== gate: production on the guest platform is admitted by the guest's row"
"$BIN/custody" gate --matrix "$MATRIX" --platform "$VMOUT/out/platform.json" --tier production "${trust[@]}"
echo "== gate: development on this host is admitted by its row"
"$BIN/custody" gate --matrix "$MATRIX" --platform this --runtime "$BIN/custody-runc" --tier development "${trust[@]}"
echo "qualify-vm: done in ${SECONDS}s; rows and index.html in $MATRIX"

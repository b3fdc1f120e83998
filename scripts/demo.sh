#!/usr/bin/env bash
# The whole custody flow on embedded defaults: start custodyd on a fresh
# state dir, import the test image, admit, issue a grant, run, print the
# result, stop. Run as root from the repository root (make demo does).
set -euo pipefail
ROOT=$(pwd)
DEMO=$ROOT/build/demo
BIN=$ROOT/bin
SOCK=$DEMO/sock

if grep -q " $DEMO" /proc/self/mountinfo; then
	echo "demo: something is still mounted under $DEMO; not touching it" >&2
	exit 1
fi
rm -rf "$DEMO"
mkdir -p "$DEMO"
chmod 0711 "$DEMO"

cat > "$DEMO/custodyd.yaml" <<YAML
runner:
  stateDir: $DEMO/state
  runtimeDir: $DEMO/run
  runtime:
    path: $BIN/custody-runc
    version: "$("$BIN/custody-runc" --version | awk 'NR==1{print $3}')"
    sha256: $(sha256sum "$BIN/custody-runc" | cut -d' ' -f1)
policy: $DEMO/policy.yaml
controlSocket: $SOCK/control.sock
submitSocket: $SOCK/submit.sock
operators: [0]
YAML
# Until the image is imported the policy lists no image, so nothing may
# run yet; it is the example policy otherwise, and valid from the start.
sed -e '/^images:/,/^ceilings:/{/^images:/c\
images: []
/^ceilings:/!d}' -e "s|@INPUTROOT@|$DEMO/work|" examples/policy.yaml > "$DEMO/policy.yaml"

"$BIN/custodyd" --config "$DEMO/custodyd.yaml" --log-level warn &
DAEMON=$!
trap 'kill -TERM $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null || true' EXIT
custody() { "$BIN/custody" --control "$SOCK/control.sock" --submit "$SOCK/submit.sock" "$@"; }
for _ in $(seq 100); do custody status >/dev/null 2>&1 && break; sleep 0.1; done

echo "== import the test image (operator)"
IMAGE=$(custody image import "$ROOT/build/testimage/rootfs")
echo "$IMAGE"
sed -e "s/@IMAGE@/$IMAGE/" -e "s|@INPUTROOT@|$DEMO/work|" examples/policy.yaml > "$DEMO/policy.yaml"
mkdir -p "$DEMO/work"
sed "s/@IMAGE@/$IMAGE/" examples/phase.yaml > "$DEMO/work/phase.yaml"
cp -r examples/src "$DEMO/work/src"
custody policy reload >/dev/null

echo "== admit (dry run)"
custody admit "$DEMO/work/phase.yaml"
echo "== issue a single-use grant to ci-bot (operator, control socket)"
custody grant issue "$DEMO/work/phase.yaml" --actor ci-bot --ttl 15m > "$DEMO/grant.json"
echo "wrote $DEMO/grant.json"
echo "== run with the grant (client, submit socket); keep the signed receipt and the outputs"
custody run --grant "$DEMO/grant.json" --receipt "$DEMO/out/receipt.json"
echo "== verify the receipt as a reviewer would (trust file with the runner and issuer keys)"
# This host can only run the unqualified development tier; a production
# trust file (the default, --tiers production) would reject the receipt.
custody trust export --max-age 1h --tiers development > "$DEMO/trust.yaml"
custody trust export --runner-pem > "$DEMO/runner.pub"
custody verify "$DEMO/out/receipt.json" --trust "$DEMO/trust.yaml" --outputs "$DEMO/out/outputs"
echo "== promote: a signed SLSA VSA, only because verification passed"
custody promote "$DEMO/out/receipt.json" --trust "$DEMO/trust.yaml" --outputs "$DEMO/out/outputs" \
	--key "$DEMO/verifier.key" > "$DEMO/promotion.json"
echo "wrote $DEMO/promotion.json"
echo "== cosign verifies the same receipt with the runner key"
"$BIN/cosign" verify-blob-attestation --key "$DEMO/runner.pub" --bundle "$DEMO/out/receipt.sigstore.json" \
	--type https://custody.dev/attestation/receipt/v3 --insecure-ignore-tlog "$DEMO/out/outputs/HELLO.txt"
echo "== the same grant again is refused: it admits one launch"
if custody run --grant "$DEMO/grant.json" 2>&1; then
	echo "demo: a replayed grant launched" >&2
	exit 1
fi

package evidence_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/predicate"
)

// TestCosignVerifiesPackReceipt checks pack receipts with an independent
// verifier: cosign verify-blob-attestation accepts the Sigstore bundle of
// an up and a down receipt (fresh and frozen) for the compose file they
// vouch for, and refuses another compose file, a tampered bundle and the
// wrong predicate type.
func TestCosignVerifiesPackReceipt(t *testing.T) {
	cosign := cosignBin(t)
	f := newPackFixture(t)
	dir := t.TempDir()
	pub := filepath.Join(dir, "runner.pub")
	must(t, os.WriteFile(pub, f.runner.PublicPEM(), 0o644))
	compose := filepath.Join(dir, "range.compose.yaml")
	must(t, os.WriteFile(compose, []byte(packCompose), 0o644))

	run := func(key string, env []byte, blob, typ string) (string, error) {
		t.Helper()
		b, err := evidence.Bundle(env, "")
		if err != nil {
			t.Fatal(err)
		}
		bundle := filepath.Join(dir, "receipt.sigstore.json")
		must(t, os.WriteFile(bundle, b, 0o644))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, cosign, "verify-blob-attestation", "--key", key, "--bundle", bundle,
			"--type", typ, "--insecure-ignore-tlog", blob)
		// No network: a key-based, tlog-less verification needs none.
		cmd.Env = append(os.Environ(), "HOME="+dir, "TUF_ROOT="+filepath.Join(dir, "tuf"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	for name, env := range map[string][]byte{"up": f.upEnv, "down": f.downEnv} {
		if out, err := run(pub, env, compose, predicate.PackReceipt); err != nil {
			t.Fatalf("cosign refuses a genuine %s receipt: %v\n%s", name, err, out)
		}
	}
	_, golden, _ := packGolden(t)
	if out, err := run(filepath.Join(packGoldenDir, "runner.pub"), golden["receipt-up.json"], filepath.Join(packGoldenDir, "compose.yaml"), predicate.PackReceipt); err != nil {
		t.Fatalf("cosign refuses the frozen up receipt: %v\n%s", err, out)
	}

	other := filepath.Join(dir, "other.compose.yaml")
	must(t, os.WriteFile(other, []byte(packCompose+"  x:\n    image: x\n"), 0o644))
	if out, err := run(pub, f.upEnv, other, predicate.PackReceipt); err == nil {
		t.Fatalf("cosign accepts a compose file the receipt does not vouch for:\n%s", out)
	}
	payload := payloadOf(t, f.upEnv)
	tampered := withPayload(t, f.upEnv, []byte(strings.Replace(string(payload), `"privileged":false`, `"privileged":true`, 1)))
	if out, err := run(pub, tampered, compose, predicate.PackReceipt); err == nil {
		t.Fatalf("cosign accepts a tampered pack receipt:\n%s", out)
	}
	if out, err := run(pub, f.upEnv, compose, predicate.Receipt); err == nil {
		t.Fatalf("cosign accepts a pack receipt as a phase receipt:\n%s", out)
	}
}

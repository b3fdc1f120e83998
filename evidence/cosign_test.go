package evidence_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/predicate"
)

// cosignBin returns the pinned cosign that tools/cosign builds, named by
// $CUSTODY_COSIGN.
func cosignBin(t *testing.T) string {
	t.Helper()
	p := os.Getenv("CUSTODY_COSIGN")
	if p == "" {
		testenv.Missing(t, "cosign: set CUSTODY_COSIGN to the pinned cosign (cd tools/cosign && go build -o ../../bin/cosign github.com/sigstore/cosign/v3/cmd/cosign)")
	}
	if _, err := os.Stat(p); err != nil {
		testenv.Missing(t, "cosign at CUSTODY_COSIGN="+p+": "+err.Error())
	}
	return p
}

// TestCosignVerifiesReceipt checks receipts with an independent verifier:
// cosign verify-blob-attestation accepts the Sigstore bundle of a genuine
// receipt (of the current version, v3) for one of its output files, and refuses a tampered bundle and a
// file the receipt does not vouch for.
func TestCosignVerifiesReceipt(t *testing.T) {
	cosign := cosignBin(t)
	f := newFixture(t)
	dir := t.TempDir()
	pub := filepath.Join(dir, "runner.pub")
	must(t, os.WriteFile(pub, f.runner.PublicPEM(), 0o644))
	b, err := evidence.Bundle(f.env, "")
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(dir, "receipt.sigstore.json")
	must(t, os.WriteFile(bundle, b, 0o644))
	output := filepath.Join(f.outDir, "hello.txt") // a retained output file

	run := func(bundlePath, blob string, extra ...string) (string, error) {
		args := append([]string{"verify-blob-attestation",
			"--key", pub,
			"--bundle", bundlePath,
			"--type", predicate.ReceiptV3,
			"--insecure-ignore-tlog",
		}, extra...)
		args = append(args, blob)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, cosign, args...)
		// No network: cosign must not need one for a key-based, tlog-less
		// verification.
		cmd.Env = append(os.Environ(), "HOME="+dir, "TUF_ROOT="+filepath.Join(dir, "tuf"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	if out, err := run(bundle, output); err != nil {
		t.Fatalf("cosign refuses a genuine receipt: %v\n%s", err, out)
	}
	// Every retained file is a subject, and so is nothing else.
	if out, err := run(bundle, filepath.Join(f.outDir, "bin/tool")); err != nil {
		t.Fatalf("cosign refuses another output file: %v\n%s", err, out)
	}

	// Tampered: one payload byte flipped.
	var raw map[string]any
	must(t, json.Unmarshal(b, &raw))
	de := raw["dsseEnvelope"].(map[string]any)
	payload, err := base64.StdEncoding.DecodeString(de["payload"].(string))
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(payload, []byte(`"runId":"`)) + len(`"runId":"`)
	payload[i] ^= 0x01
	de["payload"] = base64.StdEncoding.EncodeToString(payload)
	tampered, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	tamperedPath := filepath.Join(dir, "tampered.sigstore.json")
	must(t, os.WriteFile(tamperedPath, tampered, 0o644))
	if out, err := run(tamperedPath, output); err == nil {
		t.Fatalf("cosign accepts a tampered receipt:\n%s", out)
	} else {
		t.Logf("tampered bundle refused: %v\n%s", err, out)
	}

	// A file that is not a subject.
	stranger := filepath.Join(dir, "stranger.txt")
	must(t, os.WriteFile(stranger, []byte("not an output\n"), 0o644))
	if out, err := run(bundle, stranger); err == nil {
		t.Fatalf("cosign accepts a file that is not a subject:\n%s", out)
	} else {
		t.Logf("non-subject file refused: %v\n%s", err, out)
	}

	// The wrong predicate type.
	if out, err := run(bundle, output, "--type", predicate.Grant); err == nil {
		t.Fatalf("cosign accepts the receipt as a grant:\n%s", out)
	} else {
		t.Logf("wrong predicate type refused: %v\n%s", err, out)
	}
}

// TestCosignVerifiesGoldens: receipts signed while v1, v2 and v3 were
// current still verify with cosign under their own predicate types, and
// not under another version's.
func TestCosignVerifiesGoldens(t *testing.T) {
	cosign := cosignBin(t)
	_, envs := golden(t)
	out := takeOutputs(t, outputFiles)
	for _, g := range []struct{ name, key, typ, other string }{
		{goldenV1OK, "runner.pub", predicate.ReceiptV1, predicate.ReceiptV2},
		{goldenV2OK, "runner-v2.pub", predicate.ReceiptV2, predicate.ReceiptV3},
		{goldenOK, "runner-v3.pub", predicate.ReceiptV3, predicate.ReceiptV2},
	} {
		t.Run(g.name, func(t *testing.T) {
			dir := t.TempDir()
			b, err := evidence.Bundle(envs[g.name], "")
			if err != nil {
				t.Fatal(err)
			}
			bundle := filepath.Join(dir, "receipt.sigstore.json")
			must(t, os.WriteFile(bundle, b, 0o644))
			run := func(typ string) ([]byte, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, cosign, "verify-blob-attestation", "--key", filepath.Join("testdata", g.key),
					"--bundle", bundle, "--type", typ, "--insecure-ignore-tlog", filepath.Join(out, "docs", "README.md"))
				cmd.Env = append(os.Environ(), "HOME="+dir, "TUF_ROOT="+filepath.Join(dir, "tuf"))
				return cmd.CombinedOutput()
			}
			if b, err := run(g.typ); err != nil {
				t.Fatalf("cosign refuses the golden receipt as %s: %v\n%s", g.typ, err, b)
			}
			if b, err := run(g.other); err == nil {
				t.Fatalf("cosign accepts the golden receipt as %s:\n%s", g.other, b)
			}
		})
	}
}

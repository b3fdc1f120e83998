package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/internal/clitest"
	"github.com/custody-dev/custody/internal/testenv"
)

// TestVerifyPrintsBackend: custody verify prints a v3 receipt's backend
// and evidence map, one line each, and prints neither for a v1 or v2
// receipt, whose output stays as it was. The receipts are the frozen
// goldens (signed by keys whose private halves are gone).
func TestVerifyPrintsBackend(t *testing.T) {
	dir := filepath.Join(testenv.ModuleRoot(t), "evidence", "testdata")
	trust := filepath.Join(dir, "trust.yaml")
	verify := func(name string) string {
		t.Helper()
		code, out, errs := custodyCLI("verify", filepath.Join(dir, name), "--trust", trust, "--no-outputs-unsafe")
		if code == verifyUnauthentic || !strings.Contains(out, "authentic=true promotable=") {
			t.Fatalf("verify %s: %d\n%s%s", name, code, out, errs)
		}
		return out
	}
	out := verify("receipt-v3.json")
	clitest.WantBackendLines(t, out, "oci", "config", "gate", "seccomp", "runtime")
	if !strings.Contains(out, "path=/usr/lib/custody/runc sha256=") {
		t.Fatalf("the backend line does not name the runtime's path and digest:\n%s", out)
	}
	for _, name := range []string{"receipt.json", "receipt-v2.json"} {
		out := verify(name)
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "backend ") || strings.HasPrefix(l, "evidence ") {
				t.Fatalf("verify %s prints a v3 line %q:\n%s", name, l, out)
			}
		}
	}
}

// TestVerifyPrintsWhatRan: verify prints what an authentic receipt says
// ran (phase, command, env names without values, image, inputs with
// digests, budgets, exit, tier, backend) for every receipt version, and
// none of it for a receipt that is not authentic.
func TestVerifyPrintsWhatRan(t *testing.T) {
	dir := filepath.Join(testenv.ModuleRoot(t), "evidence", "testdata")
	trust := filepath.Join(dir, "trust.yaml")
	for _, name := range []string{"receipt.json", "receipt-v2.json", "receipt-v3.json"} {
		code, out, errs := custodyCLI("verify", filepath.Join(dir, name), "--trust", trust, "--no-outputs-unsafe")
		if code == verifyUnauthentic {
			t.Fatalf("verify %s: %d\n%s%s", name, code, out, errs)
		}
		for _, prefix := range []string{"ran      phase ", "command  \"", "image    sha256:", "input    /", "budgets  memory ", "exit     "} {
			if !strings.Contains(out, "\n"+prefix) && !strings.HasPrefix(out, prefix) {
				t.Errorf("verify %s prints no %q line:\n%s", name, prefix, out)
			}
		}
		if !strings.Contains(out, "backend oci") {
			t.Errorf("verify %s does not name the backend:\n%s", name, out)
		}
	}
	// A receipt whose signature fails says nothing about what ran.
	raw, err := os.ReadFile(filepath.Join(dir, "receipt-v3.json"))
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, bytes.Replace(raw, []byte(`"sig":"`), []byte(`"sig":"AAAA`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ := custodyCLI("verify", bad, "--trust", trust, "--no-outputs-unsafe")
	if code != verifyUnauthentic || strings.Contains(out, "ran      ") || strings.Contains(out, "command  ") {
		t.Fatalf("a tampered receipt: exit %d, and it printed what ran:\n%s", code, out)
	}
}

// TestVerifyReadsTheBundle: verify takes the Sigstore bundle form as well
// as the envelope, and when both sit side by side they must hold the same
// signed envelope: a bundle of another receipt beside it is refused as
// unauthentic before anything else.
func TestVerifyReadsTheBundle(t *testing.T) {
	golden := filepath.Join(testenv.ModuleRoot(t), "evidence", "testdata")
	trust := filepath.Join(golden, "trust.yaml")
	v3, err := os.ReadFile(filepath.Join(golden, "receipt-v3.json"))
	if err != nil {
		t.Fatal(err)
	}
	v2, err := os.ReadFile(filepath.Join(golden, "receipt-v2.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	receipt, bundle := filepath.Join(dir, "receipt.json"), filepath.Join(dir, "receipt.sigstore.json")
	b, err := evidence.Bundle(v3, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bundle, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// The bundle alone verifies.
	if code, out, errs := custodyCLI("verify", bundle, "--trust", trust, "--no-outputs-unsafe"); code == verifyUnauthentic || !strings.Contains(out, "authentic=true") {
		t.Fatalf("verify the bundle alone: %d\n%s%s", code, out, errs)
	}
	// Beside its own envelope, either form verifies and says they match.
	if err := os.WriteFile(receipt, v3, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{receipt, bundle} {
		code, out, errs := custodyCLI("verify", p, "--trust", trust, "--no-outputs-unsafe")
		if code == verifyUnauthentic || !strings.Contains(out, "holds the same signed envelope") {
			t.Fatalf("verify %s beside its twin: %d\n%s%s", filepath.Base(p), code, out, errs)
		}
	}
	// Beside another receipt's envelope, both are refused.
	if err := os.WriteFile(receipt, v2, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{receipt, bundle} {
		code, out, errs := custodyCLI("verify", p, "--trust", trust, "--no-outputs-unsafe")
		if code != verifyUnauthentic || !strings.Contains(errs, "the Sigstore bundle does not hold this envelope") || strings.Contains(out, "authentic=true") {
			t.Fatalf("verify %s beside a different twin: %d\n%s%s", filepath.Base(p), code, out, errs)
		}
	}
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/internal/testenv"
)

// wantBackendLines checks that verify's output names backend on one line
// and, on the next, an evidence map with at least the names given.
func wantBackendLines(t *testing.T, stdout, backend string, names ...string) {
	t.Helper()
	var be, ev string
	for _, l := range strings.Split(stdout, "\n") {
		switch {
		case strings.HasPrefix(l, "backend "):
			be = l
		case strings.HasPrefix(l, "evidence "):
			ev = l
		}
	}
	if !strings.HasPrefix(be, "backend "+backend+" version=") {
		t.Fatalf("verify prints no backend line for %s:\n%s", backend, stdout)
	}
	for _, n := range names {
		if !strings.Contains(ev, " "+n+"=") {
			t.Fatalf("verify's evidence line has no %s:\n%s", n, stdout)
		}
	}
}

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
	wantBackendLines(t, out, "oci", "config", "gate", "seccomp", "runtime")
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

// TestDigestReproducesTheReceipt: custody digest of an input's source
// prints the digest the receipt records for it, so a reviewer can check a
// receipt's inputs from the files alone; a path that is not there is
// refused.
func TestDigestReproducesTheReceipt(t *testing.T) {
	e := startDaemon(t)
	src := filepath.Join(e.dir, "in", "src")
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(src, "a.txt"), "alpha\n")
	write(t, filepath.Join(src, "sub", "b.txt"), "beta\n")
	g := e.grant(t, e.phase(t, "digest", "cat /in/a.txt > /out/seen", "inputs:\n  - {source: "+src+", target: /in}\n"))
	receipt := filepath.Join(e.dir, "out", "receipt.json")
	if code, _, errs := e.custody("run", "--grant", g, "--receipt", receipt); code != exitOK {
		t.Fatalf("run: %d %s", code, errs)
	}
	trust := e.trust(t, "trust.yaml", "development")
	code, out, errs := e.custody("verify", receipt, "--trust", trust, "--outputs", filepath.Join(e.dir, "out", "outputs"))
	if code != verifyPromotable {
		t.Fatalf("verify: %d\n%s%s", code, out, errs)
	}
	var recorded string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 5 && f[0] == "input" && f[1] == "/in" && f[4] == src {
			recorded = f[2]
		}
	}
	if recorded == "" {
		t.Fatalf("verify prints no input line for %s:\n%s", src, out)
	}
	code, out, errs = e.custody("digest", src, "--target", "/in")
	if code != exitOK || !strings.HasPrefix(out, recorded+"  ") {
		t.Fatalf("custody digest %s: exit %d, want %s first:\n%s%s", src, code, recorded, out, errs)
	}
	if code, out, errs := e.custody("digest", filepath.Join(e.dir, "absent")); code != exitRefused || out != "" {
		t.Fatalf("digest of a missing path: exit %d\n%s%s", code, out, errs)
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

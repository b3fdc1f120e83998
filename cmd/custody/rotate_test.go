package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunnerKeyRotation: a stopped custodyd's runner key is rotated; the
// restarted daemon signs with the new key, and a trust file that keeps the
// old key until the rotation (notAfter) and the new one from it verifies
// the receipts of both. Refusals: rotating while custodyd runs, and an old
// receipt under a trust file that names only the new key.
func TestRunnerKeyRotation(t *testing.T) {
	e := startDaemon(t)
	phase := e.phase(t, "rotate", "echo x > /out/x", "")
	receipt := func(name string) string {
		t.Helper()
		r := filepath.Join(e.dir, name, "receipt.json")
		if code, _, errs := e.custody("run", "--grant", e.grant(t, phase), "--receipt", r); code != exitOK {
			t.Fatalf("run: %d %s", code, errs)
		}
		return r
	}
	runnerPub := func(file string) {
		t.Helper()
		e.trust(t, "scratch-trust.yaml", "development") // writes runner.pub and issuer.pub from status
		if err := os.Rename(filepath.Join(e.dir, "runner.pub"), filepath.Join(e.dir, file)); err != nil {
			t.Fatal(err)
		}
	}
	before := receipt("before")
	runnerPub("runner-old.pub")

	bin := os.Getenv("CUSTODYD_BIN")
	if out, err := exec.Command(bin, "--config", e.d.Config, "--rotate-key", "runner").CombinedOutput(); err == nil || !strings.Contains(string(out), "must be stopped") {
		t.Fatalf("rotation while running: %v %s", err, out)
	}
	e.d.Stop()
	out, err := exec.Command(bin, "--config", e.d.Config, "--rotate-key", "runner").Output()
	if err != nil {
		t.Fatalf("rotate: %v %s", err, out)
	}
	var rec struct {
		Retired, Successor string
		At                 time.Time
	}
	if err := json.Unmarshal(out, &rec); err != nil || rec.Retired == rec.Successor {
		t.Fatalf("rotation record %s: %v", out, err)
	}
	e.d.Start()
	runnerPub("runner-new.pub")
	after := receipt("after")

	trust := func(name, runners string) string {
		p := filepath.Join(e.dir, name)
		write(t, p, fmt.Sprintf("apiVersion: custody.dev/v1alpha1\nkind: Trust\nrunners: %s\nissuers: [{name: issuer, publicKey: issuer.pub}]\nmaxAge: 1h\ntiers: [development]\n", runners))
		return p
	}
	at := rec.At.Format(time.RFC3339Nano)
	both := trust("both.yaml", fmt.Sprintf("[{name: old, publicKey: runner-old.pub, notAfter: %q}, {name: new, publicKey: runner-new.pub, notBefore: %q}]", at, at))
	for _, r := range []string{before, after} {
		if code, stdout, errs := e.custody("verify", r, "--trust", both, "--outputs", filepath.Join(filepath.Dir(r), "outputs")); code != verifyPromotable {
			t.Fatalf("verify %s across the rotation: %d\n%s%s", r, code, stdout, errs)
		}
	}
	// custody trust export writes the same overlap from the runner's own
	// record of its rotations.
	code, exported, errs := e.custody("trust", "export", "--tiers", "development", "--max-age", "1h")
	if code != exitOK || strings.Count(exported, "publicKeyPEM") != 3 || !strings.Contains(exported, "notAfter: \""+at) && !strings.Contains(exported, "notAfter: "+at) {
		t.Fatalf("trust export: %d %s\n%s", code, errs, exported)
	}
	exportedPath := filepath.Join(e.dir, "exported.yaml")
	write(t, exportedPath, exported)
	for _, r := range []string{before, after} {
		if code, stdout, errs := e.custody("verify", r, "--trust", exportedPath, "--outputs", filepath.Join(filepath.Dir(r), "outputs")); code != verifyPromotable {
			t.Fatalf("verify %s with the exported trust: %d\n%s%s", r, code, stdout, errs)
		}
	}
	if code, _, _ := e.custody("trust", "export", "--tiers", "staging"); code != exitUsage {
		t.Fatalf("trust export --tiers staging: %d", code)
	}
	onlyNew := trust("new.yaml", "[{name: new, publicKey: runner-new.pub}]")
	// Not authentic (2): no trusted key signed it.
	if code, _, _ := e.custody("verify", before, "--trust", onlyNew, "--outputs", filepath.Join(e.dir, "before", "outputs")); code != 2 {
		t.Fatalf("a receipt of the retired key without it in trust: exit %d, want 2", code)
	}
}

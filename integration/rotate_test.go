package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/custody-dev/custody/keys"
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

	if out, err := e.d.Command(context.Background(), "--rotate-key", "runner").CombinedOutput(); err == nil || !strings.Contains(string(out), "must be stopped") {
		t.Fatalf("rotation while running: %v %s", err, out)
	}
	e.d.Stop()
	out, err := e.d.Command(context.Background(), "--rotate-key", "runner").Output()
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

// TestRotationResumesAfterEveryKill: custodyd --rotate-key runner killed
// (SIGKILL, by the fault-injection build) at each of its seven points
// leaves custodyd refusing to start with "finish with custodyd
// --rotate-key runner" (or, killed after its last step, a finished
// rotation), and a second --rotate-key of the production build finishes
// that rotation: the successor it staged is the runner key custodyd
// starts with, the record hands over from the key it retired, and the
// operations log, whose head the rotation re-signs, verifies.
func TestRotationResumesAfterEveryKill(t *testing.T) {
	e := startDaemon(t)
	g := e.grant(t, e.phase(t, "rotate-kill", "true", ""))
	if code, _, errs := e.custody("revoke", "grant", grantIDOf(t, g), "--reason", "an oplog line to re-sign the head of"); code != exitOK {
		t.Fatalf("revoke grant: %d %s", code, errs)
	}
	runnerID := func() string {
		t.Helper()
		code, out, errs := e.custody("status", "--json")
		var st struct{ Status struct{ RunnerID string } }
		if code != exitOK || json.Unmarshal([]byte(out), &st) != nil || st.Status.RunnerID == "" {
			t.Fatalf("status: %d %s %s", code, out, errs)
		}
		return st.Status.RunnerID
	}
	keyDir := filepath.Join(e.dir, "state", "keys")
	for _, step := range []string{"next-private", "next-key", "retired-pub", "record", "head", "public", "private"} {
		before := runnerID()
		e.d.Stop()
		out, err := e.d.FaultCommand(context.Background(), "rotate-"+step, "--rotate-key", "runner").CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("%s: --rotate-key was not killed there: %v %s", step, err, out)
		}
		staged := ""
		if p, err := keys.LoadPrivate(keyDir, "runner-next"); err == nil {
			staged = p.ID()
		}
		if step != "private" {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			out, err := e.d.Command(ctx).CombinedOutput()
			cancel()
			if err == nil || !strings.Contains(string(out), "finish with custodyd --rotate-key runner") {
				t.Fatalf("%s: custodyd's start on the half-rotated key: %v %s", step, err, out)
			}
		}
		out, err = e.d.Command(context.Background(), "--rotate-key", "runner").Output()
		var rec struct{ Retired, Successor string }
		if err != nil || json.Unmarshal(out, &rec) != nil {
			t.Fatalf("%s: the second --rotate-key: %v %s", step, err, out)
		}
		e.d.Start()
		now := runnerID()
		if step == "private" {
			// Killed after its last step: that rotation was complete, and
			// the second one is another rotation, from its successor.
			if rec.Retired == before || now != rec.Successor {
				t.Fatalf("%s: after a complete rotation, another: %+v, running %s (was %s)", step, rec, now, before)
			}
		} else if rec.Retired != before || rec.Successor != staged || now != staged {
			t.Fatalf("%s: the rotation resumed as %+v, running %s; want %s handed over to the staged %s", step, rec, now, before, staged)
		}
		if code, _, errs := e.custody("oplog"); code != exitOK {
			t.Fatalf("%s: the operations log after the rotation: %d %s", step, code, errs)
		}
	}
}

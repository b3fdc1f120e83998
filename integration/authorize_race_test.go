package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/daemontest"
)

// TestAuthorizationReadsWhatThePeerOpened: a client whose authorization's
// input root is a symlink in its own home (which it may rewrite) points
// the symlink, after custodyd opened the input as the client and before
// custodyd reads it, at a tree in another user's home that it cannot
// search. The fault-injection custodyd holds the mint at exactly that
// point. custodyd reads only what the client opened, at the mint and at
// the launch alike: the run gets the client's own tree, and the other
// user's file never reaches it. With the symlink pointing home, the same
// request mints and runs.
func TestAuthorizationReadsWhatThePeerOpened(t *testing.T) {
	const agent = 65534
	d := daemontest.New(t, daemontest.Options{Fault: true})
	gate := filepath.Join(d.Dir, "gate")
	if err := os.Mkdir(gate, 0o700); err != nil {
		t.Fatal(err)
	}
	d.Start("CUSTODY_FAULT_PAUSE=mint-inputs-opened", "CUSTODY_FAULT_GATE="+gate)
	ctx := context.Background()
	d.ImportBusybox(ctx)
	homes := filepath.Join(d.Dir, "homes")
	alice, bob := filepath.Join(homes, "alice"), filepath.Join(homes, "bob")
	daemontest.Write(t, filepath.Join(alice, "real", "repo", "main.go"), "package main\n")
	daemontest.Write(t, filepath.Join(bob, "real", "repo", "main.go"), "bob's secret\n")
	for _, p := range []string{homes, alice, bob} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(bob, 0o700); err != nil { // another user's home
		t.Fatal(err)
	}
	if err := os.Chown(alice, agent, agent); err != nil { // the client's own home
		t.Fatal(err)
	}
	work := filepath.Join(alice, "work")
	point := func(target string) {
		t.Helper()
		_ = os.Remove(work)
		if err := os.Symlink(target, work); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(work, agent, agent); err != nil {
			t.Fatal(err)
		}
	}
	point("real")
	pol := strings.NewReplacer(`inputRoots: ["@INPUTROOT@"]`, `inputRoots: ["@INPUTROOT@/homes/alice/work"]`,
		`inputRoots: ["@INPUTROOT@/agent"]`, `inputRoots: ["@INPUTROOT@/homes/alice/work"]`,
		"submitters: {uids: [0]}", "submitters: {uids: [0, 65534]}").Replace(authPolicy)
	d.WritePolicy(pol)
	if _, err := d.Control.ReloadPolicy(ctx); err != nil {
		t.Fatal(err)
	}
	e := &authEnv{env: newEnv(t, d), inside: filepath.Join(work, "repo")}
	e.image = d.Image
	phaseFile := filepath.Join(alice, "agent-step.yaml")
	write(t, phaseFile, string(e.authPhase(t, "cat /src/main.go").YAML))
	if err := os.Chmod(phaseFile, 0o644); err != nil {
		t.Fatal(err)
	}

	// The race, made deterministic: swap once custodyd holds the mint.
	reached, goOn := filepath.Join(gate, "reached"), filepath.Join(gate, "go")
	race := func(swap func()) (int, string, string) {
		t.Helper()
		for _, p := range []string{reached, goOn} {
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
		done := make(chan struct{})
		var code int
		var out, errs string
		go func() {
			defer close(done)
			code, out, errs = e.custodyAs(t, agent, "run", "--authorization", "agent-loop", phaseFile)
		}()
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(reached); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("custodyd never reached the point between its check and its read")
			}
		}
		swap()
		write(t, goOn, "")
		<-done
		return code, out, errs
	}
	code, out, errs := race(func() { point(filepath.Join(bob, "real")) })
	if strings.Contains(out+errs, "bob's secret") {
		t.Fatalf("uid %d read a file in a home it cannot search, by swapping a symlink after the check: exit %d\n%s%s", agent, code, out, errs)
	}
	if code != exitOK || !strings.Contains(out, "package main") {
		t.Fatalf("the request swapped after its inputs were opened did not run the tree the client opened: exit %d\n%s%s", code, out, errs)
	}
	point("real")

	// An entry moved into the tree after the check: another user's 0600
	// file, which the client may rename (from a directory it may write,
	// a group-shared one say) but not read, is refused as the walk meets
	// it, and never read.
	shared := filepath.Join(homes, "shared")
	daemontest.Write(t, filepath.Join(shared, "bobs.go"), "bob's secret\n")
	if err := os.Chmod(filepath.Join(shared, "bobs.go"), 0o600); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(alice, "real", "repo", "bobs.go")
	phase := e.authPhase(t, "cat /src/*.go")
	write(t, phaseFile, string(phase.YAML))
	code, out, errs = race(func() {
		if err := os.Rename(filepath.Join(shared, "bobs.go"), planted); err != nil {
			t.Fatal(err)
		}
	})
	if strings.Contains(out+errs, "bob's secret") {
		t.Fatalf("uid %d read another user's 0600 file renamed into its tree after the check: exit %d\n%s%s", agent, code, out, errs)
	}
	if code != exitRefused || !strings.Contains(out+errs, "not readable by the client") || !strings.Contains(out+errs, filepath.Join(work, "repo", "bobs.go")) || strings.Contains(out+errs, "/proc/self/fd") {
		t.Fatalf("the file renamed into the tree: exit %d\n%s%s", code, out, errs)
	}
	if err := os.Remove(planted); err != nil {
		t.Fatal(err)
	}

	// The legitimate case: the symlinked root pointing home mints and runs.
	point("real")
	if code, out, errs := e.custodyAs(t, agent, "run", "--authorization", "agent-loop", phaseFile); code != exitOK || !strings.Contains(out, "package main") {
		t.Fatalf("uid %d over its own tree through its symlinked root: %d\n%s%s", agent, code, out, errs)
	}
}

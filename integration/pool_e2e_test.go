package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/testenv"
)

// poolProfile matches e.phase's plans (64Mi, 64 pids, the example
// policy's default cpu, tmp and output, /out, development).
const poolProfile = `
pool:
  - name: small
    image: "@IMAGE@"
    tier: development
    size: 3
    idleTTL: 10m
    resources: {memory: 64Mi, pids: 64, cpu: 1, tmpBytes: 16Mi, outputPath: /out, outputBytes: 32Mi}
`

// poolMembers are the launch dirs of the pool's members in the runtime dir.
func poolMembers(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "run"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// addPool appends poolProfile to the daemon's policy and reloads it.
func (e *env) addPool(t *testing.T) {
	t.Helper()
	pol, err := os.ReadFile(e.d.Policy)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.d.Policy, append(pol, strings.ReplaceAll(poolProfile, "@IMAGE@", e.image)...), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := e.custody("policy", "reload"); code != 0 {
		t.Fatalf("policy reload: %s %s", out, errs)
	}
}

// waitUntil polls ok until it holds, for at most 30 s.
func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPoolRecoveredAfterSIGKILL: custodyd killed with a full pool (three
// sandboxes held at their gates) leaves their gates, mounts, cgroups and
// launch dirs; the restarted custodyd recovers each member's attempt to an
// explicit state (clean here) and leaves nothing of them: no process, no
// mount, no cgroup, no dir; the runner is not quarantined, and the pool
// fills again and serves a grant (its receipt verifies and says pooled).
func TestPoolRecoveredAfterSIGKILL(t *testing.T) {
	e := startDaemon(t)
	d := e.d
	e.addPool(t)
	waitFor := func(what string, ok func() bool) { t.Helper(); waitUntil(t, what, ok) }
	waitFor("a full pool", func() bool { return len(poolMembers(t, e.dir)) == 3 })
	time.Sleep(300 * time.Millisecond) // the last member reaches its gate
	killed := poolMembers(t, e.dir)
	d.Kill()

	d.Start()
	ctx := context.Background()
	as, err := d.Control.Attempts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, a := range as {
		states["custody-"+a.RunID] = a.State + " " + a.Detail
	}
	for _, id := range killed {
		st := states[id]
		if !strings.HasPrefix(st, "clean ") && !strings.HasPrefix(st, "residual ") {
			t.Errorf("member %s recovered to %q, want clean or residual", id, st)
		}
		if _, err := os.Stat(filepath.Join(e.dir, "run", id)); !os.IsNotExist(err) {
			t.Errorf("member %s: launch dir left (%v)", id, err)
		}
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, id := range killed {
		if strings.Contains(string(mounts), id) {
			t.Errorf("member %s: a mount is left", id)
		}
		if cg, _ := filepath.Glob("/sys/fs/cgroup/*/custody/" + id); len(cg) > 0 {
			t.Errorf("member %s: cgroups left: %v", id, cg)
		}
		if cg, _ := filepath.Glob("/sys/fs/cgroup/*/*/custody/" + id); len(cg) > 0 {
			t.Errorf("member %s: cgroups left: %v", id, cg)
		}
		for _, p := range procs {
			if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), id) {
				t.Errorf("member %s: process %s is left", id, filepath.Dir(p))
			}
		}
	}
	q, err := d.Control.Quarantine(ctx)
	if err != nil || q.Quarantined {
		t.Fatalf("quarantine after recovery: %+v %v", q, err)
	}

	// The pool fills again and serves a grant; its receipt says pooled.
	waitFor("a full pool again", func() bool { return len(poolMembers(t, e.dir)) == 3 })
	g := e.grant(t, e.phase(t, "pooled", "echo pooled-ok", ""))
	runDir := filepath.Join(e.dir, "pooled-run")
	if err := os.Mkdir(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	receipt := filepath.Join(runDir, "receipt.json")
	code, out, errs := e.custody("run", "--grant", g, "--receipt", receipt)
	if code != 0 || !strings.Contains(out, "pooled-ok") {
		t.Fatalf("pooled run: %d %s %s", code, out, errs)
	}
	code, out, errs = e.custody("verify", receipt, "--trust", e.trust(t, "trust.yaml", "development"), "--outputs", filepath.Join(runDir, "outputs"))
	if code != 0 || !strings.Contains(out, "pooled (prepared at ") {
		t.Fatalf("verify: %d %s %s", code, out, errs)
	}
	t.Log(strings.TrimSpace(out))
}

// TestPooledRunResidualAfterSIGKILL: custodyd killed during a run, cold
// and pooled, while a host process holds a file of the run's output open.
// The restarted custodyd cannot verify the sandbox's cleanup: the runner is
// quarantined, and the run's own result says residual, pooled as cold,
// never clean (a pooled run's cleanup state is its member's). Once the
// file is closed the operator's release recovers everything clean.
func TestPooledRunResidualAfterSIGKILL(t *testing.T) {
	for _, pooled := range []bool{false, true} {
		t.Run(map[bool]string{false: "cold", true: "pooled"}[pooled], func(t *testing.T) { residualAfterSIGKILL(t, pooled) })
	}
}

func residualAfterSIGKILL(t *testing.T, pooled bool) {
	e := startDaemon(t)
	d := e.d
	ctx := context.Background()
	if pooled {
		e.addPool(t)
		waitUntil(t, "a full pool", func() bool { return len(poolMembers(t, e.dir)) == 3 })
		time.Sleep(300 * time.Millisecond) // the last member reaches its gate
	}
	g := e.grant(t, e.phase(t, "held", "echo x > /out/held; sleep 30", ""))
	held := testenv.HoldOutput(t, filepath.Join(e.dir, "run"), "held")
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.custody("run", "--grant", g)
	}()
	f := <-held
	if f == nil {
		t.Fatal("could not hold the output open")
	}
	as, err := d.Control.Attempts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	runID := ""
	for _, a := range as {
		if !strings.HasPrefix(a.GrantID, "pool:") && a.State == "running" {
			runID = a.RunID
		}
	}
	if runID == "" {
		t.Fatalf("no running run among the attempts: %+v", as)
	}
	d.Kill()
	<-done
	d.Start()

	q, err := d.Control.Quarantine(ctx)
	if err != nil || !q.Quarantined {
		t.Fatalf("quarantine after recovery with a held output: %+v %v", q, err)
	}
	code, out, errs := e.custody("result", runID)
	if code != 0 || !strings.Contains(out, "residual") || strings.Contains(out, "left it clean") {
		t.Fatalf("result of the pooled run recovered residual: %d\n%s%s", code, out, errs)
	}
	if pooled && !strings.Contains(out, "pool member") {
		t.Errorf("the result does not name the pool member that holds the residue:\n%s", out)
	}
	// What the record does not hold was not observed: unknown, never "".
	if strings.Contains(out, `""`) || !strings.Contains(out, "exit unknown") || !strings.Contains(out, "usage    unknown") || !strings.Contains(out, "actor ci-bot") {
		t.Errorf("the recovered run's result prints values it does not know as empty or zero:\n%s", out)
	}
	as, err = d.Control.Attempts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.RunID == runID && a.State != "residual" {
			t.Errorf("the run's attempt is %s (%s), want residual", a.State, a.Detail)
		}
	}
	t.Log(strings.TrimSpace(out))

	f.Close()
	if err := d.Control.ReleaseQuarantine(ctx); err != nil {
		t.Fatalf("release once the file is closed: %v", err)
	}
	as, err = d.Control.Attempts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.State != "clean" {
			t.Errorf("after the release, attempt %s (%s) is %s: %s", a.RunID, a.GrantID, a.State, a.Detail)
		}
	}
}

package host_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/launch"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/pool"
	"github.com/custody-dev/custody/quantity"
	"github.com/custody-dev/custody/runrecord"
	"github.com/custody-dev/custody/store"
)

// withPool is h's policy with one pool profile of size members matching
// h.phase's plans.
func (h *harness) withPool(size int) *policy.Policy {
	pol := *h.policy
	pol.Pool = []policy.PoolProfile{{
		Name: "small", Image: h.image, Tier: "development", Size: size, IdleTTL: quantity.Duration(10 * time.Minute),
		Resources: policy.PoolResources{Memory: 64 << 20, Pids: 64, CPU: 1, TmpBytes: 8 << 20, OutputPath: "/out", OutputBytes: 1 << 20},
	}}
	if err := pol.Validate(); err != nil {
		h.t.Fatalf("pool policy invalid: %v", err)
	}
	return &pol
}

// members are the pool members' attempts by state.
func (h *harness) members() map[journal.State][]journal.Attempt {
	h.t.Helper()
	as, err := h.r.Attempts()
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[journal.State][]journal.Attempt{}
	for _, a := range as {
		if pool.IsMember(a) {
			out[a.State] = append(out[a.State], a)
		}
	}
	return out
}

// TestPoolPrunesCleanMembers: members destroyed and verified clean are
// pruned from the journal beyond the newest few (here 2), while the live
// member stays; a regular run's attempt is never pruned.
func TestPoolPrunesCleanMembers(t *testing.T) {
	h := newHarness(t)
	host.SetPoolKeepClean(h.r, 2)
	ctx := context.Background()
	res, out := h.run(h.phase("echo cold"))
	want(t, res, runrecord.StatusOK, out)
	pol := h.withPool(1)
	t.Cleanup(func() { h.r.Pool().Drain(context.Background(), "test done") })
	for i := range 5 {
		// Each digest is a policy change: the member made under the last
		// one is destroyed and verified clean, and a new one is made.
		h.r.Pool().Configure(ctx, pol, "policy-"+string(rune('a'+i)))
		if err := h.r.Pool().Fill(ctx); err != nil {
			t.Fatalf("fill %d: %v", i, err)
		}
	}
	ms := h.members()
	if len(ms[journal.Running]) != 1 || len(ms[journal.Clean]) != 2 || len(ms[journal.Residual]) != 0 {
		t.Fatalf("members after 5 policies: %d running, %d clean, %d residual; want 1 live and the 2 newest clean kept",
			len(ms[journal.Running]), len(ms[journal.Clean]), len(ms[journal.Residual]))
	}
	if a := h.attempt(res.RunID); a.State != journal.Clean {
		t.Fatalf("the cold run's attempt: %+v", a)
	}
	if q, _ := h.r.Quarantine(); q != nil {
		t.Fatalf("quarantined: %+v", q)
	}
}

// TestRecoverPrunesAnOldJournalsMembers: a journal written before pruning
// (every member kept, as attempts with a pool: grant id) is pruned by
// recovery to the newest clean members that served no run; a member left
// running by a dead runner is recovered, not pruned, and a regular attempt
// stays.
func TestRecoverPrunesAnOldJournalsMembers(t *testing.T) {
	h := newHarness(t)
	host.SetPoolKeepClean(h.r, 2)
	j := journal.New(h.db)
	var clean []string
	for range 5 {
		id := host.NewRunID()
		if err := j.Begin(id, "pool:small"); err != nil {
			t.Fatal(err)
		}
		if err := j.Finish(id, journal.Clean, "pool member destroyed unused: test", ""); err != nil {
			t.Fatal(err)
		}
		clean = append(clean, id)
		time.Sleep(2 * time.Millisecond) // distinct times: newest known
	}
	dead := host.NewRunID()
	if err := j.Begin(dead, "pool:small"); err != nil {
		t.Fatal(err)
	}
	regular := host.NewRunID()
	if err := j.Begin(regular, "grant-1"); err != nil {
		t.Fatal(err)
	}
	if err := j.Finish(regular, journal.Clean, "test", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := h.r.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The dead runner's member, recovered clean, may have served a run: it
	// is kept and not counted; of the unused ones the newest 2 stay.
	for i, id := range clean {
		_, err := j.Get(id)
		if kept := i >= 3; kept != (err == nil) {
			t.Errorf("member %d of 5: kept %v (%v), want only the newest 2 kept", i, err == nil, err)
		}
	}
	if a, err := j.Get(dead); err != nil || a.State != journal.Clean || !strings.Contains(a.Detail, "recovered") {
		t.Errorf("the dead runner's member: %+v %v; want recovered clean and kept", a, err)
	}
	if _, err := j.Get(regular); err != nil {
		t.Errorf("a regular attempt was pruned: %v", err)
	}
}

// runcCopy copies the pinned runc where a test may change its bytes, and
// returns the copy's path, the bytes and the runtime pinned to them.
func runcCopy(t *testing.T) (string, []byte, host.Runtime) {
	t.Helper()
	testenv.Root(t)
	path, version, sha := testenv.Runc(t)
	copyPath := filepath.Join(t.TempDir(), "runc")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyPath, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return copyPath, data, host.Runtime{Path: copyPath, Version: version, SHA256: sha}
}

// TestPoolBackoff: a profile whose members always fail to prepare (the
// runtime's bytes changed) is retried after 1 s, 2 s, 4 s..., not every
// round, and its state says so; a policy change resets the backoff, and
// so does a member prepared again.
func TestPoolBackoff(t *testing.T) {
	copyPath, data, rt := runcCopy(t)
	h := newHarnessWith(t, rt)
	ctx := context.Background()
	pol := h.withPool(1)
	t.Cleanup(func() { h.r.Pool().Drain(context.Background(), "test done") })
	if err := os.WriteFile(copyPath, append(data, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	h.r.Pool().Configure(ctx, pol, "policy-a")
	// Rounds every 100 ms for 3.5 s: tries at 0, 1 and 3 s.
	var errs int
	for start := time.Now(); time.Since(start) < 3500*time.Millisecond; time.Sleep(100 * time.Millisecond) {
		if h.r.Pool().Fill(ctx) != nil {
			errs++
		}
	}
	tried := len(h.members()[journal.Clean])
	st := h.r.Pool().Profiles()
	if tried < 2 || tried > 4 || errs != tried || len(st) != 1 {
		t.Fatalf("a failing profile was tried %d times in 3.5 s (%d rounds failed), want 3 (backoff 1 s, 2 s)", tried, errs)
	}
	p := st[0]
	if p.State != pool.Backoff || p.Failures != tried || !strings.Contains(p.LastError, "runtime") ||
		p.NextTry.Sub(p.LastFailure) != time.Second<<(p.Failures-1) {
		t.Fatalf("profile after %d failures: %+v; want backoff, the runtime error and a next try %s after the last", tried, p, time.Second<<(tried-1))
	}

	// A policy change resets it: the new policy's profile is tried at once.
	h.r.Pool().Configure(ctx, pol, "policy-b")
	if p := h.r.Pool().Profiles()[0]; p.Failures != 0 || p.State != pool.Filling || !p.NextTry.IsZero() {
		t.Fatalf("profile after a policy change: %+v; want no backoff", p)
	}
	if err := h.r.Pool().Fill(ctx); err == nil {
		t.Fatal("a member was prepared under a runtime whose bytes changed")
	}
	if p := h.r.Pool().Profiles()[0]; p.Failures != 1 || p.State != pool.Backoff {
		t.Fatalf("profile after one failure: %+v", p)
	}

	// The runtime is back: after the backoff a member is prepared, and
	// the backoff is gone.
	if err := os.WriteFile(copyPath, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := h.r.Pool().Fill(ctx); err != nil || h.r.Pool().Status()["small"] != 0 {
		t.Fatalf("a round within the backoff: %v, %v; want nothing tried", err, h.r.Pool().Status())
	}
	time.Sleep(time.Until(h.r.Pool().Profiles()[0].NextTry) + 50*time.Millisecond)
	if err := h.r.Pool().Fill(ctx); err != nil {
		t.Fatalf("fill after the runtime came back: %v", err)
	}
	if p := h.r.Pool().Profiles()[0]; p.State != pool.Ready || p.Failures != 0 || p.LastError != "" || p.Idle != 1 {
		t.Fatalf("profile after a member was prepared: %+v; want ready and no backoff", p)
	}
}

// TestRecoverDoesNotWaitForTheFillRound: an operator's recovery while a
// slow profile fills (each member takes over a second to prepare, six to
// make) cancels the round rather than wait for it: it returns within
// about one member's preparation, every member made or cut short is
// verified clean, nothing is quarantined, and the pool fills again after.
func TestRecoverDoesNotWaitForTheFillRound(t *testing.T) {
	testenv.Root(t)
	path, version, sha := testenv.Runc(t)
	var slow atomic.Bool
	slow.Store(true)
	h := newHarnessFaults(t, launchBase(t), host.Runtime{Path: path, Version: version, SHA256: sha}, func(stage string) {
		if stage == "mid-prepare" && slow.Load() {
			time.Sleep(1200 * time.Millisecond)
		}
	})
	ctx := context.Background()
	pol := h.withPool(6)
	t.Cleanup(func() { h.r.Pool().Drain(context.Background(), "test done") })
	h.r.Pool().Configure(ctx, pol, "policy-a")
	filled := make(chan error, 1)
	go func() { filled <- h.r.Pool().Fill(ctx) }()
	// Recover once the first member is under way.
	for deadline := time.Now().Add(10 * time.Second); len(h.members()[journal.Running]) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no member was begun")
		}
	}
	start := time.Now()
	rec, err := h.r.Recover(ctx)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	// The round would take over 7 s; one member's preparation is 1.2 s.
	if took > 4*time.Second {
		t.Fatalf("recovery took %s: it waited for the fill round", took)
	}
	if err := <-filled; err != nil {
		t.Fatalf("the cancelled round: %v", err)
	}
	for _, a := range rec.Attempts {
		if a.State != journal.Clean {
			t.Errorf("recovered %s: %s %q", a.RunID, a.State, a.Detail)
		}
	}
	ms := h.members()
	if len(ms[journal.Running])+len(ms[journal.Residual])+len(ms[journal.CleanupPending]) != 0 || len(ms[journal.Clean]) == 0 {
		t.Fatalf("members after recovery: %v", ms)
	}
	if q, _ := h.r.Quarantine(); q != nil {
		t.Fatalf("quarantined: %+v", q)
	}
	h.noLeftovers()
	t.Logf("recovery took %s", took)

	// Legitimate: with the hold released, the pool fills again.
	slow.Store(false)
	h.r.Pool().Configure(ctx, h.withPool(2), "policy-b")
	if err := h.r.Pool().Fill(ctx); err != nil || h.r.Pool().Status()["small"] != 2 {
		t.Fatalf("fill after recovery: %v %v", err, h.r.Pool().Status())
	}
}

// TestPoolServedMemberIsNeverPruned: a member that served a run is that
// run's record of the sandbox its receipt names, so pruning, in later fill
// rounds and in recovery, removes only members destroyed unused: after a
// pooled launch and several policy changes with only 1 clean member kept,
// the served member's attempt is still in the journal, clean, naming the
// run.
func TestPoolServedMemberIsNeverPruned(t *testing.T) {
	h := newHarness(t)
	host.SetPoolKeepClean(h.r, 1)
	ctx := context.Background()
	prep, err := launch.Prepare(ctx, h.r, h.phase("echo pooled"), h.policy)
	if err != nil {
		t.Fatal(err)
	}
	pl := prep.Plan
	pol := *h.policy
	pol.Pool = []policy.PoolProfile{{
		Name: "exact", Image: h.image, Tier: string(pl.Tier), Size: 1, IdleTTL: quantity.Duration(10 * time.Minute),
		Resources: policy.PoolResources{Memory: quantity.Bytes(pl.Memory), Pids: pl.Pids, CPU: pl.CPU, TmpBytes: quantity.Bytes(pl.TmpBytes),
			OutputPath: pl.OutputPath, OutputBytes: quantity.Bytes(pl.OutputBytes), OutputFiles: pl.OutputFiles},
	}}
	if err := pol.Validate(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.r.Pool().Drain(context.Background(), "test done") })
	h.r.Pool().Configure(ctx, &pol, "policy-0")
	if err := h.r.Pool().Fill(ctx); err != nil {
		t.Fatal(err)
	}
	lease := h.r.Pool().Reserve(pl)
	if lease == nil {
		t.Fatal("the plan did not match the profile made from it")
	}
	served := lease.Member().Sandbox
	prep.RunID = host.NewRunID()
	prep.GrantID = "grant-pooled"
	if err := h.r.ConsumePooled(prep.RunID, prep.GrantID, store.GrantUse{At: time.Now(), RunID: prep.RunID, Actor: "test"}, lease); err != nil {
		t.Fatal(err)
	}
	res, out := h.launchSpent(ctx, prep, true, lease)
	want(t, res, runrecord.StatusOK, out)
	if res.Pooled == nil || res.Pooled.Sandbox != served {
		t.Fatalf("the run was not served by the reserved member %s: %+v", served, res.Pooled)
	}
	for i := range 4 {
		h.r.Pool().Configure(ctx, &pol, "policy-"+string(rune('a'+i)))
		if err := h.r.Pool().Fill(ctx); err != nil {
			t.Fatalf("fill %d: %v", i, err)
		}
	}
	h.r.Pool().Drain(ctx, "before recovery")
	if _, err := h.r.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	a := h.attempt(served)
	if a.State != journal.Clean || !strings.Contains(a.Detail, "served run "+prep.RunID) {
		t.Fatalf("the member that served the run: %+v; want it kept, clean, naming run %s", a, prep.RunID)
	}
	if n := len(h.members()[journal.Clean]); n != 2 {
		t.Errorf("%d clean members kept, want the served one and the 1 newest unused", n)
	}
}

package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/internal/randid"
	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/quantity"
	"github.com/custody-dev/custody/store"
)

// These tests drive the pool's bookkeeping with a stand-in for the held
// sandbox (unit logic only: the containment itself is tested against the
// real runtime in backend/oci and cmd/custodyd).

// fakeHeld is a held sandbox whose Take fails with take (if set) and
// whose Destroy is verified or not.
type fakeHeld struct {
	take      error
	verified  bool
	destroyed atomic.Int32
	block     chan struct{} // Destroy waits for it to close, if set
}

func (h *fakeHeld) ID() string            { return "fake" }
func (h *fakeHeld) PreparedAt() time.Time { return time.Now() }
func (h *fakeHeld) Alive() error          { return nil }
func (h *fakeHeld) Take(context.Context, backend.Attachment) (backend.Sandbox, error) {
	return nil, h.take
}
func (h *fakeHeld) Destroy(context.Context) backend.CleanupReport {
	if h.block != nil {
		<-h.block
	}
	h.destroyed.Add(1)
	return backend.CleanupReport{Verified: h.verified, Steps: []backend.CleanupStep{{Name: "fake", OK: h.verified}}}
}

// errQuarantined is testHost's quarantine.
var errQuarantined = errors.New("quarantined (test)")

// testHost is a host on a real store and journal whose only backend is
// none: it quarantines as the host does (a residual attempt sets it).
type testHost struct {
	db *store.DB
	j  *journal.Journal
}

func (h *testHost) BackendNamed(name string) (backend.Backend, error) {
	return nil, fmt.Errorf("backend %q: none in this test", name)
}
func (h *testHost) BackendNames() []string { return nil }
func (h *testHost) CheckQuarantine() error {
	if q, err := h.db.Quarantine(); err != nil || q != nil {
		return errors.Join(errQuarantined, err)
	}
	return nil
}
func (h *testHost) Abandon(runID, reason string) error {
	return h.j.Finish(runID, journal.Clean, reason, "")
}
func (h *testHost) Residual(runID, reason string, removed ...journal.Resource) error {
	_ = h.j.Finish(runID, journal.Residual, reason, "", removed...)
	if err := h.db.SetQuarantine(store.Quarantine{Since: time.Now().UTC(), Reason: reason, RunID: runID}); err != nil {
		return err
	}
	return fmt.Errorf("%w: %s", errQuarantined, reason)
}

func poolRunner(t *testing.T) *Pool {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	j := journal.New(db)
	return New(Config{Host: &testHost{db: db, j: j}, Journal: j, ContainerID: func(id string) string { return "custody-" + id },
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// member journals a member's attempt and returns it, held by h.
func poolMember(t *testing.T, r *Pool, p policy.PoolProfile, h backend.Held) *member {
	t.Helper()
	m := &member{runID: randid.New(8), profile: p, held: h, digest: "policy", image: p.Image}
	if err := r.journal.Begin(m.runID, grantPrefix+p.Name); err != nil {
		t.Fatal(err)
	}
	return m
}

// A released member goes back to a profile short of its size, and is
// destroyed when FillPool refilled the profile while it was reserved.
func TestReleaseKeepsThePoolToItsSize(t *testing.T) {
	r := poolRunner(t)
	p := policy.PoolProfile{Name: "small", Image: "img", Size: 1}
	r.digest, r.profiles, r.members = "policy", []policy.PoolProfile{p}, map[string][]*member{}

	back := &fakeHeld{verified: true}
	(&Lease{r: r, m: poolMember(t, r, p, back)}).Release()
	if n := len(r.members["small"]); n != 1 || back.destroyed.Load() != 0 {
		t.Fatalf("release into an empty profile: %d members, destroyed %d; want 1 kept", n, back.destroyed.Load())
	}

	extra := &fakeHeld{verified: true}
	m := poolMember(t, r, p, extra)
	(&Lease{r: r, m: m}).Release()
	r.destroying.wait()
	if n := len(r.members["small"]); n != 1 || extra.destroyed.Load() != 1 {
		t.Fatalf("release into a full profile: %d members, destroyed %d; want 1 member and the released one destroyed", n, extra.destroyed.Load())
	}
	if a, err := r.journal.Get(m.runID); err != nil || a.State != journal.Clean {
		t.Fatalf("the destroyed member's attempt: %+v, %v; want clean", a, err)
	}
}

// A member that cannot be taken sends the run cold; but when its
// teardown was not verified (the runner is quarantined), no cold launch
// follows and the run fails to start with the quarantine error. (The
// launch goes cold exactly when Take's error is not a *TakeError.)
func TestFailedTakeOnAQuarantinedRunner(t *testing.T) {
	for _, verified := range []bool{true, false} {
		r := poolRunner(t)
		p := policy.PoolProfile{Name: "small", Image: "img", Size: 1}
		h := &fakeHeld{take: errors.New("attach failed (test)"), verified: verified}
		lease := &Lease{r: r, m: poolMember(t, r, p, h)}
		sb, err := lease.Take(context.Background(), backend.Spec{}, randid.New(8))
		if h.destroyed.Load() != 1 {
			t.Fatalf("verified=%v: the member was destroyed %d times, want once", verified, h.destroyed.Load())
		}
		if sb != nil || lease.Held() || !errors.Is(err, errTake) {
			t.Fatalf("verified=%v: take gave %v, %v (lease held %v); want the take error and the lease spent", verified, sb, err, lease.Held())
		}
		var pt *TakeError
		if verified {
			if errors.As(err, &pt) || errors.Is(err, errQuarantined) {
				t.Fatalf("verified teardown: %v; want a cold launch to follow", err)
			}
			continue
		}
		if !errors.Is(err, errQuarantined) || !errors.As(err, &pt) {
			t.Fatalf("unverified teardown: err %v; want no cold launch and the quarantine error", err)
		}
	}
}

// Recover's hold on the pool waits for a member teardown started in the
// background (a released or dead member's) before it walks the journal.
func TestHoldPoolWaitsForTeardowns(t *testing.T) {
	r := poolRunner(t)
	p := policy.PoolProfile{Name: "small", Image: "img", Size: 1}
	h := &fakeHeld{verified: true, block: make(chan struct{})}
	m := poolMember(t, r, p, h)
	r.destroyLater(m, "test")
	held := make(chan func())
	go func() { held <- r.Hold(context.Background()) }()
	select {
	case release := <-held:
		release()
		close(h.block)
		t.Fatal("holdPool returned while a member's teardown was under way")
	case <-time.After(200 * time.Millisecond):
	}
	close(h.block)
	select {
	case release := <-held:
		release()
	case <-time.After(5 * time.Second):
		t.Fatal("holdPool did not return after the teardown ended")
	}
	if a, err := r.journal.Get(m.runID); err != nil || a.State != journal.Clean {
		t.Fatalf("the member's attempt when the hold was taken: %+v, %v; want clean", a, err)
	}
}

// flakyHeld's gate answers dead once, then alive (as a poll interrupted
// once may).
type flakyHeld struct {
	fakeHeld
	asked atomic.Int32
}

func (h *flakyHeld) Alive() error {
	if h.asked.Add(1) == 1 {
		return errors.New("gate gone (test)")
	}
	return nil
}

// poolBackend is a Pooler whose runtime never changes.
type poolBackend struct{ backend.Backend }

func (poolBackend) Name() string                       { return "oci" }
func (poolBackend) Identity() backend.Identity         { return backend.Identity{} }
func (poolBackend) CheckRuntime(context.Context) error { return nil }
func (poolBackend) PrepareHeld(context.Context, string, backend.HeldSpec, backend.Recorder) (backend.Held, error) {
	return nil, errors.New("not in this test")
}

// FillPool destroys a member whose gate was found dead by the one answer
// it asked for (it once asked twice, and a second nil answer crashed it).
func TestFillPoolAsksAliveOnce(t *testing.T) {
	r := poolRunner(t)
	p := policy.PoolProfile{Name: "small", Image: "img", Size: 1, IdleTTL: quantity.Duration(time.Hour)}
	h := &flakyHeld{fakeHeld: fakeHeld{verified: true}}
	m := poolMember(t, r, p, h)
	m.backend = poolBackend{}
	r.digest, r.members = "policy", map[string][]*member{"small": {m}}
	if err := r.Fill(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(r.members["small"]); n != 0 || h.destroyed.Load() != 1 {
		t.Fatalf("a member found dead: %d kept, destroyed %d; want it destroyed", n, h.destroyed.Load())
	}
}

// A teardown may start while wait blocks: wait returns once all are done,
// not before (a sync.WaitGroup would be misused here and could panic).
func TestTeardownsGainWhileWaiting(t *testing.T) {
	var td teardowns
	td.wait() // none under way: returns at once
	td.add()
	returned := make(chan struct{})
	go func() { td.wait(); close(returned) }()
	td.add()
	td.done()
	select {
	case <-returned:
		t.Fatal("wait returned with a teardown under way")
	case <-time.After(100 * time.Millisecond):
	}
	td.done()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return once every teardown was done")
	}
	td.add() // reused after a wait
	td.done()
	td.wait()
}

// TestMismatchNamesTheFirstField: a plan that asks for exactly what a
// profile holds (its silent outputFiles and nofile resolved by the
// request's rules) matches; each field changed alone is named as the
// profile names it, with both values.
func TestMismatchNamesTheFirstField(t *testing.T) {
	files := int64(8192)
	pol := &policy.Policy{Ceilings: policy.Ceilings{OutputFiles: &files}}
	pr := policy.PoolProfile{Name: "p", Image: "sha256:aa", Tier: "development", UID: 1000, GID: 1000,
		Resources: policy.PoolResources{Memory: 64 << 20, Pids: 64, CPU: 1, TmpBytes: 8 << 20, OutputPath: "/out", OutputBytes: 8 << 20}}
	exact := func() *admission.Plan {
		return &admission.Plan{Image: "sha256:aa", Tier: "development", Network: "deny", Memory: 64 << 20, Pids: 64, CPU: 1,
			TmpBytes: 8 << 20, Nofile: policy.DefaultNofile, OutputPath: "/out", OutputBytes: 8 << 20, OutputFiles: pol.OutputFilesDefault(),
			User: &admission.User{UID: 1000, GID: 1000}}
	}
	if m := mismatch(pol, pr, exact()); m != nil {
		t.Fatalf("the exact plan differs: %+v", m)
	}
	for field, change := range map[string]func(p *admission.Plan){
		"image":                 func(p *admission.Plan) { p.Image = "sha256:bb" },
		"backend":               func(p *admission.Plan) { p.Backend = "vm" },
		"network":               func(p *admission.Plan) { p.Egress = []string{"example.test:443"} },
		"inputs":                func(p *admission.Plan) { p.Inputs = []admission.Input{{Target: "/in", Writable: true}} },
		"resources.memory":      func(p *admission.Plan) { p.Memory *= 2 },
		"resources.cpu":         func(p *admission.Plan) { p.CPU = 0.5 },
		"resources.nofile":      func(p *admission.Plan) { p.Nofile = 4096 },
		"resources.outputFiles": func(p *admission.Plan) { p.OutputFiles = files },
		"uid":                   func(p *admission.Plan) { p.User = nil },
	} {
		p := exact()
		change(p)
		m := mismatch(pol, pr, p)
		if m == nil || m.Field != field || m.Profile == m.Plan {
			t.Errorf("%s changed: mismatch %+v", field, m)
		}
	}
}

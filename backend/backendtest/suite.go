// Package backendtest is the one conformance suite of the backend contract:
// every backend (oci, docker, vm, and the in-memory Fake) runs Suite
// against real sandboxes, as containerd's snapshotters share
// core/snapshots/testsuite. It checks the lifecycle, that every resource is
// journalled as an intent before it is created, that cleanup is verified,
// that recovery finishes a half-made sandbox, that a look-alike is left
// alone, that cancellation and wall time kill the workload, that a refused
// Spec creates nothing; the bounds and budgets a backend claims, each
// broken by a workload that would pass without it; refusals in each
// lifecycle state; that each capability reported is enforced and each
// one not reported is refused; denied egress; parallel launches; and, for
// a backend.Pooler, the held-sandbox lifecycle. A failing case logs what
// the backend still holds. EngineSuite is the same for pack engines.
package backendtest

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
)

// Fixture is what a backend gives the suite.
type Fixture struct {
	// Backend is the backend under test, on private directories.
	Backend backend.Backend
	// Spec returns a valid Spec that runs args (argv[0] is a shell, so a
	// case may pass "/bin/sh", "-c", script) with modest budgets: Memory
	// and Pids at most 256 MiB and 256, OutputBytes and TmpBytes at most
	// 64 MiB. Cases write their output under the Spec's OutputPath.
	Spec func(args ...string) backend.Spec
	// EnvAdded are the variables the backend's engine adds to every
	// workload's environment whatever the Spec declares, with their
	// fixed values (dockerd adds HOSTNAME and HOME). None may come from
	// the launcher's own environment; EnvExactlyDeclared checks each is
	// exactly its value here, and that nothing else is added.
	EnvAdded map[string]string
	// State, when set, describes what the backend holds natively (its
	// containers, processes, mounts), logged when a case fails.
	State func() string
}

// Factory makes a fresh Fixture for one case; it may skip (loudly, via
// testenv) when the backend's real parts are missing.
type Factory func(t *testing.T) Fixture

var ids struct {
	sync.Mutex
	n int
}

// newID is a fresh launch id: unique across cases and runs.
func newID(t *testing.T) string {
	ids.Lock()
	defer ids.Unlock()
	ids.n++
	return fmt.Sprintf("suite-%d-%d", os.Getpid()%100000, ids.n)
}

var cases = []struct {
	name string
	run  func(*testing.T, Fixture)
}{
	{"Lifecycle", lifecycle},
	{"IntentsBeforeCreate", intentsBeforeCreate},
	{"RecoverHalfMade", recoverHalfMade},
	{"ForeignLookAlikeLeftAlone", foreignLeftAlone},
	{"CancelKillsTree", cancelKillsTree},
	{"WallTime", wallTime},
	{"RefusedSpecCreatesNothing", refusedSpec},
	// Bounds and budgets.
	{"MemoryBound", memoryBound},
	{"PidsBound", pidsBound},
	{"OutputBound", outputBound},
	{"TmpBound", tmpBound},
	{"RootfsReadOnly", rootfsReadOnly},
	{"InputsReadOnly", inputsReadOnly},
	{"EnvExactlyDeclared", envExactlyDeclared},
	{"UsageReadBack", usageReadBack},
	{"FileSizeBound", fileSizeBound},
	{"ExitStatus", exitStatus},
	{"IdentityAndPlace", identityAndPlace},
	// Refusals in each state.
	{"RunTwiceRefused", runTwiceRefused},
	{"RunAfterCleanupRefused", runAfterCleanupRefused},
	{"RunWithoutWallTimeRefused", runWithoutWallRefused},
	{"CleanupIdempotent", cleanupIdempotent},
	{"VerifyAbsentSeesLiveSandbox", verifyAbsentSeesLive},
	// Capabilities and egress.
	{"CapabilityHonesty", capabilityHonesty},
	{"DeniedEgress", deniedEgress},
	// Scale and the pool.
	{"ParallelLaunches", parallelLaunches},
	{"Pooler", pooler},
}

// Suite runs every case against backends made by f. When a case fails,
// what the backend still holds is logged (see dump).
func Suite(t *testing.T, f Factory) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fx := f(t)
			t.Cleanup(func() {
				if t.Failed() {
					dump(t, fx)
				}
			})
			c.run(t, fx)
		})
	}
}

// dump logs the backend's state for a failed case: its identity and
// capabilities, everything carrying its naming that no journal holds
// (after the case's own cleanups, so a leak shows here), and the
// fixture's native view.
func dump(t *testing.T, f Fixture) {
	t.Helper()
	b := f.Backend
	t.Logf("backend state after the failure: %s, identity %+v", b.Name(), b.Identity())
	t.Logf("  capabilities %+v", b.Capabilities())
	held := b.Foreign(func(kind, name string) bool { return false })
	t.Logf("  %d resource(s) it still holds:", len(held))
	for _, r := range held {
		t.Logf("    %s %s %v", r.Kind, r.Name, r.Identity)
	}
	if f.State != nil {
		t.Logf("  native state:\n%s", f.State())
	}
}

// journal is an in-memory Recorder that checks the contract's order: an
// intent before any create, a create before a removal.
type journal struct {
	mu        sync.Mutex
	intents   map[string]bool
	resources map[string]backend.Resource
	problems  []string
}

func newJournal() *journal {
	return &journal{intents: map[string]bool{}, resources: map[string]backend.Resource{}}
}

// newJournalFor is a journal whose records are logged if t fails.
func newJournalFor(t *testing.T) *journal {
	j := newJournal()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, r := range j.recorded() {
			t.Logf("journal: %s %s %s %v", r.State, r.Kind, r.Name, r.Identity)
		}
	})
	return j
}

func key(r backend.Resource) string { return r.Kind + "\x00" + r.Name }

func (j *journal) Intent(rs ...backend.Resource) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, r := range rs {
		j.intents[key(r)] = true
		if _, ok := j.resources[key(r)]; !ok {
			r.State = "intent"
			j.resources[key(r)] = r
		}
	}
	return nil
}

func (j *journal) Created(rs ...backend.Resource) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, r := range rs {
		if !j.intents[key(r)] {
			j.problems = append(j.problems, fmt.Sprintf("%s %s created without an intent", r.Kind, r.Name))
		}
		r.State = "created"
		j.resources[key(r)] = r
	}
	return nil
}

func (j *journal) Removed(rs ...backend.Resource) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, r := range rs {
		old, ok := j.resources[key(r)]
		if !ok {
			j.problems = append(j.problems, fmt.Sprintf("%s %s removed but never recorded", r.Kind, r.Name))
		}
		old.State = "removed"
		j.resources[key(r)] = old
	}
	return nil
}

// recorded is what recovery would read back from the journal.
func (j *journal) recorded() []backend.Resource {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []backend.Resource
	for _, k := range slices.Sorted(maps.Keys(j.resources)) {
		r := j.resources[k]
		r.Identity = maps.Clone(r.Identity)
		out = append(out, r)
	}
	return out
}

func (j *journal) check(t *testing.T) {
	t.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, p := range j.problems {
		t.Error(p)
	}
}

func prepare(t *testing.T, f Fixture, id string, s backend.Spec, j *journal) backend.Sandbox {
	t.Helper()
	ctx := context.Background()
	// The contract: the caller journals the intents durably before
	// Prepare (the launch pipeline does it with the grant it spends).
	intents, err := f.Backend.Intents(id)
	if err != nil {
		t.Fatalf("intents: %v", err)
	}
	if err := j.Intent(intents...); err != nil {
		t.Fatal(err)
	}
	sb, err := f.Backend.Prepare(ctx, id, s, j)
	if err != nil {
		if sb != nil {
			sb.Cleanup(ctx)
		}
		t.Fatalf("prepare: %v", err)
	}
	return sb
}

func wantVerified(t *testing.T, what string, r backend.CleanupReport) {
	t.Helper()
	if !r.Verified {
		t.Fatalf("%s not verified: %+v", what, r.Steps)
	}
}

func lifecycle(t *testing.T, f Fixture) {
	ctx := context.Background()
	id, j := newID(t), newJournalFor(t)
	sb := prepare(t, f, id, shSpec(f, "echo out; echo err >&2; echo kept > @OUT@/file"), j)
	var stdout, stderr bytes.Buffer
	ex, err := sb.Run(ctx, 30*time.Second, backend.IO{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		sb.Cleanup(ctx)
		t.Fatalf("run: %v", err)
	}
	if ex.Code != 0 || ex.Signal != "" || ex.TimedOut || ex.Cancelled || ex.OOMKilled {
		t.Errorf("exit %+v, want a clean exit 0", ex)
	}
	if ex.Observation == nil || ex.Observation.At.IsZero() {
		t.Error("no observation of the live sandbox")
	}
	if stdout.String() != "out\n" || stderr.String() != "err\n" {
		t.Errorf("streams %q %q", stdout.String(), stderr.String())
	}
	if data, err := os.ReadFile(filepath.Join(sb.Output().Dir(), "file")); err != nil || string(data) != "kept\n" {
		t.Errorf("output file: %q %v", data, err)
	}
	if used, err := sb.Output().Used(); err != nil || used <= 0 {
		t.Errorf("output used %d %v", used, err)
	}
	for k, v := range sb.Evidence() {
		if len(v) != 64 || strings.Trim(v, "0123456789abcdef") != "" {
			t.Errorf("evidence %s = %q, want 64 lowercase hex", k, v)
		}
	}
	wantVerified(t, "cleanup", sb.Cleanup(ctx))
	wantVerified(t, "absence after cleanup", f.Backend.VerifyAbsent(id, j.recorded()))
	j.check(t)
	if id := f.Backend.Identity(); id.Kind != f.Backend.Name() || id.Version == "" {
		t.Errorf("identity %+v", id)
	}
}

func intentsBeforeCreate(t *testing.T, f Fixture) {
	ctx := context.Background()
	id, j := newID(t), newJournalFor(t)
	intents, err := f.Backend.Intents(id)
	if err != nil || len(intents) == 0 {
		t.Fatalf("intents %v %v: a backend that makes something must say so first", intents, err)
	}
	sb := prepare(t, f, id, f.Spec("/bin/true"), j)
	if _, err := sb.Run(ctx, 30*time.Second, backend.IO{}); err != nil {
		t.Errorf("run: %v", err)
	}
	wantVerified(t, "cleanup", sb.Cleanup(ctx))
	j.check(t)
	listed := map[string]bool{}
	for _, r := range intents {
		listed[key(r)] = true
	}
	for _, r := range j.recorded() {
		if r.State != "intent" && !listed[key(r)] {
			t.Errorf("%s %s was created but Intents(%s) did not list it", r.Kind, r.Name, id)
		}
	}
}

func recoverHalfMade(t *testing.T, f Fixture) {
	ctx := context.Background()
	id, j := newID(t), newJournalFor(t)
	sb := prepare(t, f, id, f.Spec("/bin/true"), j)
	_ = sb // the runner "died" after Prepare: recovery has only the journal
	wantVerified(t, "recovery of a prepared sandbox", f.Backend.Recover(ctx, id, j.recorded(), j))
	wantVerified(t, "absence after recovery", f.Backend.VerifyAbsent(id, j.recorded()))
	// Recovery again finds nothing to do and says so.
	wantVerified(t, "a second recovery", f.Backend.Recover(ctx, id, j.recorded(), newJournal()))
}

func foreignLeftAlone(t *testing.T, f Fixture) {
	ctx := context.Background()
	id, j := newID(t), newJournalFor(t)
	sb := prepare(t, f, id, f.Spec("/bin/true"), j)
	// Identities are on record once the workload has run.
	if ex, err := sb.Run(ctx, 30*time.Second, backend.IO{}); err != nil || ex.Code != 0 {
		sb.Cleanup(ctx)
		t.Fatalf("run: %+v %v", ex, err)
	}
	// The same names with identities that do not match: a look-alike.
	var forged []backend.Resource
	for _, r := range j.recorded() {
		if len(r.Identity) == 0 {
			continue
		}
		for k := range r.Identity {
			r.Identity[k] = "forged-" + r.Identity[k]
		}
		forged = append(forged, r)
	}
	if len(forged) == 0 {
		sb.Cleanup(ctx)
		t.Fatal("Prepare recorded no identities: ownership could not be proved")
	}
	// Unknown to a journal, the sandbox is foreign: reported, not touched.
	if got := f.Backend.Foreign(func(kind, name string) bool { return false }); len(got) == 0 {
		t.Error("Foreign reports nothing while a sandbox no journal knows exists")
	}
	known := map[string]bool{}
	for _, r := range j.recorded() {
		known[key(r)] = true
	}
	for _, r := range f.Backend.Foreign(func(kind, name string) bool { return known[kind+"\x00"+name] }) {
		if strings.Contains(r.Name, id) {
			t.Errorf("Foreign reports %s %s, which the journal holds", r.Kind, r.Name)
		}
	}
	if rep := f.Backend.Recover(ctx, id, forged, newJournal()); rep.Verified {
		t.Error("recovery with forged identities reported verified: it must not claim what it cannot prove")
	}
	// The real sandbox was not touched: its output is still there, and
	// its own cleanup verifies.
	if _, err := os.Stat(sb.Output().Dir()); err != nil {
		t.Errorf("the real sandbox's output after a forged recovery: %v", err)
	}
	wantVerified(t, "cleanup of the real sandbox", sb.Cleanup(ctx))
}

func cancelKillsTree(t *testing.T, f Fixture) {
	id, j := newID(t), newJournalFor(t)
	sb := prepare(t, f, id, f.Spec("/bin/sh", "-c", "sleep 60 & sleep 60 & echo started; wait"), j)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	w := &signalWriter{want: "started", ch: started}
	done := make(chan struct{})
	var ex *backend.Exit
	var err error
	go func() {
		defer close(done)
		ex, err = sb.Run(ctx, time.Minute, backend.IO{Stdout: w})
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Error("the workload never started")
	}
	cancel()
	<-done
	if err == nil && (ex == nil || !ex.Cancelled) {
		t.Errorf("exit after cancel %+v, want cancelled", ex)
	}
	wantVerified(t, "cleanup after cancel (every process gone)", sb.Cleanup(context.Background()))
}

func wallTime(t *testing.T, f Fixture) {
	ctx := context.Background()
	id, j := newID(t), newJournalFor(t)
	sb := prepare(t, f, id, f.Spec("/bin/sh", "-c", "sleep 60"), j)
	ex, err := sb.Run(ctx, time.Second, backend.IO{})
	if err != nil {
		t.Errorf("run: %v", err)
	} else if !ex.TimedOut {
		t.Errorf("exit %+v, want timed out", ex)
	}
	wantVerified(t, "cleanup after timeout", sb.Cleanup(ctx))
}

// refusedSpec: a Spec missing any one budget is refused before anything
// is made; the same Spec with every budget runs.
func refusedSpec(t *testing.T, f Fixture) {
	for name, drop := range map[string]func(*backend.Spec){
		"output bytes": func(s *backend.Spec) { s.OutputBytes = 0 },
		"tmp bytes":    func(s *backend.Spec) { s.TmpBytes = 0 },
		"memory":       func(s *backend.Spec) { s.Memory = 0 },
		"pids":         func(s *backend.Spec) { s.Pids = 0 },
		"cpu":          func(s *backend.Spec) { s.CPU = 0 },
		"file size":    func(s *backend.Spec) { s.FileSize = 0 },
	} {
		s := f.Spec("/bin/true")
		drop(&s)
		refusedBeforeCreate(t, f, s, "a Spec without a "+name+" budget")
	}
	runSpec(t, f, f.Spec("/bin/true"), time.Minute).wantClean(t, "the Spec with every budget")
}

// signalWriter closes ch once want has been written.
type signalWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	ch   chan struct{}
	done bool
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && strings.Contains(w.buf.String(), w.want) {
		w.done = true
		close(w.ch)
	}
	return len(p), nil
}

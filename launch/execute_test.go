package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/backendtest"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/runrecord"
	"github.com/custody-dev/custody/store"
)

// watched is a backend whose Prepare first reports the run's journal
// attempt as it stands when the backend is asked to make anything; a
// sandbox's Cleanup reports unverified when residual is set (after it
// cleaned up for real).
type watched struct {
	backend.Backend
	rg       *fakeRig
	seen     []*journal.Attempt
	residual bool
	// failStart, if set, is the stage at which a sandbox's Run fails
	// before its workload starts.
	failStart string
}

func (w *watched) Prepare(ctx context.Context, id string, s backend.Spec, rec backend.Recorder) (backend.Sandbox, error) {
	a, err := w.rg.h.Attempt(strings.TrimPrefix(id, "custody-"))
	if err != nil {
		return nil, fmt.Errorf("the attempt is not on record before Prepare: %w", err)
	}
	w.seen = append(w.seen, a)
	sb, err := w.Backend.Prepare(ctx, id, s, rec)
	if sb != nil && w.residual {
		sb = residualSandbox{sb}
	}
	if sb != nil && w.failStart != "" {
		sb = failingSandbox{sb, w.failStart}
	}
	return sb, err
}

// failingSandbox fails to start its workload, at stage, as a backend
// whose launch failed before the workload began says.
type failingSandbox struct {
	backend.Sandbox
	stage string
}

func (s failingSandbox) Run(context.Context, time.Duration, backend.IO) (*backend.Exit, error) {
	return nil, &startError{s.stage}
}

type startError struct{ stage string }

func (e *startError) Error() string      { return "stage " + e.stage + ": the sandbox did not start" }
func (e *startError) StartStage() string { return e.stage }

type residualSandbox struct{ backend.Sandbox }

func (s residualSandbox) Cleanup(ctx context.Context) backend.CleanupReport {
	rep := s.Sandbox.Cleanup(ctx)
	rep.Verified = false
	rep.Steps = append(rep.Steps, backend.CleanupStep{Name: "test residue", Detail: "left behind"})
	return rep
}

func watch(rg *fakeRig) *watched {
	w := &watched{rg: rg}
	rg.wrap = func(b backend.Backend) backend.Backend { w.Backend = b; return w }
	return w
}

// TestAttemptOpensBeforeTheBackendMakesAnything: the run's attempt is on
// record, running and with the backend's intents, before the backend is
// asked to make anything: opened by the spend for a granted run, by the
// backend's intents for a launch without a grant.
func TestAttemptOpensBeforeTheBackendMakesAnything(t *testing.T) {
	var w *watched
	rg := newFakeRig(t, func(rg *fakeRig) { w = watch(rg) })
	o, out := rg.execute(rg.redeem(rg.issue()))
	if o.Err != nil || o.Result.Status != runrecord.StatusOK {
		t.Fatalf("granted run: %v %+v\n%s", o.Err, o.Result, out)
	}
	p, err := Prepare(context.Background(), rg.h, rg.phase(), rg.pol)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Launch(context.Background(), rg.h, p, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil || res.Status != runrecord.StatusOK {
		t.Fatalf("launch without a grant: %v %+v", err, res)
	}
	if len(w.seen) != 2 {
		t.Fatalf("Prepare saw %d attempts, want 2", len(w.seen))
	}
	for i, a := range w.seen {
		if a.State != journal.Running || len(a.Outstanding()) < 2 {
			t.Errorf("run %d: the attempt when the backend was asked to make the sandbox: %+v; want it running with the intents", i, a)
		}
	}
}

// TestCleanRunIsRecordedWithItsAttempt: a run whose cleanup was verified
// is recorded in the transaction that closes its attempt clean (the
// record needs no second write), with the verified cleanup in it.
func TestCleanRunIsRecordedWithItsAttempt(t *testing.T) {
	rg := newFakeRig(t)
	r := rg.redeem(rg.issue())
	r.store = nil // no second write: only the close can record it
	o, out := rg.execute(r)
	if o.Err != nil || o.Result.Status != runrecord.StatusOK {
		t.Fatalf("run: %v %+v\n%s", o.Err, o.Result, out)
	}
	if r.a.state != recorded {
		t.Fatalf("attempt state %d, want recorded", r.a.state)
	}
	rec := rg.record(r.ID())
	if rec.Result == nil || rec.Result.Status != runrecord.StatusOK || rec.Owner != 1000 || rec.Receipt == nil {
		t.Fatalf("run record %+v", rec)
	}
	if c := rec.Result.Cleanup; c == nil || !c.Verified {
		t.Fatalf("the record was made before cleanup was verified: %+v", c)
	}
	if a := rg.attempt(r.ID()); a.State != journal.Clean || len(a.Outstanding()) != 0 {
		t.Fatalf("the attempt the record closed: %+v", a)
	}
}

// TestResidualCleanupKeepsNoRecordWithTheAttempt: a run whose cleanup is
// not verified marks its attempt residual and quarantines the runner (the
// error says so); the attempt's close keeps no run record (a launch
// without a store has none), and Execute stores the record on its own.
func TestResidualCleanupKeepsNoRecordWithTheAttempt(t *testing.T) {
	var w *watched
	rg := newFakeRig(t, func(rg *fakeRig) { w = watch(rg) })
	w.residual = true
	p, err := Prepare(context.Background(), rg.h, rg.phase(), rg.pol)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Launch(context.Background(), rg.h, p, &bytes.Buffer{}, &bytes.Buffer{})
	if !errors.Is(err, host.ErrQuarantined) || res.Cleanup == nil || res.Cleanup.Verified {
		t.Fatalf("unverified cleanup: err = %v, cleanup %+v; want quarantine", err, res.Cleanup)
	}
	if a := rg.attempt(res.RunID); a.State != journal.Residual {
		t.Fatalf("attempt %+v, want residual", a)
	}
	var rec runrecord.Record
	if err := rg.db.GetRun(res.RunID, &rec); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("residual cleanup: run record %+v (%v); want none kept with the attempt", rec, err)
	}
	if q, _ := rg.h.Quarantine(); q == nil || q.RunID != res.RunID {
		t.Fatalf("quarantine %+v, want one naming run %s", q, res.RunID)
	}

	// A granted run (redeemed before the quarantine, as one in flight
	// is): Execute stores its record, receipt and all, on its own.
	if err := rg.h.ReleaseQuarantine(); err != nil {
		t.Fatal(err)
	}
	r := rg.redeem(rg.issue())
	o, _ := rg.execute(r)
	if !errors.Is(o.Err, host.ErrQuarantined) || r.a.state != closed {
		t.Fatalf("granted run, unverified cleanup: %v, attempt state %d; want quarantine, closed", o.Err, r.a.state)
	}
	if rec := rg.record(r.ID()); rec.Receipt == nil || rec.Result.Cleanup.Verified {
		t.Fatalf("the record stored after a residual close: %+v", rec)
	}
}

// TestOutputCustodyHashesAndLeavesOut: every output file is taken into
// the output store, hashed and listed; an entry whose name is not valid
// UTF-8 is left out and listed as such (at most MaxLeftOutListed of them,
// all counted), and the receipt's notes say so.
func TestOutputCustodyHashesAndLeavesOut(t *testing.T) {
	rg := newFakeRig(t)
	const bad = MaxLeftOutListed + 3
	rg.program = func(ctx context.Context, r backendtest.FakeRun) (int, error) {
		if err := os.MkdirAll(filepath.Join(r.OutputDir, "d"), 0o755); err != nil {
			return 0, err
		}
		for name, data := range map[string]string{"d/x": "abc", "y": "hello"} {
			if err := os.WriteFile(filepath.Join(r.OutputDir, name), []byte(data), 0o644); err != nil {
				return 0, err
			}
		}
		for i := range bad {
			if err := os.WriteFile(filepath.Join(r.OutputDir, fmt.Sprintf("bad-%03d-\xff", i)), nil, 0o644); err != nil {
				return 0, err
			}
		}
		return 0, nil
	}
	o, out := rg.execute(rg.redeem(rg.issue()))
	if o.Err != nil || o.Result.Status != runrecord.StatusOK {
		t.Fatalf("run: %v %+v\n%s", o.Err, o.Result, out)
	}
	res := o.Result
	got := map[string]string{}
	for _, f := range res.Output.Files {
		got[f.Path] = f.SHA256
	}
	// sha256("abc") and sha256("hello")
	if len(got) != 2 || got["d/x"] != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" ||
		got["y"] != "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" {
		t.Fatalf("output files = %v", got)
	}
	if data, err := os.ReadFile(filepath.Join(res.Output.Path, "y")); err != nil || string(data) != "hello" {
		t.Fatalf("the output is not in the runner's store: %q %v", data, err)
	}
	if res.Output.LeftOutTotal != bad || len(res.Output.LeftOut) != MaxLeftOutListed {
		t.Fatalf("left out: %d listed of %d; want %d of %d", len(res.Output.LeftOut), res.Output.LeftOutTotal, MaxLeftOutListed, bad)
	}
	if l := res.Output.LeftOut[0]; l.Name != `"bad-000-\xff"` || l.Reason != leftOutReason {
		t.Fatalf("first left out: %+v", l)
	}
	rc := receiptPredicate(t, o.Receipt)
	if len(rc.Output.Files) != 2 || rc.Output.TreeDigest != res.Output.Digest {
		t.Fatalf("receipt output %+v", rc.Output)
	}
	if !slices.ContainsFunc(rc.Observed.Notes, func(n string) bool {
		return strings.Contains(n, fmt.Sprintf("%d entries the workload wrote were not retained", bad))
	}) {
		t.Fatalf("the receipt does not say what was left out: %q", rc.Observed.Notes)
	}
}

// TestReceiptIsMadeOnce: a granted run's receipt is signed once: the one
// Execute returns is the one stored with the run's record, and asking
// for the record again signs nothing new.
func TestReceiptIsMadeOnce(t *testing.T) {
	rg := newFakeRig(t)
	r := rg.redeem(rg.issue())
	o, _ := rg.execute(r)
	if o.Err != nil || o.Receipt == nil {
		t.Fatalf("run: %v, receipt %v", o.Err, o.Receipt)
	}
	stored := rg.record(r.ID()).Receipt
	if stored == nil || !bytes.Equal(stored.Envelope, o.Receipt.Envelope) {
		t.Fatal("the stored receipt is not the one Execute returned: the receipt was signed twice")
	}
	if again := r.record(context.Background(), o.Result); again.Receipt != o.Receipt {
		t.Fatal("the record was made again")
	}
}

// TestRefusedLaunchHasNoReceipt: a redeemed run refused before its
// backend made anything (the runner was quarantined in between) has a
// refused record with no receipt, and its attempt closes clean.
func TestRefusedLaunchHasNoReceipt(t *testing.T) {
	rg := newFakeRig(t)
	r := rg.redeem(rg.issue())
	if err := rg.db.SetQuarantine(store.Quarantine{Reason: "test", RunID: "other"}); err != nil {
		t.Fatal(err)
	}
	o, _ := rg.execute(r)
	if !errors.Is(o.Err, host.ErrQuarantined) || o.Result.Status != runrecord.StatusRefused || o.Receipt != nil {
		t.Fatalf("refused launch: %v, %s, receipt %v", o.Err, o.Result.Status, o.Receipt != nil)
	}
	rec := rg.record(r.ID())
	if rec.Receipt != nil || rec.ReceiptError != "" || rec.Result.Status != runrecord.StatusRefused {
		t.Fatalf("refused launch's record: %+v", rec)
	}
	if a := rg.attempt(r.ID()); a.State != journal.Clean || len(a.Outstanding()) != 0 {
		t.Fatalf("refused launch's attempt: %+v", a)
	}
	if left := rg.fake.Foreign(func(string, string) bool { return false }); len(left) != 0 {
		t.Fatalf("the refused launch made %+v", left)
	}
}

// TestFailedToStartReceiptSaysFailed: a run whose sandbox failed before
// its workload started is failed-to-start, exit -1, with the stage, its
// sandbox cleaned up; its signed receipt keeps the published statuses:
// failed, with exit code -1, and nothing observed.
func TestFailedToStartReceiptSaysFailed(t *testing.T) {
	var w *watched
	rg := newFakeRig(t, func(rg *fakeRig) { w = watch(rg) })
	w.failStart = "setup"
	ran := false
	rg.program = func(context.Context, backendtest.FakeRun) (int, error) { ran = true; return 0, nil }
	o, _ := rg.execute(rg.redeem(rg.issue()))
	res := o.Result
	if o.Err == nil || res.Status != runrecord.StatusFailedToStart || res.ExitCode != -1 || res.FailedStage != "setup" || ran {
		t.Fatalf("result: err %v, status %s exit %d stage %q, workload ran %v", o.Err, res.Status, res.ExitCode, res.FailedStage, ran)
	}
	if res.Cleanup == nil || !res.Cleanup.Verified {
		t.Fatalf("cleanup not verified: %+v", res.Cleanup)
	}
	if o.Receipt == nil {
		t.Fatal("a run that failed to start after its grant was spent has no receipt")
	}
	rc := receiptPredicate(t, o.Receipt)
	if rc.Exit.Status != "failed" || rc.Exit.Code != -1 || rc.Observed.Seccomp != "unobserved" {
		t.Fatalf("receipt exit %+v observed %+v; want the published status failed, code -1, nothing observed", rc.Exit, rc.Observed)
	}
}

// TestFailedAfterStartReceiptMarksUnobserved: a run whose sandbox failed
// once under way, reporting no exit code, has a receipt that says failed
// and names the exit code and usage it did not observe, each -1, never a
// zero nobody saw.
func TestFailedAfterStartReceiptMarksUnobserved(t *testing.T) {
	rg := newFakeRig(t)
	rg.program = func(context.Context, backendtest.FakeRun) (int, error) {
		return 0, errors.New("the sandbox went away")
	}
	o, _ := rg.execute(rg.redeem(rg.issue()))
	res := o.Result
	if res.Status != runrecord.StatusFailed || !res.ExitUnobserved || !strings.Contains(res.Error, "the sandbox went away") {
		t.Fatalf("result: status %s, exit unobserved %v, error %q", res.Status, res.ExitUnobserved, res.Error)
	}
	if o.Receipt == nil {
		t.Fatal("a run that failed after its launch began has no receipt")
	}
	rc := receiptPredicate(t, o.Receipt)
	want := []string{"exit.code", "usage.cpuTimeMillis", "usage.oomKills", "usage.peakMemoryBytes"}
	if rc.Exit.Status != "failed" || rc.Exit.Code != -1 || !slices.Equal(rc.Unobserved, want) ||
		rc.Usage.CPUTimeMillis != -1 || rc.Usage.PeakMemoryBytes != -1 || rc.Usage.OOMKills != -1 {
		t.Fatalf("receipt exit %+v usage %+v unobserved %v; want failed, -1s, unobserved %v", rc.Exit, rc.Usage, rc.Unobserved, want)
	}
}

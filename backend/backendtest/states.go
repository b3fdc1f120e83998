package backendtest

import (
	"context"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
)

// runOnce prepares and runs a quick workload to a clean exit.
func runOnce(t *testing.T, f Fixture, id string, j *journal) backend.Sandbox {
	t.Helper()
	sb := prepare(t, f, id, shSpec(f, "echo once >> @OUT@/runs"), j)
	ex, err := sb.Run(context.Background(), time.Minute, backend.IO{})
	if err != nil || ex.Code != 0 {
		sb.Cleanup(context.Background())
		t.Fatalf("the first run: %+v %v", ex, err)
	}
	return sb
}

// runTwiceRefused: a sandbox runs once; a second Run is refused and does
// not run the workload again.
func runTwiceRefused(t *testing.T, f Fixture) {
	ctx := context.Background()
	id, j := newID(t), newJournalFor(t)
	sb := runOnce(t, f, id, j)
	if ex, err := sb.Run(ctx, time.Minute, backend.IO{}); err == nil {
		t.Errorf("a second Run was accepted: %+v", ex)
	}
	if n := countRuns(t, sb); n != 1 {
		t.Errorf("the workload ran %d times, want once", n)
	}
	wantVerified(t, "cleanup", sb.Cleanup(ctx))
	j.check(t)
}

func countRuns(t *testing.T, sb backend.Sandbox) int {
	t.Helper()
	data, err := readOutput(sb, "runs")
	if err != nil {
		t.Errorf("the run's output: %v", err)
		return -1
	}
	n := 0
	for _, c := range data {
		if c == '\n' {
			n++
		}
	}
	return n
}

// runAfterCleanupRefused: a cleaned-up sandbox cannot be run, and the
// refusal makes nothing: its resources stay verified absent.
func runAfterCleanupRefused(t *testing.T, f Fixture) {
	ctx := context.Background()
	id, j := newID(t), newJournalFor(t)
	sb := prepare(t, f, id, shSpec(f, "echo ran > @OUT@/ran"), j)
	wantVerified(t, "cleanup of an unrun sandbox", sb.Cleanup(ctx))
	if ex, err := sb.Run(ctx, time.Minute, backend.IO{}); err == nil {
		t.Errorf("Run after Cleanup was accepted: %+v", ex)
	}
	wantVerified(t, "absence after the refused Run", f.Backend.VerifyAbsent(id, j.recorded()))
	wantVerified(t, "a second cleanup", sb.Cleanup(ctx))
	j.check(t)
}

// runWithoutWallRefused: Run without a wall time is refused before the
// workload starts; the sandbox still runs with one.
func runWithoutWallRefused(t *testing.T, f Fixture) {
	ctx := context.Background()
	id, j := newID(t), newJournalFor(t)
	sb := prepare(t, f, id, shSpec(f, "echo once >> @OUT@/runs"), j)
	defer func() { wantVerified(t, "cleanup", sb.Cleanup(ctx)) }()
	for _, wall := range []time.Duration{0, -time.Second} {
		if ex, err := sb.Run(ctx, wall, backend.IO{}); err == nil {
			t.Errorf("Run with wall time %v was accepted: %+v", wall, ex)
		}
	}
	ex, err := sb.Run(ctx, time.Minute, backend.IO{})
	if err != nil || ex.Code != 0 {
		t.Fatalf("Run with a wall time after the refusals: %+v %v", ex, err)
	}
	if n := countRuns(t, sb); n != 1 {
		t.Errorf("the workload ran %d times, want once", n)
	}
}

// cleanupIdempotent: Cleanup after a run verifies every part gone; a
// second Cleanup finds nothing and verifies again.
func cleanupIdempotent(t *testing.T, f Fixture) {
	ctx := context.Background()
	id, j := newID(t), newJournalFor(t)
	sb := runOnce(t, f, id, j)
	first := sb.Cleanup(ctx)
	wantVerified(t, "the first cleanup", first)
	if len(first.Steps) == 0 {
		t.Error("the first cleanup reports no steps: nothing was verified")
	}
	for _, st := range first.Steps {
		if !st.OK || st.Name == "" {
			t.Errorf("a cleanup step %+v in a verified report", st)
		}
	}
	wantVerified(t, "the second cleanup", sb.Cleanup(ctx))
	wantVerified(t, "absence", f.Backend.VerifyAbsent(id, j.recorded()))
	for _, r := range j.recorded() {
		if r.State == "created" {
			t.Errorf("%s %s is still recorded as created after a verified cleanup", r.Kind, r.Name)
		}
	}
	j.check(t)
}

// verifyAbsentSeesLive: VerifyAbsent of a launch that was never prepared
// verifies; of a prepared one it does not, until Cleanup.
func verifyAbsentSeesLive(t *testing.T, f Fixture) {
	ctx := context.Background()
	id, j := newID(t), newJournalFor(t)
	intents, err := f.Backend.Intents(id)
	if err != nil {
		t.Fatal(err)
	}
	wantVerified(t, "absence before Prepare", f.Backend.VerifyAbsent(id, intents))
	sb := prepare(t, f, id, shSpec(f, "true"), j)
	if rep := f.Backend.VerifyAbsent(id, j.recorded()); rep.Verified {
		t.Errorf("VerifyAbsent verified a prepared sandbox absent: %+v", rep.Steps)
	}
	wantVerified(t, "cleanup", sb.Cleanup(ctx))
	wantVerified(t, "absence after cleanup", f.Backend.VerifyAbsent(id, j.recorded()))
}

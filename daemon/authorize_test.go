package daemon

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/policy"
)

// TestAuthorizationLimits: each limit refuses once reached, saying when to
// retry, and frees up as its window passes or its runs end; a mint that did
// not happen gives its slot back.
func TestAuthorizationLimits(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	z := newAuthorizations(func() time.Time { return now })
	a := &policy.Authorization{Name: "loop", Limits: policy.AuthorizationLimits{GrantsPerMinute: 2, ConcurrentRuns: 2, RunsPerDay: 3, CPUSecondsPerDay: 10}}
	limited := func(want string) time.Duration {
		t.Helper()
		_, err := z.take(a, 0)
		var rl *rateLimitedError
		var ae *api.Error
		if !errors.As(err, &rl) || !errors.As(err, &ae) || ae.Code != api.CodeRateLimited {
			t.Fatalf("want rate-limited (%s), got %v", want, err)
		}
		if !strings.Contains(ae.Message, want) {
			t.Fatalf("refusal %q does not name %s", ae.Message, want)
		}
		return rl.after
	}
	s1, err := z.take(a, 0)
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(10 * time.Second)
	s2, err := z.take(a, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Two in flight: the concurrency limit speaks first.
	limited("concurrentRuns")
	s1.finished(4000)
	// Two minted in the minute: retry when the first leaves it (50s).
	if after := limited("grantsPerMinute"); after != 50*time.Second {
		t.Fatalf("retry after %s, want 50s", after)
	}
	now = now.Add(51 * time.Second)
	s3, err := z.take(a, 0)
	if err != nil {
		t.Fatal(err)
	}
	s3.unmint() // refused after the take: nothing minted
	s3, err = z.take(a, 0)
	if err != nil {
		t.Fatal(err)
	}
	s2.finished(7000)
	s3.finished(0)
	now = now.Add(2 * time.Minute)
	// Three runs today: runsPerDay, retry when the first is a day old.
	if after := limited("runsPerDay"); after != day-(2*time.Minute+61*time.Second) {
		t.Fatalf("retry after %s", after)
	}
	left := z.remaining(a, 0)
	if left.RunsPerDay != 0 || left.CPUSecondsPerDay != 0 || left.ConcurrentRuns != 2 {
		t.Fatalf("remaining %+v", left)
	}
	// A day on, runs free up; the CPU used then is gone too.
	now = now.Add(day)
	if _, err := z.take(a, 0); err != nil {
		t.Fatalf("a day later: %v", err)
	}
}

// TestAuthorizationCPUPerDay: a day's CPU-seconds refuse further mints
// until enough of them leave the day.
func TestAuthorizationCPUPerDay(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	z := newAuthorizations(func() time.Time { return now })
	a := &policy.Authorization{Name: "cpu", Limits: policy.AuthorizationLimits{GrantsPerMinute: 100, ConcurrentRuns: 5, CPUSecondsPerDay: 10}}
	s, err := z.take(a, 0)
	if err != nil {
		t.Fatal(err)
	}
	s.finished(12_000)
	now = now.Add(time.Hour)
	_, err = z.take(a, 0)
	var rl *rateLimitedError
	if !errors.As(err, &rl) || rl.after != 23*time.Hour {
		t.Fatalf("after 12 CPU-seconds of 10: %v", err)
	}
}

// TestAuthorizationsLoad: the operations log's revocations and the day's
// mints survive a restart; a changed definition is no longer revoked.
func TestAuthorizationsLoad(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	a := &policy.Authorization{Name: "loop", Limits: policy.AuthorizationLimits{GrantsPerMinute: 100, ConcurrentRuns: 5, RunsPerDay: 2}}
	z := newAuthorizations(func() time.Time { return now })
	ref := &evidence.OpAuthorization{Name: "loop", Digest: definitionDigest(a)}
	z.load([]evidence.OpEntry{
		{Kind: evidence.OpGrantMinted, At: now.Add(-25 * time.Hour), Authorization: ref},
		{Kind: evidence.OpGrantMinted, At: now.Add(-time.Hour), Authorization: ref},
		{Kind: evidence.OpAuthorizationRevoked, At: now, Authorization: ref},
	})
	if !z.isRevoked(a) {
		t.Fatal("a revocation in the log is not in force")
	}
	if left := z.remaining(a, 0); left.RunsPerDay != 1 {
		t.Fatalf("runs left today %d, want 1 (one mint within the day)", left.RunsPerDay)
	}
	changed := *a
	changed.Limits.RunsPerDay = 3
	if z.isRevoked(&changed) {
		t.Fatal("a changed definition is still revoked")
	}
}

// TestAuthorizationsSettleCPU: after a restart the day's CPU-seconds are
// what the store says the day's minted runs used; a mint that never ran
// counts nothing, and a run nobody observed to its end (cut short by the
// stop) counts as the most one run may use, so the restart grants no
// more than the day's limit.
func TestAuthorizationsSettleCPU(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	a := &policy.Authorization{Name: "cpu", Limits: policy.AuthorizationLimits{GrantsPerMinute: 100, ConcurrentRuns: 5, CPUSecondsPerDay: 10}}
	ref := &evidence.OpAuthorization{Name: "cpu", Digest: definitionDigest(a)}
	mints := []evidence.OpEntry{
		{Kind: evidence.OpGrantMinted, At: now.Add(-25 * time.Hour), Grant: "old", Authorization: ref},
		{Kind: evidence.OpGrantMinted, At: now.Add(-2 * time.Hour), Grant: "ran", Authorization: ref},
		{Kind: evidence.OpGrantMinted, At: now.Add(-time.Hour), Grant: "unspent", Authorization: ref},
		{Kind: evidence.OpGrantMinted, At: now.Add(-time.Minute), Grant: "cut-short", Authorization: ref},
	}
	store := map[string]struct {
		millis int64
		ran    bool
	}{"old": {9000, true}, "ran": {4000, true}, "unspent": {0, false}, "cut-short": {-1, true}}
	const bound = 5000
	z := newAuthorizations(func() time.Time { return now })
	z.load(mints)
	z.settle(func(id string) (time.Time, int64, bool) {
		if id == "old" {
			t.Error("settle asked for a mint older than a day")
		}
		r := store[id]
		return time.Time{}, r.millis, r.ran
	})
	if left := z.remaining(a, bound); left.CPUSecondsPerDay != 1 {
		t.Fatalf("CPU-seconds left %d, want 1 (10 - 4 observed - 5 unobserved at the bound)", left.CPUSecondsPerDay)
	}
	s, err := z.take(a, bound)
	if err != nil {
		t.Fatalf("with a CPU-second left: %v", err)
	}
	s.finished(1500)
	var rl *rateLimitedError
	if _, err := z.take(a, bound); !errors.As(err, &rl) || !strings.Contains(err.Error(), "cpuSecondsPerDay") {
		t.Fatalf("over the day's CPU-seconds after a restart: %v", err)
	}
}

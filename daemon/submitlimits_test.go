package daemon

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/daemon/config"
)

// TestDryRunLimiter: a uid's dry runs in flight are bounded, its burst
// spent is refused saying when to retry (and the Retry-After agrees), one
// more is earned after every, and another uid is not held by it.
func TestDryRunLimiter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l, err := newDryRunLimiter(config.DryRunLimits{Burst: 3, Every: "10s", InFlight: 2}, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	r1, err := l.acquire(7)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.acquire(7)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.acquire(7)
	var rl *rateLimitedError
	if !errors.As(err, &rl) || !errors.Is(err, &api.Error{Code: api.CodeRateLimited}) || !strings.Contains(err.Error(), "2 dry runs in progress") {
		t.Fatalf("a third in flight: %v", err)
	}
	if r, err := l.acquire(8); err != nil {
		t.Fatalf("another uid: %v", err)
	} else {
		r()
	}
	r1()
	r2()
	r3, err := l.acquire(7) // the third of the burst (the refused one took none)
	if err != nil {
		t.Fatalf("the burst's third: %v", err)
	}
	r3()
	_, err = l.acquire(7)
	if !errors.As(err, &rl) || !strings.Contains(err.Error(), "retry in 10s, at 2026-01-01T00:00:10Z") || rl.retryAfter() != "10" {
		t.Fatalf("past the burst: %v", err)
	}
	now = now.Add(10 * time.Second)
	if r, err := l.acquire(7); err != nil {
		t.Fatalf("after every: %v", err)
	} else {
		r()
	}
	for _, bad := range []config.DryRunLimits{{Every: "0s"}, {Every: "soon"}, {Burst: -1}, {InFlight: -2}} {
		if _, err := newDryRunLimiter(bad, time.Now); err == nil || !strings.Contains(err.Error(), "submitLimits.dryRuns") {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

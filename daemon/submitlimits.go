package daemon

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/daemon/config"
)

// stallAfter is the StalledClient timeout.
func stallAfter(c config.SubmitLimits) (time.Duration, error) {
	if c.StalledClient == "" {
		return stallTimeout, nil
	}
	d, err := time.ParseDuration(c.StalledClient)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("submitLimits.stalledClient %q: want a positive duration such as 30s", c.StalledClient)
	}
	return d, nil
}

const (
	defaultDryRunBurst    = 32
	defaultDryRunEvery    = time.Second
	defaultDryRunInFlight = 2
	// maxDryRunUIDs bounds the limiter's table; uids whose allowance is
	// whole again are forgotten first.
	maxDryRunUIDs = 4096
)

// dryRunLimiter is a token bucket and an in-flight count per uid.
type dryRunLimiter struct {
	burst, inFlight int
	every           time.Duration
	now             func() time.Time

	mu   sync.Mutex
	uids map[uint32]*uidDryRuns
}

type uidDryRuns struct {
	bucket *rate.Limiter
	busy   int
}

func newDryRunLimiter(c config.DryRunLimits, now func() time.Time) (*dryRunLimiter, error) {
	l := &dryRunLimiter{burst: c.Burst, inFlight: c.InFlight, every: defaultDryRunEvery, now: now, uids: map[uint32]*uidDryRuns{}}
	if l.burst == 0 {
		l.burst = defaultDryRunBurst
	}
	if l.inFlight == 0 {
		l.inFlight = defaultDryRunInFlight
	}
	if c.Every != "" {
		d, err := time.ParseDuration(c.Every)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("submitLimits.dryRuns.every %q: want a positive duration such as 2s", c.Every)
		}
		l.every = d
	}
	if l.burst < 1 || l.inFlight < 1 {
		return nil, fmt.Errorf("submitLimits.dryRuns: burst %d and inFlight %d must be at least 1", l.burst, l.inFlight)
	}
	return l, nil
}

// acquire takes one dry run for uid, or refuses saying when to retry; a
// taken one is given back with release.
func (l *dryRunLimiter) acquire(uid uint32) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	u := l.uids[uid]
	if u == nil {
		if len(l.uids) >= maxDryRunUIDs {
			l.forget(now)
		}
		u = &uidDryRuns{bucket: rate.NewLimiter(rate.Every(l.every), l.burst)}
		l.uids[uid] = u
	}
	if u.busy >= l.inFlight {
		return nil, &rateLimitedError{after: time.Second, err: &api.Error{Code: api.CodeRateLimited, Message: fmt.Sprintf(
			"uid %d already has %d dry runs in progress, the most custodyd answers at once for one uid; retry when one has answered (fix: wait for them, or an operator may raise submitLimits.dryRuns.inFlight)", uid, u.busy)}}
	}
	r := u.bucket.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		d = (d + time.Second - 1).Truncate(time.Second) // whole seconds, rounded up
		return nil, &rateLimitedError{after: d, err: &api.Error{Code: api.CodeRateLimited, Message: fmt.Sprintf(
			"uid %d has made its %d dry runs and earns one every %s; retry in %s, at %s (fix: wait, or an operator may raise submitLimits.dryRuns)",
			uid, l.burst, l.every, d, now.Add(d).UTC().Format(time.RFC3339))}}
	}
	u.busy++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		u.busy--
	}, nil
}

// forget drops the uids with nothing in flight and a whole allowance:
// they would start afresh anyway.
func (l *dryRunLimiter) forget(now time.Time) {
	for uid, u := range l.uids {
		if u.busy == 0 && u.bucket.TokensAt(now) >= float64(l.burst) {
			delete(l.uids, uid)
		}
	}
}

// rateLimitedError is a dry run refused for its uid's limits, and when to
// retry (the answer's Retry-After).
type rateLimitedError struct {
	after time.Duration
	err   *api.Error
}

func (e *rateLimitedError) Error() string { return e.err.Error() }
func (e *rateLimitedError) Unwrap() error { return e.err }

// retryAfter is the Retry-After header's whole seconds, at least one.
func (e *rateLimitedError) retryAfter() string {
	return strconv.FormatInt(int64(math.Ceil(max(e.after, time.Second).Seconds())), 10)
}

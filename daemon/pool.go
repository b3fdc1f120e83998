package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/pool"
)

// poolTick is how often the warm pool's upkeep runs when nothing kicks
// it: idle TTLs, dead gates and runtime or image changes are found within
// about this long.
const poolTick = time.Second

// wake is a level signal: any number of signals before a wait wake it
// once. Its zero value is ready to use.
type wake struct {
	once sync.Once
	ch   chan struct{}
}

func (w *wake) c() chan struct{} {
	w.once.Do(func() { w.ch = make(chan struct{}, 1) })
	return w.ch
}

// signal wakes the waiter, without waiting.
func (w *wake) signal() {
	select {
	case w.c() <- struct{}{}:
	default:
	}
}

// startPool runs the warm pool's upkeep until ctx ends or the returned
// stop is called; stop then drains the pool (every idle member destroyed
// and verified, its attempt closed), so a clean stop leaves nothing for
// recovery. With no profile and no member the upkeep does nothing and
// waits for a policy reload (or a kick) instead of its tick.
func (s *server) startPool(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(poolTick)
		defer tick.Stop()
		for {
			s.poolRound(ctx)
			s.poolRounds.Add(1)
			var ticks <-chan time.Time
			if !s.r.Pool().Idle() {
				ticks = tick.C
			}
			select {
			case <-ctx.Done():
				return
			case <-ticks:
			case <-s.poolWake.c():
			case <-s.r.Pool().Kicks():
			}
		}
	}()
	return func() {
		cancel()
		<-done
		s.r.Pool().Drain(context.Background(), "custodyd stopped")
	}
}

// poolRound configures the pool from the policy in force (none: drained)
// and refills it.
func (s *server) poolRound(ctx context.Context) {
	pol, dig, err := s.currentPolicy()
	if err != nil {
		s.r.Pool().Drain(ctx, "no valid policy is loaded")
		return
	}
	s.r.Pool().Configure(ctx, pol, dig)
	if err := s.r.Pool().Fill(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("warm pool", "err", err)
	}
}

// wirePool is the pool's profiles as custody status shows them.
func wirePool(ps []pool.ProfileStatus) []api.PoolProfile {
	out := []api.PoolProfile{}
	for _, p := range ps {
		w := api.PoolProfile{Name: p.Name, Size: p.Size, Idle: p.Idle, State: p.State, Failures: p.Failures,
			LastError: p.LastError, LastFailure: p.LastFailure.UTC(), NextTry: p.NextTry.UTC(), Hits: p.Hits, Misses: p.Misses}
		if m := p.LastMiss; m != nil {
			w.LastMiss = &api.PoolMiss{Field: m.Field, Profile: m.Profile, Request: m.Plan}
		}
		out = append(out, w)
	}
	return out
}

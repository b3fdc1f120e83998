package main

import (
	"context"
	"time"
)

// poolTick is how often the warm pool's upkeep runs when nothing kicks
// it: idle TTLs, dead gates and runtime or image changes are found within
// about this long.
const poolTick = time.Second

// startPool runs the warm pool's upkeep until ctx ends or the returned
// stop is called; stop then drains the pool (every idle member destroyed
// and verified, its attempt closed), so a clean stop leaves nothing for
// recovery.
func (s *server) startPool(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(poolTick)
		defer tick.Stop()
		for {
			s.poolRound(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case <-s.r.PoolKicks():
			}
		}
	}()
	return func() {
		cancel()
		<-done
		s.r.DrainPool(context.Background(), "custodyd stopped")
	}
}

// poolRound configures the pool from the policy in force (none: drained)
// and refills it.
func (s *server) poolRound(ctx context.Context) {
	pol, dig, err := s.currentPolicy()
	if err != nil {
		s.r.DrainPool(ctx, "no valid policy is loaded")
		return
	}
	s.r.ConfigurePool(ctx, pol, dig)
	if err := s.r.FillPool(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("warm pool", "err", err)
	}
}

package main

import (
	"testing"
	"time"

	"github.com/custody-dev/custody/bench"
)

// TestFloorRow: the floor row compares the trusted launch with the
// in-process floor against its target, and says so when this run has no
// launch row.
func TestFloorRow(t *testing.T) {
	for _, c := range []struct {
		launch  time.Duration
		floor   float64
		verdict string
		ratio   float64
	}{
		{24 * time.Millisecond, 20, bench.VerdictMet, 1.2},
		{25 * time.Millisecond, 20, bench.VerdictMet, 1.25},
		{30 * time.Millisecond, 20, bench.VerdictMissed, 1.5},
	} {
		r := floorRow(c.launch, c.floor)
		if r.Verdict != c.verdict || r.Ratio == nil || *r.Ratio < c.ratio-1e-9 || *r.Ratio > c.ratio+1e-9 || r.Target != "≤ 1.25×" {
			t.Fatalf("launch %v over floor %v ms: %+v", c.launch, c.floor, r)
		}
	}
	if r := floorRow(0, 20); r.Verdict != bench.VerdictUnavailable || r.Value != nil {
		t.Fatalf("no launch row: %+v", r)
	}
}

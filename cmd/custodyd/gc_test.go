package main

import (
	"io"
	"log/slog"
	"math"
	"runtime/debug"
	"testing"
)

// With neither GOGC nor GOMEMLIMIT set, tuneGC applies custodyd's setting;
// with either set, it leaves the runtime's as the environment made it.
func TestTuneGC(t *testing.T) {
	oldPct := debug.SetGCPercent(100)
	oldLim := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(oldPct); debug.SetMemoryLimit(oldLim) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	env := map[string]string{}
	tuneGC(log, func(k string) string { return env[k] })
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Fatalf("GC percent %d, want %d", got, gcPercent)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != gcSoftLimit {
		t.Fatalf("memory limit %d, want %d", got, gcSoftLimit)
	}
	for _, k := range []string{"GOGC", "GOMEMLIMIT"} {
		env = map[string]string{k: "200"}
		tuneGC(log, func(k string) string { return env[k] })
		if got := debug.SetGCPercent(100); got != 100 {
			t.Fatalf("%s set: GC percent changed to %d", k, got)
		}
		if got := debug.SetMemoryLimit(math.MaxInt64); got != math.MaxInt64 {
			t.Fatalf("%s set: memory limit changed to %d", k, got)
		}
	}
}

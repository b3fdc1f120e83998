package main

import (
	"log/slog"
	"runtime/debug"
)

// The daemon's GC setting, unless the operator set GOGC or GOMEMLIMIT.
// custodyd's live heap is small and steady (about 6 MB after a collection
// under the throughput bench, GODEBUG=gctrace=1), and at Go's default
// GOGC=100 it collected every dozen launches or so, about 0.6-0.8 ms of
// CPU per launch on a machine where custodyd's own CPU bounds throughput.
// GOGC=400 lets the heap grow to five times the live heap before a
// collection (about 30 MB here), a quarter as many collections. The soft
// limit bounds that growth when the live heap is large (many streams at
// once): near it the GC runs as often as it must again, so the heap stays
// about max(5 x live, gcSoftLimit), never 5x an outsized live heap.
const (
	gcPercent   = 400
	gcSoftLimit = 256 << 20
)

// tuneGC applies the setting unless the environment already chose one
// (the runtime read GOGC and GOMEMLIMIT at start), and says which applies.
func tuneGC(log *slog.Logger, getenv func(string) string) {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		log.Debug("gc: the environment's GOGC/GOMEMLIMIT apply", "GOGC", getenv("GOGC"), "GOMEMLIMIT", getenv("GOMEMLIMIT"))
		return
	}
	debug.SetGCPercent(gcPercent)
	debug.SetMemoryLimit(gcSoftLimit)
	log.Debug("gc: custodyd's setting", "gcPercent", gcPercent, "softLimitBytes", gcSoftLimit)
}

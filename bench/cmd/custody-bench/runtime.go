package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/custody-dev/custody/bench"
)

// launchCost is one way of launching as tools/runc/launchcost measured
// it: the mean CPU time and the median wall time per launch.
type launchCost struct {
	N         int     `json:"n"`
	CPUms     float64 `json:"cpuMs"`
	WallP50ms float64 `json:"wallP50Ms"`
}

// runtimeCost is the runtime rows, for information: the raw runc bundle
// launched as an exec'd `runc run` and in-process through libcontainer
// (the pinned runc's own library), alternating. The difference is what a
// runc process per launch costs, which custody pays on every phase: the
// structural share of the launch and throughput rows that no work inside
// custodyd can take back.
func (b *bencher) runtimeCost(ctx context.Context) {
	row := bench.Row{ID: "1", Metric: "  in-process libcontainer launch, p50 (information)", Unit: "ms",
		Baseline: "runc run of the same bundle", Verdict: bench.VerdictInfo}
	if b.o.launchCost == "" {
		row.Verdict, row.Note = bench.VerdictUnavailable, "no -launchcost binary (make bench builds tools/runc/launchcost)"
		b.rep.Add(row)
		return
	}
	w := startWindow()
	defer b.endWindow(w, "runtime")
	progress("runtime: runc run against in-process libcontainer (%d launches each, alternating)", b.o.launchCostRuns)
	// Its state dir must not share a tree with the binaries: libcontainer
	// seals its own binary through an overlay of the binary's directory,
	// which the kernel refuses over an overlapping layer, and copying the
	// binary instead costs a launch about 15 ms.
	root := filepath.Join(b.tmp, "launchcost")
	runc := filepath.Join(b.o.bin, "runc")
	defer func() {
		// A launch the tool did not finish (it failed, or was stopped)
		// may leave its container; runc reads libcontainer's state.
		if left := bench.RemoveContainers(runc, root); len(left) > 0 {
			progress("!!! runtime: launchcost left containers %v (force-deleted)", left)
		}
		_ = os.RemoveAll(root)
	}()
	cmd := exec.CommandContext(ctx, b.o.launchCost, "-runc", runc,
		"-bundle", b.raw.Bundle(0), "-root", root, "-n", strconv.Itoa(b.o.launchCostRuns))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b.fail(row, fmt.Errorf("%s: %v: %s", b.o.launchCost, err, strings.TrimSpace(stderr.String())))
		return
	}
	var res map[string]launchCost
	if err := json.Unmarshal(out, &res); err != nil {
		b.fail(row, fmt.Errorf("%s: its output %q: %w", b.o.launchCost, out, err))
		return
	}
	ex, ok1 := res["exec"]
	in, ok2 := res["inproc"]
	if !ok1 || !ok2 || ex.N < 1 || in.N < 1 || ex.WallP50ms <= 0 || ex.CPUms <= 0 {
		b.fail(row, fmt.Errorf("%s: incomplete output %q", b.o.launchCost, out))
		return
	}
	row.N, row.Value, row.BaselineValue = in.N, bench.F(in.WallP50ms), bench.F(ex.WallP50ms)
	row.Ratio = bench.F(in.WallP50ms / ex.WallP50ms)
	row.RatioText = fmt.Sprintf("%.2f× runc, %+.2f ms", in.WallP50ms/ex.WallP50ms, in.WallP50ms-ex.WallP50ms)
	row.Note = "tools/runc/launchcost: create, run, wait and destroy through the pinned runc's libcontainer, without a runc process per launch; custody launches through bin/runc"
	b.rep.Add(row)
	b.rep.Add(floorRow(b.launchP50, in.WallP50ms))
	b.rep.Add(bench.Row{ID: "1", Metric: "  in-process libcontainer launch, CPU per launch (information)", Unit: "ms",
		Value: bench.F(in.CPUms), Baseline: "runc run of the same bundle", BaselineValue: bench.F(ex.CPUms),
		Ratio: bench.F(in.CPUms / ex.CPUms), RatioText: fmt.Sprintf("%.2f× runc, %+.2f ms", in.CPUms/ex.CPUms, in.CPUms-ex.CPUms),
		Verdict: bench.VerdictInfo, N: in.N, Note: "rusage of the launching process and the processes it reaped"})
}

// floorTarget is how far over the in-process libcontainer launch of the
// same bundle custody's whole trusted launch may be.
const floorTarget = 1.25

// floorRow is custody's trusted launch p50 (row 1's, this run) over the
// in-process libcontainer launch p50: custody's own cost on top of the
// runtime library's floor. Without a launch row in this run it says so.
func floorRow(launch time.Duration, floorMs float64) bench.Row {
	row := bench.Row{ID: "1", Metric: "trusted launch p50 vs the in-process libcontainer floor", Unit: "ms",
		Baseline: "in-process libcontainer launch p50", BaselineValue: bench.F(floorMs), Target: fmt.Sprintf("≤ %.2f×", floorTarget)}
	if launch <= 0 {
		row.Verdict, row.Note = bench.VerdictUnavailable, "no trusted launch row in this run (-only launch,runtime measures both)"
		return row
	}
	got := bench.Ms(launch)
	r := got / floorMs
	row.Value, row.Ratio = bench.F(got), bench.F(r)
	row.RatioText = fmt.Sprintf("%.2f× floor, %+.2f ms", r, got-floorMs)
	row.Verdict = bench.VerdictMet
	if r > floorTarget {
		row.Verdict = bench.VerdictMissed
	}
	row.Note = "custody's own share of a launch: verify, admit, consume, journal, observe, receipt, and a runc process per launch"
	return row
}

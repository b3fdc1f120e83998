package vm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/backend/vm"
	"github.com/custody-dev/custody/internal/testenv"
)

// BenchmarkBootToExit is the make bench row of the vm backend: a trivial
// phase (/bin/true) from Prepare to verified Cleanup, against a bare boot
// of the same kernel and the same initrd by the same QEMU, with the same
// RAM, to its reset (Machine.BareBoot, between the phase's Prepare and its
// Run, outside the phase's time), alternated in one run; and, for
// information, against a bare boot of the guest's binaries alone (no root,
// no config: bare-bin-s, ratio-bin). It reports both medians, the ratio (target ≤ 1.2), QEMU's CPU
// time for each and their ratio, and the median phase's breakdown: the
// host's steps and the guest init's.
func BenchmarkBootToExit(b *testing.B) {
	opts := pins(b)
	be := newBackend(b, opts)
	rootfs := testenv.BusyboxRootfs(b)
	ctx := context.Background()
	var phases, bares, bins, phaseCPU, bareCPU, inits []time.Duration
	var pairs, binPairs []float64 // each phase over the bare boots beside it
	timings := map[time.Duration]vm.Timing{}
	for i := 0; b.Loop(); i++ {
		s := spec(b, rootfs, "/bin/true")
		t0 := time.Now()
		sb, err := be.Prepare(ctx, fmt.Sprintf("bench-%d-%d", os.Getpid(), i), s, partial.Nop{})
		if err != nil {
			b.Fatal(err)
		}
		prepared := time.Since(t0)
		d, cpu, err := sb.(*vm.Machine).BareBoot(ctx, filepath.Join(b.TempDir(), "bare"), vm.PhaseInitrd)
		if err != nil {
			sb.Cleanup(ctx)
			b.Fatal(err)
		}
		bares, bareCPU = append(bares, d), append(bareCPU, cpu)
		d, _, err = sb.(*vm.Machine).BareBoot(ctx, filepath.Join(b.TempDir(), "bare-bin"), vm.GuestBinaries)
		if err != nil {
			sb.Cleanup(ctx)
			b.Fatal(err)
		}
		bins = append(bins, d)
		t1 := time.Now()
		ex, err := sb.Run(ctx, 5*time.Minute, backend.IO{})
		rep := sb.Cleanup(ctx)
		if err != nil || ex.Code != 0 || !rep.Verified {
			b.Fatalf("phase: %+v %v %+v", ex, err, rep.Steps)
		}
		took := prepared + time.Since(t1)
		phases = append(phases, took)
		pairs = append(pairs, took.Seconds()/bares[len(bares)-1].Seconds())
		binPairs = append(binPairs, took.Seconds()/bins[len(bins)-1].Seconds())
		phaseCPU = append(phaseCPU, time.Duration(ex.Usage.CPUTimeNanos))
		tm := sb.(*vm.Machine).Timing()
		timings[took] = tm
		if n := len(tm.Guest); n > 0 {
			inits = append(inits, time.Duration(tm.Guest[n-1].Uptime*float64(time.Second))-tm.Kernel)
		}
	}
	// Every sample, sorted: on a shared host one boot can take a quarter
	// longer than the next, and the medians alone hide how much.
	b.Logf("samples (s): phase %s; bare %s; binaries %s", seconds(phases), seconds(bares), seconds(bins))
	// The breakdown is the median phase's, not the last one's: on a
	// shared machine one slow run is not where the time goes.
	p, q := median(phases), median(bares)
	last := timings[p]
	b.ReportMetric(p.Seconds(), "phase-s")
	b.ReportMetric(q.Seconds(), "bare-s")
	// The ratio is the median of each phase over the bare boot run just
	// before it: this host's speed drifts by half a second a boot from one
	// few-second window to the next (other tenants), which a ratio of two
	// medians of a few samples each catches unevenly, and a pair mostly
	// shares. The ratio of the medians is reported beside it.
	b.ReportMetric(medianOf(pairs), "ratio")
	b.ReportMetric(p.Seconds()/q.Seconds(), "ratio-of-medians")
	b.ReportMetric(median(bins).Seconds(), "bare-bin-s")
	b.ReportMetric(medianOf(binPairs), "ratio-bin")
	// QEMU's CPU time beside the wall time: on a shared 2-core host other
	// load stretches the wall time of both, unevenly; the guest's work
	// under TCG is what the CPU time counts.
	pc, qc := median(phaseCPU), median(bareCPU)
	b.ReportMetric(pc.Seconds(), "phase-cpu-s")
	b.ReportMetric(qc.Seconds(), "bare-cpu-s")
	b.ReportMetric(pc.Seconds()/qc.Seconds(), "cpu-ratio")
	// The init's own work, from its start to its last step (the output
	// written): what a phase's guest does that the bare boot's does not,
	// on the guest's clock, less stretched by other load than the ratio.
	if len(inits) > 0 {
		b.ReportMetric(median(inits).Seconds(), "guest-init-s")
	}
	b.Logf("accel %s; phase p50 %s, bare boot p50 %s (of the guest's binaries alone %s); median phase: prepare %s (images %s), qemu %s (kernel %s, init setup %s, workload %s); host steps: %s",
		be.Accel(), p, q, median(bins), last.Prepare, last.Images, last.QEMU, last.Kernel, last.Setup, last.Workload, last)
}

func seconds(ds []time.Duration) string {
	var out []string
	for _, d := range slices.Sorted(slices.Values(ds)) {
		out = append(out, fmt.Sprintf("%.2f", d.Seconds()))
	}
	return strings.Join(out, " ")
}

func medianOf(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

func median(ds []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/2]
}

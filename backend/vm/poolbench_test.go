package vm_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/backend/vm"
	"github.com/custody-dev/custody/internal/procfs"
	"github.com/custody-dev/custody/internal/testenv"
)

// BenchmarkPooledTake is the make bench row of the vm warm pool: a
// trivial phase (/bin/true) on a warm guest, from its take (the grant's
// inputs attached) through Run to verified Cleanup, which is the
// backend's share of a pooled grant → receipt; the guest's boot is
// outside the time, as in a pool. It reports the median (pooled-s), one
// warm guest's QEMU resident set while it waits (warm-rss-bytes, the
// median), QEMU's CPU over one second of that wait (idle-cpu-cores) and
// QEMU's CPU from the take to its exit (pooled-cpu-s).
func BenchmarkPooledTake(b *testing.B) {
	be := newBackend(b, pins(b))
	rootfs := testenv.BusyboxRootfs(b)
	ctx := context.Background()
	var takes, idle, takeCPU []time.Duration
	var rss []float64
	var last vm.Timing
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		s := spec(b, rootfs, "/bin/true")
		h, err := be.PrepareHeld(ctx, fmt.Sprintf("pbench-%d-%d", os.Getpid(), i), heldOf(s), partial.Nop{})
		if err != nil {
			if h != nil {
				h.Destroy(ctx)
			}
			b.Fatal(err)
		}
		pid := vm.HeldPid(h)
		cpu0 := procCPU(pid)
		time.Sleep(time.Second)
		idle = append(idle, procCPU(pid)-cpu0)
		rss = append(rss, float64(procRSS(pid)))
		atTake := procCPU(pid)
		b.StartTimer()
		t0 := time.Now()
		sb, err := h.Take(ctx, backend.Attachment{Args: s.Args, Env: s.Env, Cwd: s.Cwd})
		if err != nil {
			h.Destroy(ctx)
			b.Fatal(err)
		}
		ex, err := sb.Run(ctx, time.Minute, backend.IO{})
		rep := sb.Cleanup(ctx)
		if err != nil || ex.Code != 0 || !rep.Verified {
			b.Fatalf("pooled phase: %+v %v %+v", ex, err, rep.Steps)
		}
		takes = append(takes, time.Since(t0))
		// QEMU's CPU from the take to its exit: its host cgroup's total
		// less what it had used when taken (boot and wait).
		takeCPU = append(takeCPU, time.Duration(ex.Usage.CPUTimeNanos)-atTake)
		last = sb.(*vm.Machine).Timing()
	}
	b.Logf("samples (s): pooled take→cleanup %s; QEMU CPU over 1 s of waiting %s", seconds(takes), seconds(idle))
	b.ReportMetric(median(takes).Seconds(), "pooled-s")
	b.ReportMetric(medianOf(rss), "warm-rss-bytes")
	b.ReportMetric(median(idle).Seconds(), "idle-cpu-cores")
	// Less stretched by other load than the wall time: under TCG QEMU's
	// CPU is the guest's work.
	b.ReportMetric(median(takeCPU).Seconds(), "pooled-cpu-s")
	b.Logf("accel %s; pooled p50 %s; warm QEMU RSS p50 %.0f MiB; last pooled phase's steps: %s", be.Accel(), median(takes), medianOf(rss)/(1<<20), last)
}

// procCPU is a process's user and system CPU time so far.
func procCPU(pid int) time.Duration {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return 0
	}
	return time.Duration(st.UTime+st.STime) * time.Second / 100 // USER_HZ
}

// procRSS is a process's resident set in bytes.
func procRSS(pid int) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
)

// StopGrace is how long a workload stopped by its StopSignal has to end
// before SIGKILL.
const StopGrace = 2 * time.Second

// wait waits for the runtime's run to end: with the workload, or killed with its
// tree when the wall time passes or ctx ends (after the image's StopSignal
// and StopGrace, when it names one). It returns runc's result,
// and an error only when the container could not be stopped.
func (g *gated) wait(ctx context.Context, pid int, ex *backend.Exit) (runErr, err error) {
	select {
	case runErr = <-g.exited:
	case <-g.timer.C:
		ex.TimedOut = true
	case <-ctx.Done():
		ex.Cancelled = true
	}
	if ex.TimedOut || ex.Cancelled {
		if g.c.stopSignal != 0 && g.c.pidfd > 0 && unix.PidfdSendSignal(g.c.pidfd, g.c.stopSignal, nil, 0) == nil {
			// The image's StopSignal first: a workload that handles it
			// may end cleanly within the grace period.
			select {
			case runErr = <-g.exited:
				ex.Signal, ex.Code = unix.SignalName(g.c.stopSignal), 128+int(g.c.stopSignal)
				return runErr, nil
			case <-time.After(StopGrace):
			}
		}
		g.c.kill(pid)
		select {
		case runErr = <-g.exited:
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("container %s: runc run did not end after its init %d was killed", g.c.id, pid)
		}
		ex.Signal, ex.Code = "SIGKILL", 128+int(unix.SIGKILL)
	}
	return runErr, nil
}

// exitStatus reads the workload's status from the run's result: the
// runtime reports the workload's, 128+n for signal n (an *ExitError when
// not 0). A killed run already has its status.
func (c *Container) exitStatus(ex *backend.Exit, runErr error) error {
	if ex.TimedOut || ex.Cancelled {
		return nil
	}
	var ee *ExitError
	switch {
	case runErr == nil:
	case errors.As(runErr, &ee):
		ex.Code = ee.Code
	default:
		return fmt.Errorf("runc run: %w", runErr)
	}
	return nil
}

// collectUsage reads what the kernel accounted to the launch.
func (c *Container) collectUsage(ex *backend.Exit) {
	ex.Usage = c.cgroups.usage()
	ooms, late := c.cgroups.oomNotified()
	ex.Usage.OOMKills = max(ex.Usage.OOMKills, ooms, lateOOMs(late, ex.Code, ex.Usage.PeakMemoryBytes, ex.Observation.Cgroup.MemoryLimitBytes))
	ex.Usage.PidsLimitHits = c.cgroups.pidsNotified()
	// The leaf is gone with its limits; they were read from it live.
	observed := ex.Observation
	ex.Usage.MemoryLimitBytes, ex.Usage.PidsLimit = observed.Cgroup.MemoryLimitBytes, observed.Cgroup.PidsLimit
	ex.OOMKilled = ex.Usage.OOMKills > 0
	if ex.OOMKilled && ex.Code == 128+int(unix.SIGKILL) {
		ex.Signal = "SIGKILL"
	}
}

// lateOOMs reads the leaf's OOM firings that were read only after the
// leaf was gone (cgroupDirs.oomLate), of which one may be its removal's:
// two or more hold an OOM for sure; one is an OOM only with the kernel's
// other marks of one, a SIGKILLed workload whose memory reached its limit
// (within a sixteenth: the kernel charges in batches, and a huge page
// that does not fit fails whole).
func lateOOMs(late int64, code int, peak, limit int64) int64 {
	switch {
	case late >= 2:
		return late - 1
	case late == 1 && code == 128+int(unix.SIGKILL) && limit > 0 && peak+limit/16 >= limit:
		return 1
	}
	return 0
}

// gatedPid finds the gate: the one process in the launch's leaf cgroup
// (any hierarchy holds every member; the pids one is read).
func (c *Container) gatedPid() (int, error) {
	pids, err := c.cgroups.leafProcs("pids")
	if err != nil {
		return 0, err
	}
	if len(pids) != 1 {
		return 0, fmt.Errorf("container %s: expected only the gate in its cgroup, found %v", c.id, pids)
	}
	return pids[0], nil
}

// kill sends SIGKILL to init; when init dies the kernel kills every process
// in its pid namespace, double-forked and setsid'd ones included. The pidfd
// taken while the gate held init cannot hit a reused pid; without one it
// goes through the runtime, and if that fails every pid in the cgroup is
// killed.
func (c *Container) kill(pid int) {
	if c.pidfd > 0 && unix.PidfdSendSignal(c.pidfd, unix.SIGKILL, nil, 0) == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := c.b.runtimeFor(c.bin)
	if err == nil {
		err = rc.kill(ctx, c.id, unix.SIGKILL)
	}
	if err != nil {
		c.b.log.Warn("runc kill failed; killing cgroup members", "id", c.id, "err", err)
		if pid > 0 {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		if pids, err := c.cgroups.procs(); err == nil {
			for _, p := range pids {
				_ = unix.Kill(p, unix.SIGKILL)
			}
		}
	}
}

// drain passes a container stream on, at most limit bytes. Writes of the
// two streams are serialised: callers often hand the same writer for both.
func drain(r *os.File, w io.Writer, mu *sync.Mutex, limit int64, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	defer r.Close()
	if w == nil {
		w = io.Discard
	}
	buf := make([]byte, 32<<10)
	var n int64
	for {
		m, err := r.Read(buf)
		if m > 0 {
			keep := int64(m)
			if n+keep > limit {
				keep = max(limit-n, 0)
			}
			if keep > 0 {
				mu.Lock()
				_, _ = w.Write(buf[:keep])
				mu.Unlock()
			}
			if n < limit && n+int64(m) > limit {
				mu.Lock()
				fmt.Fprintf(w, "\n[custody: output truncated at %d bytes]\n", limit)
				mu.Unlock()
			}
			n += int64(m)
		}
		if err != nil {
			return
		}
	}
}

package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/egress"
)

// Run runs the container with one run of the runtime and waits until its whole
// process tree is gone: the workload exits, the wall time passes, or ctx is
// cancelled (then the tree is killed). The container's first process is the
// gate: once runc has set up every namespace, mount, capability drop and
// seccomp filter, the gate reports ready and waits; the backend observes the
// process from outside, and only then lets it exec the workload. It returns
// an error only when the container could not be run or could not be
// stopped. A container runs once: a second Run, or one after Cleanup, is
// refused with a *StateError before anything is made.
func (c *Container) run(ctx context.Context, wall time.Duration, stdout, stderr io.Writer) (*backend.Exit, error) {
	if _, err := c.move(opRun); err != nil {
		return nil, err
	}
	defer func() { _, _ = c.move(opExit) }() // refused only if a Cleanup came first
	s, err := c.startDrains(stdout, stderr)
	if err != nil {
		return nil, &StartError{Stage: StageStreams, Err: err}
	}
	g, err := c.startGated(ctx, s, wall)
	if err != nil {
		return nil, &StartError{Stage: StageRuntime, Err: err}
	}
	defer g.control.Close()
	defer g.join()
	defer g.timer.Stop()
	if err := g.awaitReady(ctx); err != nil {
		return nil, &StartError{Stage: StageSetup, Err: err}
	}
	pid, observed, err := g.joinIdentities()
	if err != nil {
		return nil, &StartError{Stage: StageObserve, Err: g.abort(err)}
	}
	c.fault("after-create")
	if pidfd, err := unix.PidfdOpen(pid, 0); err == nil {
		c.pidfd = pidfd
		defer func() { unix.Close(c.pidfd); c.pidfd = 0 }()
	}
	ex := &backend.Exit{Started: time.Now(), Observation: observed}
	if err := c.attachEgress(ctx); err != nil {
		return nil, &StartError{Stage: StageEgress, Err: g.abort(err)}
	}
	if err := g.goAhead(); err != nil {
		return nil, &StartError{Stage: StageGoAhead, Err: g.abort(err)}
	}
	runErr, err := g.wait(ctx, pid, ex)
	if err != nil {
		return nil, err
	}
	ex.Finished = time.Now()
	c.fault("after-exit")
	s.wait()
	if err := c.exitStatus(ex, runErr); err != nil {
		return nil, err
	}
	c.collectUsage(ex)
	return ex, nil
}

// The stages of a run before its workload starts, as a StartError names
// them.
const (
	StagePrepare = "prepare"         // the launch dir, mounts and config, before runc
	StageStreams = "streams"         // the stdout and stderr pipes
	StageRuntime = "runtime-start"   // starting runc
	StageSetup   = "container-setup" // runc's namespaces, mounts, cwd, up to the gate
	StageObserve = "observe"         // custody's observation of the gated container
	StageGoAhead = "go-ahead"        // releasing the gate
	StageEgress  = "egress-attach"   // opening the egress listeners in the container's namespace
)

// attachEgress lets the launch's Egress open its listeners inside the
// held container's network namespace, entered through the gate's pidfd
// (never a pid, which could be recycled). The namespace is the one runc
// made fresh for this container, loopback only: the listeners are the
// only things in it that lead anywhere.
func (c *Container) attachEgress(ctx context.Context) error {
	if c.egress == nil {
		return nil
	}
	if c.pidfd == 0 {
		return errors.New("no pidfd for the gated container, so its namespace cannot be entered safely; fix: run on Linux 5.3 or later")
	}
	return c.egress.Attach(ctx, func(addr string) (net.Listener, error) {
		ln, err := egress.ListenInPidfd(c.pidfd, addr)
		if err != nil {
			return nil, err
		}
		c.lnMu.Lock()
		defer c.lnMu.Unlock()
		c.lns = append(c.lns, ln)
		return ln, nil
	})
}

// closeEgress closes every egress listener; nil when there were none.
func (c *Container) closeEgress() error {
	c.lnMu.Lock()
	defer c.lnMu.Unlock()
	var errs []error
	for _, ln := range c.lns {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	c.lns = nil
	return errors.Join(errs...)
}

// StartError is a run that failed before its workload started: nothing of
// the workload ran, whatever exit status the runtime had.
type StartError struct {
	Stage string
	Err   error
}

func (e *StartError) Error() string {
	return fmt.Sprintf("failed to start (stage %s): %v", e.Stage, e.Err)
}
func (e *StartError) Unwrap() error { return e.Err }

// StartStage names the stage that failed; callers match on the method, so
// they need not import this package.
func (e *StartError) StartStage() string { return e.Stage }

// streams are a run's stdout and stderr pipes, drained into the caller's
// writers.
type streams struct {
	outW, errW *os.File
	copied     chan struct{}
}

// startDrains makes the two pipes and starts draining them, each up to
// MaxLogBytes.
func (c *Container) startDrains(stdout, stderr io.Writer) (*streams, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	s := &streams{outW: outW, errW: errW, copied: make(chan struct{}, 2)}
	limit := c.b.opts.MaxLogBytes
	var mu sync.Mutex
	go drain(outR, stdout, &mu, limit, s.copied)
	go drain(errR, stderr, &mu, limit, s.copied)
	return s, nil
}

// closeWriters closes this process's write ends, once runc holds its own.
func (s *streams) closeWriters() {
	s.outW.Close()
	s.errW.Close()
}

// wait lets the drains finish, for a few seconds at most: a process that
// escaped with a copy of a pipe must not hold the run.
func (s *streams) wait() {
	for range 2 {
		select {
		case <-s.copied:
		case <-time.After(5 * time.Second):
			return
		}
	}
}

// gated is one run of the container by the runtime, and the gate it holds.
type gated struct {
	c       *Container
	streams *streams
	control *os.File     // this end of the gate's control socket
	exited  <-chan error // the run's result: nil, an *ExitError or why it failed
	flushed chan error   // the journal record of its identity
	joined  bool
	wall    time.Duration
	timer   *time.Timer // the wall time, counted from runc's start
}

// startGated starts the runtime's run with the gate as the container's first
// process, and journals runc's identity while runc creates the container.
// The wall time runs from here.
func (c *Container) startGated(ctx context.Context, s *streams, wall time.Duration) (*gated, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		s.closeWriters()
		s.wait()
		return nil, fmt.Errorf("gate control socket: %w", err)
	}
	control := os.NewFile(uintptr(pair[0]), "gate-control")
	theirs := os.NewFile(uintptr(pair[1]), "gate-control-peer")
	rc, err := c.b.runtimeFor(c.bin)
	var exited <-chan error
	if err == nil {
		exited, err = rc.startRun(c.id, c.dir, s.outW, s.errW, theirs, c.b.gate, c.b.filter)
	}
	theirs.Close()
	s.closeWriters()
	if err != nil {
		s.wait()
		control.Close()
		return nil, err
	}
	g := &gated{c: c, streams: s, control: control, exited: exited, flushed: make(chan error, 1), wall: wall}
	// The runtime's identity is journalled with Prepare's identities while
	// it starts the container (tens of milliseconds): recovery waits until
	// exactly that process no longer runs the container, and finds the
	// container through runc's own state. The record must have landed
	// before the go-ahead; every return joins it, so that no record lands
	// after cleanup's.
	go func() { g.flushed <- c.recordRuntime(rc.ident) }()
	g.timer = time.NewTimer(wall)
	return g, nil
}

// join waits for the journal record of runc's identity, once.
func (g *gated) join() error {
	if g.joined {
		return nil
	}
	g.joined = true
	return <-g.flushed
}

// abort ends a run that fails before the go-ahead: closing the control
// socket makes the gate exit without running the workload.
func (g *gated) abort(err error) error {
	g.join()
	g.control.Close()
	select {
	case <-g.exited:
	case <-time.After(30 * time.Second):
		g.c.kill(0)
		<-g.exited
	}
	g.streams.wait()
	return err
}

// awaitReady waits for the gate to report that runc has set the container
// up, within the wall time and until ctx ends.
func (g *gated) awaitReady(ctx context.Context) error {
	c := g.c
	ready := make(chan error, 1)
	go func() {
		var b [1]byte
		n, err := g.control.Read(b[:])
		if err == nil && (n != 1 || b[0] != 'r') {
			err = fmt.Errorf("unexpected gate message %q", b[:n])
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			runErr := <-g.exited
			g.streams.wait()
			return fmt.Errorf("runc run: the container never reached its workload (%v): %v", err, runErr)
		}
		return nil
	case runErr := <-g.exited:
		g.streams.wait()
		return fmt.Errorf("runc run: %v", runErr)
	case <-g.timer.C:
		return g.abort(fmt.Errorf("container %s: not ready within its wall time of %s", c.id, g.wall))
	case <-ctx.Done():
		return g.abort(fmt.Errorf("container %s: cancelled before its workload started: %w", c.id, ctx.Err()))
	}
}

// joinIdentities finds the gated init, arms the OOM watch, observes the
// container from outside, and waits for runc's identity to be on record.
// The watches and the observation make nothing durable and need no record,
// so they overlap the journal's write (which a loaded disk makes slow);
// the go-ahead still waits for both.
func (g *gated) joinIdentities() (int, *backend.Observation, error) {
	c := g.c
	pid, err := c.gatedPid()
	if err != nil {
		return 0, nil, err
	}
	watchErr := errors.Join(c.cgroups.watchOOM(), c.cgroups.watchPids(pid))
	observed := c.observe(pid)
	if err := g.join(); err != nil {
		return 0, nil, err
	}
	if watchErr != nil {
		return 0, nil, watchErr
	}
	return pid, observed, nil
}

// goAhead releases the gate: it execs the workload.
func (g *gated) goAhead() error {
	if _, err := g.control.Write([]byte{'g'}); err != nil {
		return fmt.Errorf("release the gate: %w", err)
	}
	g.control.Close()
	g.c.fault("after-start")
	g.c.fault("mid-run")
	return nil
}

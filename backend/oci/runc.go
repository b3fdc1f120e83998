package oci

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrNotExist means the runtime has no container with that id.
var ErrNotExist = errors.New("container does not exist")

// errRuntimeGone means the runtime process ended before it answered.
var errRuntimeGone = errors.New("the runtime process is gone")

// State is the subset of `runc state` that the runner uses.
type State struct {
	ID     string `json:"id"`
	Pid    int    `json:"pid"`
	Status string `json:"status"`
	Bundle string `json:"bundle"`
}

// ExitError is a run whose workload ended with a non-zero status, 128+n
// for signal n.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// runc is one `custody-runc serve` process: the pinned runtime, started
// from its verified sealed copy, serving this backend's container state
// dir. It does what `runc run/kill/state/delete` would, through runc's own
// library, without a runtime process per launch. The protocol is one JSON
// message a request or reply on an inherited SOCK_SEQPACKET socket; a run's
// stdio and extra descriptors travel with it (SCM_RIGHTS). The process
// kills every container it started when the socket closes, so nothing it
// launched outlives this runner.
type runc struct {
	ident map[string]string // pid and start time, journalled with each container
	cmd   *exec.Cmd
	// fd is the socket; fdMu keeps it from being closed (and its number
	// reused) while a call writes to it or close shuts it down.
	fdMu     sync.RWMutex
	fd       int
	fdClosed bool

	mu      sync.Mutex
	seq     uint64
	pending map[uint64]chan runcReply
	gone    chan struct{} // closed when the process's socket has closed
	goneErr error
}

// The messages of the custody-runc protocol (its main.go has the other side).
type runcRequest struct {
	Seq    uint64 `json:"seq"`
	Op     string `json:"op"`
	ID     string `json:"id"`
	Bundle string `json:"bundle,omitempty"`
	Signal int    `json:"signal,omitempty"`
	Force  bool   `json:"force,omitempty"`
}

type runcReply struct {
	Seq      uint64 `json:"seq"`
	Err      string `json:"err,omitempty"`
	NotExist bool   `json:"notExist,omitempty"`
	Status   int    `json:"status"`
	State    *State `json:"state,omitempty"`
}

// startRunc starts the runtime's server on root. Its stderr (libcontainer's
// warnings) goes to logf a line at a time.
func startRunc(bin *Binary, root string, logf func(line string)) (*runc, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("runtime socket: %w", err)
	}
	peer := os.NewFile(uintptr(pair[1]), "custody-runc-peer")
	defer peer.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		unix.Close(pair[0])
		return nil, err
	}
	cmd := exec.Command(bin.Path(), "serve", "--root", root)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"} // nothing ambient
	cmd.ExtraFiles = []*os.File{peer}
	cmd.Stderr = errW
	// Its own process group: a terminal's ^C to the runner must not kill
	// the runtime before it has stopped its containers.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	errW.Close()
	if err != nil {
		errR.Close()
		unix.Close(pair[0])
		return nil, fmt.Errorf("start the runtime: %w", err)
	}
	ident, err := processIdentity(cmd.Process.Pid)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		errR.Close()
		unix.Close(pair[0])
		return nil, fmt.Errorf("identify the runtime %d: %w", cmd.Process.Pid, err)
	}
	r := &runc{ident: ident, fd: pair[0], cmd: cmd,
		pending: map[uint64]chan runcReply{}, gone: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(errR)
		for sc.Scan() {
			logf(sc.Text())
		}
		errR.Close()
	}()
	go r.read()
	return r, nil
}

// read delivers replies until the socket closes, then fails every call
// still waiting.
func (r *runc) read() {
	buf := make([]byte, 64<<10)
	var err error
	for {
		var n int
		n, _, _, _, err = unix.Recvmsg(r.fd, buf, nil, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			break
		}
		var rep runcReply
		if json.Unmarshal(buf[:n], &rep) != nil {
			continue
		}
		r.mu.Lock()
		ch := r.pending[rep.Seq]
		delete(r.pending, rep.Seq)
		r.mu.Unlock()
		if ch != nil {
			ch <- rep
		}
	}
	r.fdMu.Lock()
	unix.Close(r.fd)
	r.fdClosed = true
	r.fdMu.Unlock()
	werr := r.cmd.Wait()
	r.mu.Lock()
	r.goneErr = fmt.Errorf("%w (pid %d: %v)", errRuntimeGone, r.cmd.Process.Pid, errors.Join(err, werr))
	r.pending = nil
	close(r.gone)
	r.mu.Unlock()
}

// alive reports whether the process still serves.
func (r *runc) alive() bool {
	select {
	case <-r.gone:
		return false
	default:
		return true
	}
}

// close ends the process: it kills what it still runs, then exits.
func (r *runc) close() {
	r.fdMu.RLock()
	if !r.fdClosed {
		_ = unix.Shutdown(r.fd, unix.SHUT_RDWR)
	}
	r.fdMu.RUnlock()
	<-r.gone
}

// send sends one request and returns the channel its reply comes on.
func (r *runc) send(req runcRequest, files ...*os.File) (<-chan runcReply, error) {
	ch := make(chan runcReply, 1)
	r.mu.Lock()
	if r.pending == nil {
		err := r.goneErr
		r.mu.Unlock()
		return nil, err
	}
	r.seq++
	req.Seq = r.seq
	r.pending[req.Seq] = ch
	r.mu.Unlock()
	b, err := json.Marshal(req)
	if err == nil {
		var oob []byte
		if len(files) > 0 {
			fds := make([]int, len(files))
			for i, f := range files {
				fds[i] = int(f.Fd())
			}
			oob = unix.UnixRights(fds...)
		}
		r.fdMu.RLock()
		if r.fdClosed {
			err = errRuntimeGone
		} else {
			err = unix.Sendmsg(r.fd, b, oob, nil, 0)
		}
		r.fdMu.RUnlock()
	}
	if err != nil {
		r.mu.Lock()
		if r.pending != nil {
			delete(r.pending, req.Seq)
		}
		r.mu.Unlock()
		return nil, fmt.Errorf("runc %s: send: %w", req.Op, err)
	}
	return ch, nil
}

// await waits for a reply, the process's end or ctx's.
func (r *runc) await(ctx context.Context, op string, ch <-chan runcReply) (runcReply, error) {
	select {
	case rep := <-ch:
		return rep, rep.err(op)
	case <-r.gone:
		select {
		case rep := <-ch: // answered just before it went
			return rep, rep.err(op)
		default:
		}
		return runcReply{}, fmt.Errorf("runc %s: %w", op, r.goneErr)
	case <-ctx.Done():
		return runcReply{}, fmt.Errorf("runc %s: %w", op, ctx.Err())
	}
}

func (rep runcReply) err(op string) error {
	switch {
	case rep.Err == "":
		return nil
	case rep.NotExist:
		return fmt.Errorf("runc %s: %w: %s", op, ErrNotExist, rep.Err)
	default:
		return fmt.Errorf("%s", rep.Err)
	}
}

func (r *runc) call(ctx context.Context, req runcRequest) (runcReply, error) {
	ch, err := r.send(req)
	if err != nil {
		return runcReply{}, err
	}
	return r.await(ctx, req.Op, ch)
}

// startRun is `runc run --bundle bundle --preserve-fds 3 id`: the runtime
// creates and starts the container, reaps its init, deletes it and reports
// the workload's status on the returned channel (nil for 0, an *ExitError
// otherwise). files are the container's stdout and stderr, passed straight
// through, then its descriptors from 3 on (custody's: the gate's control
// socket, the gate and the filter).
func (r *runc) startRun(id, bundle string, files ...*os.File) (<-chan error, error) {
	ch, err := r.send(runcRequest{Op: "run", ID: id, Bundle: bundle}, files...)
	if err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() {
		// Not bound to a context: on cancellation the backend kills the
		// container itself and the runtime then deletes it.
		rep, err := r.await(context.Background(), "run", ch)
		switch {
		case err == nil && rep.Status != 0:
			err = &ExitError{Code: rep.Status}
		case err != nil && rep.Status > 0:
			err = fmt.Errorf("%w (the workload exited %d)", err, rep.Status)
		}
		exited <- err
	}()
	return exited, nil
}

func (r *runc) kill(ctx context.Context, id string, sig unix.Signal) error {
	_, err := r.call(ctx, runcRequest{Op: "kill", ID: id, Signal: int(sig)})
	return err
}

func (r *runc) delete(ctx context.Context, id string, force bool) error {
	_, err := r.call(ctx, runcRequest{Op: "delete", ID: id, Force: force})
	return err
}

func (r *runc) state(ctx context.Context, id string) (*State, error) {
	rep, err := r.call(ctx, runcRequest{Op: "state", ID: id})
	if err != nil {
		return nil, err
	}
	if rep.State == nil {
		return nil, fmt.Errorf("runc state %s: no state in the reply", id)
	}
	return rep.State, nil
}

// waitDone returns once this process no longer runs container id.
func (r *runc) waitDone(ctx context.Context, id string) error {
	_, err := r.call(ctx, runcRequest{Op: "wait", ID: id})
	return err
}

// runtimeFor returns the runtime process serving bin, started at its first
// use and again if it has ended: each verified copy of the runtime has its
// own, so a re-pinned binary never serves under the old one's identity.
func (b *Backend) runtimeFor(bin *Binary) (*runc, error) {
	if bin == nil {
		return nil, errors.New("no verified runtime")
	}
	b.runcMu.Lock()
	defer b.runcMu.Unlock()
	if r := b.runcs[bin]; r != nil && r.alive() {
		return r, nil
	}
	r, err := startRunc(bin, b.opts.StateDir, func(line string) { b.log.Warn("runtime", "stderr", line) })
	if err != nil {
		return nil, err
	}
	if b.runcs == nil {
		b.runcs = map[*Binary]*runc{}
	}
	b.runcs[bin] = r
	return r, nil
}

// Close stops the backend's runtime processes, which kill whatever they
// still run (custodyd's exit does the same). A later call starts another.
func (b *Backend) Close() {
	b.runcMu.Lock()
	rs := b.runcs
	b.runcs = nil
	b.runcMu.Unlock()
	for _, r := range rs {
		r.close()
	}
}

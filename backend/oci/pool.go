package oci

// The warm pool's half of the oci backend: a container made for a pool
// profile before any grant exists, started by the runtime's run up to its gate
// (every namespace, mount, cgroup, capability drop and the seccomp filter
// in place; no workload), and held there until one grant takes it.
//
// Attach. A grant's inputs are attached to the held container by
// open_tree(OPEN_TREE_CLONE) of the immutable snapshot on the host, made
// read-only, nosuid and nodev with mount_setattr while it is still a
// detached tree nobody else can reach, then moved with move_mount into
// the container's own mount namespace, entered through the gate's pidfd
// (never a pid, which could be recycled) on a thread that leaves the
// process with it. The mount point is made first through the host's
// mount of the container's overlay rootfs (the same superblock the
// container sees), one component at a time, refusing symlinks and
// anything that leaves that filesystem. The alternative, mount
// propagation into a pre-made slave mount point, would need the mount
// points (and so every grant's input targets) known at preparation and a
// shared peer group between the host and every pooled container: one
// misplaced mount on the host side would reach every member. move_mount
// gives each input to exactly one mount namespace, and nothing of one
// grant exists in any namespace but its own container's.
//
// Output. The output filesystem is the one preparation made for this
// container alone (a bounded tmpfs, the profile's size); only the gate has
// run in the container, and Take verifies it empty before the grant gets
// it.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
)

var _ backend.Pooler = (*Backend)(nil)

// holdReady bounds how long a pooled container may take to reach its gate.
const holdReady = 30 * time.Second

// holdWall is the timer a held container starts with; Run sets the
// launch's wall time in its place. A held container lives only as long as
// its pool keeps it (its idle TTL), so this is a backstop.
const holdWall = 24 * time.Hour

// maxPooledGoAhead is the gate's limit on the pooled go-ahead's workload
// (cmd/custody-gate: POOLED_MAX).
const maxPooledGoAhead = 256 << 10

// maxPooledSlots is the gate's limit on the go-ahead's arguments, and on
// its variables, each (cmd/custody-gate: POOLED_SLOTS): the gate exits 125
// past it, so the go-ahead is refused here, before it is sent.
const maxPooledSlots = 8192

// ErrPoolTaken is returned for a held container that was already taken.
var ErrPoolTaken = errors.New("the pooled container was already taken: one pooled container serves exactly one grant")

// PrepareHeld makes a container for a pool profile and starts it up to the
// gate (see the package comment above).
func (b *Backend) PrepareHeld(ctx context.Context, id string, s backend.HeldSpec, rec backend.Recorder) (backend.Held, error) {
	cfg := Config{
		Pooled: true, Cwd: "/", Env: []string{}, Hostname: s.Hostname, UID: s.UID, GID: s.GID,
		Output:   Mount{Target: s.OutputPath},
		TmpBytes: s.TmpBytes, Memory: s.Memory, Pids: s.Pids, CPU: s.CPU, FileSize: s.FileSize, Nofile: s.Nofile,
	}
	c, err := b.prepare(ctx, Launch{ID: id, ImageRootfs: s.Rootfs, ImageSealed: b.mountableSeal(s.Sealed), Config: cfg,
		OutputBytes: s.OutputBytes, OutputFiles: s.OutputFiles, Recorder: rec, Journalled: true})
	if c == nil {
		return nil, err
	}
	h := &held{c: c, stdout: &switchWriter{}, stderr: &switchWriter{}, ended: true}
	if err != nil {
		return h, err
	}
	if _, err := c.move(opRun); err != nil {
		return h, err
	}
	st, err := c.startDrains(h.stdout, h.stderr)
	if err != nil {
		return h, &StartError{Stage: StageStreams, Err: err}
	}
	g, err := c.startGated(ctx, st, holdWall)
	if err != nil {
		return h, &StartError{Stage: StageRuntime, Err: err}
	}
	h.g, h.ended = g, false
	rctx, cancel := context.WithTimeout(ctx, holdReady)
	defer cancel()
	if err := g.awaitReady(rctx); err != nil {
		h.ended = true // awaitReady saw the runtime's run end, or ended it
		g.join()
		return h, &StartError{Stage: StageSetup, Err: err}
	}
	if err := g.join(); err != nil {
		h.ended = true
		return h, &StartError{Stage: StageSetup, Err: g.abort(err)}
	}
	pid, err := c.gatedPid()
	if err == nil {
		c.pidfd, err = unix.PidfdOpen(pid, 0)
	}
	if err != nil {
		c.pidfd = 0
		h.ended = true
		return h, &StartError{Stage: StageObserve, Err: g.abort(fmt.Errorf("open the held gate's pidfd: %w", err))}
	}
	h.pid = pid
	h.preparedAt = time.Now().UTC()
	return h, nil
}

// CheckRuntime verifies the pinned runtime's bytes, as every launch does.
func (b *Backend) CheckRuntime(ctx context.Context) error {
	bin, err := b.runtime.get(ctx)
	if err != nil {
		return err
	}
	bin.Close()
	return nil
}

// held is one container held at its gate for the pool.
type held struct {
	c              *Container
	g              *gated
	stdout, stderr *switchWriter
	pid            int
	preparedAt     time.Time

	mu    sync.Mutex
	taken bool
	ended bool // the runtime's run has returned and been waited for
	att   backend.Attachment
}

func (h *held) ID() string            { return h.c.id }
func (h *held) PreparedAt() time.Time { return h.preparedAt }

// Alive polls the gate's pidfd: readable means the gate has exited.
func (h *held) Alive() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended || h.c.pidfd <= 0 {
		return fmt.Errorf("container %s is no longer held at its gate", h.c.id)
	}
	fds := []unix.PollFd{{Fd: int32(h.c.pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	for errors.Is(err, unix.EINTR) { // the Go runtime's preemption signal
		n, err = unix.Poll(fds, 0)
	}
	switch {
	case err != nil:
		return fmt.Errorf("container %s: poll its gate: %w", h.c.id, err)
	case n > 0:
		return fmt.Errorf("container %s: its gate exited while held", h.c.id)
	}
	return nil
}

// Take hands the held container to one launch: its output verified empty,
// its inputs attached, its process kept for the go-ahead.
func (h *held) Take(ctx context.Context, a backend.Attachment) (backend.Sandbox, error) {
	h.mu.Lock()
	if h.taken {
		h.mu.Unlock()
		return nil, fmt.Errorf("container %s: %w", h.c.id, ErrPoolTaken)
	}
	h.taken = true
	h.mu.Unlock()
	if err := h.Alive(); err != nil {
		return nil, err
	}
	if len(a.Args) == 0 || !path.IsAbs(a.Args[0]) || !path.IsAbs(a.Cwd) {
		return nil, fmt.Errorf("container %s: a pooled launch needs an absolute command and working directory, got %q in %q", h.c.id, a.Args, a.Cwd)
	}
	if _, err := encodeGoAhead(a); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(h.c.outDir)
	if err != nil || len(ents) != 0 {
		return nil, fmt.Errorf("container %s: its output is not fresh (%d entries, %v); it is destroyed, never served", h.c.id, len(ents), err)
	}
	for _, in := range a.Inputs {
		if in.Writable {
			return nil, fmt.Errorf("container %s: input %s is writable, and a pooled container takes only read-only inputs", h.c.id, in.Target)
		}
		if err := h.c.attachInput(in.Source, in.Target); err != nil {
			return nil, fmt.Errorf("container %s: attach input %s: %w", h.c.id, in.Target, err)
		}
	}
	h.att = a
	h.c.stopSignal = a.StopSignal
	return &pooled{h}, nil
}

// Destroy ends an untaken (or taken but never run) held container: closing
// the gate's control socket makes it exit without running anything, then
// cleanup removes and verifies every part as after any launch.
func (h *held) Destroy(ctx context.Context) backend.CleanupReport {
	h.end()
	return *h.c.cleanup(ctx)
}

// end stops the runtime's run if it still holds the gate, once.
func (h *held) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return
	}
	h.ended = true
	h.g.timer.Stop()
	h.g.abort(nil)
	if h.c.pidfd > 0 {
		unix.Close(h.c.pidfd)
		h.c.pidfd = 0
	}
	_, _ = h.c.move(opExit)
}

// attachInput binds the snapshot at src read-only at target in the held
// container's mount namespace (see the package comment above).
func (c *Container) attachInput(src, target string) error {
	if path.Clean(target) != target || !path.IsAbs(target) || target == "/" {
		return fmt.Errorf("target %q is not a clean absolute path", target)
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return fmt.Errorf("snapshot %s is neither a directory nor a regular file", src)
	}
	if err := makeMountPoint(c.rootfs, target, fi.IsDir()); err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(tree)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("make the input read-only: %w", err)
	}
	if c.pidfd <= 0 {
		return errors.New("no pidfd for the held gate")
	}
	return inMountNS(c.pidfd, func() error {
		flags := uint64(unix.O_PATH | unix.O_CLOEXEC)
		if fi.IsDir() {
			flags |= unix.O_DIRECTORY
		}
		dst, err := unix.Openat2(unix.AT_FDCWD, target, &unix.OpenHow{Flags: flags,
			Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV})
		if err != nil {
			return fmt.Errorf("open %s in the container: %w", target, err)
		}
		defer unix.Close(dst)
		if err := unix.MoveMount(tree, "", dst, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
			return fmt.Errorf("move_mount into the container: %w", err)
		}
		return nil
	})
}

// makeMountPoint makes target (a directory, or an empty file) beneath
// root, one component at a time, never following a symlink nor leaving
// root's filesystem.
func makeMountPoint(root, target string, dir bool) error {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	parts := strings.Split(strings.TrimPrefix(target, "/"), "/")
	resolve := uint64(unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV)
	for i, p := range parts {
		last := i == len(parts)-1
		if !last || dir {
			if err := unix.Mkdirat(fd, p, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(fd)
				return fmt.Errorf("mkdir %s: %w", p, err)
			}
			nfd, err := unix.Openat2(fd, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolve})
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("open %s: %w", p, err)
			}
			fd = nfd
			continue
		}
		f, err := unix.Openat2(fd, p, &unix.OpenHow{Flags: unix.O_CREAT | unix.O_WRONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Mode: 0o444, Resolve: resolve})
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("create %s: %w", p, err)
		}
		unix.Close(f)
		return nil
	}
	unix.Close(fd)
	return nil
}

// inMountNS runs fn on a thread of its own that has entered the mount
// namespace of the process behind pidfd. The thread never returns to the
// scheduler: it leaves with its goroutine (LockOSThread without Unlock),
// so no other goroutine ever runs in the container's namespace (and the
// main thread, which the runtime parks instead, never enters it).
func inMountNS(pidfd int, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread is never terminated, only parked, and
			// /proc/self shows its namespaces: hold it here so that the
			// work lands on another thread.
			err := inMountNS(pidfd, fn)
			runtime.UnlockOSThread()
			done <- err
			return
		}
		// setns(CLONE_NEWNS) needs a thread whose fs state is its own.
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			done <- fmt.Errorf("unshare the thread's fs state: %w", err)
			return
		}
		if err := unix.Setns(pidfd, unix.CLONE_NEWNS); err != nil {
			done <- fmt.Errorf("enter the container's mount namespace: %w", err)
			return
		}
		done <- fn()
	}()
	return <-done
}

// encodeGoAhead is the pooled go-ahead (cmd/custody-gate): 'p', the
// length, then the working directory, each argument and each variable,
// NUL-terminated, with an empty string between arguments and variables.
func encodeGoAhead(a backend.Attachment) ([]byte, error) {
	if len(a.Args) > maxPooledSlots || len(a.Env) > maxPooledSlots {
		return nil, fmt.Errorf("pooled go-ahead: %d arguments and %d variables, the gate takes at most %d of each", len(a.Args), len(a.Env), maxPooledSlots)
	}
	var body []byte
	nul := func(s string) error {
		if strings.IndexByte(s, 0) >= 0 {
			return fmt.Errorf("pooled go-ahead: %q holds a NUL byte", s)
		}
		body = append(append(body, s...), 0)
		return nil
	}
	if err := nul(a.Cwd); err != nil {
		return nil, err
	}
	for _, s := range a.Args {
		if s == "" {
			return nil, errors.New("pooled go-ahead: an empty argument cannot be passed (it ends the argument list)")
		}
		if err := nul(s); err != nil {
			return nil, err
		}
	}
	body = append(body, 0)
	for _, kv := range a.Env {
		if !strings.Contains(kv, "=") {
			return nil, fmt.Errorf("pooled go-ahead: variable %q has no '='", kv)
		}
		if err := nul(kv); err != nil {
			return nil, err
		}
	}
	if len(body) > maxPooledGoAhead {
		return nil, fmt.Errorf("pooled go-ahead: the command and environment take %d bytes, the gate takes at most %d", len(body), maxPooledGoAhead)
	}
	msg := make([]byte, 5, 5+len(body))
	msg[0] = 'p'
	binary.LittleEndian.PutUint32(msg[1:], uint32(len(body)))
	return append(msg, body...), nil
}

// pooled is a taken held container as one launch's Sandbox.
type pooled struct{ h *held }

var _ backend.Sandbox = (*pooled)(nil)

// Run observes the live container (after the attach: what the receipt
// records is read now, never at preparation), sends the pooled go-ahead
// and waits as a cold Run does.
func (p *pooled) Run(ctx context.Context, wall time.Duration, out backend.IO) (*backend.Exit, error) {
	h, c := p.h, p.h.c
	if wall <= 0 {
		return nil, errors.New("oci: a wall time is required")
	}
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return nil, &StartError{Stage: StageSetup, Err: fmt.Errorf("container %s is no longer held at its gate", c.id)}
	}
	h.ended = true // from here on Run waits for the runtime's run itself
	h.mu.Unlock()
	g := h.g
	g.timer.Reset(wall)
	h.stdout.set(out.Stdout)
	h.stderr.set(out.Stderr)
	defer func() { _, _ = c.move(opExit) }()
	defer g.control.Close()
	defer g.timer.Stop()
	defer func() {
		if c.pidfd > 0 {
			unix.Close(c.pidfd)
			c.pidfd = 0
		}
	}()
	c.fault("after-create")
	watchErr := errors.Join(c.cgroups.watchOOM(), c.cgroups.watchPids(h.pid))
	observed := c.observe(h.pid)
	if watchErr != nil {
		return nil, &StartError{Stage: StageObserve, Err: g.abort(watchErr)}
	}
	msg, err := encodeGoAhead(h.att)
	if err != nil {
		return nil, &StartError{Stage: StageGoAhead, Err: g.abort(err)}
	}
	ex := &backend.Exit{Started: time.Now(), Observation: observed}
	if _, err := g.control.Write(msg); err != nil {
		return nil, &StartError{Stage: StageGoAhead, Err: g.abort(fmt.Errorf("release the gate: %w", err))}
	}
	g.control.Close()
	c.fault("after-start")
	c.fault("mid-run")
	runErr, err := g.wait(ctx, h.pid, ex)
	if err != nil {
		return nil, err
	}
	ex.Finished = time.Now()
	c.fault("after-exit")
	g.streams.wait()
	if err := c.exitStatus(ex, runErr); err != nil {
		return nil, err
	}
	c.collectUsage(ex)
	return ex, nil
}

func (p *pooled) Output() backend.Output { return p.h.c.Output() }

// Evidence is the container's, and the digest of the go-ahead: the
// command, environment and directory the gate ran are not in the
// container's config.json (made before the grant), so the receipt binds
// them here. The go-ahead is the encoding of the attachment Run sends.
func (p *pooled) Evidence() map[string]string {
	ev := p.h.c.Evidence()
	if msg, err := encodeGoAhead(p.h.att); err == nil {
		ev["goahead"] = fmt.Sprintf("%x", sha256.Sum256(msg))
	}
	return ev
}
func (p *pooled) Cleanup(ctx context.Context) backend.CleanupReport { return p.h.Destroy(ctx) }

// switchWriter passes writes to the writer set last; before one is set
// (the gate writes only when it fails) they are dropped.
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w = w
}

func (s *switchWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return len(b), nil
	}
	return s.w.Write(b)
}

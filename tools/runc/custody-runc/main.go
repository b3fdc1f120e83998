// Command custody-runc is custody's pinned OCI runtime: runc's own library,
// libcontainer, at the version this module pins, behind one long-lived
// process that custodyd starts and talks to over an inherited socket. It
// does what `runc run`, `runc kill`, `runc state` and `runc delete` do, with
// the same state directory format, but a launch no longer pays for a runc
// process of its own (about 19 ms of CPU and of wall time a launch here).
//
// It has no listening socket: `custody-runc serve --root DIR` serves the
// SOCK_SEQPACKET socket it inherits as descriptor 3, one JSON message a
// request or a reply, a run's stdio and extra descriptors passed with
// SCM_RIGHTS. When that socket closes (custodyd exited or was killed) or
// it gets SIGTERM, it kills every container it started, waits for each to
// be reaped and deleted, and exits: nothing it launched outlives the runner
// that asked for it.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/opencontainers/cgroups/devices" // device rules for the v1 and v2 managers
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

func init() {
	// libcontainer starts each container's init as this binary's "init".
	if len(os.Args) > 1 && os.Args[1] == "init" {
		libcontainer.Init()
	}
}

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-v") {
		printVersion()
		return
	}
	if len(os.Args) < 2 || os.Args[1] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: custody-runc --version | custody-runc serve --root DIR (socket on fd 3)")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	root := fs.String("root", "", "the container state directory (runc --root)")
	_ = fs.Parse(os.Args[2:])
	if !filepath.IsAbs(*root) {
		fmt.Fprintln(os.Stderr, "custody-runc serve: --root must be an absolute path")
		os.Exit(2)
	}
	logrus.SetLevel(logrus.WarnLevel)
	if err := os.MkdirAll(*root, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, "custody-runc serve:", err)
		os.Exit(1)
	}
	// The socket must reach no container: libcontainer passes only the
	// descriptors a run names, but a close-on-exec socket cannot leak.
	unix.CloseOnExec(3)
	s := &server{root: *root, fd: 3, running: map[string]*run{}}
	if err := s.serve(); err != nil {
		fmt.Fprintln(os.Stderr, "custody-runc serve:", err)
		os.Exit(1)
	}
}

// printVersion answers like runc does, so that one parser reads both: the
// version is the runc module's this binary was built from.
func printVersion() {
	v := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/opencontainers/runc" {
				v = strings.TrimPrefix(d.Version, "v")
			}
		}
		fmt.Printf("custody-runc version %s\nlibcontainer: github.com/opencontainers/runc@v%s\nspec: %s\ngo: %s\n", v, v, specs.Version, bi.GoVersion)
		return
	}
	fmt.Printf("custody-runc version %s\nspec: %s\n", v, specs.Version)
}

// request and reply are the protocol's messages; custodyd's side is
// backend/oci's launcher.go.
type request struct {
	Seq    uint64 `json:"seq"`
	Op     string `json:"op"` // run, kill, state, delete, wait
	ID     string `json:"id"`
	Bundle string `json:"bundle,omitempty"`
	Signal int    `json:"signal,omitempty"`
	Force  bool   `json:"force,omitempty"`
}

type reply struct {
	Seq      uint64 `json:"seq"`
	Err      string `json:"err,omitempty"`
	NotExist bool   `json:"notExist,omitempty"`
	// Status is a run's exit status, 128+n for signal n.
	Status int    `json:"status"`
	State  *state `json:"state,omitempty"`
}

// state is what `runc state` prints that custody reads.
type state struct {
	ID     string `json:"id"`
	Pid    int    `json:"pid"`
	Status string `json:"status"`
	Bundle string `json:"bundle"`
}

type run struct {
	c    *libcontainer.Container
	done chan struct{}
}

type server struct {
	root string
	fd   int

	wmu sync.Mutex // one reply written at a time

	mu       sync.Mutex
	running  map[string]*run
	stopping bool
	wg       sync.WaitGroup
}

func (s *server) serve() error {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		<-term
		// Unblocks the read below, which then stops everything.
		_ = unix.Shutdown(s.fd, unix.SHUT_RD)
	}()
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(16*4))
	for {
		n, oobn, flags, _, err := unix.Recvmsg(s.fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			s.stop()
			return nil
		}
		files, ferr := receivedFiles(oob[:oobn])
		var req request
		switch {
		case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
			ferr = errors.Join(ferr, errors.New("request truncated"))
		case ferr == nil:
			ferr = json.Unmarshal(buf[:n], &req)
		}
		if ferr != nil {
			closeAll(files)
			s.send(reply{Seq: req.Seq, Err: "custody-runc: bad request: " + ferr.Error(), Status: -1})
			continue
		}
		s.handle(req, files)
	}
}

func receivedFiles(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			closeAll(files)
			return nil, err
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), fmt.Sprintf("passed-%d", fd)))
		}
	}
	return files, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

func (s *server) send(r reply) {
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, _ = unix.Write(s.fd, b)
}

func (s *server) handle(req request, files []*os.File) {
	if req.Op != "run" {
		closeAll(files)
	}
	switch req.Op {
	case "run":
		s.mu.Lock()
		_, dup := s.running[req.ID]
		stopping := s.stopping
		s.mu.Unlock()
		if dup || stopping || len(files) < 2 {
			closeAll(files)
			s.send(reply{Seq: req.Seq, Err: fmt.Sprintf("custody-runc: run %s refused (already running %v, stopping %v, %d descriptors)", req.ID, dup, stopping, len(files)), Status: -1})
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			status, err := s.run(req, files)
			r := reply{Seq: req.Seq, Status: status}
			if err != nil {
				r.Err = err.Error()
			}
			s.send(r)
		}()
	// Each in a goroutine of its own: a wait or a forced delete may take
	// seconds, and must not hold up the requests behind it.
	case "kill":
		go func() { s.send(s.kill(req)) }()
	case "state":
		go func() { s.send(s.state(req)) }()
	case "delete":
		go func() { s.send(s.delete(req)) }()
	case "wait":
		go func() { s.send(s.wait(req)) }()
	default:
		s.send(reply{Seq: req.Seq, Err: fmt.Sprintf("custody-runc: unknown op %q", req.Op), Status: -1})
	}
}

// run is `runc run --bundle B --preserve-fds N ID`: create the container
// from the bundle's spec, start its init with the passed stdio and extra
// descriptors, wait for it, then delete the container.
func (s *server) run(req request, files []*os.File) (int, error) {
	defer closeAll(files) // the container holds its own copies once started
	c, p, err := s.create(req, files)
	if err != nil {
		return -1, err
	}
	r := &run{c: c, done: make(chan struct{})}
	s.mu.Lock()
	s.running[req.ID] = r
	stopping := s.stopping
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.running, req.ID)
		s.mu.Unlock()
		close(r.done)
	}()
	if err := c.Run(p); err != nil {
		_ = c.Destroy()
		return -1, fmt.Errorf("runc run: %w", err)
	}
	// This process's copies of the stdio would keep the runner's readers
	// from ever seeing the workload's streams end.
	closeAll(files)
	if stopping {
		_ = p.Signal(unix.SIGKILL)
	}
	st, werr := p.Wait()
	status := -1
	if st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok {
			switch {
			case ws.Signaled():
				status = 128 + int(ws.Signal())
			case ws.Exited():
				status = ws.ExitStatus()
			}
		}
	}
	derr := c.Destroy()
	if status < 0 {
		return -1, fmt.Errorf("runc run: wait for init: %v", werr)
	}
	if derr != nil {
		return status, fmt.Errorf("runc run: delete container %s: %w", req.ID, derr)
	}
	return status, nil
}

func (s *server) create(req request, files []*os.File) (*libcontainer.Container, *libcontainer.Process, error) {
	if !filepath.IsAbs(req.Bundle) {
		return nil, nil, fmt.Errorf("runc run: bundle %q is not absolute", req.Bundle)
	}
	data, err := os.ReadFile(filepath.Join(req.Bundle, "config.json"))
	if err != nil {
		return nil, nil, fmt.Errorf("runc run: %w", err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, nil, fmt.Errorf("runc run: config.json: %w", err)
	}
	if spec.Root == nil || spec.Process == nil {
		return nil, nil, errors.New("runc run: the bundle's spec has no root or no process")
	}
	if spec.Process.Terminal {
		return nil, nil, errors.New("runc run: a terminal is not supported")
	}
	// runc resolves these against its cwd, the bundle; this process
	// serves many bundles, so it resolves them itself.
	if !filepath.IsAbs(spec.Root.Path) {
		spec.Root.Path = filepath.Join(req.Bundle, spec.Root.Path)
	}
	// specconv leaves the rlimits to the process, as runc's CLI does; one
	// this process cannot name refuses the run, before anything is made,
	// rather than go unset.
	var limits []configs.Rlimit
	for _, rl := range spec.Process.Rlimits {
		n, ok := rlimits[rl.Type]
		if !ok {
			return nil, nil, fmt.Errorf("runc run: unknown rlimit %q", rl.Type)
		}
		limits = append(limits, configs.Rlimit{Type: n, Hard: rl.Hard, Soft: rl.Soft})
	}
	cfg, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{CgroupName: req.ID, Spec: &spec})
	if err != nil {
		return nil, nil, fmt.Errorf("runc run: %w", err)
	}
	for i, l := range cfg.Labels {
		if strings.HasPrefix(l, "bundle=") {
			cfg.Labels[i] = "bundle=" + req.Bundle
		}
	}
	c, err := libcontainer.Create(s.root, req.ID, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("runc run: %w", err)
	}
	u := spec.Process.User
	p := &libcontainer.Process{
		Args: spec.Process.Args, Env: spec.Process.Env, Cwd: spec.Process.Cwd,
		UID: int(u.UID), GID: int(u.GID),
		Stdout: files[0], Stderr: files[1], ExtraFiles: files[2:],
		Init: true, LogLevel: "3", // logrus warn
	}
	for _, g := range u.AdditionalGids {
		p.AdditionalGroups = append(p.AdditionalGroups, int(g))
	}
	p.Rlimits = limits
	return c, p, nil
}

// rlimits are the OCI names of setrlimit(2)'s resources.
var rlimits = map[string]int{
	"RLIMIT_AS": unix.RLIMIT_AS, "RLIMIT_CORE": unix.RLIMIT_CORE, "RLIMIT_CPU": unix.RLIMIT_CPU,
	"RLIMIT_DATA": unix.RLIMIT_DATA, "RLIMIT_FSIZE": unix.RLIMIT_FSIZE, "RLIMIT_LOCKS": unix.RLIMIT_LOCKS,
	"RLIMIT_MEMLOCK": unix.RLIMIT_MEMLOCK, "RLIMIT_MSGQUEUE": unix.RLIMIT_MSGQUEUE, "RLIMIT_NICE": unix.RLIMIT_NICE,
	"RLIMIT_NOFILE": unix.RLIMIT_NOFILE, "RLIMIT_NPROC": unix.RLIMIT_NPROC, "RLIMIT_RSS": unix.RLIMIT_RSS,
	"RLIMIT_RTPRIO": unix.RLIMIT_RTPRIO, "RLIMIT_RTTIME": unix.RLIMIT_RTTIME, "RLIMIT_SIGPENDING": unix.RLIMIT_SIGPENDING,
	"RLIMIT_STACK": unix.RLIMIT_STACK,
}

func (s *server) load(req request) (*libcontainer.Container, *reply) {
	c, err := libcontainer.Load(s.root, req.ID)
	if err != nil {
		return nil, &reply{Seq: req.Seq, Err: fmt.Sprintf("runc %s: %v", req.Op, err), NotExist: errors.Is(err, libcontainer.ErrNotExist), Status: -1}
	}
	return c, nil
}

func (s *server) kill(req request) reply {
	c, bad := s.load(req)
	if bad != nil {
		return *bad
	}
	if err := c.Signal(unix.Signal(req.Signal)); err != nil {
		return reply{Seq: req.Seq, Err: "runc kill: " + err.Error(), Status: -1}
	}
	return reply{Seq: req.Seq}
}

func (s *server) state(req request) reply {
	c, bad := s.load(req)
	if bad != nil {
		return *bad
	}
	st, err := c.State()
	if err != nil {
		return reply{Seq: req.Seq, Err: "runc state: " + err.Error(), Status: -1}
	}
	status, err := c.Status()
	if err != nil {
		return reply{Seq: req.Seq, Err: "runc state: " + err.Error(), Status: -1}
	}
	out := &state{ID: st.ID, Pid: st.InitProcessPid, Status: status.String()}
	for _, l := range c.Config().Labels {
		if b, ok := strings.CutPrefix(l, "bundle="); ok {
			out.Bundle = b
		}
	}
	return reply{Seq: req.Seq, State: out}
}

// delete is `runc delete [--force]`: a stopped container is deleted, a
// created or (with force) running one is killed first.
func (s *server) delete(req request) reply {
	c, bad := s.load(req)
	if bad != nil {
		if bad.NotExist {
			_ = os.RemoveAll(filepath.Join(s.root, req.ID))
			if req.Force {
				return reply{Seq: req.Seq}
			}
		}
		return *bad
	}
	status, err := c.Status()
	if err != nil {
		return reply{Seq: req.Seq, Err: "runc delete: " + err.Error(), Status: -1}
	}
	switch {
	case status == libcontainer.Stopped:
		err = c.Destroy()
	case req.Force || status == libcontainer.Created:
		err = killAndDestroy(c)
	default:
		err = fmt.Errorf("cannot delete container %s that is not stopped: %s", req.ID, status)
	}
	if err != nil {
		return reply{Seq: req.Seq, Err: "runc delete: " + err.Error(), Status: -1}
	}
	return reply{Seq: req.Seq}
}

func killAndDestroy(c *libcontainer.Container) error {
	_ = c.Signal(unix.SIGKILL)
	for range 100 {
		if err := c.Signal(unix.Signal(0)); err != nil {
			return c.Destroy()
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("container init still running")
}

// wait answers once this process no longer runs container req.ID: its run
// has reaped the init and deleted the container (or there is none).
func (s *server) wait(req request) reply {
	s.mu.Lock()
	r := s.running[req.ID]
	s.mu.Unlock()
	if r != nil {
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			return reply{Seq: req.Seq, Err: fmt.Sprintf("custody-runc: container %s still running after 30 s", req.ID), Status: -1}
		}
	}
	return reply{Seq: req.Seq}
}

// stop kills every container still running and waits for their runs to
// reap and delete them.
func (s *server) stop() {
	s.mu.Lock()
	s.stopping = true
	for _, r := range s.running {
		_ = r.c.Signal(unix.SIGKILL)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		fmt.Fprintln(os.Stderr, "custody-runc: containers still running 60 s after the runner left")
	}
}

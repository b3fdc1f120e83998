package backendtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
)

// The Fake's resource kinds, as its Intents list them.
const (
	FakeKindSandbox = "fake sandbox"
	FakeKindOutput  = "fake output"
)

// ErrFakeState is wrapped by every refusal of an operation that a fake
// sandbox's state does not allow (a second Run, a Run after Cleanup, a
// second Take).
var ErrFakeState = errors.New("operation not allowed in the fake sandbox's state")

// FakeOptions configure a Fake.
type FakeOptions struct {
	// Dir holds each launch's output directory (Dir/<id>/out); required.
	Dir string
	// Program, when set, is run for each launch instead of its Args as a
	// host process: a unit test scripts the workload in Go. Its error is
	// a Run failure (the exit unobserved); its code is the exit code.
	Program func(ctx context.Context, r FakeRun) (code int, err error)
	// Capabilities, when set, replace the Fake's own, which say honestly
	// that it confines nothing (so admission refuses every launch on it).
	// A unit test that needs admission to pass sets them. Never run Suite
	// with claims the Fake does not enforce: its refusal workloads (a
	// write to /, a fork bomb) would then run on the host unconfined.
	Capabilities *backend.Capabilities
	// Runtime, when set, is what CheckRuntime returns: a unit test makes
	// the "pinned runtime" change under a pool.
	Runtime func() error
}

// FakeRun is one launch as a Program sees it.
type FakeRun struct {
	ID   string
	Args []string
	Env  []string
	// OutputDir is the launch's output directory on the host.
	OutputDir string
	// Inputs maps each input's target to its host source.
	Inputs         map[string]string
	Stdout, Stderr io.Writer
}

// Fake is an in-memory backend.Backend and backend.Pooler that passes
// Suite without root: its workload is its Args run as a plain host process
// in a process group of its own (or FakeOptions.Program), with exactly the
// declared environment, killed with its group on cancellation or at the
// wall time. It has no mount namespace, so it rewrites the Spec's output
// path and input targets in argv and env to their host directories (each
// occurrence that stands as a whole path or a path's leading components). It enforces no
// memory, pids, tmp or output bound, runs nothing in the image and denies
// no egress, and its Capabilities say so as Controls gaps; it claims no
// tier, no user namespace, no writable inputs, no restricted egress and
// no sealed images, and refuses a Spec that asks for the last three.
//
// Its native state is a registry keyed by launch id: each resource carries
// a nonce as its identity, so Recover and Foreign act as a real backend's
// do, on identity, never on a name alone.
type Fake struct {
	opts FakeOptions

	mu        sync.Mutex
	sandboxes map[string]*fakeSandbox // by launch id
}

var (
	_ backend.Backend = (*Fake)(nil)
	_ backend.Pooler  = (*Fake)(nil)
)

// NewFake makes a Fake over opts.Dir.
func NewFake(opts FakeOptions) (*Fake, error) {
	if !filepath.IsAbs(opts.Dir) {
		return nil, fmt.Errorf("fake backend: Dir %q must be an absolute directory", opts.Dir)
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("fake backend: %w", err)
	}
	return &Fake{opts: opts, sandboxes: map[string]*fakeSandbox{}}, nil
}

// Name is "fake".
func (f *Fake) Name() string { return "fake" }

// Identity names the fake: no runtime binary runs.
func (f *Fake) Identity() backend.Identity { return backend.Identity{Kind: "fake", Version: "1"} }

// fakeGaps are the controls the Fake does not enforce.
var fakeGaps = []struct{ control, what string }{
	{ControlMemory, "memory budget"}, {ControlPids, "pids budget"}, {ControlOutputBytes, "output bound"},
	{ControlTmpBytes, "tmp budget"}, {ControlRootfs, "image as the root filesystem"},
	{ControlRootfsRO, "read-only root filesystem"}, {ControlInputsRO, "read-only inputs"},
	{ControlDeniedEgress, "denied egress"}, {ControlFileSize, "file size budget"},
	{ControlIdentity, "user, hostname or working directory of the Spec"},
}

// Capabilities say what the Fake enforces: nothing of a sandbox's bounds.
func (f *Fake) Capabilities() backend.Capabilities {
	if f.opts.Capabilities != nil {
		c := *f.opts.Capabilities
		return c
	}
	var controls []backend.Gap
	for _, g := range fakeGaps {
		controls = append(controls, backend.Gap{Requirement: g.control, Code: "fake-unconfined",
			Detail: "the fake backend runs its workload as a plain host process: no " + g.what + " is enforced",
			Fix:    "run untrusted work on a real backend (oci, docker or vm)"})
	}
	tier := []backend.Gap{{Requirement: "tier", Code: "fake-unconfined",
		Detail: "the fake backend confines nothing", Fix: "run on a real backend"}}
	return backend.Capabilities{Controls: controls, Tiers: map[string][]backend.Gap{"production": tier, "development": tier}}
}

var fakeID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Intents lists the launch's sandbox and its output directory.
func (f *Fake) Intents(id string) ([]backend.Resource, error) {
	if !fakeID.MatchString(id) {
		return nil, fmt.Errorf("fake backend: launch id %q must match %s", id, fakeID)
	}
	return []backend.Resource{{Kind: FakeKindSandbox, Name: id}, {Kind: FakeKindOutput, Name: id}}, nil
}

func fakeCheck(s backend.HeldSpec) error {
	var bad []string
	for name, v := range map[string]int64{"OutputBytes": s.OutputBytes, "TmpBytes": s.TmpBytes,
		"Memory": s.Memory, "Pids": s.Pids, "FileSize": s.FileSize} {
		if v <= 0 {
			bad = append(bad, name+" must be positive")
		}
	}
	if s.CPU <= 0 {
		bad = append(bad, "CPU must be positive")
	}
	if !filepath.IsAbs(s.OutputPath) || filepath.Clean(s.OutputPath) == "/" {
		bad = append(bad, fmt.Sprintf("OutputPath %q must be an absolute path below /", s.OutputPath))
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("fake backend: %s; every budget is required (admission sets them)", strings.Join(bad, "; "))
	}
	return nil
}

// Prepare makes the launch's output directory and registers its sandbox.
func (f *Fake) Prepare(ctx context.Context, id string, s backend.Spec, rec backend.Recorder) (backend.Sandbox, error) {
	caps := f.Capabilities()
	if err := fakeCheck(heldSpec(s)); err != nil {
		return nil, err
	}
	if len(s.Args) == 0 {
		return nil, errors.New("fake backend: Args is empty")
	}
	if s.Egress != nil && !caps.RestrictedEgress {
		return nil, errors.New("fake backend: restricted egress is not served (Capabilities.RestrictedEgress is false); fix: ask for network: deny and no credentials")
	}
	for _, in := range s.Inputs {
		if in.Writable && !caps.WritableInputs {
			return nil, fmt.Errorf("fake backend: input %s is writable, which the fake does not serve (Capabilities.WritableInputs is false)", in.Target)
		}
	}
	sb, err := f.make(id, heldSpec(s), rec)
	if err != nil {
		return sb, err
	}
	sb.attach(backend.Attachment{Args: s.Args, Env: s.Env, Cwd: s.Cwd, StopSignal: s.StopSignal, Inputs: s.Inputs})
	sb.state = fakePrepared
	return sb, nil
}

// make creates and records a sandbox's resources; on error the returned
// sandbox, if not nil, needs Cleanup.
func (f *Fake) make(id string, s backend.HeldSpec, rec backend.Recorder) (*fakeSandbox, error) {
	if _, err := f.Intents(id); err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, errors.New("fake backend: a recorder is required")
	}
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	sb := &fakeSandbox{f: f, id: id, spec: s, rec: rec, nonce: hex.EncodeToString(nonce), out: filepath.Join(f.opts.Dir, id, "out")}
	f.mu.Lock()
	if _, ok := f.sandboxes[id]; ok {
		f.mu.Unlock()
		return nil, fmt.Errorf("fake backend: launch %s already has a sandbox: a launch id is used once", id)
	}
	f.sandboxes[id] = sb
	f.mu.Unlock()
	if err := rec.Created(backend.Resource{Kind: FakeKindSandbox, Name: id, Identity: map[string]string{"nonce": sb.nonce}}); err != nil {
		return sb, fmt.Errorf("fake backend: record the sandbox: %w", err)
	}
	if err := os.Mkdir(filepath.Join(f.opts.Dir, id), 0o700); err != nil {
		return sb, fmt.Errorf("fake backend: %w", err)
	}
	sb.made = true
	if err := os.Mkdir(sb.out, 0o755); err != nil {
		return sb, fmt.Errorf("fake backend: %w", err)
	}
	if err := rec.Created(sb.outputResource()); err != nil {
		return sb, fmt.Errorf("fake backend: record the output: %w", err)
	}
	return sb, nil
}

// VerifyAbsent verifies that neither the launch's sandbox nor its output
// directory exists.
func (f *Fake) VerifyAbsent(id string, recorded []backend.Resource) backend.CleanupReport {
	rep := backend.CleanupReport{Verified: true}
	f.mu.Lock()
	_, live := f.sandboxes[id]
	f.mu.Unlock()
	step(&rep, FakeKindSandbox+" "+id, func() error {
		if live {
			return fmt.Errorf("the sandbox of %s exists", id)
		}
		return nil
	}())
	step(&rep, FakeKindOutput+" "+id, f.dirGone(id))
	return rep
}

func (f *Fake) dirGone(id string) error {
	if _, err := f.Intents(id); err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(f.opts.Dir, id)); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("the launch directory of %s exists (%v)", id, err)
	}
	return nil
}

func step(rep *backend.CleanupReport, name string, err error) {
	st := backend.CleanupStep{Name: name, OK: err == nil, Detail: "verified gone"}
	if err != nil {
		rep.Verified = false
		st.Detail = strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	rep.Steps = append(rep.Steps, st)
}

// Recover removes the launch's sandbox where a recorded identity matches
// the live one; a recorded identity that does not is a look-alike: left
// alone and reported.
func (f *Fake) Recover(ctx context.Context, id string, recorded []backend.Resource, rec backend.Recorder) backend.CleanupReport {
	f.mu.Lock()
	sb := f.sandboxes[id]
	f.mu.Unlock()
	if sb == nil {
		return f.VerifyAbsent(id, recorded)
	}
	for _, r := range recorded {
		if r.Name != id || (r.Kind != FakeKindSandbox && r.Kind != FakeKindOutput) || r.Identity == nil {
			continue
		}
		if r.Identity["nonce"] != sb.nonce {
			rep := backend.CleanupReport{}
			step(&rep, r.Kind+" "+id, fmt.Errorf("the live sandbox's identity is not the recorded one: a look-alike, left alone"))
			return rep
		}
	}
	sb.rec = rec
	return sb.Cleanup(ctx)
}

// Foreign lists the sandboxes known does not hold.
func (f *Fake) Foreign(known func(kind, name string) bool) []backend.Resource {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []backend.Resource
	for _, id := range slices.Sorted(maps.Keys(f.sandboxes)) {
		sb := f.sandboxes[id]
		for _, r := range []backend.Resource{{Kind: FakeKindSandbox, Name: id, Identity: map[string]string{"nonce": sb.nonce}}, sb.outputResource()} {
			if !known(r.Kind, r.Name) {
				out = append(out, r)
			}
		}
	}
	return out
}

// PrepareHeld makes a sandbox held until Take.
func (f *Fake) PrepareHeld(ctx context.Context, id string, s backend.HeldSpec, rec backend.Recorder) (backend.Held, error) {
	if err := fakeCheck(s); err != nil {
		return nil, err
	}
	sb, err := f.make(id, s, rec)
	if sb == nil {
		return nil, err
	}
	sb.state = fakeHeld
	sb.heldAt = time.Now()
	return (*fakeHolding)(sb), err
}

// CheckRuntime is FakeOptions.Runtime's answer, nil without one.
func (f *Fake) CheckRuntime(ctx context.Context) error {
	if f.opts.Runtime != nil {
		return f.opts.Runtime()
	}
	return nil
}

type fakeState uint8

const (
	fakePreparing fakeState = iota
	fakeHeld
	fakePrepared
	fakeRunning
	fakeExited
	fakeCleaned
)

var fakeStateNames = [...]string{"preparing", "held", "prepared", "running", "exited", "cleaned"}

func (s fakeState) String() string { return fakeStateNames[s] }

type fakeSandbox struct {
	f      *Fake
	id     string
	spec   backend.HeldSpec
	att    backend.Attachment
	rec    backend.Recorder
	nonce  string
	out    string
	heldAt time.Time

	mu    sync.Mutex
	state fakeState
	made  bool // the launch directory exists
	pgid  int
}

func (sb *fakeSandbox) outputResource() backend.Resource {
	return backend.Resource{Kind: FakeKindOutput, Name: sb.id, Identity: map[string]string{"nonce": sb.nonce, "path": sb.out}}
}

func (sb *fakeSandbox) attach(a backend.Attachment) { sb.att = a }

// to moves the sandbox from one of from to next, or refuses.
func (sb *fakeSandbox) to(op string, next fakeState, from ...fakeState) error {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if !slices.Contains(from, sb.state) {
		return fmt.Errorf("fake sandbox %s: cannot %s a sandbox that is %s: %w", sb.id, op, sb.state, ErrFakeState)
	}
	sb.state = next
	return nil
}

// rewrite maps the sandbox's paths to the host's in one argument: each
// whole path component sequence that is the output path or an input's
// target, or begins with one followed by "/".
func (sb *fakeSandbox) rewrite(s string) string {
	pairs := [][2]string{{sb.spec.OutputPath, sb.out}}
	for _, in := range sb.att.Inputs {
		pairs = append(pairs, [2]string{in.Target, in.Source})
	}
	// Longer paths first, so /in/a is not taken for /in.
	slices.SortFunc(pairs, func(a, b [2]string) int { return len(b[0]) - len(a[0]) })
	var out strings.Builder
	for i := 0; i < len(s); {
		matched := false
		if i == 0 || !pathByte(s[i-1]) {
			for _, p := range pairs {
				j := i + len(p[0])
				if p[0] != "" && strings.HasPrefix(s[i:], p[0]) && (j == len(s) || s[j] == '/' || !pathByte(s[j])) {
					out.WriteString(p[1])
					i, matched = j, true
					break
				}
			}
		}
		if !matched {
			out.WriteByte(s[i])
			i++
		}
	}
	return out.String()
}

// pathByte is a byte that continues a path.
func pathByte(c byte) bool {
	return c == '/' || c == '.' || c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// Run runs the workload until its process group is gone, killing the
// group at the wall time or when ctx ends.
func (sb *fakeSandbox) Run(ctx context.Context, wall time.Duration, out backend.IO) (*backend.Exit, error) {
	if wall <= 0 {
		return nil, errors.New("fake backend: a wall time is required")
	}
	if err := sb.to("run", fakeRunning, fakePrepared); err != nil {
		return nil, err
	}
	defer func() { _ = sb.to("exit", fakeExited, fakeRunning) }()
	run := FakeRun{ID: sb.id, OutputDir: sb.out, Inputs: map[string]string{}, Stdout: out.Stdout, Stderr: out.Stderr}
	for _, a := range sb.att.Args {
		run.Args = append(run.Args, sb.rewrite(a))
	}
	run.Env = []string{}
	for _, kv := range sb.att.Env {
		run.Env = append(run.Env, sb.rewrite(kv))
	}
	for _, in := range sb.att.Inputs {
		run.Inputs[in.Target] = in.Source
	}
	ex := &backend.Exit{Started: time.Now(), Usage: backend.Usage{PeakMemoryBytes: -1, CPUTimeNanos: -1, OOMKills: -1, MemoryLimitBytes: -1, PidsLimit: -1}}
	// No seccomp filter is applied: a receipt says so ("disabled").
	ex.Observation = &backend.Observation{At: ex.Started, Seccomp: "disabled", Notes: []string{"fake backend: an unconfined host process"}}
	rctx, cancel := context.WithTimeout(ctx, wall)
	defer cancel()
	var err error
	if sb.f.opts.Program != nil {
		ex.Code, err = sb.f.opts.Program(rctx, run)
	} else {
		err = sb.exec(rctx, run, ex)
	}
	ex.Finished = time.Now()
	switch {
	case ctx.Err() != nil:
		ex.Cancelled = true
	case rctx.Err() != nil:
		ex.TimedOut = true
	}
	if err != nil {
		ex.CodeUnobserved = true
		return ex, fmt.Errorf("fake backend: run %s: %w", sb.id, err)
	}
	return ex, nil
}

func (sb *fakeSandbox) exec(ctx context.Context, run FakeRun, ex *backend.Exit) error {
	cmd := exec.Command(run.Args[0], run.Args[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = run.Env, run.Stdout, run.Stderr
	cmd.Dir = sb.rewrite(sb.att.Cwd)
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	sb.mu.Lock()
	sb.pgid = cmd.Process.Pid
	sb.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-done:
	case <-ctx.Done():
		sb.killGroup()
		werr = <-done
	}
	// The whole group, not only its leader, is the workload.
	for !sb.groupGone() {
		select {
		case <-ctx.Done():
			sb.killGroup()
		case <-time.After(20 * time.Millisecond):
		}
	}
	st := cmd.ProcessState
	if st == nil {
		return werr
	}
	ex.Usage.CPUTimeNanos = (st.UserTime() + st.SystemTime()).Nanoseconds()
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		ex.Code, ex.Signal = 128+int(ws.Signal()), unix.SignalName(ws.Signal())
	} else {
		ex.Code = st.ExitCode()
	}
	return nil
}

func (sb *fakeSandbox) killGroup() {
	sb.mu.Lock()
	pgid := sb.pgid
	sb.mu.Unlock()
	if pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// groupGone says no live (non-zombie) process is left in the group.
func (sb *fakeSandbox) groupGone() bool {
	sb.mu.Lock()
	pgid := sb.pgid
	sb.mu.Unlock()
	if pgid <= 0 {
		return true
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return syscall.Kill(-pgid, 0) != nil
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces.
		rest := string(data)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			return false
		}
	}
	return true
}

func (sb *fakeSandbox) Output() backend.Output { return fakeOutput{sb.out} }

// Evidence is the digest of what ran: argv and environment.
func (sb *fakeSandbox) Evidence() map[string]string {
	data, _ := json.Marshal(struct{ Args, Env []string }{sb.att.Args, sb.att.Env})
	sum := sha256.Sum256(data)
	return map[string]string{"fake-workload": hex.EncodeToString(sum[:])}
}

// Cleanup kills what is left of the group, removes the launch directory
// and the registry entry, and verifies each gone.
func (sb *fakeSandbox) Cleanup(ctx context.Context) backend.CleanupReport {
	sb.mu.Lock()
	sb.state = fakeCleaned
	sb.mu.Unlock()
	rep := backend.CleanupReport{Verified: true}
	sb.killGroup()
	gone := false
	for range 250 {
		if gone = sb.groupGone(); gone {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !gone {
		step(&rep, "fake processes", errors.New("the workload's process group outlived SIGKILL"))
		return rep
	}
	if sb.made {
		err := os.RemoveAll(filepath.Join(sb.f.opts.Dir, sb.id))
		if err == nil {
			err = sb.f.dirGone(sb.id)
		}
		step(&rep, FakeKindOutput+" "+sb.id, err)
		if err != nil {
			return rep
		}
		sb.made = false
		if err := sb.rec.Removed(sb.outputResource()); err != nil {
			step(&rep, "record the output removed", err)
			return rep
		}
	}
	sb.f.mu.Lock()
	mine := sb.f.sandboxes[sb.id] == sb
	if mine {
		delete(sb.f.sandboxes, sb.id)
	}
	sb.f.mu.Unlock()
	if mine {
		step(&rep, FakeKindSandbox+" "+sb.id, sb.rec.Removed(backend.Resource{Kind: FakeKindSandbox, Name: sb.id}))
	} else {
		step(&rep, FakeKindSandbox+" "+sb.id, nil)
	}
	return rep
}

type fakeOutput struct{ dir string }

func (o fakeOutput) Dir() string { return o.dir }

func (o fakeOutput) Used() (int64, error) {
	var n int64
	err := filepath.Walk(o.dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
		return err
	})
	return n, err
}

// fakeHolding is a fake sandbox held for the pool.
type fakeHolding fakeSandbox

func (h *fakeHolding) sb() *fakeSandbox      { return (*fakeSandbox)(h) }
func (h *fakeHolding) ID() string            { return h.id }
func (h *fakeHolding) PreparedAt() time.Time { return h.heldAt }

func (h *fakeHolding) Alive() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != fakeHeld {
		return fmt.Errorf("fake sandbox %s is %s, not held: %w", h.id, h.state, ErrFakeState)
	}
	return nil
}

func (h *fakeHolding) Take(ctx context.Context, a backend.Attachment) (backend.Sandbox, error) {
	for _, in := range a.Inputs {
		if in.Writable {
			return nil, fmt.Errorf("fake backend: a writable input %s is never pooled", in.Target)
		}
	}
	if err := h.sb().to("take", fakePrepared, fakeHeld); err != nil {
		return nil, err
	}
	h.sb().attach(a)
	return h.sb(), nil
}

func (h *fakeHolding) Destroy(ctx context.Context) backend.CleanupReport { return h.sb().Cleanup(ctx) }

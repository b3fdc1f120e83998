package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/internal/procfs"
	"github.com/custody-dev/custody/policy/policytest"
)

// Daemon is a real custodyd (the built binary) on a private directory, with
// clients of both its sockets and the busybox test image imported.
type Daemon struct {
	Dir           string
	ControlSocket string
	SubmitSocket  string
	Control       *api.Client
	Submit        *api.Client
	// Image is the digest of the imported test image.
	Image string
	// LogPath is custodyd's log (stderr) file.
	LogPath string
	// ReadyTimeout bounds the wait for a (re)started custodyd to answer:
	// its recovery and retention run first. 20 s if unset.
	ReadyTimeout time.Duration

	cmd  *exec.Cmd
	done chan error
	logs *os.File
	// bin and args start custodyd again (Restart); cfg is its
	// configuration as written to cfgPath.
	bin, cfgPath string
	args         []string
	cfg          config.Config
	// runTmpfs is the tmpfs mounted on the runtime dir, if any.
	runTmpfs string

	// logStart is where the log stood once the daemon was set up: the
	// placeholder policy's expected refusal at start is not news.
	logStart int64

	mu          sync.Mutex
	lastReceipt *api.Receipt
	lastResult  *api.Result
}

// LastReceipt is the signed receipt of the latest successful run and that
// run's result.
func (d *Daemon) LastReceipt() (*api.Receipt, *api.Result) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastReceipt, d.lastResult
}

// IssuerPublicKey is the PEM of custodyd's grant issuer key.
func (d *Daemon) IssuerPublicKey() ([]byte, error) {
	return os.ReadFile(filepath.Join(d.cfg.Runner.StateDir, "keys", "issuer.pub"))
}

// DaemonOptions say which binaries and image to use.
type DaemonOptions struct {
	Custodyd string
	// Runtime is the pinned runtime custodyd launches with (custody-runc);
	// the raw baselines run runc's own CLI (RawRunc).
	Runtime string
	Rootfs  string
	// Dir must exist, be private to root and traversable (0711): it holds
	// the state dir and the per-launch bundles.
	Dir      string
	LogLevel string
	// CPUProfile, if set, is where custodyd writes its CPU profile.
	CPUProfile string
	// Configure, if set, edits custodyd's configuration before it is
	// written (another state dir, retention, more backends).
	Configure func(*config.Config)
}

// policyYAML is the bench's operator policy: the example policy's
// ceilings, defaults and actors, with the test image allowed.
const policyYAML = `apiVersion: custody.dev/v1alpha1
kind: Policy
images:
  - digest: %q
    name: busybox test image
` + policyLimits + `tiers:
  development: true
actors:
  - name: bench
    stages: [build, test]
    submitters: {uids: [0]}
inputRoots: [%q]
authorizations:
  - name: ` + LoopAuthorization + `
    actor: bench
    stages: [test]
    images: [%[1]q]
    inputRoots: [%[2]q]
    limits: {grantsPerMinute: 100000, concurrentRuns: 8, runsPerDay: 1000000}
    notBefore: 2020-01-01T00:00:00Z
    notAfter: 2999-01-01T00:00:00Z
`

// LoopAuthorization is the standing authorization of the bench policy
// that the agent-loop row mints its phases under (submit socket).
const LoopAuthorization = "bench-loop"

// policyLimits are the example policy's phase ceilings and defaults, which
// every bench policy carries.
const policyLimits = policytest.Limits

// TrivialPhase is the phase every launch measurement runs: /bin/true in the
// test image, with the budgets RawConfig mirrors.
const TrivialPhase = `apiVersion: custody.dev/v1alpha1
kind: Phase
name: bench-true
stage: build
tier: development
image: %q
command: ["/bin/true"]
output:
  path: /out
resources:
  memory: 64Mi
  pids: 64
  wallTime: 30s
`

// Budgets of TrivialPhase as admission plans them under policyYAML (its
// defaults fill in cpu, tmp and output); the raw bundle uses the same.
const (
	TrivialMemory      = 64 << 20
	TrivialPids        = 64
	TrivialCPU         = 1.0
	TrivialTmpBytes    = 16 << 20
	TrivialOutputBytes = 32 << 20
)

// RuncIdentity returns the version and sha256 of a runc binary, as
// custodyd's configuration pins them.
func RuncIdentity(path string) (version, sha string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", "", err
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return "", "", fmt.Errorf("%s --version: %w", path, err)
	}
	first := strings.Fields(strings.SplitN(string(out), "\n", 2)[0])
	if len(first) == 0 {
		return "", "", fmt.Errorf("%s --version printed nothing", path)
	}
	return first[len(first)-1], hex.EncodeToString(h.Sum(nil)), nil
}

// StartDaemon starts custodyd, imports the test image and installs the
// bench policy.
func StartDaemon(ctx context.Context, o DaemonOptions) (*Daemon, error) {
	version, sha, err := RuncIdentity(o.Runtime)
	if err != nil {
		return nil, err
	}
	if o.LogLevel == "" {
		o.LogLevel = "warn"
	}
	d := &Daemon{
		Dir:           o.Dir,
		ControlSocket: filepath.Join(o.Dir, "control.sock"),
		SubmitSocket:  filepath.Join(o.Dir, "submit.sock"),
		LogPath:       filepath.Join(o.Dir, "custodyd.log"),
		done:          make(chan error, 1),
	}
	policy := filepath.Join(o.Dir, "policy.yaml")
	cfg := filepath.Join(o.Dir, "custodyd.yaml")
	c := config.Config{
		Runner: config.Runner{StateDir: o.Dir + "/state", RuntimeDir: o.Dir + "/run",
			Runtime: config.Runtime{Path: o.Runtime, Version: version, SHA256: sha}},
		Policy: policy, ControlSocket: d.ControlSocket, SubmitSocket: d.SubmitSocket, Operators: []uint32{0},
	}
	if o.Configure != nil {
		o.Configure(&c)
	}
	d.cfg, d.cfgPath = c, cfg
	data, err := c.Marshal()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(cfg, data, 0o600); err != nil {
		return nil, err
	}
	// Until the image digest is known the policy is unusable: custodyd
	// starts refusing everything.
	if err := os.WriteFile(policy, []byte("not yet written\n"), 0o600); err != nil {
		return nil, err
	}
	if d.logs, err = os.Create(d.LogPath); err != nil {
		return nil, err
	}
	// The installed custodyd.yaml keeps launch bundles under /run, a
	// tmpfs: so does the bench, or every launch would pay for a directory
	// made and removed on the state disk that no installation pays for.
	run := filepath.Join(o.Dir, "run")
	if err := os.MkdirAll(run, 0o711); err != nil {
		d.logs.Close()
		return nil, err
	}
	if err := unix.Mount("tmpfs", run, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0711"); err != nil {
		d.logs.Close()
		return nil, fmt.Errorf("mount a tmpfs on the runtime dir %s: %w", run, err)
	}
	d.runTmpfs = run
	args := []string{"--config", cfg, "--log-level", o.LogLevel}
	if o.CPUProfile != "" {
		args = append(args, "--cpuprofile", o.CPUProfile)
	}
	d.bin, d.args = o.Custodyd, args
	d.Control = api.NewClient(d.ControlSocket)
	d.Submit = api.NewClient(d.SubmitSocket)
	if err := d.spawn(ctx); err != nil {
		d.logs.Close()
		d.unmountRun()
		return nil, err
	}
	fail := func(err error) (*Daemon, error) {
		d.Stop()
		return nil, fmt.Errorf("%w\ncustodyd log (%s):\n%s", err, d.LogPath, d.LogTail(20))
	}
	if err := d.waitReady(ctx); err != nil {
		return fail(err)
	}
	img, err := d.Control.ImportImage(ctx, o.Rootfs)
	if err != nil {
		return fail(fmt.Errorf("image import: %w", err))
	}
	if d.Image, err = imageDigest(img); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(policy, fmt.Appendf(nil, policyYAML, d.Image, filepath.Join(o.Dir, "work")), 0o600); err != nil {
		return fail(err)
	}
	st, err := d.Control.ReloadPolicy(ctx)
	if err != nil {
		return fail(fmt.Errorf("policy reload: %w", err))
	}
	if st.Error != "" {
		return fail(fmt.Errorf("policy reload: %s", st.Error))
	}
	if fi, err := os.Stat(d.LogPath); err == nil {
		d.logStart = fi.Size()
	}
	return d, nil
}

// imageDigest reads the digest out of an import answer: a JSON string, or
// an object with a digest field.
func imageDigest(raw []byte) (string, error) {
	var obj struct {
		Digest string `json:"digest"`
	}
	var str string
	switch {
	case json.Unmarshal(raw, &obj) == nil && strings.HasPrefix(obj.Digest, "sha256:"):
		return obj.Digest, nil
	case json.Unmarshal(raw, &str) == nil && strings.HasPrefix(str, "sha256:"):
		return str, nil
	}
	return "", fmt.Errorf("image import answered %s: no digest", raw)
}

// PhaseYAML is TrivialPhase for this daemon's image.
func (d *Daemon) PhaseYAML() []byte { return fmt.Appendf(nil, TrivialPhase, d.Image) }

// Issue mints a fresh single-use grant for the trivial phase over the
// control socket.
func (d *Daemon) Issue(ctx context.Context) ([]byte, error) {
	return d.Control.IssueGrant(ctx, api.IssueRequest{
		Phase: api.PhaseSource{YAML: d.PhaseYAML(), BaseDir: d.Dir},
		Actor: "bench", TTL: "1h",
	})
}

// Timing is one launch as the client saw it, with the daemon's own
// timestamps of the container's start and exit from the result.
type Timing struct {
	// Total is from sending the grant to receiving the result.
	Total time.Duration
	// Admit is from sending the grant to the "started" event: verify,
	// re-derive every bound value, consume.
	Admit time.Duration
	// Create is from "started" to the container's start (result.started):
	// runtime verification, mounts, config, runc run up to the gate's
	// go-ahead.
	Create time.Duration
	// Run is the container's life (result.started to result.finished).
	Run time.Duration
	// After is from the container's exit to the result: output custody,
	// verified cleanup, the signed receipt, the run record.
	After time.Duration
}

// Run submits a grant and waits for the result; the result must be ok with
// a verified cleanup.
func (d *Daemon) Run(ctx context.Context, grant []byte) (Timing, *api.Result, error) {
	var t Timing
	var started time.Time
	t0 := time.Now()
	res, rcpt, err := d.Submit.RunWithReceipt(ctx, grant, io.Discard, io.Discard, func(string) { started = time.Now() })
	t2 := time.Now()
	if rcpt != nil && res != nil {
		d.mu.Lock()
		d.lastReceipt, d.lastResult = rcpt, res
		d.mu.Unlock()
	}
	t.Total = t2.Sub(t0)
	if err != nil {
		return t, res, err
	}
	if res == nil {
		return t, nil, errors.New("no result")
	}
	if res.Status != api.StatusOK || res.Cleanup == nil || !res.Cleanup.Verified {
		return t, res, fmt.Errorf("run %s: status %s, exit %d, cleanup verified %v, error %q",
			res.RunID, res.Status, res.ExitCode, res.Cleanup != nil && res.Cleanup.Verified, res.Error)
	}
	if !started.IsZero() {
		t.Admit = started.Sub(t0)
		if !res.Started.IsZero() && !res.Finished.IsZero() {
			t.Create = res.Started.Sub(started)
			t.Run = res.Finished.Sub(res.Started)
			t.After = t2.Sub(res.Finished)
		}
	}
	return t, res, nil
}

// Pid is custodyd's process id (0 once stopped).
func (d *Daemon) Pid() int {
	if d.cmd == nil || d.cmd.Process == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// CPU is the CPU time custodyd has used so far: its own (self), and that
// of every process under it (children): the runtime process it keeps
// running, which is never reaped while custodyd runs, the containers that
// process reaped, and anything custodyd reaped itself.
func (d *Daemon) CPU() (self, children time.Duration, err error) {
	st, err := procfs.ReadStat(d.Pid())
	if err != nil {
		return 0, 0, err
	}
	const userHZ = 100 // USER_HZ, fixed for /proc on Linux
	self = time.Duration(st.UTime+st.STime) * (time.Second / userHZ)
	return self, TreeCPU(d.Pid()) - self, nil
}

// unmountRun unmounts the runtime dir's tmpfs, once custodyd is gone.
func (d *Daemon) unmountRun() {
	if d.runTmpfs != "" {
		_ = unix.Unmount(d.runTmpfs, unix.MNT_DETACH)
		d.runTmpfs = ""
	}
}

// LogTail returns the last n lines of custodyd's log.
func (d *Daemon) LogTail(n int) string {
	b, _ := os.ReadFile(d.LogPath)
	if int64(len(b)) >= d.logStart {
		b = b[d.logStart:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Stop stops custodyd (SIGTERM, then SIGKILL after 30 s) and checks that it
// left no mount behind in its directory.
func (d *Daemon) Stop() error {
	if d.cmd == nil || d.cmd.Process == nil {
		return nil
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-d.done:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		err = fmt.Errorf("custodyd did not stop within 30 s: %v", <-d.done)
	}
	d.cmd = nil
	d.logs.Close()
	// The check first: a detach of the runtime dir's tmpfs would take the
	// mounts custodyd left with it, out of the table the check reads.
	defer d.unmountRun()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = fmt.Errorf("custodyd exited with %v", err)
	}
	if m, merr := MountedUnder(d.Dir); merr == nil {
		m = slices.DeleteFunc(m, func(p string) bool { return p == d.runTmpfs }) // the bench's own
		if len(m) > 0 {
			err = errors.Join(err, fmt.Errorf("custodyd left mounts: %v", m))
		}
	}
	return err
}

// Steps reads, from custodyd's log since setup, the stage timings each
// launch logged at debug level ("launch steps"), by run id. A custodyd at
// a higher level logs none.
func (d *Daemon) Steps() (map[string]map[string]time.Duration, error) {
	b, err := os.ReadFile(d.LogPath)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) >= d.logStart {
		b = b[d.logStart:]
	}
	return ParseSteps(string(b)), nil
}

// ParseSteps reads the "launch steps" lines of a custodyd text log: run=ID
// then one name=duration per stage.
func ParseSteps(log string) map[string]map[string]time.Duration {
	out := map[string]map[string]time.Duration{}
	for _, line := range strings.Split(log, "\n") {
		_, rest, ok := strings.Cut(line, `msg="launch steps" `)
		if !ok {
			continue
		}
		var id string
		steps := map[string]time.Duration{}
		for _, f := range strings.Fields(rest) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				continue
			}
			if k == "run" {
				id = v
				continue
			}
			if d, err := time.ParseDuration(v); err == nil {
				steps[k] = d
			}
		}
		if id != "" {
			out[id] = steps
		}
	}
	return out
}

// Package daemontest starts the real custodyd binary for tests: on
// temporary directories, with the pinned runc, operator uid 0, a policy
// written from a template and the busybox test image. Tests of package
// daemon run its server in process instead; everything
// else that needs a daemon starts the built binary through this package.
package daemontest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/backend/vm/vmpin"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/internal/testenv"
)

// Options choose the binary and its logging.
type Options struct {
	// Fault runs the fault-injection build ($CUSTODYD_FAULT_BIN) instead
	// of $CUSTODYD_BIN; Start's environment then chooses the fault.
	Fault bool
	// LogLevel is custodyd's --log-level; "warn" if empty.
	LogLevel string
	// Config is YAML appended to the generated custodyd.yaml, e.g. a
	// backends list and its sections.
	Config string
	// LogFormat is custodyd's --log-format; its default if empty.
	LogFormat string
	// Args are more custodyd flags.
	Args []string
}

// Daemon is one custodyd configuration on a temporary directory, and the
// process running it, if any. Its layout under Dir: custodyd.yaml,
// policy.yaml, control.sock, submit.sock, state/ and run/.
type Daemon struct {
	Dir                         string
	Config, Policy              string // paths of the config and policy files
	ControlSocket, SubmitSocket string
	Control, Submit             *api.Client
	// Image is the busybox image's digest once ImportBusybox has run.
	Image string
	// Logs are the running (or last) process's stdout and stderr.
	Logs testenv.Buffer

	t         testing.TB
	bin       string
	logLevel  string
	logFormat string
	args      []string
	cmd       *exec.Cmd
}

// New writes the configuration of a daemon on a fresh temporary directory
// (readable by nobody else's tests: 0711) with a policy that does not load
// yet, and stops the daemon when the test ends. It skips or fails the test
// as testenv does when root, runc or the binary is missing.
func New(t testing.TB, opts Options) *Daemon {
	t.Helper()
	testenv.Root(t)
	path, version, sha := testenv.Runc(t)
	bin := os.Getenv("CUSTODYD_BIN")
	if opts.Fault {
		if bin = os.Getenv("CUSTODYD_FAULT_BIN"); bin == "" {
			testenv.Missing(t, "the fault-injection custodyd ($CUSTODYD_FAULT_BIN, built by make test)")
		}
	} else if bin == "" {
		testenv.Missing(t, "the custodyd binary ($CUSTODYD_BIN, set by make test)")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	d := &Daemon{Dir: dir, Config: filepath.Join(dir, "custodyd.yaml"), Policy: filepath.Join(dir, "policy.yaml"),
		ControlSocket: filepath.Join(dir, "control.sock"), SubmitSocket: filepath.Join(dir, "submit.sock"),
		t: t, bin: bin, logLevel: opts.LogLevel, logFormat: opts.LogFormat, args: opts.Args}
	if d.logLevel == "" {
		d.logLevel = "warn"
	}
	d.Control, d.Submit = api.NewClient(d.ControlSocket), api.NewClient(d.SubmitSocket)
	cfg := config.Config{
		Runner: config.Runner{StateDir: filepath.Join(dir, "state"), RuntimeDir: filepath.Join(dir, "run"),
			Runtime: config.Runtime{Path: path, Version: version, SHA256: sha}},
		Policy: d.Policy, ControlSocket: d.ControlSocket, SubmitSocket: d.SubmitSocket, Operators: []uint32{0},
	}
	data, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	Write(t, d.Config, string(data)+opts.Config)
	Write(t, d.Policy, "not yet: written once the image is imported\n")
	t.Cleanup(func() {
		d.Stop()
		if t.Failed() {
			t.Logf("custodyd log:\n%s", d.Logs.String())
		}
	})
	return d
}

// Start runs the binary on the configuration, with env added to this
// process's environment, and waits until its control socket answers.
func (d *Daemon) Start(env ...string) {
	d.t.Helper()
	d.Logs.Reset()
	args := []string{"--config", d.Config, "--log-level", d.logLevel}
	if d.logFormat != "" {
		args = append(args, "--log-format", d.logFormat)
	}
	args = append(args, d.args...)
	d.cmd = exec.Command(d.bin, args...)
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = &d.Logs, &d.Logs
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := d.Control.WaitReady(ctx); err != nil {
		d.t.Fatalf("custodyd did not come up: %v\n%s", err, d.Logs.String())
	}
}

// Stop sends SIGTERM to a running daemon and waits for it, failing the
// test if the race detector reported anything. It does nothing if the
// process is not running.
func (d *Daemon) Stop() {
	if d.cmd != nil && d.cmd.ProcessState == nil {
		d.cmd.Process.Signal(syscall.SIGTERM)
		testenv.NoRace(d.t, "custodyd", d.cmd.Wait(), d.Logs.String())
	}
}

// Command is the daemon's binary on its configuration with more flags, for
// the runs that serve nothing: a key rotation, an adoption, a flag or a
// state it must refuse. The daemon must be stopped for most of them.
func (d *Daemon) Command(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, d.bin, append([]string{"--config", d.Config}, args...)...)
}

// FaultCommand is Command on the fault-injection build ($CUSTODYD_FAULT_BIN),
// which dies at the named stage (CUSTODY_FAULT).
func (d *Daemon) FaultCommand(ctx context.Context, fault string, args ...string) *exec.Cmd {
	d.t.Helper()
	bin := os.Getenv("CUSTODYD_FAULT_BIN")
	if bin == "" {
		testenv.Missing(d.t, "the fault-injection custodyd ($CUSTODYD_FAULT_BIN, built by make build)")
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--config", d.Config}, args...)...)
	cmd.Env = append(os.Environ(), "CUSTODY_FAULT="+fault)
	return cmd
}

// AppendConfig adds YAML to the configuration, for a section that names
// a path under Dir; Options.Config is the way for any other.
func (d *Daemon) AppendConfig(yaml string) {
	d.t.Helper()
	cfg, err := os.ReadFile(d.Config)
	if err != nil {
		d.t.Fatal(err)
	}
	Write(d.t, d.Config, string(cfg)+yaml)
}

// Pid is the running (or last) process's id.
func (d *Daemon) Pid() int {
	d.t.Helper()
	if d.cmd == nil || d.cmd.Process == nil {
		d.t.Fatal("daemontest: custodyd was not started")
	}
	return d.cmd.Process.Pid
}

// Kill sends SIGKILL to the running daemon (by its pid) and waits for it:
// a runner that dies without cleaning up.
func (d *Daemon) Kill() {
	if d.cmd != nil && d.cmd.ProcessState == nil {
		d.cmd.Process.Kill()
		d.cmd.Wait()
	}
}

// Exited waits up to timeout for the process to exit by itself (a fault
// killing it) and returns how it ended, or nil if it is still running.
func (d *Daemon) Exited(timeout time.Duration) *os.ProcessState {
	done := make(chan struct{})
	go func() { d.cmd.Wait(); close(done) }()
	select {
	case <-done:
		return d.cmd.ProcessState
	case <-time.After(timeout):
		return nil
	}
}

// ImportBusybox imports the busybox test image through the control socket
// and records its digest in Image.
func (d *Daemon) ImportBusybox(ctx context.Context) string {
	d.t.Helper()
	raw, err := d.Control.ImportImage(ctx, testenv.BusyboxRootfs(d.t))
	if err != nil {
		d.t.Fatalf("image import: %v", err)
	}
	var img struct{ Digest string }
	if err := json.Unmarshal(raw, &img); err != nil || img.Digest == "" {
		d.t.Fatalf("image import answered %s (%v)", raw, err)
	}
	d.Image = img.Digest
	return d.Image
}

// WritePolicy writes the policy from tmpl, replacing @IMAGE@ with Image
// and @INPUTROOT@ with Dir (the placeholders of examples/policy.yaml). A
// running daemon reads it on a reload, a starting one at once.
func (d *Daemon) WritePolicy(tmpl string) {
	d.t.Helper()
	Write(d.t, d.Policy, strings.NewReplacer("@IMAGE@", d.Image, "@INPUTROOT@", d.Dir).Replace(tmpl))
}

// Start starts a daemon ready to run work: New and Start, then the
// busybox image imported and the policy from tmpl loaded.
func Start(t testing.TB, opts Options, tmpl string) *Daemon {
	t.Helper()
	d := New(t, opts)
	d.Start()
	ctx := context.Background()
	d.ImportBusybox(ctx)
	d.WritePolicy(tmpl)
	if _, err := d.Control.ReloadPolicy(ctx); err != nil {
		t.Fatalf("policy reload: %v", err)
	}
	return d
}

// Write writes data to path, creating its parent directories.
func Write(t testing.TB, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// VMConfig is custodyd configuration YAML that adds the vm backend on the
// artifacts of testenv.VM, each pinned as it is now, with accel (auto, kvm, tcg).
func VMConfig(t testing.TB, accel string) string {
	t.Helper()
	a := testenv.VM(t)
	sum := func(p string) string {
		s, err := vmpin.FileSHA256(p)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	mods, err := vmpin.ModulesDigest(a.Modules)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`backends: [oci, vm]
vm:
  qemu: {path: %s, sha256: %s}
  kernel: {path: %s, sha256: %s}
  modules: {path: %s, sha256: %s}
  init: {path: %s, sha256: %s}
  stage: {path: %s, sha256: %s}
  accel: %s
`, a.QEMU, sum(a.QEMU), a.Kernel, sum(a.Kernel), a.Modules, mods, a.Init, sum(a.Init), a.Stage, sum(a.Stage), accel)
}

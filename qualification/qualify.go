package qualification

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/internal/randid"
	"github.com/custody-dev/custody/internal/regfile"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/matrix"
	"github.com/custody-dev/custody/platform"
)

// AmbientVar is set in the private custodyd's environment; the suite checks
// that no phase sees it.
const AmbientVar = "CUSTODY_QUALIFY_AMBIENT"

// ErrPrecondition classes what stops a qualification before anything
// starts: a tier that is not one, not being root, a binary that cannot go
// into the conformance image.
var ErrPrecondition = errors.New("cannot qualify")

// BinaryError is a binary Options names that cannot be used, by the name of
// its option ("custodyd", "runtime", "probe", "busybox").
type BinaryError struct {
	Option, Path string
	// Missing says there is no file at Path; otherwise Err says what is
	// wrong with it.
	Missing bool
	Err     error
}

func (e *BinaryError) Error() string   { return e.Option + " " + e.Path + ": " + e.Err.Error() }
func (e *BinaryError) Unwrap() []error { return []error{ErrPrecondition, e.Err} }

// Options say what to qualify and with which binaries.
type Options struct {
	// Tier is conformance.TierProduction or conformance.TierDevelopment.
	Tier string
	// Backend is the backend to qualify: "" or "oci" (runc), or "vm"
	// (the microVM backend, configured by VM). The row is for it alone.
	Backend string
	// VM is the vm section of custodyd's config (YAML: qemu, kernel,
	// modules, init, accel, each artifact by path and sha256), required
	// for Backend "vm"; the private daemon is given it with backends
	// [oci, vm].
	VM []byte
	// Custodyd is run privately; Runtime is the pinned runc it is given.
	Custodyd, Runtime string
	// Probe (custody-probe) and Busybox are static binaries copied into the
	// conformance image.
	Probe, Busybox string
	// Keep leaves the private daemon's temporary directory (debugging).
	Keep bool
	// Parallel is how many checks run at once.
	Parallel int
	// Only, when set, runs only checks named FAMILY or FAMILY/NAME; such a
	// row cannot pass.
	Only []string
	// Pooled runs the suite on pooled launches: the private daemon keeps
	// a warm pool for conformance.PooledBudgets, and every run must take
	// a pooled sandbox. Without Only it runs conformance.PooledChecks:
	// every check but the restricted-egress ones, which are never pooled.
	Pooled bool
	// Logf reports progress, a line at a time; nil discards it.
	Logf func(format string, args ...any)
}

// Result is a finished qualification: the suite's report, the row the
// private daemon signed, and that row verified under the daemon's runner
// key.
type Result struct {
	Report    conformance.Report
	Row       *matrix.Row
	Verified  *matrix.Verified
	RunnerKey *keys.Verifier
}

// Qualify runs the conformance suite on this host through a private
// custodyd on fresh temporary state, has the daemon sign the row with its
// runner identity key, and stops the daemon and removes its state. A
// qualification that ran but FAILED is a Result, not an error: the row
// says so. Errors of class ErrPrecondition mean nothing was started.
func Qualify(ctx context.Context, o Options) (*Result, error) {
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if o.Tier != conformance.TierProduction && o.Tier != conformance.TierDevelopment {
		return nil, &classed{class: ErrPrecondition, err: fmt.Errorf("tier %q: want production or development", o.Tier)}
	}
	switch o.Backend {
	case "", string(backend.KindOCI):
		o.Backend = string(backend.KindOCI)
	case string(backend.KindVM):
		if len(o.VM) == 0 {
			return nil, &classed{class: ErrPrecondition, err: errors.New("backend vm: no vm configuration; pass the vm section of custodyd's config (qemu, kernel, modules, init by path and sha256)")}
		}
	default:
		return nil, &classed{class: ErrPrecondition, err: fmt.Errorf("backend %q: want oci or vm", o.Backend)}
	}
	if os.Geteuid() != 0 {
		return nil, &classed{class: ErrPrecondition, err: errors.New("qualify must run as root: it starts custodyd, which mounts, makes cgroups and runs runc")}
	}
	for _, b := range []struct{ option, path string }{{"custodyd", o.Custodyd}, {"runtime", o.Runtime}} {
		if fi, err := os.Stat(b.path); err != nil || fi.IsDir() {
			return nil, &BinaryError{Option: b.option, Path: b.path, Missing: true, Err: errors.New("not found")}
		}
	}
	for _, b := range []struct{ option, path string }{{"probe", o.Probe}, {"busybox", o.Busybox}} {
		if err := requireStatic(b.path); err != nil {
			return nil, &BinaryError{Option: b.option, Path: b.path, Err: err}
		}
	}
	start := time.Now()
	d, err := startPrivateDaemon(ctx, o, logf)
	if d != nil {
		defer d.stop(logf)
	}
	if err != nil {
		return nil, err
	}
	image, err := d.importImage(ctx, o)
	if err != nil {
		return nil, err
	}
	logf("private custodyd up, conformance image %s imported (%s)", image, time.Since(start).Round(time.Millisecond))
	// The runner runs the suite and judges it: what comes back is its
	// signed row and the report it built the row from.
	req := MeasureRequest{Tier: o.Tier, Backend: o.Backend, Image: image, Scratch: d.scratch, AmbientVar: AmbientVar,
		Parallel: o.Parallel, Only: o.Only, Pooled: o.Pooled, Egress: d.egressTarget()}
	if o.Pooled {
		logf("the runner waits for its warm pool: the checks run pooled")
	}
	var m Measurement
	if err := d.control.Measure(ctx, req, &m); err != nil {
		return nil, fmt.Errorf("the runner's qualification: %w\n%s", err, d.logTail())
	}
	rep, row := m.Report, &m.Row
	for _, c := range rep.Checks {
		state := "pass"
		if !c.Passed {
			state = "FAIL"
		}
		logf("%-4s %s/%s (%d ms)", state, c.Family, c.Name, c.Millis)
	}
	logf("suite: %d checks, %d failed, in %s", len(rep.Checks), len(rep.Failed()), rep.Finished.Sub(rep.Started).Round(time.Millisecond))

	for _, n := range rep.NotApplicable {
		logf("n/a  %s/%s: %s", n.Family, n.Name, n.Reason)
	}
	if f := rep.Failed(); len(f) > 0 && len(f) == len(rep.Checks) && !rep.Launched() {
		// Typically a tier the backend does not support on this host: say
		// so loudly, with the runner's own words.
		logf("NOTHING RAN: every check was refused before launch; the %s backend does not qualify for %s here: %s",
			o.Backend, o.Tier, f[0].Detail)
	}
	ver, err := row.Verify(ctx, []*keys.Verifier{d.runnerKey})
	if err != nil {
		return nil, fmt.Errorf("the daemon's row does not verify under its own runner key: %w", err)
	}
	return &Result{Report: rep, Row: row, Verified: ver, RunnerKey: d.runnerKey}, nil
}

// suiteBackend is what the suite's phases name: nothing for oci, so that
// an oci qualification asks for exactly what it asked before backends.
func suiteBackend(name string) string {
	if name == string(backend.KindOCI) {
		return ""
	}
	return name
}

// SignRequestOf is what a suite's report asks a runner to sign: each
// check's verdict, its detail made row-safe, and the runs it launched.
func SignRequestOf(rep conformance.Report) matrix.SignRequest {
	req := matrix.SignRequest{Tier: rep.Tier, SuiteVersion: rep.SuiteVersion, Backend: suiteBackend(rep.Backend)}
	for _, n := range rep.NotApplicable {
		req.NotApplicable = append(req.NotApplicable, matrix.NotApplicable{Family: n.Family, Name: n.Name, Reason: matrix.SanitizeDetail(n.Reason)})
	}
	for _, c := range rep.Checks {
		req.Checks = append(req.Checks, matrix.RequestCheck{
			Family: c.Family, Name: c.Name, Case: string(c.Case), Passed: c.Passed,
			Detail: matrix.SanitizeDetail(c.Detail), Runs: append([]string{}, c.Runs...),
		})
	}
	return req
}

// maxImageBinary bounds a binary qualify copies into the conformance image
// (busybox and custody-probe are a few MB each).
const maxImageBinary = 256 << 20

// requireStatic refuses a binary that needs a dynamic loader: the
// conformance image has no libc.
func requireStatic(path string) error {
	r, err := regfile.Open(path, maxImageBinary)
	if err != nil {
		return err
	}
	defer r.Close()
	f, err := elf.NewFile(r)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; the conformance image needs a static binary", path)
		}
	}
	return nil
}

// privateDaemon is a custodyd on temporary directories, for one qualify.
type privateDaemon struct {
	dir, scratch    string
	cmd             *exec.Cmd
	done            chan error
	log             *os.File
	control, submit *api.Client
	controlSocket   string
	runnerKey       *keys.Verifier
	keep            bool
	// egress is the upstream world of the restricted-egress checks; nil
	// when it could not be made (the row then covers denied egress only).
	egress *egressWorld
}

func startPrivateDaemon(ctx context.Context, o Options, logf func(string, ...any)) (*privateDaemon, error) {
	rt, err := platform.ProbeRuntime(ctx, o.Runtime)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "custody-qualify-")
	if err != nil {
		return nil, err
	}
	d := &privateDaemon{dir: dir, scratch: filepath.Join(dir, "scratch"), keep: o.Keep}
	// The runtime dir must be traversable by the container's remapped root.
	if err := os.Chmod(dir, 0o711); err != nil {
		return d, err
	}
	for _, sub := range []string{"sock", "scratch", "image"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			return d, err
		}
	}
	d.controlSocket = filepath.Join(dir, "sock", "control.sock")
	submitSocket := filepath.Join(dir, "sock", "submit.sock")
	cfg := config.Config{
		Runner: config.Runner{StateDir: filepath.Join(dir, "state"), RuntimeDir: filepath.Join(dir, "run"),
			Runtime: config.Runtime{Path: rt.Path, Version: rt.Version, SHA256: rt.SHA256}},
		Policy: filepath.Join(dir, "policy.yaml"), ControlSocket: d.controlSocket, SubmitSocket: submitSocket,
		Operators: []uint32{uint32(os.Geteuid())},
	}
	if o.Backend == string(backend.KindVM) {
		vm, err := vmSectionConfig(o.VM)
		if err != nil {
			return d, &classed{class: ErrPrecondition, err: err}
		}
		cfg.Backends, cfg.VM = []string{string(backend.KindOCI), string(backend.KindVM)}, vm
	}
	if o.Backend != string(backend.KindOCI) {
		// No NIC reaches a guest: a vm row covers denied egress only.
	} else if w, err := startEgressWorld(dir); err != nil {
		logf("restricted egress not qualified: its upstream namespace could not be made: %v", err)
		if w != nil {
			if err := w.stop(); err != nil {
				logf("remove the upstream namespace: %v", err)
			}
		}
	} else {
		d.egress = w
		cfg.Egress = w.config()
	}
	data, err := cfg.Marshal()
	if err != nil {
		return d, err
	}
	if err := os.WriteFile(filepath.Join(dir, "custodyd.yaml"), data, 0o600); err != nil {
		return d, err
	}
	// No image is known yet: the daemon starts refusing everything.
	if err := os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte("# written once the image is imported\n"), 0o600); err != nil {
		return d, err
	}
	if d.log, err = os.OpenFile(filepath.Join(dir, "custodyd.log"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
		return d, err
	}
	d.cmd = exec.Command(o.Custodyd, "--config", filepath.Join(dir, "custodyd.yaml"), "--log-level", "info")
	d.cmd.Env = append(os.Environ(), AmbientVar+"=ambient-"+randid.New(8))
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		return d, fmt.Errorf("start %s: %w", o.Custodyd, err)
	}
	d.done = make(chan error, 1)
	go func() { d.done <- d.cmd.Wait() }()
	logf("started private custodyd %s (pid %d) in %s", o.Custodyd, d.cmd.Process.Pid, dir)
	d.control, d.submit = api.NewClient(d.controlSocket), api.NewClient(submitSocket)
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- d.control.WaitReady(rctx) }()
	select {
	case err := <-ready:
		if err != nil {
			return d, fmt.Errorf("private custodyd did not come up: %w\n%s", err, d.logTail())
		}
	case err := <-d.done:
		d.done <- err
		return d, fmt.Errorf("private custodyd exited before it was ready (%v)\n%s", err, d.logTail())
	}
	st, err := d.control.Status(ctx)
	if err != nil {
		return d, err
	}
	if d.runnerKey, err = keys.ParsePublic([]byte(st.RunnerPublicKey)); err != nil {
		return d, fmt.Errorf("runner key: %w", err)
	}
	return d, nil
}

func (d *privateDaemon) logTail() string {
	b, _ := os.ReadFile(filepath.Join(d.dir, "custodyd.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return "custodyd log:\n" + string(b)
}

// importImage builds the conformance image, imports it and writes the
// qualification policy.
func (d *privateDaemon) importImage(ctx context.Context, o Options) (string, error) {
	root := filepath.Join(d.dir, "image", "rootfs")
	for _, sub := range []string{"bin", "etc", "root", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, sub), 0o755); err != nil {
			return "", err
		}
	}
	if err := copyFile(o.Busybox, filepath.Join(root, "bin", "busybox"), 0o755); err != nil {
		return "", err
	}
	if err := copyFile(o.Probe, filepath.Join(root, "bin", "custody-probe"), 0o755); err != nil {
		return "", err
	}
	list, err := exec.CommandContext(ctx, filepath.Join(root, "bin", "busybox"), "--list").Output()
	if err != nil {
		return "", fmt.Errorf("busybox --list: %w", err)
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" || applet == "custody-probe" || strings.Contains(applet, "/") {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil && !errors.Is(err, os.ErrExist) {
			return "", err
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
		"etc/group":  "root:x:0:\nnogroup:x:65534:\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	raw, err := d.control.ImportImage(ctx, root)
	if err != nil {
		return "", fmt.Errorf("import the conformance image: %w", err)
	}
	var img struct{ Digest string }
	if err := json.Unmarshal(raw, &img); err != nil || img.Digest == "" {
		return "", fmt.Errorf("import the conformance image: no digest in %s", raw)
	}
	pol := fmt.Sprintf(`# Generated by custody qualify for one qualification run.
apiVersion: custody.dev/v1alpha1
kind: Policy
images:
  - digest: %q
    name: custody conformance image
ceilings: {memory: 512Mi, pids: 512, cpu: 2, wallTime: 5m, outputBytes: 64Mi, tmpBytes: 64Mi, inputBytes: 64Mi}
defaults: {cpu: 1, outputBytes: 16Mi, tmpBytes: 16Mi}
tiers:
  development: %t
actors:
  - name: qualify
    stages: [acquire, generate, build, test, run]
    submitters: {uids: [0]}
inputRoots: [%q]
`, img.Digest, o.Tier == conformance.TierDevelopment, d.scratch)
	if d.egress != nil {
		pol += d.egress.policy()
	}
	if o.Pooled {
		pol += poolPolicy(img.Digest, o.Tier)
	}
	if err := os.WriteFile(filepath.Join(d.dir, "policy.yaml"), []byte(pol), 0o600); err != nil {
		return "", err
	}
	st, err := d.control.ReloadPolicy(ctx)
	if err != nil {
		return "", err
	}
	if st.Error != "" {
		return "", fmt.Errorf("the qualification policy does not load: %s", st.Error)
	}
	return img.Digest, nil
}

// stop stops the daemon and removes its temporary directory, unless
// something is still mounted under it.
func (d *privateDaemon) stop(logf func(string, ...any)) {
	if d.cmd != nil && d.cmd.Process != nil {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(45 * time.Second):
			logf("private custodyd did not stop after SIGTERM; killing it")
			_ = d.cmd.Process.Kill()
			<-d.done
		}
	}
	if d.log != nil {
		d.log.Close()
	}
	if d.egress != nil {
		if err := d.egress.stop(); err != nil {
			logf("remove the egress upstream namespace: %v", err)
		}
	}
	if d.keep {
		logf("kept %s (--keep)", d.dir)
		return
	}
	if left := mountsUnder(d.dir); len(left) > 0 {
		logf("NOT removing %s: still mounted there: %s", d.dir, strings.Join(left, ", "))
		return
	}
	if err := os.RemoveAll(d.dir); err != nil {
		logf("remove %s: %v", d.dir, err)
	}
}

// mountsUnder lists mount points at or below dir.
func mountsUnder(dir string) []string {
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return []string{"(cannot read mountinfo: " + err.Error() + ")"}
	}
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Mountpoint)
	}
	return out
}

func copyFile(src, dst string, perm os.FileMode) error {
	in, err := regfile.Open(src, maxImageBinary)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// egressTarget is the suite's restricted-egress target, nil without one.
func (d *privateDaemon) egressTarget() *conformance.EgressTarget {
	if d.egress == nil {
		return nil
	}
	return d.egress.target()
}

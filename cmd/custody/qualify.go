package main

import (
	"bytes"
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
	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/internal/quote"
	"github.com/custody-dev/custody/internal/randid"
	"github.com/custody-dev/custody/internal/regfile"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/matrix"
	"github.com/custody-dev/custody/platform"
)

// ambientVar is set in the private custodyd's environment; the suite checks
// that no phase sees it.
const ambientVar = "CUSTODY_QUALIFY_AMBIENT"

type qualifyOptions struct {
	asJSON                   bool
	tier                     string
	custodyd, runtime, probe string
	busybox, out, matrixDir  string
	keep                     bool
	parallel                 int
	timeout                  time.Duration
	only                     []string
	trustRunner              []string
}

func (a *app) qualifyCmd() *cobra.Command {
	var o qualifyOptions
	cmd := &cobra.Command{
		Use:   "qualify --tier production|development [--json] [--out ROW.json] [--matrix DIR]",
		Short: "Run the conformance suite on this host through a private custodyd and print the signed qualification row",
		Long: `qualify starts a private custodyd (the binary given, or custodyd next to this one) on a fresh temporary
state directory, runtime directory and sockets, with a generated qualification policy; builds and imports the
conformance image (static busybox and its applets, plus custody-probe); runs the conformance suite through the
daemon's control and submit sockets; asks the daemon to sign the qualification row with its runner identity key;
prints the row; stops the daemon and removes its state.

The row is a DSSE envelope over an in-toto Statement v1 with the in-toto test-result predicate, whose subject is the
platform description (kernel, arch, distro, cgroup mode and controllers, host facts, runtime version and sha256).
With --json, stdout is exactly the row; otherwise a table of checks and then the row. The row also carries the
runner public key, so a gate can be given it (custody gate --trust-runner).

Exit status: 0 when every check passed, 1 when the qualification FAILED (the row says so), 3 when qualify could
not run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.qualify(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.asJSON, "json", false, "stdout is exactly the signed row (the table goes to stderr)")
	f.StringVar(&o.tier, "tier", "", "tier to qualify: production or development")
	f.StringVar(&o.custodyd, "custodyd", "", "custodyd binary to run privately (default: custodyd next to this binary)")
	f.StringVar(&o.runtime, "runtime", "", "pinned runc binary (default: runc next to this binary)")
	f.StringVar(&o.probe, "probe", "", "static custody-probe binary (default: custody-probe next to this binary)")
	f.StringVar(&o.busybox, "busybox", "/bin/busybox", "static busybox for the conformance image")
	f.StringVar(&o.out, "out", "", "also write the row to this file")
	f.StringVar(&o.matrixDir, "matrix", "", "also write the row into this matrix directory and re-render its index.html")
	f.StringArrayVar(&o.trustRunner, "trust-runner", nil, "runner public keys to check the other rows with when rendering --matrix (repeatable)")
	f.BoolVar(&o.keep, "keep", false, "keep the private daemon's temporary directory (for debugging)")
	f.IntVar(&o.parallel, "parallel", 1, "checks to run at once")
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	f.StringArrayVar(&o.only, "only", nil, "run only checks named FAMILY or FAMILY/NAME (debugging; such a row cannot pass)")
	_ = cmd.MarkFlagRequired("tier")
	return cmd
}

// besideSelf is name in the directory of this executable.
func besideSelf(name string) string {
	exe, err := os.Executable()
	if err != nil {
		return name
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	return filepath.Join(filepath.Dir(exe), name)
}

func (a *app) qualify(ctx context.Context, o qualifyOptions) error {
	if o.tier != conformance.TierProduction && o.tier != conformance.TierDevelopment {
		return &exitError{exitRefused, fmt.Errorf("--tier %q: want production or development", o.tier)}
	}
	if os.Geteuid() != 0 {
		return &exitError{exitRefused, errors.New("qualify must run as root: it starts custodyd, which mounts, makes cgroups and runs runc")}
	}
	if o.custodyd == "" {
		o.custodyd = besideSelf("custodyd")
	}
	if o.runtime == "" {
		o.runtime = besideSelf("runc")
	}
	if o.probe == "" {
		o.probe = besideSelf("custody-probe")
	}
	for _, b := range []struct{ what, path string }{{"custodyd", o.custodyd}, {"runtime", o.runtime}} {
		if fi, err := os.Stat(b.path); err != nil || fi.IsDir() {
			return &exitError{exitRefused, fmt.Errorf("%s %s: not found; pass --%s PATH", b.what, b.path, b.what)}
		}
	}
	for _, b := range []struct{ flag, path string }{{"probe", o.probe}, {"busybox", o.busybox}} {
		if err := requireStatic(b.path); err != nil {
			return &exitError{exitRefused, fmt.Errorf("--%s: %w", b.flag, err)}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(a.stderr, "custody qualify: "+format+"\n", args...)
	}

	d, err := startPrivateDaemon(ctx, o, logf)
	if d != nil {
		defer d.stop(logf)
	}
	if err != nil {
		return &exitError{exitInternal, err}
	}
	image, err := d.importImage(ctx, o)
	if err != nil {
		return &exitError{exitInternal, err}
	}
	logf("private custodyd up, conformance image %s imported (%s)", image, time.Since(start).Round(time.Millisecond))

	env := conformance.Env{
		Control: d.control, Submit: d.submit, Image: image, Scratch: d.scratch, Tier: o.tier,
		AmbientVar: ambientVar, Parallel: o.parallel,
		Progress: func(c conformance.Check) {
			state := "pass"
			if !c.Passed {
				state = "FAIL"
			}
			logf("%-4s %s/%s (%d ms)", state, c.Family, c.Name, c.Millis)
		},
	}
	if len(o.only) > 0 {
		env.Only = func(family, name string) bool {
			for _, s := range o.only {
				if s == family || s == family+"/"+name {
					return true
				}
			}
			return false
		}
	}
	rep := conformance.Run(ctx, env)
	logf("suite: %d checks, %d failed, in %s", len(rep.Checks), len(rep.Failed()), rep.Finished.Sub(rep.Started).Round(time.Millisecond))

	row, err := d.sign(ctx, rep)
	if err != nil {
		return &exitError{exitInternal, fmt.Errorf("sign the qualification row: %w", err)}
	}
	rowJSON, err := json.MarshalIndent(row, "", "  ")
	if err != nil {
		return err
	}
	rowJSON = append(rowJSON, '\n')
	ver, err := row.Verify(ctx, []*keys.Verifier{d.runnerKey})
	if err != nil {
		return &exitError{exitInternal, fmt.Errorf("the daemon's row does not verify under its own runner key: %w", err)}
	}

	table := a.stdout
	if o.asJSON {
		table = a.stderr
	}
	printReport(table, &rep, ver)
	if o.asJSON {
		if _, err := a.stdout.Write(rowJSON); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.stdout, "\nsigned row (runner %s):\n", ver.SignerID)
		if _, err := a.stdout.Write(rowJSON); err != nil {
			return err
		}
	}
	if o.out != "" {
		if err := writeFileAtomic(o.out, rowJSON, 0o644); err != nil {
			return &exitError{exitInternal, err}
		}
		logf("row written to %s", quote.String(o.out))
	}
	if o.matrixDir != "" {
		if err := addToMatrix(ctx, o, rowJSON, ver, d.runnerKey); err != nil {
			return &exitError{exitInternal, err}
		}
	}
	logf("qualification %s for platform sha256:%s at tier %s in %s", ver.Result, ver.PlatformDigest(), ver.Tier,
		time.Since(start).Round(time.Millisecond))
	if !ver.AllPassed() {
		return &exitError{exitFailed, fmt.Errorf("qualification FAILED: %s", matrix.Abbreviate(ver.Failed, 5))}
	}
	return nil
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

func printReport(w io.Writer, rep *conformance.Report, ver *matrix.Verified) {
	fmt.Fprintf(w, "custody qualification: tier %s, platform %s/%s kernel %s, cgroup %s, runtime %s sha256:%s\n",
		quote.String(ver.Tier), quote.String(ver.Platform.OS), quote.String(ver.Platform.Arch), quote.String(ver.Platform.Kernel),
		quote.String(ver.Platform.Cgroup.Mode), quote.String(ver.Platform.Runtime.Version), quote.String(ver.Platform.Runtime.SHA256))
	for _, c := range rep.Checks {
		state, detail := "pass", c.Detail
		if !c.Passed {
			state = "FAIL"
		} else if len(detail) > 160 {
			detail = detail[:157] + "..."
		}
		// Quoted after the cut, which may split a character.
		fmt.Fprintf(w, "%-4s %-12s %-36s %-10s %s\n", state, c.Family, c.Name, c.Case, quote.Message(detail))
	}
	if len(ver.Missing) > 0 {
		fmt.Fprintf(w, "missing: %s\n", strings.Join(ver.Missing, ", "))
	}
	fmt.Fprintf(w, "result: %s (%d passed, %d failed)\n", ver.Result, len(ver.Passed), len(ver.Failed))
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
}

func startPrivateDaemon(ctx context.Context, o qualifyOptions, logf func(string, ...any)) (*privateDaemon, error) {
	rt, err := platform.ProbeRuntime(ctx, o.runtime)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "custody-qualify-")
	if err != nil {
		return nil, err
	}
	d := &privateDaemon{dir: dir, scratch: filepath.Join(dir, "scratch"), keep: o.keep}
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
	cfg := fmt.Sprintf(`runner:
  stateDir: %q
  runtimeDir: %q
  runtime: {path: %q, version: %q, sha256: %q}
policy: %q
controlSocket: %q
submitSocket: %q
operators: [%d]
`, filepath.Join(dir, "state"), filepath.Join(dir, "run"), rt.Path, rt.Version, rt.SHA256,
		filepath.Join(dir, "policy.yaml"), d.controlSocket, submitSocket, os.Geteuid())
	if err := os.WriteFile(filepath.Join(dir, "custodyd.yaml"), []byte(cfg), 0o600); err != nil {
		return d, err
	}
	// No image is known yet: the daemon starts refusing everything.
	if err := os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte("# written once the image is imported\n"), 0o600); err != nil {
		return d, err
	}
	if d.log, err = os.OpenFile(filepath.Join(dir, "custodyd.log"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
		return d, err
	}
	d.cmd = exec.Command(o.custodyd, "--config", filepath.Join(dir, "custodyd.yaml"), "--log-level", "info")
	d.cmd.Env = append(os.Environ(), ambientVar+"=ambient-"+randid.New(8))
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		return d, fmt.Errorf("start %s: %w", o.custodyd, err)
	}
	d.done = make(chan error, 1)
	go func() { d.done <- d.cmd.Wait() }()
	logf("started private custodyd %s (pid %d) in %s", o.custodyd, d.cmd.Process.Pid, dir)
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
func (d *privateDaemon) importImage(ctx context.Context, o qualifyOptions) (string, error) {
	root := filepath.Join(d.dir, "image", "rootfs")
	for _, sub := range []string{"bin", "etc", "root", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, sub), 0o755); err != nil {
			return "", err
		}
	}
	if err := copyFile(o.busybox, filepath.Join(root, "bin", "busybox"), 0o755); err != nil {
		return "", err
	}
	if err := copyFile(o.probe, filepath.Join(root, "bin", "custody-probe"), 0o755); err != nil {
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
`, img.Digest, o.tier == conformance.TierDevelopment, d.scratch)
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

// sign asks the private daemon to sign the suite's row.
func (d *privateDaemon) sign(ctx context.Context, rep conformance.Report) (*matrix.Row, error) {
	req := matrix.SignRequest{Tier: rep.Tier, SuiteVersion: rep.SuiteVersion}
	for _, c := range rep.Checks {
		req.Checks = append(req.Checks, matrix.RequestCheck{
			Family: c.Family, Name: c.Name, Case: string(c.Case), Passed: c.Passed,
			Detail: matrix.SanitizeDetail(c.Detail), Runs: append([]string{}, c.Runs...),
		})
	}
	var row matrix.Row
	if err := api.NewClient(d.controlSocket).SignQualification(ctx, req, &row); err != nil {
		return nil, err
	}
	return &row, nil
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

func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// addToMatrix writes the row into a matrix directory, named by platform
// and tier (a newer row for the same platform and tier replaces the older
// one), and re-renders the directory's index.html.
func addToMatrix(ctx context.Context, o qualifyOptions, rowJSON []byte, ver *matrix.Verified, own *keys.Verifier) error {
	name := fmt.Sprintf("%s-%s.json", ver.PlatformDigest()[:16], ver.Tier)
	if err := writeFileAtomic(filepath.Join(o.matrixDir, name), rowJSON, 0o644); err != nil {
		return err
	}
	trusted, err := loadTrustedRunners(o.trustRunner)
	if err != nil {
		return err
	}
	trusted = append(trusted, own)
	return renderMatrix(ctx, o.matrixDir, filepath.Join(o.matrixDir, "index.html"), trusted, matrix.DefaultMaxAge)
}

func loadTrustedRunners(paths []string) ([]*keys.Verifier, error) {
	var out []*keys.Verifier
	for _, p := range paths {
		v, err := keys.LoadPublic(p)
		if err != nil {
			return nil, fmt.Errorf("--trust-runner %s: %w", p, err)
		}
		out = append(out, v)
	}
	return out, nil
}

func renderMatrix(ctx context.Context, dir, htmlPath string, trusted []*keys.Verifier, maxAge time.Duration) error {
	entries, err := matrix.LoadDir(ctx, dir, trusted)
	if err != nil {
		return err
	}
	disabled, err := matrix.LoadDisabled(dir)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := matrix.WriteHTML(&buf, entries, matrix.HTMLOptions{Disabled: disabled, MaxAge: maxAge}); err != nil {
		return err
	}
	return writeFileAtomic(htmlPath, buf.Bytes(), 0o644)
}

// ---- gate -------------------------------------------------------------------

type gateOptions struct {
	matrixDir, platform, tier, runtime, html string
	trustRunner                              []string
	maxAge                                   time.Duration
	asJSON, printPlatform                    bool
}

func (a *app) gateCmd() *cobra.Command {
	var o gateOptions
	cmd := &cobra.Command{
		Use:   "gate --matrix DIR --platform this|FILE [--tier production] --trust-runner PUB... | --matrix DIR --html FILE",
		Short: "Allow a release only on a platform with a current, passing, authentic qualification row",
		Long: `gate reads the qualification rows (*.json) in DIR and allows a release only if a row exists for exactly this
platform (kernel, arch, distro, cgroup mode and controllers, host facts, runtime version and sha256) and tier, its
signature verifies under a trusted runner key, every check passed, and it is current (--max-age). A runtime whose
digest changed is another platform; a backend, runtime or platform listed in DIR/disabled invalidates its rows.

--platform this probes this host (as root) with the runtime from --runtime; --platform FILE reads a platform
description (custody gate --platform this --print-platform writes one). --html FILE renders the matrix
(platform x check) as HTML; with no --platform that is all gate does.

Exit status: 0 allowed, 1 refused (the reason is printed), 3 when gate could not decide.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.gate(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.matrixDir, "matrix", "", "matrix directory of qualification rows (required, except with --print-platform)")
	f.StringVar(&o.platform, "platform", "", `"this" to probe this host, or a platform description file`)
	f.StringVar(&o.tier, "tier", matrix.TierProduction, "tier the release needs")
	f.StringArrayVar(&o.trustRunner, "trust-runner", nil, "trusted runner public key (PEM); repeatable")
	f.StringVar(&o.runtime, "runtime", "", "the pinned runtime binary, for --platform this (default: runc next to this binary)")
	f.DurationVar(&o.maxAge, "max-age", matrix.DefaultMaxAge, "how old a row may be")
	f.StringVar(&o.html, "html", "", "render the matrix as HTML into this file")
	f.BoolVar(&o.asJSON, "json", false, "print the decision as JSON")
	f.BoolVar(&o.printPlatform, "print-platform", false, "print the platform description and its digest, and decide nothing")
	return cmd
}

func (a *app) gate(ctx context.Context, o gateOptions) error {
	if o.matrixDir == "" && !o.printPlatform {
		return &exitError{exitRefused, errors.New("--matrix DIR is required")}
	}
	trusted, err := loadTrustedRunners(o.trustRunner)
	if err != nil {
		return &exitError{exitRefused, err}
	}
	if o.html != "" {
		if err := renderMatrix(ctx, o.matrixDir, o.html, trusted, o.maxAge); err != nil {
			return &exitError{exitInternal, fmt.Errorf("render %s: %w", o.html, err)}
		}
		fmt.Fprintf(a.stderr, "custody gate: wrote %s\n", quote.String(o.html))
		if o.platform == "" {
			return nil
		}
	}
	if o.platform == "" {
		return &exitError{exitRefused, errors.New("--platform this|FILE is required to gate (or --html to render only)")}
	}
	this, err := a.gatePlatform(ctx, o)
	if err != nil {
		return &exitError{exitInternal, err}
	}
	if o.printPlatform {
		return writeJSON(a.stdout, struct {
			Digest   string          `json:"digest"`
			Platform matrix.Platform `json:"platform"`
		}{this.Digest(), this})
	}
	if len(trusted) == 0 {
		return &exitError{exitRefused, errors.New("--trust-runner PUB is required: a gate trusts no row by default")}
	}
	if o.tier != matrix.TierProduction && o.tier != matrix.TierDevelopment {
		return &exitError{exitRefused, fmt.Errorf("--tier %q: want production or development", o.tier)}
	}
	entries, err := matrix.LoadDir(ctx, o.matrixDir, trusted)
	if err != nil {
		return &exitError{exitInternal, err}
	}
	disabled, err := matrix.LoadDisabled(o.matrixDir)
	if err != nil {
		return &exitError{exitInternal, err}
	}
	dec := matrix.Gate(entries, this, matrix.GateOptions{Tier: o.tier, MaxAge: o.maxAge, Disabled: disabled})
	if o.asJSON {
		if err := writeJSON(a.stdout, dec); err != nil {
			return err
		}
	} else {
		// Reasons and notes quote what they take from rows, which anyone
		// able to write into the matrix directory may have written.
		fmt.Fprintln(a.stdout, quote.Message(dec.Reason))
		for _, n := range dec.Notes {
			fmt.Fprintln(a.stdout, "  "+quote.Message(n))
		}
	}
	if !dec.Allowed {
		return &exitError{exitFailed, errors.New("gate refused")}
	}
	return nil
}

// gatePlatform describes the platform to gate: this host, or a file.
func (a *app) gatePlatform(ctx context.Context, o gateOptions) (matrix.Platform, error) {
	if o.platform != "this" {
		data, err := readFile("platform description", o.platform, maxPlatformSize)
		if err != nil {
			return matrix.Platform{}, err
		}
		// Accept a bare description or what --print-platform writes.
		var wrapped struct {
			Digest   string           `json:"digest"`
			Platform *matrix.Platform `json:"platform"`
		}
		var p matrix.Platform
		if json.Unmarshal(data, &wrapped) == nil && wrapped.Platform != nil {
			p = *wrapped.Platform
		} else {
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&p); err != nil {
				return matrix.Platform{}, fmt.Errorf("%s: %w", o.platform, err)
			}
		}
		return p, p.Validate()
	}
	rt := o.runtime
	if rt == "" {
		rt = besideSelf("runc")
	}
	prof, err := platform.Probe(ctx, platform.Options{RuntimePath: rt})
	if err != nil {
		return matrix.Platform{}, err
	}
	return matrix.PlatformOf(prof)
}

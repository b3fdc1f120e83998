package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/internal/quote"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/matrix"
	"github.com/custody-dev/custody/platform"
	"github.com/custody-dev/custody/qualification"
)

// maxVMConfigSize bounds --vm-config: a vm section is a few pinned paths.
const maxVMConfigSize = 64 << 10

type qualifyOptions struct {
	asJSON                   bool
	tier, backend, vmConfig  string
	custodyd, runtime, probe string
	busybox, out, matrixDir  string
	keep                     bool
	parallel                 int
	timeout                  time.Duration
	only                     []string
	pooled                   bool
	trust                    string
	trustRunner              []string
}

func (a *app) qualifyCmd() *cobra.Command {
	var o qualifyOptions
	cmd := &cobra.Command{
		Use:   "qualify --tier production|development [--json] [--out ROW.json] [--matrix DIR]",
		Short: "Run the conformance suite on this host through a private custodyd and print the signed qualification row",
		Long: `qualify starts a private custodyd (the binary given, or custodyd next to this one) on a fresh temporary
state directory, runtime directory and sockets, with a generated qualification policy; builds and imports the
conformance image (static busybox and its applets, plus custody-probe); asks the daemon to qualify itself; prints
the row; stops the daemon and removes its state. The daemon runs the conformance suite itself, through its own
sockets, judges every check from what it observed, and signs only that with its runner identity key: the row says
so (measured by the runner), and binds each check's runs by their receipts' digests. No verdict is handed to it.

The row is a DSSE envelope over an in-toto Statement v1 with the in-toto test-result predicate, whose subject is the
platform description (kernel, arch, distro, cgroup mode and controllers, host facts, runtime version and sha256).
With --json, stdout is exactly the row; otherwise a table of checks and then the row. The row also carries the
runner public key, for a trust file (custody gate --trust reads the trust file custody verify reads).

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
	f.StringVar(&o.backend, "backend", string(backend.KindOCI), "backend to qualify: oci (the pinned runc) or vm (the microVM backend; needs --vm-config)")
	f.StringVar(&o.vmConfig, "vm-config", "", "for --backend vm: a YAML file holding custodyd's vm section (vm: qemu, kernel, modules, init by path and sha256; accel)")
	f.StringVar(&o.custodyd, "custodyd", "", "custodyd binary to run privately (default: custodyd next to this binary)")
	f.StringVar(&o.runtime, "runtime", "", "pinned runc binary (default: custody-runc next to this binary)")
	f.StringVar(&o.probe, "probe", "", "static custody-probe binary (default: custody-probe next to this binary)")
	f.StringVar(&o.busybox, "busybox", "/bin/busybox", "static busybox for the conformance image")
	f.StringVar(&o.out, "out", "", "also write the row to this file")
	f.StringVar(&o.matrixDir, "matrix", "", "also write the row into this matrix directory and re-render its index.html")
	f.StringVar(&o.trust, "trust", "", "trust file (as for custody verify) to check the other rows with when rendering --matrix")
	f.StringArrayVar(&o.trustRunner, "trust-runner", nil, "no longer accepted: use --trust")
	_ = f.MarkHidden("trust-runner")
	f.BoolVar(&o.keep, "keep", false, "keep the private daemon's temporary directory (for debugging)")
	f.IntVar(&o.parallel, "parallel", 1, "checks to run at once")
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	f.StringArrayVar(&o.only, "only", nil, "run only checks named FAMILY or FAMILY/NAME (debugging; the row lists the others as not run, and cannot pass)")
	f.BoolVar(&o.pooled, "pooled", false, "run the suite on pooled launches: every check but the restricted-egress ones (never pooled); every run must be pooled")
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
		return usageError("--tier %q: want production or development", o.tier)
	}
	if len(o.trustRunner) > 0 {
		return errTrustRunner
	}
	var vmConfig []byte
	switch o.backend {
	case string(backend.KindOCI):
	case string(backend.KindVM):
		if o.vmConfig == "" {
			return usageError("--backend vm needs --vm-config FILE: the vm section of custodyd's config")
		}
		var err error
		if vmConfig, err = readFile("vm configuration", o.vmConfig, maxVMConfigSize); err != nil {
			return err
		}
	default:
		return usageError("--backend %q: want oci or vm", o.backend)
	}
	if o.custodyd == "" {
		o.custodyd = besideSelf("custodyd")
	}
	if o.runtime == "" {
		o.runtime = besideSelf("custody-runc")
	}
	if o.probe == "" {
		o.probe = besideSelf("custody-probe")
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(a.stderr, "custody qualify: "+format+"\n", args...)
	}
	res, err := qualification.Qualify(ctx, qualification.Options{
		Tier: o.tier, Backend: o.backend, VM: vmConfig, Custodyd: o.custodyd, Runtime: o.runtime, Probe: o.probe, Busybox: o.busybox,
		Keep: o.keep, Parallel: o.parallel, Only: o.only, Pooled: o.pooled, Logf: logf,
	})
	var be *qualification.BinaryError
	switch {
	case errors.As(err, &be) && be.Missing:
		return &exitError{exitRefused, fmt.Errorf("%s %s: not found; pass --%s PATH", be.Option, be.Path, be.Option)}
	case errors.As(err, &be):
		return &exitError{exitRefused, fmt.Errorf("--%s: %w", be.Option, be.Err)}
	case errors.Is(err, qualification.ErrPrecondition):
		return &exitError{exitRefused, err}
	case err != nil:
		return &exitError{exitInternal, err}
	}
	rep, ver := &res.Report, res.Verified
	rowJSON, err := json.MarshalIndent(res.Row, "", "  ")
	if err != nil {
		return err
	}
	rowJSON = append(rowJSON, '\n')

	table := a.stdout
	if o.asJSON {
		table = a.stderr
	}
	printReport(table, rep, ver)
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
		if err := addToMatrix(ctx, o, rowJSON, ver, res.RunnerKey); err != nil {
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
// one), and re-renders the directory's index.html, checking the other rows
// with --trust and this row with the key that just signed it.
func addToMatrix(ctx context.Context, o qualifyOptions, rowJSON []byte, ver *matrix.Verified, own *keys.Verifier) error {
	name := fmt.Sprintf("%s-%s.json", ver.PlatformDigest()[:16], ver.Tier)
	if err := writeFileAtomic(filepath.Join(o.matrixDir, name), rowJSON, 0o644); err != nil {
		return err
	}
	trust := &evidence.Trust{}
	if o.trust != "" {
		var err error
		if trust, err = evidence.LoadTrust(o.trust); err != nil {
			return err
		}
	}
	trust.Runners = append(trust.Runners, evidence.TrustedKey{Name: "this qualification's runner", Key: own})
	return renderMatrix(ctx, o.matrixDir, filepath.Join(o.matrixDir, "index.html"), trust, matrix.DefaultMaxAge)
}

// errTrustRunner refuses the bare keys --trust-runner took: a bare key
// carries no window or revocation.
var errTrustRunner = usageError("--trust-runner is no longer accepted: a bare public key carries no validity window, retirement or revocation; " +
	"pass --trust FILE, the trust file custody verify reads (custody trust export writes one)")

func renderMatrix(ctx context.Context, dir, htmlPath string, trust matrix.Trust, maxAge time.Duration) error {
	entries, err := matrix.LoadDir(ctx, dir, trust)
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
	backend, vmConfig, trust, config         string
	trustRunner                              []string
	maxAge                                   time.Duration
	asJSON, printPlatform                    bool
}

// defaultCustodydConfig is where custodyd reads its configuration unless
// told otherwise.
const defaultCustodydConfig = "/etc/custody/custodyd.yaml"

func (a *app) gateCmd() *cobra.Command {
	var o gateOptions
	cmd := &cobra.Command{
		Use:   "gate --matrix DIR --trust trust.yaml --platform this|FILE [--config custodyd.yaml] [--tier production] [--backend oci] | --matrix DIR --trust trust.yaml --html FILE",
		Short: "Allow a release only on a platform whose newest authentic qualification row is current and passing",
		Long: `gate reads the qualification rows (*.json) in DIR. A row is authentic when its signature verifies under a runner
key of the trust file (--trust, the file custody verify reads) and that key could sign at the row's time: within its
notBefore/notAfter window (a rotation retires a key at its notAfter), not revoked at or before it, and, unless the file
says revocation.acceptBefore, not revoked at all. Of the authentic rows for exactly this platform (kernel, arch,
distro, cgroup mode and controllers, host facts, runtime version and sha256), backend (--backend) and tier, the newest
decides: the release is allowed only if every check of that row passed, the runner measured it itself, it is current
(--max-age), and its backend, runtime or platform is not listed in DIR/disabled. An older passing row never outweighs
a newer failing one. A row for one backend never admits another; a runtime whose digest changed is another platform.

--platform this probes this host (as root) with the runtime custodyd is pinned to: the runtime its configuration
(--config, default ` + defaultCustodydConfig + `) names, whose sha256 must still be the pinned one; --runtime PATH
names the binary instead (still checked against the pin when a configuration is read). Without either, gate refuses
to guess. --platform FILE reads a platform description (custody gate --platform this --print-platform writes one),
which must be for --backend. --html FILE renders the matrix (platform x check) as HTML; with no --platform that is
all gate does.

Exit status: 0 allowed, 1 refused (the reason is printed), 2 when a trust file, configuration or runtime it was given
cannot be used (nothing was decided), 3 when gate could not decide.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.gate(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.matrixDir, "matrix", "", "matrix directory of qualification rows (required, except with --print-platform)")
	f.StringVar(&o.platform, "platform", "", `"this" to probe this host, or a platform description file`)
	f.StringVar(&o.tier, "tier", matrix.TierProduction, "tier the release needs")
	f.StringVar(&o.backend, "backend", string(backend.KindOCI), "backend the release runs on")
	f.StringVar(&o.vmConfig, "vm-config", "", "for --platform this --backend vm: a YAML file holding custodyd's vm section; the vm runtime is probed with it as custodyd probes it")
	f.StringVar(&o.trust, "trust", "", "trust file (the one custody verify reads): runner keys with their windows, retirements and revocations")
	f.StringArrayVar(&o.trustRunner, "trust-runner", nil, "no longer accepted: use --trust")
	_ = f.MarkHidden("trust-runner")
	f.StringVar(&o.config, "config", "", "custodyd's configuration, for --platform this: its pinned runtime is probed and checked (default "+defaultCustodydConfig+" if it exists)")
	f.StringVar(&o.runtime, "runtime", "", "for --platform this: the runtime binary to probe instead of the one --config names")
	f.DurationVar(&o.maxAge, "max-age", matrix.DefaultMaxAge, "how old a row may be")
	f.StringVar(&o.html, "html", "", "render the matrix as HTML into this file")
	f.BoolVar(&o.asJSON, "json", false, "print the decision as JSON")
	f.BoolVar(&o.printPlatform, "print-platform", false, "print the platform description and its digest, and decide nothing")
	return cmd
}

func (a *app) gate(ctx context.Context, o gateOptions) error {
	if len(o.trustRunner) > 0 {
		return errTrustRunner
	}
	if o.matrixDir == "" && !o.printPlatform {
		return usageError("gate: --matrix DIR is required")
	}
	var trust *evidence.Trust
	if o.trust != "" {
		var err error
		if trust, err = evidence.LoadTrust(o.trust); err != nil {
			return &exitError{exitRefused, err}
		}
	} else if !o.printPlatform || o.html != "" {
		return usageError("gate: --trust FILE is required: a gate trusts no row by default; pass the trust file custody verify reads (custody trust export writes one)")
	}
	if o.html != "" {
		if err := renderMatrix(ctx, o.matrixDir, o.html, trust, o.maxAge); err != nil {
			return &exitError{exitInternal, fmt.Errorf("render %s: %w", o.html, err)}
		}
		fmt.Fprintf(a.stderr, "custody gate: wrote %s\n", quote.String(o.html))
		if o.platform == "" {
			return nil
		}
	}
	if o.platform == "" {
		return usageError("gate: --platform this|FILE is required to gate (or --html to render only)")
	}
	if o.tier != matrix.TierProduction && o.tier != matrix.TierDevelopment {
		return usageError("--tier %q: want production or development", o.tier)
	}
	this, err := a.gatePlatform(ctx, o)
	var ee *exitError
	if errors.As(err, &ee) {
		return err // a usage error or a refused file keeps its exit status
	} else if err != nil {
		return &exitError{exitInternal, err}
	}
	if o.printPlatform {
		return writeJSON(a.stdout, struct {
			Digest   string          `json:"digest"`
			Platform matrix.Platform `json:"platform"`
		}{this.Digest(), this})
	}
	entries, err := matrix.LoadDir(ctx, o.matrixDir, trust)
	if err != nil {
		return &exitError{exitInternal, err}
	}
	disabled, err := matrix.LoadDisabled(o.matrixDir)
	if err != nil {
		return &exitError{exitInternal, err}
	}
	dec := matrix.Gate(entries, this, matrix.GateOptions{Tier: o.tier, Backend: o.backend, MaxAge: o.maxAge, Disabled: disabled})
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
	rt, pin, err := gateRuntime(o)
	if err != nil {
		return matrix.Platform{}, err
	}
	var vmConfig []byte
	if o.backend == string(backend.KindVM) {
		if o.vmConfig == "" {
			return matrix.Platform{}, usageError("gate: --platform this --backend vm needs --vm-config FILE (custodyd's vm section), to probe the vm runtime")
		}
		var err error
		if vmConfig, err = readFile("vm configuration", o.vmConfig, maxVMConfigSize); err != nil {
			return matrix.Platform{}, err
		}
	}
	prof, err := platform.Probe(ctx, platform.Options{RuntimePath: rt})
	if err != nil {
		return matrix.Platform{}, err
	}
	if pin != nil && (prof.Runtime.SHA256 != pin.SHA256 || prof.Runtime.Version != pin.Version) {
		return matrix.Platform{}, &exitError{exitFailed, fmt.Errorf(
			"refused: custodyd (%s) is pinned to runtime %s %s sha256:%s, but %s is %s sha256:%s; custodyd launches nothing on a runtime that is not its pin: "+
				"restore the pinned binary, or review the new one and pin it",
			quote.String(pin.config), quote.String(pin.Path), quote.String(pin.Version), pin.SHA256, quote.String(rt), quote.String(prof.Runtime.Version), prof.Runtime.SHA256)}
	}
	if o.backend == string(backend.KindVM) {
		return qualification.VMPlatform(ctx, prof, vmConfig)
	}
	return matrix.PlatformOf(prof, o.backend)
}

// runtimePin is the runtime custodyd's configuration pins.
type runtimePin struct {
	config, Path, Version, SHA256 string
}

// gateRuntime resolves the runtime --platform this probes: --runtime, or
// the one custodyd's configuration pins (--config, or custodyd's default
// configuration when it exists). With a configuration, its pin is
// returned to be checked. Without either, it refuses to guess.
func gateRuntime(o gateOptions) (string, *runtimePin, error) {
	path := o.config
	if path == "" {
		if _, err := os.Stat(defaultCustodydConfig); err == nil {
			path = defaultCustodydConfig
		}
	}
	if path == "" {
		if o.runtime != "" {
			return o.runtime, nil, nil
		}
		return "", nil, &exitError{exitRefused, fmt.Errorf("gate: which runtime is custodyd pinned to? %s does not exist; "+
			"pass --config with custodyd's configuration, or --runtime PATH; the gate does not guess", defaultCustodydConfig)}
	}
	cfg, err := readCustodydConfig(path)
	if err != nil {
		return "", nil, err
	}
	rt := cfg.Runner.Runtime
	if rt.Path == "" || rt.SHA256 == "" {
		return "", nil, &exitError{exitRefused, fmt.Errorf("refused: %s pins no runtime (runner.runtime path and sha256); the gate does not guess", quote.String(path))}
	}
	pin := &runtimePin{config: path, Path: rt.Path, Version: rt.Version, SHA256: rt.SHA256}
	if o.runtime != "" {
		return o.runtime, pin, nil
	}
	return rt.Path, pin, nil
}

package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/internal/clitest"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/matrix"
	"github.com/custody-dev/custody/platform"
	"github.com/custody-dev/custody/qualification"
)

// qualifyBins returns the binaries a qualify run needs: the real custodyd
// ($CUSTODYD_BIN), the pinned runc, a static busybox and the probe
// ($CUSTODY_PROBE, or built here).
func qualifyBins(t *testing.T) (custodyd, runc, busybox, probe string) {
	t.Helper()
	testenv.Root(t)
	runc, _, _ = testenv.Runc(t)
	custodyd = os.Getenv("CUSTODYD_BIN")
	if custodyd == "" {
		testenv.Missing(t, "the custodyd binary ($CUSTODYD_BIN, set by make test)")
	}
	busybox = testenv.Busybox(t)
	probe = os.Getenv("CUSTODY_PROBE")
	if probe == "" {
		goTool, err := exec.LookPath("go")
		if err != nil {
			testenv.Missing(t, "custody-probe ($CUSTODY_PROBE) or a go tool to build it")
		}
		probe = filepath.Join(t.TempDir(), "custody-probe")
		cmd := exec.Command(goTool, "build", "-trimpath", "-o", probe, "./cmd/custody-probe")
		cmd.Dir = testenv.ModuleRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build custody-probe: %v\n%s", err, out)
		}
	}
	return custodyd, runc, busybox, probe
}

// readRow reads a row file, writes its runner key next to it and verifies
// the row under that key.
func readRow(t *testing.T, path string) (*matrix.Verified, string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	row, err := matrix.ParseRow(data)
	if err != nil {
		t.Fatal(err)
	}
	pub := strings.TrimSuffix(path, ".json") + ".pub"
	write(t, pub, row.RunnerPublicKey)
	k, err := keys.ParsePublic([]byte(row.RunnerPublicKey))
	if err != nil {
		t.Fatal(err)
	}
	v, err := row.Verify(context.Background(), []*keys.Verifier{k})
	if err != nil {
		t.Fatalf("the row does not verify under its runner key: %v", err)
	}
	return v, pub
}

// TestQualifyDevelopmentAndGate qualifies this host for the development
// tier against the real custodyd, then gates on the row.
func TestQualifyDevelopmentAndGate(t *testing.T) {
	custodyd, runc, busybox, probe := qualifyBins(t)
	dir := t.TempDir()
	rowPath, mx := filepath.Join(dir, "row.json"), filepath.Join(dir, "matrix")
	start := time.Now()
	code, stdout, stderr := custody(t, "qualify", "--tier", "development", "--json", "--custodyd", custodyd, "--runtime", runc,
		"--probe", probe, "--busybox", busybox, "--out", rowPath, "--matrix", mx)
	t.Logf("qualify --tier development took %s", time.Since(start).Round(time.Millisecond))
	if code != 0 {
		t.Fatalf("qualify: exit %d\n%s", code, stderr)
	}
	if file, _ := os.ReadFile(rowPath); string(file) != stdout {
		t.Fatal("--json stdout is not the row written to --out")
	}
	v, pub := readRow(t, rowPath)
	if !v.AllPassed() || v.Tier != "development" || len(v.Checks) < 30 || len(v.Missing) != 0 {
		t.Fatalf("row: result %s tier %s checks %d failed %v missing %v", v.Result, v.Tier, len(v.Checks), v.Failed, v.Missing)
	}
	listed := map[string]bool{}
	for _, c := range v.Checks {
		listed[c.TestName()] = true
		if len(c.Runs) == 0 {
			t.Errorf("%s passed with no run behind it", c.TestName())
		}
		for _, r := range c.Runs {
			if r.Tier != "development (unqualified)" || len(r.ReceiptSHA256) != 64 {
				t.Errorf("%s: run %+v", c.TestName(), r)
			}
		}
	}
	for _, name := range []string{"egress/restricted-allowed-host-reachable", "egress/restricted-intercept-terminated", "egress/restricted-intercept-confined"} {
		if !listed[name] {
			t.Errorf("the row does not list %s: %v", name, listed)
		}
	}
	_, _, sha := testenv.Runc(t)
	if v.Platform.Runtime.SHA256 != sha || v.Platform.Backend != string(backend.KindOCI) {
		t.Fatalf("row platform = %+v", v.Platform)
	}
	// This run's own directory, as it logged it: other qualify runs on a
	// shared machine make their own in the same temporary directory.
	private := regexp.MustCompile(`started private custodyd .* in (\S*custody-qualify-\S+)`).FindStringSubmatch(stderr)
	if private == nil {
		t.Errorf("qualify did not say where its private state was:\n%s", stderr)
	} else if _, err := os.Lstat(private[1]); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("qualify left its private state behind: %s (%v)", private[1], err)
	}
	html, err := os.ReadFile(filepath.Join(mx, "index.html"))
	if err != nil || !strings.Contains(string(html), "current") || !strings.Contains(string(html), "budgets/fork-bomb-capped") {
		t.Fatalf("matrix index.html: %v\n%.2000s", err, html)
	}

	if v.Measured == nil || v.Measured.By != matrix.MeasuredByRunner || !strings.HasPrefix(v.Measured.Image, "sha256:") {
		t.Fatalf("the row does not say the runner measured it: %+v", v.Measured)
	}
	trust := trustForKeys(t, filepath.Join(dir, "trust.yaml"), pub)
	gate := func(args ...string) (int, string) {
		t.Helper()
		code, out, errs := custody(t, append([]string{"gate", "--matrix", mx, "--trust", trust}, args...)...)
		return code, out + errs
	}
	if code, out := gate("--platform", "this", "--runtime", runc, "--tier", "development"); code != 0 || !strings.Contains(out, "allowed") {
		t.Fatalf("gate on this platform's current passing development row: %d\n%s", code, out)
	}
	// Production on this platform: no matching row.
	if code, out := gate("--platform", "this", "--runtime", runc); code != exitFailed || !strings.Contains(out, "no authentic, passing, current row") {
		t.Fatalf("gate for production without a production row: %d\n%s", code, out)
	}
	// Another runtime binary (one byte appended) is another platform.
	changed := clitest.ChangedCopy(t, runc, filepath.Join(dir, "runc-changed"))
	if code, out := gate("--platform", "this", "--runtime", changed, "--tier", "development"); code != exitFailed || !strings.Contains(out, "runtime binary changed") {
		t.Fatalf("gate with a changed runtime digest: %d\n%s", code, out)
	}
	// A description file works like this host.
	code, plat, errs := custody(t, "gate", "--matrix", mx, "--platform", "this", "--runtime", runc, "--print-platform")
	if code != 0 {
		t.Fatalf("print-platform: %d %s", code, errs)
	}
	write(t, filepath.Join(dir, "platform.json"), plat)
	if code, out := gate("--platform", filepath.Join(dir, "platform.json"), "--tier", "development"); code != 0 {
		t.Fatalf("gate on a platform file: %d\n%s", code, out)
	}
	// The row is for backend oci: it gates --backend oci (the default) and
	// never another backend, probed or described.
	if code, out := gate("--platform", "this", "--runtime", runc, "--tier", "development", "--backend", "oci"); code != 0 || !strings.Contains(out, "backend oci") {
		t.Fatalf("gate --backend oci: %d\n%s", code, out)
	}
	if code, out := gate("--platform", "this", "--runtime", runc, "--tier", "development", "--backend", "firecracker"); code != exitFailed ||
		!strings.Contains(out, "qualifies backend oci, not firecracker") {
		t.Fatalf("gate --backend firecracker on an oci row: %d\n%s", code, out)
	}
	if code, out := gate("--platform", filepath.Join(dir, "platform.json"), "--tier", "development", "--backend", "firecracker"); code != exitFailed ||
		!strings.Contains(out, "described is for backend oci") {
		t.Fatalf("gate --backend firecracker on an oci description: %d\n%s", code, out)
	}
	// Another backend disabled by name leaves this one's row standing.
	write(t, filepath.Join(mx, "disabled"), "firecracker jailer CVE\n")
	if code, out := gate("--platform", "this", "--runtime", runc, "--tier", "development"); code != 0 {
		t.Fatalf("gate with another backend disabled: %d\n%s", code, out)
	}
	// Disabling the backend or the runtime invalidates the row (R14).
	for _, entry := range []string{"oci under review", "sha256:" + sha + " withdrawn"} {
		write(t, filepath.Join(mx, "disabled"), entry+"\n")
		if code, out := gate("--platform", "this", "--runtime", runc, "--tier", "development"); code != exitFailed || !strings.Contains(out, "disabled") {
			t.Fatalf("gate with %q disabled: %d\n%s", entry, code, out)
		}
	}
	os.Remove(filepath.Join(mx, "disabled"))
	// Stale.
	if code, out := gate("--platform", "this", "--runtime", runc, "--tier", "development", "--max-age", "1ms"); code != exitFailed || !strings.Contains(out, "stale") {
		t.Fatalf("gate with a stale row: %d\n%s", code, out)
	}
	// A tampered row is refused; the genuine one next to it still counts.
	var row map[string]any
	if err := json.Unmarshal([]byte(stdout), &row); err != nil {
		t.Fatal(err)
	}
	env := row["envelope"].(map[string]any)
	payload, _ := base64.StdEncoding.DecodeString(env["payload"].(string))
	env["payload"] = base64.StdEncoding.EncodeToString(bytes.Replace(payload, []byte(`"passed":true`), []byte(`"passed":false`), 1))
	tampered, _ := json.Marshal(row)
	mx2 := filepath.Join(dir, "matrix-tampered")
	if err := os.Mkdir(mx2, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(mx2, "row.json"), string(tampered))
	code, out, errs := custody(t, "gate", "--matrix", mx2, "--trust", trust, "--platform", "this", "--runtime", runc, "--tier", "development")
	if code != exitFailed || !strings.Contains(out+errs, "not authentic") {
		t.Fatalf("gate with a tampered row: %d\n%s%s", code, out, errs)
	}
	// A gate trusts no row by default.
	if code, _, errs := custody(t, "gate", "--matrix", mx, "--platform", "this", "--runtime", runc, "--tier", "development"); code == 0 || !strings.Contains(errs, "--trust FILE is required") {
		t.Fatalf("gate without trusted keys: %d %s", code, errs)
	}
}

// TestQualifyProductionFailsHonestly: on a host that cannot enforce
// production (cgroup v1 or hybrid), qualifying production fails and the
// signed row says FAILED: the legitimate work was refused, not faked.
func TestQualifyProductionFailsHonestly(t *testing.T) {
	custodyd, runc, busybox, probe := qualifyBins(t)
	prof, err := platform.Probe(context.Background(), platform.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range platform.ProductionControllers() {
		if !slices.Contains(prof.Cgroup.V2Delegated, c) {
			break
		}
		if c == platform.ProductionControllers()[len(platform.ProductionControllers())-1] {
			t.Skip("this host delegates every production controller; production can qualify here")
		}
	}
	rowPath := filepath.Join(t.TempDir(), "row.json")
	code, _, stderr := custody(t, "qualify", "--tier", "production", "--custodyd", custodyd, "--runtime", runc,
		"--probe", probe, "--busybox", busybox, "--out", rowPath)
	if code != exitFailed || !strings.Contains(stderr, "FAILED") {
		t.Fatalf("qualify --tier production on a %s host: exit %d\n%s", prof.Cgroup.Mode, code, stderr)
	}
	v, _ := readRow(t, rowPath)
	if v.Result != matrix.ResultFailed || v.Tier != "production" || len(v.Passed) != 0 {
		t.Fatalf("row: result %s tier %s passed %v", v.Result, v.Tier, v.Passed)
	}
	for _, c := range v.Checks {
		if c.Case == matrix.CaseLegitimate && (c.Passed || !strings.Contains(c.Detail, "unsupported")) {
			t.Errorf("%s: passed=%t detail %q; want refused as unsupported", c.TestName(), c.Passed, c.Detail)
		}
		if len(c.Runs) != 0 {
			t.Errorf("%s: a production run happened on this host: %+v", c.TestName(), c.Runs)
		}
	}
}

// TestQualifyEndpoint: the runner's qualification endpoint takes what to
// run, never a verdict, refuses a malformed request before anything runs,
// and signs what it measured: a suite limited to one check says FAILED,
// lists every other check as not run, binds each run by its receipt's
// digest, and says the runner measured it.
func TestQualifyEndpoint(t *testing.T) {
	e, scratch := qualifyDaemon(t)
	good := qualification.MeasureRequest{Tier: "development", Image: e.image, Scratch: scratch, Only: []string{"input/read-input"}}
	for _, c := range []struct {
		name string
		req  any
		code string
	}{
		{"a verdict", map[string]any{"tier": "development", "image": e.image, "scratch": scratch, "checks": []any{}}, "bad-request"},
		{"unknown tier", qualification.MeasureRequest{Tier: "staging", Image: e.image, Scratch: scratch}, "bad-request"},
		{"not an image digest", qualification.MeasureRequest{Tier: "development", Image: "busybox", Scratch: scratch}, "bad-request"},
		{"relative scratch", qualification.MeasureRequest{Tier: "development", Image: e.image, Scratch: "scratch"}, "bad-request"},
		{"backend not configured", qualification.MeasureRequest{Tier: "development", Backend: "vm", Image: e.image, Scratch: scratch}, "refused"},
	} {
		err := api.NewClient(e.control).Measure(context.Background(), c.req, &qualification.Measurement{})
		var ae *api.Error
		if !errors.As(err, &ae) || string(ae.Code) != c.code {
			t.Errorf("%s: %v, want code %s", c.name, err, c.code)
		}
	}
	var m qualification.Measurement
	if err := api.NewClient(e.control).Measure(context.Background(), good, &m); err != nil {
		t.Fatal(err)
	}
	st, err := api.NewClient(e.control).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	k, _ := keys.ParsePublic([]byte(st.RunnerPublicKey))
	v, err := m.Row.Verify(context.Background(), []*keys.Verifier{k})
	if err != nil {
		t.Fatal(err)
	}
	if v.Result != matrix.ResultFailed || v.Measured == nil || v.Measured.Image != e.image || v.RunnerID != st.RunnerID {
		t.Fatalf("limited row: result %s measured %+v runner %s", v.Result, v.Measured, v.RunnerID)
	}
	notRun := 0
	for _, c := range v.Checks {
		if c.TestName() == "input/read-input" {
			if !c.Passed || len(c.Runs) != 1 {
				t.Errorf("%s: passed=%t runs %+v (%s); want one run, passed", c.TestName(), c.Passed, c.Runs, c.Detail)
			}
			for _, r := range c.Runs {
				if len(r.ReceiptSHA256) != 64 {
					t.Errorf("run %s of %s is not bound by its receipt's digest: %+v", r.ID, c.TestName(), r)
				}
			}
			continue
		}
		if c.Passed || !strings.Contains(c.Detail, "not run") {
			t.Errorf("%s: passed=%t %q; want not run", c.TestName(), c.Passed, c.Detail)
		}
		notRun++
	}
	if notRun < 30 {
		t.Errorf("%d checks listed as not run; want every check but one", notRun)
	}
	// The submit socket cannot ask for a qualification.
	if err := api.NewClient(e.submit).Measure(context.Background(), good, &m); err == nil {
		t.Fatal("the submit socket ran a qualification")
	}
}

// trustForKeys writes a trust file that lists the runner public keys (PEM
// files) with no window, as custody trust export writes them.
func trustForKeys(t *testing.T, path string, pubs ...string) string {
	t.Helper()
	var ks []evidence.ExportKey
	for i, p := range pubs {
		pem, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		ks = append(ks, evidence.ExportKey{Name: fmt.Sprintf("runner-%d", i), PEM: string(pem)})
	}
	clitest.TrustFile(t, path, ks...)
	return path
}

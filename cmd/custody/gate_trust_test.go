package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/matrix"
	"github.com/custody-dev/custody/qualification"
)

// gatePlatform is the platform the gate's trust tests describe in a file.
func gatePlatform() matrix.Platform {
	return matrix.Platform{
		OS: "linux", Arch: "amd64", Kernel: "6.1.0-57-amd64", Distro: "Debian GNU/Linux 12 (bookworm)", Backend: matrix.BackendOCI,
		Cgroup:  matrix.PlatformCgroup{Mode: "v2", V2Delegated: []string{"cpu", "io", "memory", "pids"}, V1Usable: []string{}},
		Facts:   matrix.PlatformFacts{Seccomp: true, UserNS: true, Tmpfs: true, Overlay: true},
		Runtime: matrix.PlatformRuntime{Version: "1.5.3", SHA256: strings.Repeat("ab", 32)},
	}
}

// measuredRow is a row as a runner that measured it signs it: every family
// covered, each check passed or (passed false) its refusals failed.
func measuredRow(t *testing.T, k *keys.Signer, p matrix.Platform, tier string, at time.Time, passed bool) []byte {
	t.Helper()
	var checks []matrix.Check
	for _, f := range matrix.RequiredFamilies {
		run := []matrix.RunRef{{ID: "0123456789abcdef", Status: "ok", Tier: tier, ReceiptSHA256: strings.Repeat("cd", 32)}}
		checks = append(checks,
			matrix.Check{Family: f, Name: "works", Case: matrix.CaseLegitimate, Passed: true, Detail: "ok", Runs: run},
			matrix.Check{Family: f, Name: "refused", Case: matrix.CaseRefusal, Passed: passed, Detail: "observed", Runs: run})
	}
	q, err := matrix.NewQualification(p, matrix.Info{Tier: tier, CustodyVersion: "1.0.0", SuiteVersion: "3", RunnerID: k.ID(),
		QualifiedAt: at, Checks: checks,
		Measured: &matrix.Measured{By: matrix.MeasuredByRunner, Image: "sha256:" + strings.Repeat("ee", 32), Started: at.Add(-time.Minute), Finished: at}})
	if err != nil {
		t.Fatal(err)
	}
	row, err := matrix.Sign(context.Background(), k, q)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(row)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// trustFile writes the trust file custody trust export writes for keys.
func trustFile(t *testing.T, path string, runners ...evidence.ExportKey) {
	t.Helper()
	issuer, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	out, err := evidence.ExportTrust(evidence.Export{Runners: runners, Issuers: []evidence.ExportKey{{Name: "issuer", PEM: string(issuer.PublicPEM())}}})
	if err != nil {
		t.Fatal(err)
	}
	write(t, path, string(out))
}

// TestGateTrustFile: the gate reads the trust file custody verify reads. A
// row signed by a key after its revocation, or after a rotation retired
// it, is not authentic; of the authentic rows for the platform the newest
// decides, so a newer failing row refuses though an older one passed;
// bare keys (--trust-runner) are refused.
func TestGateTrustFile(t *testing.T) {
	dir := t.TempDir()
	p := gatePlatform()
	platFile := filepath.Join(dir, "platform.json")
	data, _ := json.Marshal(p)
	write(t, platFile, string(data))
	k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	pem := string(k.PublicPEM())
	now := time.Now().UTC().Truncate(time.Second)
	gate := func(mx, trust string, extra ...string) (int, string) {
		t.Helper()
		args := append([]string{"gate", "--matrix", mx, "--platform", platFile, "--trust", trust}, extra...)
		code, out, errs := custody(args...)
		return code, out + errs
	}
	matrixWith := func(name string, rows map[string][]byte) string {
		mx := filepath.Join(dir, name)
		if err := os.Mkdir(mx, 0o755); err != nil {
			t.Fatal(err)
		}
		for n, r := range rows {
			write(t, filepath.Join(mx, n), string(r))
		}
		return mx
	}
	passing := matrixWith("passing", map[string][]byte{"row.json": measuredRow(t, k, p, "production", now.Add(-2*time.Hour), true)})

	// The legitimate case: a key with a window that holds the row's time.
	open := filepath.Join(dir, "trust-open.yaml")
	trustFile(t, open, evidence.ExportKey{Name: "runner", PEM: pem, NotBefore: now.Add(-24 * time.Hour)})
	if code, out := gate(passing, open); code != 0 || !strings.Contains(out, "allowed: row.json") {
		t.Fatalf("gate on a current passing row under a valid key: %d\n%s", code, out)
	}

	for _, c := range []struct {
		name string
		key  evidence.ExportKey
		want string
	}{
		{"revoked before the row", evidence.ExportKey{RevokedAt: now.Add(-3 * time.Hour)}, "was revoked at"},
		{"revoked after the row (acceptBefore false)", evidence.ExportKey{RevokedAt: now.Add(-time.Hour)}, "acceptBefore is false"},
		{"retired before the row", evidence.ExportKey{NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-3 * time.Hour)}, "is valid until"},
	} {
		key := c.key
		key.Name, key.PEM = "runner", pem
		trust := filepath.Join(dir, "trust-"+strings.ReplaceAll(c.name, " ", "-")+".yaml")
		trustFile(t, trust, key)
		if code, out := gate(passing, trust); code != exitFailed || !strings.Contains(out, "not authentic") || !strings.Contains(out, c.want) {
			t.Errorf("%s: gate %d, want refused as not authentic (%q)\n%s", c.name, code, c.want, out)
		}
	}
	// Retired after the row was signed: its window held then.
	retired := filepath.Join(dir, "trust-retired-later.yaml")
	trustFile(t, retired, evidence.ExportKey{Name: "runner", PEM: pem, NotAfter: now.Add(-time.Hour)})
	if code, out := gate(passing, retired); code != 0 {
		t.Errorf("a row signed within the key's window, before its retirement: %d\n%s", code, out)
	}

	// A newer failing row for the same platform, by the same key, refuses
	// though an older one passed; a newer passing one over an older
	// failure allows.
	mixed := matrixWith("mixed", map[string][]byte{
		"older-pass.json": measuredRow(t, k, p, "production", now.Add(-3*time.Hour), true),
		"newer-fail.json": measuredRow(t, k, p, "production", now.Add(-time.Hour), false),
	})
	if code, out := gate(mixed, open); code != exitFailed || !strings.Contains(out, "newest authentic row") || !strings.Contains(out, "newer-fail.json: result FAILED") {
		t.Errorf("newer failing row beside an older passing one: %d\n%s", code, out)
	}
	recovered := matrixWith("recovered", map[string][]byte{
		"older-fail.json": measuredRow(t, k, p, "production", now.Add(-3*time.Hour), false),
		"newer-pass.json": measuredRow(t, k, p, "production", now.Add(-time.Hour), true),
	})
	if code, out := gate(recovered, open); code != 0 || !strings.Contains(out, "allowed: newer-pass.json") {
		t.Errorf("newer passing row beside an older failing one: %d\n%s", code, out)
	}

	// Bare keys are refused, naming the trust file; no trust at all too.
	pub := filepath.Join(dir, "runner.pub")
	write(t, pub, pem)
	if code, _, errs := custody("gate", "--matrix", passing, "--platform", platFile, "--trust-runner", pub); code != exitUsage ||
		!strings.Contains(errs, "--trust FILE") || !strings.Contains(errs, "revocation") {
		t.Errorf("gate --trust-runner: %d %s", code, errs)
	}
	for _, args := range [][]string{{"--platform", platFile}, {"--html", filepath.Join(dir, "untrusted.html")}, {"--print-platform", "--platform", platFile, "--html", filepath.Join(dir, "untrusted.html")}} {
		if code, _, errs := custody(append([]string{"gate", "--matrix", passing}, args...)...); code != exitUsage || !strings.Contains(errs, "--trust FILE is required") {
			t.Errorf("gate %v without --trust: %d %s", args, code, errs)
		}
	}
	// --html renders under the trust file too: the revoked key's row is
	// not authentic there either.
	html := filepath.Join(dir, "index.html")
	revoked := filepath.Join(dir, "trust-revoked-before-the-row.yaml")
	if code, _, errs := custody("gate", "--matrix", passing, "--trust", revoked, "--html", html); code != 0 {
		t.Fatalf("gate --html: %d %s", code, errs)
	}
	if page, err := os.ReadFile(html); err != nil || !strings.Contains(string(page), "not authentic") {
		t.Errorf("the page under a trust file that revoked the key: %v\n%.1500s", err, page)
	}
}

// TestGateRuntimeFromConfig: gate --platform this probes the runtime
// custodyd's configuration pins and checks it against the pin; without a
// configuration or --runtime it refuses to guess.
func TestGateRuntimeFromConfig(t *testing.T) {
	testenv.Root(t)
	runc, version, sha := testenv.Runc(t)
	dir := t.TempDir()
	config := func(name, sum string) string {
		p := filepath.Join(dir, name)
		writeCustodydConfig(t, p, config.Config{Runner: config.Runner{StateDir: "/var/lib/custody", RuntimeDir: "/run/custody",
			Runtime: config.Runtime{Path: runc, Version: version, SHA256: sum}}, Policy: "/etc/custody/policy.yaml", Operators: []uint32{0}})
		return p
	}
	printed := func(args ...string) (int, string, string) {
		t.Helper()
		return custody(append([]string{"gate", "--platform", "this", "--print-platform"}, args...)...)
	}
	// The pinned runtime is the one probed: the same description as naming
	// the binary.
	code, fromConfig, errs := printed("--config", config("custodyd.yaml", sha))
	if code != 0 {
		t.Fatalf("gate --config: %d %s", code, errs)
	}
	code, fromRuntime, errs := printed("--runtime", runc)
	if code != 0 {
		t.Fatalf("gate --runtime: %d %s", code, errs)
	}
	if fromConfig != fromRuntime || !strings.Contains(fromConfig, sha) {
		t.Fatalf("the configuration's runtime and --runtime describe different platforms:\n%s\n%s", fromConfig, fromRuntime)
	}
	// A pin the binary no longer matches refuses, naming both digests.
	other := strings.Repeat("0", 64)
	code, _, errs = printed("--config", config("stale-pin.yaml", other))
	if code != exitFailed || !strings.Contains(errs, "pinned to runtime") || !strings.Contains(errs, other) || !strings.Contains(errs, sha) {
		t.Fatalf("gate with a pin the runtime does not match: %d %s", code, errs)
	}
	// --runtime naming another binary is checked against the pin too.
	changed := changedCopy(t, runc, filepath.Join(dir, "runc-changed"))
	if code, _, errs = printed("--config", config("custodyd.yaml", sha), "--runtime", changed); code != exitFailed || !strings.Contains(errs, "pinned to runtime") {
		t.Fatalf("gate --runtime with another binary than the pin: %d %s", code, errs)
	}
	// A configuration that pins nothing is refused, not guessed around.
	noPin := filepath.Join(dir, "nopin.yaml")
	write(t, noPin, "policy: /etc/custody/policy.yaml\noperators: [0]\n")
	if code, _, errs = printed("--config", noPin); code != exitRefused || !strings.Contains(errs, "does not guess") {
		t.Fatalf("gate with a configuration that pins no runtime: %d %s", code, errs)
	}
	// Neither a configuration nor --runtime: refuse to guess. (Where
	// custodyd is installed, its default configuration is read instead.)
	if _, err := os.Stat(defaultCustodydConfig); errors.Is(err, fs.ErrNotExist) {
		if code, _, errs = printed(); code != exitRefused || !strings.Contains(errs, "does not guess") || !strings.Contains(errs, "--config") {
			t.Fatalf("gate --platform this with no runtime named: %d %s", code, errs)
		}
	} else if code, out, errs := printed(); code != 0 && !strings.Contains(errs, defaultCustodydConfig) {
		t.Fatalf("gate --platform this with %s: %d %s %s", defaultCustodydConfig, code, out, errs)
	}
}

// changedCopy copies the binary src to dst with one byte appended: another
// digest, the same program.
func changedCopy(t *testing.T, src, dst string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, append(data, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// controlPost posts body to path on a daemon socket and returns the HTTP
// status and the answer.
func controlPost(t *testing.T, sock, path string, body any) (int, []byte) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Post("http://custodyd"+path, "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	if _, err := out.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out.Bytes()
}

// TestForgedVerdictsRefused: the runner signs no verdicts an operator hands
// it. Sixteen "passed" checks, one legitimate and one refusal per family,
// each pointing at a trivial run the runner really made, get no row.
func TestForgedVerdictsRefused(t *testing.T) {
	e := startDaemon(t)
	g := e.grant(t, e.phase(t, "dev-run", "true", ""))
	code, out, errs := e.custody("run", "--grant", g, "--json")
	if code != 0 {
		t.Fatalf("run: %d %s", code, errs)
	}
	var res struct{ RunID string }
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.RunID == "" {
		t.Fatalf("run result: %v %s", err, out)
	}
	var checks []matrix.RequestCheck
	for _, f := range matrix.RequiredFamilies {
		checks = append(checks,
			matrix.RequestCheck{Family: f, Name: "works", Case: matrix.CaseLegitimate, Passed: true, Detail: "ok", Runs: []string{res.RunID}},
			matrix.RequestCheck{Family: f, Name: "refused", Case: matrix.CaseRefusal, Passed: true, Detail: "ok", Runs: []string{res.RunID}})
	}
	forged := matrix.SignRequest{Tier: "development", SuiteVersion: "3", Checks: checks}
	status, answer := controlPost(t, e.control, "/v1/attest/qualification", forged)
	if status == http.StatusOK || !strings.Contains(string(answer), "signs no verdicts it is handed") {
		t.Fatalf("the runner answered forged verdicts with %d:\n%.600s", status, answer)
	}
	// Nor does the measuring endpoint take verdicts: it names what to run.
	status, answer = controlPost(t, e.control, "/v1/qualify", forged)
	if status == http.StatusOK {
		t.Fatalf("/v1/qualify accepted verdicts: %.600s", answer)
	}
	// The submit socket cannot ask the runner to qualify.
	status, answer = controlPost(t, e.submit, "/v1/qualify", map[string]any{"tier": "development"})
	if status == http.StatusOK || !strings.Contains(string(answer), "control") {
		t.Fatalf("the submit socket reached qualification: %d %s", status, answer)
	}
}

// measuredByDaemon asks e's custodyd to qualify itself on one check and
// writes the row it signs into dir/name.
func measuredByDaemon(t *testing.T, e *env, scratch, dir, name string) *matrix.Row {
	t.Helper()
	var m qualification.Measurement
	req := qualification.MeasureRequest{Tier: "development", Image: e.image, Scratch: scratch, Only: []string{"input/read-input"}}
	if err := api.NewClient(e.control).Measure(context.Background(), req, &m); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(m.Row)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, name), string(data))
	return &m.Row
}

// qualifyDaemon starts a custodyd whose image holds the probe and whose
// policy grants the suite's actor, and returns it with its scratch dir.
func qualifyDaemon(t *testing.T) (*env, string) {
	t.Helper()
	_, _, _, probe := qualifyBins(t)
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	if out, err := exec.Command("cp", "-a", testenv.BusyboxRootfs(t), rootfs).CombinedOutput(); err != nil {
		t.Fatalf("copy the busybox rootfs: %v %s", err, out)
	}
	if out, err := exec.Command("cp", probe, filepath.Join(rootfs, "bin", "custody-probe")).CombinedOutput(); err != nil {
		t.Fatalf("copy the probe: %v %s", err, out)
	}
	e := startDaemonWith(t, rootfs)
	pol, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "examples", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	e.d.WritePolicy(strings.Replace(string(pol), "name: operator", "name: qualify", 1))
	if code, out, errs := e.custody("policy", "reload"); code != 0 {
		t.Fatalf("policy reload: %s %s", out, errs)
	}
	scratch := filepath.Join(e.dir, "scratch")
	if err := os.Mkdir(scratch, 0o755); err != nil {
		t.Fatal(err)
	}
	return e, scratch
}

// TestGateRealRunnerKeyWindows: rows a real custodyd signed, judged under
// the trust file custody trust export writes from its own rotations and
// revocations. After a rotation, a row the retired key signs (a leaked
// copy) is not authentic; after custody revoke key, neither is the row it
// signed before (revocation.acceptBefore false); the successor key's row
// still is.
func TestGateRealRunnerKeyWindows(t *testing.T) {
	e, scratch := qualifyDaemon(t)
	dir := t.TempDir()
	platFile := filepath.Join(dir, "platform.json")
	code, plat, errs := custody("gate", "--platform", "this", "--runtime", os.Getenv("CUSTODY_RUNC"), "--print-platform", "--tier", "development")
	if code != 0 {
		t.Fatalf("print-platform: %d %s", code, errs)
	}
	write(t, platFile, plat)
	// The key as it was before the rotation: a copy that leaks.
	leaked := filepath.Join(dir, "leaked")
	if err := os.Mkdir(leaked, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-p", filepath.Join(e.dir, "state", "keys", "runner.key"), leaked).CombinedOutput(); err != nil {
		t.Fatalf("copy the runner key: %v %s", err, out)
	}
	oldKey, err := keys.LoadPrivate(leaked, "runner")
	if err != nil {
		t.Fatal(err)
	}
	before := measuredByDaemon(t, e, scratch, filepath.Join(dir, "before"), "row.json")
	if before == nil {
		t.Fatal("no row")
	}

	e.d.Stop()
	if out, err := exec.Command(os.Getenv("CUSTODYD_BIN"), "--config", e.d.Config, "--rotate-key", "runner").CombinedOutput(); err != nil {
		t.Fatalf("rotate: %v %s", err, out)
	}
	e.d.Start()
	// Rows are dated to the second: what follows is dated after the
	// rotation, not in its second.
	time.Sleep(1100 * time.Millisecond)
	measuredByDaemon(t, e, scratch, filepath.Join(dir, "after"), "row.json")

	// The retired key signs a row after the rotation: the leaked copy.
	q, err := before.DecodeUnverified()
	if err != nil {
		t.Fatal(err)
	}
	q.QualifiedAt = time.Now().UTC().Truncate(time.Second)
	forged, err := matrix.NewQualification(q.Platform, q.Info)
	if err != nil {
		t.Fatal(err)
	}
	row, err := matrix.Sign(context.Background(), oldKey, forged)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(row)
	write(t, filepath.Join(dir, "retired-later.json"), string(data))
	retiredDir := filepath.Join(dir, "retired")
	if err := os.Mkdir(retiredDir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(retiredDir, "row.json"), string(data))

	export := func(name string) string {
		t.Helper()
		code, out, errs := e.custody("trust", "export", "--tiers", "development")
		if code != 0 {
			t.Fatalf("trust export: %d %s", code, errs)
		}
		p := filepath.Join(dir, name)
		write(t, p, out)
		return p
	}
	gate := func(mx, trust string) (int, string) {
		t.Helper()
		code, out, errs := custody("gate", "--matrix", mx, "--platform", platFile, "--tier", "development", "--trust", trust, "--json")
		var d matrix.Decision
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("gate --json: %v %s %s", err, out, errs)
		}
		return code, d.Reason + "\n" + strings.Join(d.Notes, "\n")
	}
	// Every row is judged (the suite was limited, so each FAILED); what is
	// asserted is which are authentic.
	authentic := func(mx, trust string) bool {
		t.Helper()
		_, out := gate(mx, trust)
		switch {
		case strings.Contains(out, "newest authentic row"):
			return true
		case strings.Contains(out, "not authentic"):
			return false
		}
		t.Fatalf("gate on %s said neither:\n%s", mx, out)
		return false
	}
	rotated := export("rotated.yaml")
	if !authentic(filepath.Join(dir, "before"), rotated) || !authentic(filepath.Join(dir, "after"), rotated) {
		t.Fatal("the rows the runner signed within each key's window are not authentic under its exported trust file")
	}
	if authentic(retiredDir, rotated) {
		t.Fatal("a row the retired key signed after its rotation is authentic")
	}
	_, out := gate(retiredDir, rotated)
	if !strings.Contains(out, "is valid until") {
		t.Fatalf("the retired key's row: %s", out)
	}

	// Revoke the retired key from before its first row: nothing it signed
	// counts, and the successor's row still does.
	oldID := oldKey.ID()
	if code, _, errs := e.custody("revoke", "key", "runner", oldID, "--at", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "--reason", "leaked"); code != 0 {
		t.Fatalf("revoke key: %d %s", code, errs)
	}
	revoked := export("revoked.yaml")
	if authentic(filepath.Join(dir, "before"), revoked) {
		t.Fatal("a row of a key revoked before it was signed is authentic")
	}
	if _, out := gate(filepath.Join(dir, "before"), revoked); !strings.Contains(out, "was revoked at") {
		t.Fatalf("the revoked key's row: %s", out)
	}
	if !authentic(filepath.Join(dir, "after"), revoked) {
		t.Fatal("the successor key's row is not authentic after the old key's revocation")
	}
}

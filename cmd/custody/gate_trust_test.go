package main

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/internal/clitest"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/matrix"
)

// gatePlatform is the platform the gate's trust tests describe in a file.
func gatePlatform() matrix.Platform {
	return matrix.Platform{
		OS: "linux", Arch: "amd64", Kernel: "6.1.0-57-amd64", Distro: "Debian GNU/Linux 12 (bookworm)", Backend: string(backend.KindOCI),
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
	clitest.TrustFile(t, open, evidence.ExportKey{Name: "runner", PEM: pem, NotBefore: now.Add(-24 * time.Hour)})
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
		clitest.TrustFile(t, trust, key)
		if code, out := gate(passing, trust); code != exitFailed || !strings.Contains(out, "not authentic") || !strings.Contains(out, c.want) {
			t.Errorf("%s: gate %d, want refused as not authentic (%q)\n%s", c.name, code, c.want, out)
		}
	}
	// Retired after the row was signed: its window held then.
	retired := filepath.Join(dir, "trust-retired-later.yaml")
	clitest.TrustFile(t, retired, evidence.ExportKey{Name: "runner", PEM: pem, NotAfter: now.Add(-time.Hour)})
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
	changed := clitest.ChangedCopy(t, runc, filepath.Join(dir, "runc-changed"))
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

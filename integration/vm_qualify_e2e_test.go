package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/matrix"
	"github.com/custody-dev/custody/platform"
	"github.com/custody-dev/custody/qualification"
)

// vmSectionFile writes the vm section of a test daemon's config (the
// artifacts of testenv.VM, pinned as they are now) for --vm-config.
func vmSectionFile(t *testing.T, dir, accel string) string {
	t.Helper()
	cfg := daemontest.VMConfig(t, accel)
	_, section, ok := strings.Cut(cfg, "\nvm:")
	if !ok {
		t.Fatalf("no vm section in %s", cfg)
	}
	p := filepath.Join(dir, "vm.yaml")
	write(t, p, "vm:"+section)
	return p
}

// TestQualifyVMAndGate qualifies the vm backend for the development tier
// through one private custodyd (checks run one after another, a guest
// each): the signed row says backend vm, carries the pinned QEMU as its
// runtime, passes every family at the VM boundary and lists the oci-only
// checks as not applicable, never as passed. Production is refused with
// the backend's own gap.
func TestQualifyVMAndGate(t *testing.T) {
	if testenv.RaceDetector {
		// Not a gap: make test runs it, without -race, in the same CI. Its
		// minutes are QEMU emulating 33 guests; the daemon's vm paths run
		// under -race in backend/vm and TestVMPhaseThroughCustodyd.
		t.Skip("NOT RUN under -race: TCG-bound (about 4 minutes), it runs once in make test")
	}
	custodyd, runc, busybox, probe := qualifyBins(t)
	dir := t.TempDir()
	vmCfg := vmSectionFile(t, dir, "auto")
	rowPath, mx := filepath.Join(dir, "vm-row.json"), filepath.Join(dir, "matrix")
	start := time.Now()
	code, stdout, stderr := custody(t, "qualify", "--backend", "vm", "--vm-config", vmCfg, "--tier", "development", "--json",
		"--custodyd", custodyd, "--runtime", runc, "--probe", probe, "--busybox", busybox, "--out", rowPath, "--matrix", mx)
	took := time.Since(start).Round(time.Millisecond)
	t.Logf("qualify --backend vm --tier development took %s\n%s", took, stderr)
	if code != 0 {
		t.Fatalf("qualify --backend vm: exit %d", code)
	}
	if file, _ := os.ReadFile(rowPath); string(file) != stdout {
		t.Fatal("--json stdout is not the row written to --out")
	}
	v, _ := readRow(t, rowPath)
	if !v.AllPassed() || v.Tier != "development" || len(v.Missing) != 0 || v.Platform.Backend != "vm" {
		t.Fatalf("vm row: result %s tier %s backend %s failed %v missing %v", v.Result, v.Tier, v.Platform.Backend, v.Failed, v.Missing)
	}
	if !strings.HasPrefix(v.Platform.Runtime.Version, "qemu ") || !strings.Contains(v.Platform.Runtime.Version, "microvm") {
		t.Fatalf("the vm row's runtime is not the pinned QEMU: %+v", v.Platform.Runtime)
	}
	na := map[string]bool{}
	for _, n := range v.NotApplicable {
		na[n.Family+"/"+n.Name] = true
		if n.Reason == "" {
			t.Errorf("%s/%s not applicable without a reason", n.Family, n.Name)
		}
	}
	if !na["isolation/own-namespaces"] {
		t.Errorf("isolation/own-namespaces is not listed as not applicable: %v", v.NotApplicable)
	}
	// The guest workload's filter, capabilities, devices and budgets are
	// judged by the oci suite's own checks and probe, run in the guest.
	for _, name := range []string{"isolation/privileged-syscalls-refused", "isolation/no-capabilities",
		"environment/minimal-devices-work", "environment/host-devices-absent",
		"budgets/cpu-quota-applied", "budgets/cpu-burn-throttled", "budgets/tmp-within-budget", "budgets/tmp-bound-enforced",
		"budgets/scratch-within-budget", "budgets/writable-mounts-bounded", "egress/host-listener-unreachable",
		"budgets/wall-time-exceeded-killed", "cleanup/detached-child-runs", "cleanup/detached-child-gone-after-exit",
		"cleanup/detached-child-gone-after-timeout"} {
		if !slices.Contains(v.Passed, name) {
			t.Errorf("%s did not pass in the guest: passed %v", name, v.Passed)
		}
	}
	for _, c := range v.Checks {
		if na[c.TestName()] {
			t.Errorf("%s is both run and not applicable", c.TestName())
		}
		for _, r := range c.Runs {
			if r.Tier != "development (unqualified)" || len(r.ReceiptSHA256) != 64 {
				t.Errorf("%s: run %+v", c.TestName(), r)
			}
		}
	}
	for _, name := range v.Passed {
		if na[name] {
			t.Errorf("%s is listed as passed", name)
		}
	}

	// The gate matches on backend vm: it probes the vm runtime with the
	// same pins (custody gate --platform this --backend vm) and finds the
	// row; a matrix holding only an oci row for this host refuses vm, and
	// the vm row never admits oci.
	pub := strings.TrimSuffix(rowPath, ".json") + ".pub"
	trust := trustForKeys(t, filepath.Join(dir, "trust.yaml"), pub)
	gate := func(mx string, args ...string) (int, string) {
		t.Helper()
		code, out, errs := custody(t, append([]string{"gate", "--matrix", mx, "--tier", "development", "--trust", trust}, args...)...)
		return code, out + errs
	}
	if code, out := gate(mx, "--platform", "this", "--backend", "vm", "--vm-config", vmCfg, "--runtime", runc); code != 0 {
		t.Fatalf("gate --backend vm with the vm row: exit %d\n%s", code, out)
	}
	if code, out := gate(mx, "--platform", "this", "--backend", "vm", "--runtime", runc); code != exitUsage || !strings.Contains(out, "--vm-config") {
		t.Fatalf("gate --platform this --backend vm without --vm-config: exit %d\n%s", code, out)
	}
	if code, out := gate(mx, "--platform", "this", "--backend", "oci", "--runtime", runc); code != exitFailed {
		t.Fatalf("gate --backend oci with only the vm row: exit %d, want %d\n%s", code, exitFailed, out)
	}
	ociOnly := filepath.Join(dir, "oci-only")
	ociPub := signedOCIRow(t, ociOnly, runc)
	trust = trustForKeys(t, filepath.Join(dir, "trust-both.yaml"), pub, ociPub)
	code, out := gate(ociOnly, "--platform", "this", "--backend", "oci", "--runtime", runc)
	if code != 0 {
		t.Fatalf("gate --backend oci with the oci row (the legitimate case beside the next): exit %d\n%s", code, out)
	}
	code, out = gate(ociOnly, "--platform", "this", "--backend", "vm", "--vm-config", vmCfg, "--runtime", runc)
	if code != exitFailed {
		t.Fatalf("gate --backend vm with only an oci row: exit %d, want %d\n%s", code, exitFailed, out)
	}
	t.Logf("gate --backend vm with only an oci row:\n%s", out)
}

// TestQualifyVMProductionRefusedOnV1: on a cgroup v1 or hybrid host (the
// development machines) the vm backend's production qualification fails
// loudly with the backend's own gap, which names the host's fact (its
// cgroup v1 hierarchies, what they still bound, and the delegation they
// cannot give), and no passing row is signed. Where the host is cgroup
// v2, make qualify-vm's guest qualifies production instead.
func TestQualifyVMProductionRefusedOnV1(t *testing.T) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(own), ":memory:") {
		t.Skip("this host has no cgroup v1 memory hierarchy: the refusal is for cgroup v1 hosts (a cgroup v2 host qualifies production)")
	}
	custodyd, runc, busybox, probe := qualifyBins(t)
	vmCfg := vmSectionFile(t, t.TempDir(), "auto")
	code, stdout, stderr := custody(t, "qualify", "--backend", "vm", "--vm-config", vmCfg, "--tier", "production", "--only", "input/read-input",
		"--custodyd", custodyd, "--runtime", runc, "--probe", probe, "--busybox", busybox)
	if code != exitFailed || !strings.Contains(stdout, "result: FAILED") {
		t.Fatalf("qualify --backend vm --tier production: exit %d, want %d\n%s\n%s", code, exitFailed, stdout, stderr)
	}
	for _, want := range []string{"vm-host-cgroup-v2", "cgroup v1", "still bounds QEMU's memory (memory.limit_in_bytes)", "delegation"} {
		if !strings.Contains(stdout+stderr, want) {
			t.Errorf("the production refusal does not name %q:\n%s\n%s", want, stdout, stderr)
		}
	}
}

// signedOCIRow writes into dir a passing development row for this host on
// the oci backend, signed by a fresh key whose public half it returns:
// the gate's input, to show a vm gate does not take an oci row.
func signedOCIRow(t *testing.T, dir, runc string) string {
	t.Helper()
	prof, err := platform.Probe(context.Background(), platform.Options{RuntimePath: runc})
	if err != nil {
		t.Fatal(err)
	}
	plat, err := matrix.PlatformOf(prof, string(backend.KindOCI))
	if err != nil {
		t.Fatal(err)
	}
	return signedRow(t, dir, "oci", plat, matrix.TierDevelopment)
}

// signedRow writes into dir, as NAME.json, a passing row of tier for plat
// with every required family, signed by a fresh key whose public half it
// returns.
func signedRow(t *testing.T, dir, name string, plat matrix.Platform, tier string) string {
	t.Helper()
	ctx := context.Background()
	k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	runTier := "production"
	if tier == matrix.TierDevelopment {
		runTier = "development (unqualified)"
	}
	var checks []matrix.Check
	for _, f := range matrix.RequiredFamilies {
		for _, c := range []string{matrix.CaseLegitimate, matrix.CaseRefusal} {
			checks = append(checks, matrix.Check{Family: f, Name: "c-" + c, Case: c, Passed: true, Detail: "ok",
				Runs: []matrix.RunRef{{ID: "run-" + f + "-" + c, Status: "ok", Tier: runTier}}})
		}
	}
	q, err := matrix.NewQualification(plat, matrix.Info{Tier: tier, CustodyVersion: matrix.Version, SuiteVersion: "3",
		RunnerID: k.ID(), QualifiedAt: time.Now().UTC().Truncate(time.Second), Checks: checks,
		Measured: &matrix.Measured{By: matrix.MeasuredByRunner, Image: "sha256:" + strings.Repeat("ee", 32), Started: time.Now().UTC().Add(-time.Minute).Truncate(time.Second), Finished: time.Now().UTC().Truncate(time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	row, err := matrix.Sign(ctx, k, q)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(row)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, name+".json"), string(data))
	pub := filepath.Join(dir, "..", name+"-runner.pub")
	write(t, pub, string(k.PublicPEM()))
	return pub
}

// TestGateHonoursVMProductionRow: a passing, signed production row for
// this host's vm platform (the pinned QEMU, kernel, modules, init and
// stage, as custody gate probes them) admits a production release on vm;
// a matrix with only a development vm row refuses production. The row is
// signed here with a fresh key: what is under test is the gate, since no
// host here can measure a passing vm production row itself (the VM
// how-to says why).
func TestGateHonoursVMProductionRow(t *testing.T) {
	_, runc, _, _ := qualifyBins(t)
	dir := t.TempDir()
	vmCfg := vmSectionFile(t, dir, "auto")
	cfg, err := os.ReadFile(vmCfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	prof, err := platform.Probe(ctx, platform.Options{RuntimePath: runc})
	if err != nil {
		t.Fatal(err)
	}
	plat, err := qualification.VMPlatform(ctx, prof, cfg)
	if err != nil {
		t.Fatal(err)
	}
	prod, dev := filepath.Join(dir, "prod", "m"), filepath.Join(dir, "dev", "m")
	trust := trustForKeys(t, filepath.Join(dir, "trust.yaml"),
		signedRow(t, prod, "vm-production", plat, matrix.TierProduction), signedRow(t, dev, "vm-development", plat, matrix.TierDevelopment))
	gate := func(mx string) (int, string) {
		t.Helper()
		code, out, errs := custody(t, "gate", "--matrix", mx, "--tier", "production", "--trust", trust,
			"--platform", "this", "--backend", "vm", "--vm-config", vmCfg, "--runtime", runc)
		return code, out + errs
	}
	if code, out := gate(prod); code != 0 {
		t.Fatalf("gate --tier production --backend vm with a production vm row: exit %d\n%s", code, out)
	}
	if code, out := gate(dev); code != exitFailed {
		t.Fatalf("gate --tier production --backend vm with only a development vm row: exit %d, want %d\n%s", code, exitFailed, out)
	}
}

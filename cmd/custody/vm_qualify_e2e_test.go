package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/matrix"
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
	custodyd, runc, busybox, probe := qualifyBins(t)
	dir := t.TempDir()
	vmCfg := vmSectionFile(t, dir, "auto")
	rowPath, mx := filepath.Join(dir, "vm-row.json"), filepath.Join(dir, "matrix")
	start := time.Now()
	code, stdout, stderr := custody("qualify", "--backend", "vm", "--vm-config", vmCfg, "--tier", "development", "--json",
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
	for _, name := range []string{"isolation/own-namespaces", "isolation/no-capabilities", "isolation/privileged-syscalls-refused"} {
		if !na[name] {
			t.Errorf("%s is not listed as not applicable: %v", name, v.NotApplicable)
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

	// Production: the backend's own gap, loudly, and no passing row.
	code, _, stderr = custody("qualify", "--backend", "vm", "--vm-config", vmCfg, "--tier", "production", "--only", "input/read-input",
		"--custodyd", custodyd, "--runtime", runc, "--probe", probe, "--busybox", busybox)
	if code != exitFailed || !strings.Contains(stderr, "vm-host-cgroup-v2") {
		t.Fatalf("qualify --backend vm --tier production: exit %d, want %d naming vm-host-cgroup-v2\n%s", code, exitFailed, stderr)
	}
	_ = matrix.BackendOCI
}

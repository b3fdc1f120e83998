package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/testenv"
)

// startVMDaemon is startDaemon with the vm backend configured beside oci.
func startVMDaemon(t *testing.T) *env {
	t.Helper()
	return startDaemonOpts(t, testenv.BusyboxRootfs(t), daemontest.Options{Config: daemontest.VMConfig(t, "auto")})
}

// TestVMPhaseThroughCustodyd: a phase with backend: vm runs through
// custodyd in a microVM and returns a receipt that verifies, naming the
// vm backend with its kernel, init and QEMU digests; a runner without the
// vm backend refuses such a phase at admission, naming the config fix.
func TestVMPhaseThroughCustodyd(t *testing.T) {
	e := startVMDaemon(t)
	trust := e.trust(t, "trust-dev.yaml", "development")
	// The wall time covers the guest's boot too: generous under TCG.
	phase := filepath.Join(e.dir, "invm.yaml")
	write(t, phase, fmt.Sprintf(`apiVersion: custody.dev/v1alpha1
kind: Phase
name: invm
stage: build
tier: development
backend: vm
image: %q
command: ["/bin/sh", "-c", "uname -r > /out/kernel; echo built > /out/artifact"]
output:
  path: /out
resources:
  memory: 64Mi
  pids: 64
  wallTime: 120s
`, e.image))
	if code, out, errs := e.custody("admit", phase); code != exitOK {
		t.Fatalf("admit: %d\n%s\n%s", code, out, errs)
	}
	g := e.grant(t, phase)
	out := filepath.Join(e.dir, "vmout")
	code, stdout, errs := e.custody("run", "--grant", g, "--json", "--receipt", filepath.Join(out, "receipt.json"))
	if code != exitOK {
		t.Fatalf("run: %d %s %s", code, stdout, errs)
	}
	var res struct {
		Status  string
		Runtime struct{ Version, SHA256 string }
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("result: %v\n%s", err, stdout)
	}
	if res.Status != "ok" || !strings.Contains(res.Runtime.Version, "microvm") {
		t.Fatalf("result %+v", res)
	}
	kernel, err := os.ReadFile(filepath.Join(out, "outputs", "kernel"))
	if err != nil || strings.TrimSpace(string(kernel)) == "" {
		t.Fatalf("the guest kernel's release: %q %v", kernel, err)
	}
	code, vout, verrs := e.custody("verify", filepath.Join(out, "receipt.json"), "--trust", trust, "--outputs", filepath.Join(out, "outputs"))
	if code != verifyPromotable {
		t.Fatalf("verify: %d\n%s%s", code, vout, verrs)
	}
	wantBackendLines(t, vout, "vm", "kernel", "init", "modules", "qemu", "output-stream")
	t.Logf("guest kernel %s; verify:\n%s", strings.TrimSpace(string(kernel)), vout)

	// A runner without the vm backend refuses the phase before anything.
	plain := startDaemon(t)
	phase = plain.phase(t, "novm", "true", "backend: vm\n")
	if code, out, errs := plain.custody("admit", phase); code != exitRefused || !strings.Contains(out+errs, `backend "vm" is not configured`) ||
		!strings.Contains(out+errs, "backends: [oci, vm]") {
		t.Fatalf("admit on a runner without vm: %d\n%s\n%s", code, out, errs)
	}
}

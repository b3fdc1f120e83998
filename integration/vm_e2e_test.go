package integration

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/clitest"
	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/testenv"
)

// startVMDaemon is startDaemon with the vm backend configured beside oci.
func startVMDaemon(t *testing.T) *env {
	t.Helper()
	return startDaemonOpts(t, testenv.BusyboxRootfs(t), daemontest.Options{Config: daemontest.VMConfig(t, "auto")})
}

// vmPhase writes a development-tier phase on backend vm running command
// (a JSON list); its wall time covers the guest's boot too, so it is
// generous under TCG.
func (e *env) vmPhase(t *testing.T, name, command, wall string) string {
	t.Helper()
	p := filepath.Join(e.dir, name+".yaml")
	write(t, p, fmt.Sprintf(`apiVersion: custody.dev/v1alpha1
kind: Phase
name: %s
stage: build
tier: development
backend: vm
image: %q
command: %s
output:
  path: /out
resources:
  memory: 64Mi
  pids: 64
  wallTime: %s
`, name, e.image, command, wall))
	return p
}

// TestVMPhaseThroughCustodyd: a phase with backend: vm runs through
// custodyd in a microVM and returns a receipt that verifies, naming the
// vm backend with its kernel, init and QEMU digests; a runner without the
// vm backend refuses such a phase at admission, naming the config fix.
func TestVMPhaseThroughCustodyd(t *testing.T) {
	e := startVMDaemon(t)
	trust := e.trust(t, "trust-dev.yaml", "development")
	phase := e.vmPhase(t, "invm", `["/bin/sh", "-c", "uname -r > /out/kernel; echo built > /out/artifact"]`, "120s")
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
	clitest.WantBackendLines(t, vout, "vm", "kernel", "init", "stage", "modules", "qemu", "output-stream")
	t.Logf("guest kernel %s; verify:\n%s", strings.TrimSpace(string(kernel)), vout)

	// A runner without the vm backend refuses the phase before anything.
	plain := startDaemon(t)
	phase = plain.phase(t, "novm", "true", "backend: vm\n")
	if code, out, errs := plain.custody("admit", phase); code != exitRefused || !strings.Contains(out+errs, `backend "vm" is not configured`) ||
		!strings.Contains(out+errs, "backends: [oci, vm]") {
		t.Fatalf("admit on a runner without vm: %d\n%s\n%s", code, out, errs)
	}
}

// qemuOf lists the pids of QEMU processes whose command line names dir
// (the daemon's own state directory).
func qemuOf(dir string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), "custody-vm-") && strings.Contains(string(cmdline), dir+"/") {
			if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && !strings.Contains(string(st), ") Z ") {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// TestVMRecoveryAfterSIGKILL: custodyd killed while a phase runs in a
// microVM leaves QEMU running (it dropped to its own uid, which clears a
// parent-death signal); the restarted daemon recovers the attempt: QEMU
// killed by its recorded pid and start time, the output unmounted, the
// bundle removed, the runner not quarantined.
func TestVMRecoveryAfterSIGKILL(t *testing.T) {
	e := startVMDaemon(t)
	d := e.d
	phase := e.vmPhase(t, "long", `["/bin/sh", "-c", "echo started; sleep 300"]`, "600s")
	g := e.grant(t, phase)
	go e.custody("run", "--grant", g)
	deadline := time.Now().Add(2 * time.Minute)
	for len(qemuOf(d.Dir)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no QEMU started")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // past the start: its pid is on record
	d.Kill()
	if left := qemuOf(d.Dir); len(left) == 0 {
		t.Log("QEMU died with custodyd")
	} else {
		t.Logf("QEMU %v outlived custodyd, as expected", left)
	}
	d.Start()
	deadline = time.Now().Add(time.Minute)
	for len(qemuOf(d.Dir)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("QEMU %v still runs after recovery", qemuOf(d.Dir))
		}
		time.Sleep(100 * time.Millisecond)
	}
	q, err := d.Control.Quarantine(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if q.Quarantined {
		t.Fatalf("quarantined after recovery: %+v", q)
	}
	if ents, _ := os.ReadDir(filepath.Join(d.Dir, "state", "vm")); len(ents) != 0 {
		t.Errorf("bundles left after recovery: %v", ents)
	}
}

// TestVMGrantBindsGuest: a grant for a vm phase binds the backend's
// identity, the pinned kernel, modules and init among it; re-pinning the
// init after issue refuses the grant before anything runs, while a grant
// issued under the new pins runs.
func TestVMGrantBindsGuest(t *testing.T) {
	e := startVMDaemon(t)
	d := e.d
	phase := e.vmPhase(t, "bound", `["/bin/true"]`, "120s")
	old := e.grant(t, phase)
	// Re-pin the init: a copy with one more byte (an ELF ignores it).
	a := testenv.VM(t)
	data, err := os.ReadFile(a.Init)
	if err != nil {
		t.Fatal(err)
	}
	newInit := filepath.Join(e.dir, "custody-vminit")
	if err := os.WriteFile(newInit, append(data, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	oldSum, newSum := fmt.Sprintf("%x", sha256.Sum256(data)), fmt.Sprintf("%x", sha256.Sum256(append(data, 0)))
	cfg, err := os.ReadFile(d.Config)
	if err != nil {
		t.Fatal(err)
	}
	repinned := strings.Replace(string(cfg), "init: {path: "+a.Init+", sha256: "+oldSum+"}", "init: {path: "+newInit+", sha256: "+newSum+"}", 1)
	if repinned == string(cfg) {
		t.Fatalf("the init pin is not in the config:\n%s", cfg)
	}
	write(t, d.Config, repinned)
	d.Stop()
	d.Start()
	code, out, errs := e.custody("run", "--grant", old)
	if code != exitRefused || !strings.Contains(errs, "runtime") {
		t.Fatalf("a grant issued before the init was re-pinned: %d %s %s", code, out, errs)
	}
	if code, out, errs := e.custody("run", "--grant", e.grant(t, phase)); code != exitOK {
		t.Fatalf("a grant issued under the new pins: %d %s %s", code, out, errs)
	}
}

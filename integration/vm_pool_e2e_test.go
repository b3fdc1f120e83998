package integration

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// vmPoolProfile keeps two warm guests matching e.vmPhase's plans.
const vmPoolProfile = `
pool:
  - name: guests
    image: "@IMAGE@"
    backend: vm
    tier: development
    size: 2
    idleTTL: 10m
    resources: {memory: 64Mi, pids: 64, cpu: 1, tmpBytes: 16Mi, outputPath: /out, outputBytes: 32Mi}
`

// vmPoolIdle is how many warm guests the pool holds, and its last error.
func vmPoolIdle(t *testing.T, e *env) (int, string) {
	t.Helper()
	st, err := e.d.Control.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Pool {
		if p.Name == "guests" {
			return p.Idle, p.LastError
		}
	}
	return 0, ""
}

// waitGuests waits until the pool holds n warm guests: booting under TCG
// on a busy host takes a while, so the bound is generous and only a bound.
func waitGuests(t *testing.T, e *env, n int) {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for {
		idle, lastErr := vmPoolIdle(t, e)
		if idle == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the vm pool holds %d warm guest(s), want %d (last error %q)", idle, n, lastErr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestVMPoolRecoveredAfterSIGKILL: custodyd killed with a full vm pool
// (two guests booted and waiting for their take) leaves their QEMU
// processes, output mounts, cgroups and bundles; the restarted custodyd
// recovers each member to an explicit state and leaves nothing of them,
// is not quarantined, fills the pool again, and serves a vm phase from it
// whose receipt verifies and says pooled.
func TestVMPoolRecoveredAfterSIGKILL(t *testing.T) {
	e := startVMDaemon(t)
	d := e.d
	pol, err := os.ReadFile(d.Policy)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.Policy, append(pol, strings.ReplaceAll(vmPoolProfile, "@IMAGE@", e.image)...), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := e.custody("policy", "reload"); code != 0 {
		t.Fatalf("policy reload: %s %s", out, errs)
	}
	waitGuests(t, e, 2)
	bundles := filepath.Join(d.Dir, "state", "vm")
	ents, _ := os.ReadDir(bundles)
	var killed []string
	for _, b := range ents {
		killed = append(killed, b.Name())
	}
	if len(killed) != 2 || len(qemuOf(d.Dir)) != 2 {
		t.Fatalf("a full pool: bundles %v, QEMU %v", killed, qemuOf(d.Dir))
	}
	d.Kill()
	t.Logf("after SIGKILL: QEMU %v, bundles %v", qemuOf(d.Dir), killed)

	d.Start()
	ctx := context.Background()
	as, err := d.Control.Attempts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, a := range as {
		states["custody-"+a.RunID] = a.State + " " + a.Detail
	}
	for _, id := range killed {
		if st := states[id]; !strings.HasPrefix(st, "clean ") {
			t.Errorf("member %s recovered to %q, want clean", id, st)
		}
	}
	// Recovery finished before the daemon served; the refill may have
	// begun, so what is checked is the killed members' own names.
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range killed {
		if _, err := os.Stat(filepath.Join(bundles, id)); !os.IsNotExist(err) {
			t.Errorf("member %s: bundle left (%v)", id, err)
		}
		if strings.Contains(string(mounts), id) {
			t.Errorf("member %s: a mount is left", id)
		}
		if cg := cgroupsNamed("custody-vm-" + id); len(cg) > 0 {
			t.Errorf("member %s: QEMU's host cgroups left: %v", id, cg)
		}
		for _, pid := range qemuOf(d.Dir) {
			if cmd, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")); strings.Contains(string(cmd), id) {
				t.Errorf("member %s: QEMU %d is left", id, pid)
			}
		}
	}
	q, err := d.Control.Quarantine(ctx)
	if err != nil || q.Quarantined {
		t.Fatalf("quarantine after recovery: %+v %v", q, err)
	}

	// The pool fills again and serves a vm phase; its receipt says pooled.
	waitGuests(t, e, 2)
	g := e.grant(t, e.vmPhase(t, "pooledvm", `["/bin/sh", "-c", "echo pooled-vm-ok; cat /proc/sys/kernel/random/boot_id > /out/boot"]`, "120s"))
	runDir := filepath.Join(e.dir, "pooled-vm-run")
	if err := os.Mkdir(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	receipt := filepath.Join(runDir, "receipt.json")
	code, out, errs := e.custody("run", "--grant", g, "--receipt", receipt)
	if code != 0 || !strings.Contains(out, "pooled-vm-ok") {
		t.Fatalf("pooled vm run: %d %s %s", code, out, errs)
	}
	code, out, errs = e.custody("verify", receipt, "--trust", e.trust(t, "trust-dev.yaml", "development"), "--outputs", filepath.Join(runDir, "outputs"))
	if code != verifyPromotable || !strings.Contains(out, "pooled (prepared at ") {
		t.Fatalf("verify: %d %s %s", code, out, errs)
	}
	t.Log(strings.TrimSpace(out))
}

// cgroupsNamed lists the cgroup dirs named name, at most five levels
// below /sys/fs/cgroup.
func cgroupsNamed(name string) []string {
	var found []string
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, de os.DirEntry, err error) error {
		if err != nil || !de.IsDir() {
			return nil
		}
		if de.Name() == name {
			found = append(found, p)
		}
		if strings.Count(strings.TrimPrefix(p, "/sys/fs/cgroup"), "/") >= 5 {
			return filepath.SkipDir
		}
		return nil
	})
	return found
}

package oci_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/oci"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/probe"
)

type harness struct {
	b        *oci.Backend
	rootfs   string
	stateDir string
}

func newHarness(t *testing.T, userns bool, mods ...func(*oci.Options)) *harness {
	t.Helper()
	testenv.Root(t)
	path, version, sha := testenv.Runc(t)
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	opts := oci.Options{
		Runtime:    oci.Pinned{Path: path, Version: version, SHA256: sha},
		StateDir:   filepath.Join(base, "state"),
		RuntimeDir: filepath.Join(base, "run"),
	}
	if userns {
		opts.UserNS = &oci.IDMap{HostID: 1_000_000_000, Size: 65536}
	}
	for _, m := range mods {
		m(&opts)
	}
	b, err := oci.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{b: b, rootfs: testenv.BusyboxRootfs(t), stateDir: opts.StateDir}
}

// spec is a launch of args in the busybox image with modest budgets.
func (h *harness) spec(args ...string) backend.Spec {
	return backend.Spec{
		Rootfs: h.rootfs, Args: args, Env: []string{"PATH=/bin"}, Cwd: "/", Hostname: "custody",
		OutputPath: "/out", OutputBytes: 4 << 20,
		TmpBytes: 8 << 20, Memory: 64 << 20, Pids: 64, CPU: 1, FileSize: 64 << 20,
	}
}

// prepare journals the launch's intents on rec (nil: none), as the
// launch pipeline does with the grant it spends, then prepares it.
func (h *harness) prepare(t *testing.T, id string, s backend.Spec, rec backend.Recorder) backend.Sandbox {
	t.Helper()
	ctx := context.Background()
	if rec != nil {
		es, err := h.b.Intents(id)
		if err != nil {
			t.Fatal(err)
		}
		if err := rec.Intent(es...); err != nil {
			t.Fatal(err)
		}
	}
	c, err := h.b.Prepare(ctx, id, s, rec)
	if err != nil {
		if c != nil {
			c.Cleanup(ctx)
		}
		t.Fatalf("prepare: %v", err)
	}
	return c
}

func (h *harness) run(t *testing.T, id string, args []string, mod func(*backend.Spec)) (*backend.Exit, string, *backend.CleanupReport) {
	t.Helper()
	s := h.spec(args...)
	if mod != nil {
		mod(&s)
	}
	ctx := context.Background()
	c := h.prepare(t, id, s, nil)
	var out bytes.Buffer
	ex, err := c.Run(ctx, 10*time.Second, backend.IO{Stdout: &out, Stderr: &out})
	rep := c.Cleanup(ctx)
	if err != nil {
		t.Fatalf("run: %v (output %q)", err, out.String())
	}
	if !rep.Verified {
		t.Fatalf("cleanup not verified: %+v", rep)
	}
	return ex, out.String(), &rep
}

func TestRunTrivial(t *testing.T) {
	for _, userns := range []bool{true, false} {
		t.Run(map[bool]string{false: "no-userns", true: "userns"}[userns], func(t *testing.T) {
			h := newHarness(t, userns)
			ex, out, _ := h.run(t, "trivial-"+map[bool]string{false: "a", true: "b"}[userns],
				[]string{"/bin/sh", "-c", "echo hello; id -u; cat /proc/self/status | grep -E 'Cap|Seccomp|NoNewPrivs'; ls /sys/class/net; echo x > /out/f && echo wrote"}, nil)
			if ex.Code != 0 {
				t.Fatalf("exit %d: %s", ex.Code, out)
			}
			t.Logf("%+v\n%s", ex, out)
			if !strings.Contains(out, "hello") || !strings.Contains(out, "wrote") {
				t.Fatalf("output %q", out)
			}
		})
	}
}

func TestObservedControls(t *testing.T) {
	h := newHarness(t, true)
	ex, out, _ := h.run(t, "observe", []string{"/bin/sh", "-c", "sleep 0.3"}, nil)
	if ex.Code != 0 {
		t.Fatalf("exit %d: %s", ex.Code, out)
	}
	o := ex.Observation
	if o == nil {
		t.Fatal("nothing observed")
	}
	for _, ns := range []string{"cgroup", "ipc", "mnt", "net", "pid", "user", "uts"} {
		found := false
		for _, got := range o.Namespaces {
			found = found || got == ns
		}
		if !found {
			t.Errorf("namespace %s not observed as new: %v", ns, o.Namespaces)
		}
	}
	for _, c := range []string{"CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"} {
		if o.Capabilities[c] != "0000000000000000" {
			t.Errorf("%s = %q, want none", c, o.Capabilities[c])
		}
	}
	if !o.NoNewPrivs || o.Seccomp != "filter" {
		t.Errorf("noNewPrivs=%v seccomp=%q", o.NoNewPrivs, o.Seccomp)
	}
	if o.Cgroup.MemoryLimitBytes != 64<<20 || o.Cgroup.PidsLimit != 64 || o.Cgroup.CPUQuotaMicros != 100000 {
		t.Errorf("cgroup observed %+v", o.Cgroup)
	}
	if len(o.Interfaces) != 1 || o.Interfaces[0] != "lo" {
		t.Errorf("interfaces %v, want [lo]", o.Interfaces)
	}
	rootRO := false
	for _, m := range o.Mounts {
		if m.Target == "/" {
			rootRO = m.ReadOnly
		}
	}
	if !rootRO {
		t.Errorf("rootfs not observed read-only: %+v", o.Mounts)
	}
}

// TestCleanupIdempotent: repeated teardown is harmless and still verified.
func TestCleanupIdempotent(t *testing.T) {
	h := newHarness(t, true)
	ctx := context.Background()
	c := h.ranTrue(t, "twice")
	for i := range 3 {
		if rep := c.Cleanup(ctx); !rep.Verified {
			t.Fatalf("cleanup #%d not verified: %+v", i+1, rep)
		}
	}
}

// TestCleanupRefusesALingeringProcess: a process left in the launch's
// cgroup makes cleanup unverified and names it; once it is gone the same
// cleanup verifies.
func TestCleanupRefusesALingeringProcess(t *testing.T) {
	h := newHarness(t, true)
	ctx := context.Background()
	const id = "lingering"
	c := h.ranTrue(t, id)
	// The launch's own cgroup (runc removed the workload leaf below it),
	// in the pids hierarchy or the unified one.
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var dir string
	for _, line := range strings.Split(strings.TrimSpace(string(own)), "\n") {
		f := strings.SplitN(line, ":", 3)
		switch {
		case len(f) == 3 && f[1] == "pids":
			dir = filepath.Join("/sys/fs/cgroup/pids", f[2], "custody", id)
		case len(f) == 3 && f[0] == "0" && f[1] == "" && dir == "":
			dir = filepath.Join("/sys/fs/cgroup", f[2], "custody", id)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the launch's cgroup: %v", err)
	}
	sleeper := exec.Command("/bin/sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	pid := strconv.Itoa(sleeper.Process.Pid)
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pid), 0); err != nil {
		t.Fatal(err)
	}
	rep := c.Cleanup(ctx)
	steps := map[string]string{}
	for _, s := range rep.Steps {
		if !s.OK {
			steps[s.Name] = s.Detail
		}
	}
	if rep.Verified || !strings.Contains(steps["cgroup-empty"], pid) || steps["cgroup-removed"] == "" {
		t.Fatalf("cleanup with process %s left in its cgroup: verified=%v, failed steps %v", pid, rep.Verified, steps)
	}
	sleeper.Process.Kill()
	sleeper.Wait()
	if rep := c.Cleanup(ctx); !rep.Verified {
		t.Fatalf("cleanup after the process went: %+v", rep)
	}
}

// ranTrue prepares and runs /bin/true as launch id, leaving it for the
// caller to clean up.
func (h *harness) ranTrue(t *testing.T, id string) backend.Sandbox {
	return h.ranTrueRecorded(t, id, nil)
}

// ranTrueRecorded is ranTrue with the launch recorded by rec.
func (h *harness) ranTrueRecorded(t *testing.T, id string, rec backend.Recorder) backend.Sandbox {
	t.Helper()
	ctx := context.Background()
	s := h.spec("/bin/true")
	s.Env, s.Hostname = nil, ""
	s.TmpBytes, s.Memory, s.Pids, s.FileSize, s.OutputBytes = 1<<20, 32<<20, 16, 1<<20, 1<<20
	c := h.prepare(t, id, s, rec)
	if _, err := c.Run(ctx, 5*time.Second, backend.IO{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// abiProbe is a static program that asks for its pid twice: through the
// native syscall, and through the i386 entry point (int 0x80, getpid =
// 20), which a 64-bit process can still reach.
const abiProbe = `#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>
int main(void) {
	long compat;
	__asm__ volatile("int $0x80" : "=a"(compat) : "a"(20L) : "memory");
	printf("native=%ld i386=%ld\n", (long)syscall(SYS_getpid), compat);
	return 0;
}
`

// TestFilterRefusesTheI386ABI runs a real program both ways under runc:
// the native syscall works and the i386 one is refused with EPERM by the
// filter the gate installs. On the host, without a filter, both answer,
// which shows the kernel has the entry point to refuse.
func TestFilterRefusesTheI386ABI(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the i386 entry point is amd64's; this is %s", runtime.GOARCH)
	}
	h := newHarness(t, true)
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		testenv.Missing(t, "gcc (apt install gcc libc6-dev), to build the i386-ABI probe")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, bin := filepath.Join(dir, "abi.c"), filepath.Join(dir, "abi")
	if err := os.WriteFile(src, []byte(abiProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-static", "-O1", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("build the probe: %v: %s", err, out)
	}
	host, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("the probe on the host: %v", err)
	}
	var native, compat int
	if _, err := fmt.Sscanf(string(host), "native=%d i386=%d", &native, &compat); err != nil || compat != native {
		t.Fatalf("on the host, without a filter, both calls must give the pid: %q", host)
	}
	_, out, _ := h.run(t, "i386-abi", []string{"/in/abi"}, func(s *backend.Spec) {
		s.Inputs = []backend.Mount{{Source: dir, Target: "/in"}}
	})
	if want := fmt.Sprintf("native=1 i386=%d", -int(syscall.EPERM)); strings.TrimSpace(out) != want {
		t.Fatalf("in the container: %q, want %q (native allowed, i386 refused with EPERM)", strings.TrimSpace(out), want)
	}
}

// TestFilterRefusesMempolicy runs the probe's privileged attempts under
// runc: set_mempolicy and get_mempolicy, which moby's default profile
// allows only with CAP_SYS_NICE, are refused with EPERM by the filter the
// gate installs. The same probe on the host, without a filter, gets an
// answer from both, which shows the kernel has them to refuse.
func TestFilterRefusesMempolicy(t *testing.T) {
	h := newHarness(t, true)
	bin := os.Getenv("CUSTODY_PROBE")
	if bin == "" {
		testenv.Missing(t, "custody-probe ($CUSTODY_PROBE, set by make test)")
	}
	names := []string{"set_mempolicy(MPOL_DEFAULT)", "get_mempolicy"}
	host, err := exec.Command(bin, "-syscalls").Output()
	if err != nil {
		t.Fatalf("the probe on the host: %v", err)
	}
	for _, n := range names {
		if a := syscallAttempt(t, host, n); !a.OK {
			t.Fatalf("on the host, without a filter, %s must work: %+v", n, a)
		}
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "custody-probe"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	ex, out, _ := h.run(t, "mempolicy", []string{"/in/custody-probe", "-syscalls"}, func(s *backend.Spec) {
		s.Inputs = []backend.Mount{{Source: dir, Target: "/in"}}
	})
	if ex.Code != 0 {
		t.Fatalf("probe exit %d: %s", ex.Code, out)
	}
	for _, n := range names {
		if a := syscallAttempt(t, []byte(out), n); a.OK || a.Errno != "EPERM" {
			t.Errorf("in the container, %s: %+v, want refused with EPERM", n, a)
		}
	}
}

func syscallAttempt(t *testing.T, report []byte, name string) probe.Attempt {
	t.Helper()
	var rep probe.Report
	if err := json.Unmarshal(report, &rep); err != nil {
		t.Fatalf("probe report: %v: %.500s", err, report)
	}
	for _, a := range rep.Syscalls {
		if a.Name == name {
			return a
		}
	}
	t.Fatalf("the probe did not try %s", name)
	return probe.Attempt{}
}

// TestScratchWithinTmpBudget: with and without a user namespace, /dev and
// /sys/fs/cgroup refuse writes, and /tmp and /dev/shm, which do take
// writes, share the tmp budget: 8Mi fills neither past its share, and the
// two together hold at most the budget.
func TestScratchWithinTmpBudget(t *testing.T) {
	for _, userns := range []bool{true, false} {
		t.Run(map[bool]string{false: "no-userns", true: "userns"}[userns], func(t *testing.T) {
			h := newHarness(t, userns)
			const tmp = 8 << 20
			script := `for d in /dev /sys/fs/cgroup; do if touch $d/x 2>/dev/null; then echo "wrote $d"; else echo "refused $d"; fi; done
for d in /tmp /dev/shm; do dd if=/dev/zero of=$d/f bs=64k count=256 2>/dev/null; echo "$d $(wc -c < $d/f)"; done
echo ok > /dev/null && echo devnull`
			ex, out, _ := h.run(t, "scratch-"+map[bool]string{false: "a", true: "b"}[userns], []string{"/bin/sh", "-c", script},
				func(s *backend.Spec) { s.TmpBytes = tmp })
			if ex.Code != 0 {
				t.Fatalf("exit %d: %s", ex.Code, out)
			}
			var sizes [2]int64
			for _, line := range strings.Split(out, "\n") {
				var d string
				var n int64
				if _, err := fmt.Sscanf(line, "%s %d", &d, &n); err == nil {
					sizes[map[string]int{"/tmp": 0, "/dev/shm": 1}[d]] = n
				}
			}
			if !strings.Contains(out, "refused /dev\n") || !strings.Contains(out, "refused /sys/fs/cgroup\n") || !strings.Contains(out, "devnull") {
				t.Fatalf("/dev and /sys/fs/cgroup must refuse writes and /dev/null take them:\n%s", out)
			}
			if sizes[0] == 0 || sizes[1] == 0 || sizes[0]+sizes[1] > tmp {
				t.Fatalf("/tmp took %d and /dev/shm %d bytes: both must take some, together at most %d\n%s", sizes[0], sizes[1], tmp, out)
			}
		})
	}
}

// TestDeviceOwnersAsConfigured: the owners config.json states for each
// device node are the ones the workload sees with stat, with a user
// namespace (host nodes bind-mounted: the overflow id) and without (nodes
// made by runc as 0:0).
func TestDeviceOwnersAsConfigured(t *testing.T) {
	for _, userns := range []bool{true, false} {
		t.Run(map[bool]string{false: "no-userns", true: "userns"}[userns], func(t *testing.T) {
			h := newHarness(t, userns)
			ctx := context.Background()
			s := h.spec("/bin/sh", "-c", "for d in /dev/*; do [ -c $d ] && stat -c '%n %u %g' $d; done")
			s.Hostname = ""
			s.TmpBytes, s.Memory, s.Pids, s.FileSize, s.OutputBytes = 1<<20, 32<<20, 16, 1<<20, 1<<20
			sb := h.prepare(t, "devowners-"+map[bool]string{false: "a", true: "b"}[userns], s, nil)
			c := sb.(*oci.Container)
			defer c.Cleanup(ctx)
			var out bytes.Buffer
			if ex, err := c.Run(ctx, 10*time.Second, backend.IO{Stdout: &out, Stderr: &out}); err != nil || ex.Code != 0 {
				t.Fatalf("run: %v %+v: %s", err, ex, out.String())
			}
			var cfg struct {
				Linux struct {
					Devices []struct {
						Path     string
						UID, GID uint32
					}
				}
			}
			if err := json.Unmarshal(c.Config(), &cfg); err != nil {
				t.Fatal(err)
			}
			seen := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				if f := strings.Fields(line); len(f) == 3 {
					seen[f[0]] = f[1] + ":" + f[2]
				}
			}
			if len(cfg.Linux.Devices) == 0 {
				t.Fatal("config.json lists no devices")
			}
			for _, d := range cfg.Linux.Devices {
				if want := fmt.Sprintf("%d:%d", d.UID, d.GID); seen[d.Path] != want {
					t.Errorf("%s: config.json says owner %s, the workload sees %q", d.Path, want, seen[d.Path])
				}
			}
			t.Logf("owners seen: %v", seen)
		})
	}
}

// journal keeps what a launch records, as recovery gets it back.
type journal struct {
	order []string
	res   map[string]backend.Resource
}

func (j *journal) put(state string, es []backend.Resource) error {
	if j.res == nil {
		j.res = map[string]backend.Resource{}
	}
	for _, e := range es {
		k := e.Kind + "\x00" + e.Name
		if _, ok := j.res[k]; !ok {
			j.order = append(j.order, k)
		}
		j.res[k] = backend.Resource{Kind: e.Kind, Name: e.Name, State: state, Identity: e.Identity}
	}
	return nil
}

func (j *journal) Intent(es ...backend.Resource) error  { return j.put("intent", es) }
func (j *journal) Created(es ...backend.Resource) error { return j.put("created", es) }
func (j *journal) Removed(es ...backend.Resource) error { return j.put("removed", es) }

func (j *journal) resources() []backend.Resource {
	var out []backend.Resource
	for _, k := range j.order {
		out = append(out, j.res[k])
	}
	return out
}

// TestRecoveryLeavesNoRuncLogs: a clean launch and a clean recovery of
// another (its runner gone before cleanup) leave no log in the state dir
// (runc's CLI left one for every call; the runtime process writes none).
func TestRecoveryLeavesNoRuncLogs(t *testing.T) {
	h := newHarness(t, true)
	ctx := context.Background()
	if rep := h.ranTrue(t, "clean-logs").Cleanup(ctx); !rep.Verified {
		t.Fatalf("cleanup: %+v", rep)
	}
	j := &journal{}
	h.ranTrueRecorded(t, "recovered-logs", j)
	// The runner "died" here: another backend on the same dirs recovers
	// from the journal alone.
	if rep := h.b.Recover(ctx, "recovered-logs", j.resources(), j); !rep.Verified {
		t.Fatalf("recovery: %+v", rep)
	}
	logs, err := filepath.Glob(filepath.Join(h.stateDir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(logs) > 0 {
		b, _ := os.ReadFile(logs[0])
		t.Fatalf("runc logs left in the state dir: %v (%q)", logs, b)
	}
}

// TestTinyTmpBudgetRefused: a tmp budget below a page, which a tmpfs
// would round up, is refused before anything is made; one page runs.
func TestTinyTmpBudgetRefused(t *testing.T) {
	h := newHarness(t, true)
	ctx := context.Background()
	s := h.spec("/bin/true")
	s.TmpBytes = 100
	if c, err := h.b.Prepare(ctx, "tiny-tmp", s, nil); err == nil || c != nil {
		t.Fatalf("a 100-byte tmp budget was accepted: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(filepath.Dir(h.stateDir), "run")); len(ents) > 0 {
		t.Fatalf("the refusal left launch state: %v", ents)
	}
	h.run(t, "page-tmp", []string{"/bin/true"}, func(s *backend.Spec) { s.TmpBytes = int64(os.Getpagesize()) })
}

// TestRunRefusedOutOfState: a Run after Cleanup and a second Run are
// refused with the typed error, and neither makes anything: no launch
// files, no runtime state, no cgroup, no journal record.
func TestRunRefusedOutOfState(t *testing.T) {
	h := newHarness(t, true)
	ctx := context.Background()
	wantRefused := func(t *testing.T, c backend.Sandbox, state string) {
		t.Helper()
		var out bytes.Buffer
		ex, err := c.Run(ctx, 5*time.Second, backend.IO{Stdout: &out, Stderr: &out})
		var se *oci.StateError
		if ex != nil || !errors.Is(err, oci.ErrWrongState) || !errors.As(err, &se) || se.State != state || se.Op != "run" {
			t.Fatalf("run in state %s: exit %+v, err %v; want a *StateError", state, ex, err)
		}
		if out.Len() > 0 {
			t.Errorf("a refused run wrote %q", out.String())
		}
	}

	t.Run("after-cleanup", func(t *testing.T) {
		const id = "run-after-cleanup"
		j := &journal{}
		c := h.prepare(t, id, h.spec("/bin/true"), j)
		if rep := c.Cleanup(ctx); !rep.Verified {
			t.Fatalf("cleanup: %+v", rep)
		}
		before := len(j.order)
		wantRefused(t, c, "cleaned")
		intents, err := h.b.Intents(id)
		if err != nil {
			t.Fatal(err)
		}
		if rep := h.b.VerifyAbsent(id, intents); !rep.Verified {
			t.Fatalf("the refused run made something: %+v", rep)
		}
		for _, r := range j.resources() {
			if r.State != "removed" {
				t.Errorf("journal holds %s %s as %s after the refused run", r.Kind, r.Name, r.State)
			}
		}
		if len(j.order) != before {
			t.Errorf("the refused run journalled %d new resources", len(j.order)-before)
		}
		if rep := c.Cleanup(ctx); !rep.Verified {
			t.Fatalf("cleanup after the refused run: %+v", rep)
		}
	})

	t.Run("second-run", func(t *testing.T) {
		const id = "run-twice"
		j := &journal{}
		c := h.ranTrueRecorded(t, id, j)
		defer func() {
			if rep := c.Cleanup(ctx); !rep.Verified {
				t.Errorf("cleanup: %+v", rep)
			}
		}()
		launchDir := filepath.Join(filepath.Dir(h.stateDir), "run", id)
		files := func() []string {
			ents, err := os.ReadDir(launchDir)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			return names
		}
		was, records := files(), fmt.Sprint(j.resources())
		wantRefused(t, c, "exited")
		if now := files(); fmt.Sprint(now) != fmt.Sprint(was) {
			t.Errorf("launch dir went from %v to %v", was, now)
		}
		if _, err := os.Lstat(filepath.Join(h.stateDir, id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("runtime state after the refused run: %v", err)
		}
		intents, err := h.b.Intents(id)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range intents {
			// runc removed the leaves when the first run ended.
			if r.Kind == oci.KindCgroup && filepath.Base(r.Name) == "workload" {
				if _, err := os.Lstat(r.Name); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("cgroup leaf %s after the refused run: %v", r.Name, err)
				}
			}
		}
		if now := fmt.Sprint(j.resources()); now != records {
			t.Errorf("the refused run changed the journal:\n%s\nto\n%s", records, now)
		}
	})
}

// The workload runs as the spec's user and owns its output, with and
// without a user namespace; /etc/hosts and /etc/hostname are bound
// read-only and name the UTS name. A user outside the namespace's map is
// refused before anything is made.
func TestWorkloadUserAndEtc(t *testing.T) {
	for _, userns := range []bool{true, false} {
		t.Run(map[bool]string{false: "no-userns", true: "userns"}[userns], func(t *testing.T) {
			h := newHarness(t, userns)
			ex, out, _ := h.run(t, "user-"+map[bool]string{false: "a", true: "b"}[userns],
				[]string{"/bin/sh", "-c", `echo "ids=$(id -u):$(id -g)"; echo x > /out/f && echo wrote-out
echo x >> /etc/hosts || echo hosts-ro; grep -q "127.0.0.1.*localhost $(hostname)" /etc/hosts && echo hosts-ok
test "$(cat /etc/hostname)" = "$(hostname)" && echo hostname-ok; test -e /etc/resolv.conf && ! test -s /etc/resolv.conf && echo resolv-empty`},
				func(s *backend.Spec) { s.UID, s.GID = 1000, 1000 })
			for _, w := range []string{"ids=1000:1000", "wrote-out", "hosts-ro", "hosts-ok", "hostname-ok", "resolv-empty"} {
				if ex.Code != 0 || !strings.Contains(out, w) {
					t.Fatalf("exit %d, output lacks %q:\n%s", ex.Code, w, out)
				}
			}
		})
	}
	h := newHarness(t, true)
	s := h.spec("/bin/true")
	s.UID = 65536
	c, err := h.b.Prepare(context.Background(), "user-unmapped", s, nil)
	if err == nil || !strings.Contains(err.Error(), "outside the user namespace") || c != nil {
		t.Fatalf("an unmapped uid: %v (sandbox %v)", err, c)
	}
}

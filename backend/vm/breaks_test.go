package vm_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/backend/vm"
	"github.com/custody-dev/custody/internal/testenv"
)

// TestDevReadOnlyShmInTmpBudget: the uid-0 workload cannot write to or
// make anything in /dev, while /dev/shm is a tmpfs of the tmp budget's
// quarter (as in the oci backend's containers): a small file fits, one
// past the quarter does not, and /tmp keeps the rest.
func TestDevReadOnlyShmInTmpBudget(t *testing.T) {
	b := newBackend(t, pins(t))
	s := spec(t, testenv.BusyboxRootfs(t), "/bin/sh", "-c", `
r=/tmp/r
ok() { if "$@" >/dev/null 2>&1; then echo "$name=ok" >> $r; else echo "$name=refused" >> $r; fi; }
name=dev-write ok sh -c 'echo x > /dev/newfile'
name=dev-mkdir ok mkdir /dev/shm2
name=dev-null ok sh -c 'echo x > /dev/null'
name=shm-small ok dd if=/dev/zero of=/dev/shm/a bs=1k count=512
name=shm-past ok dd if=/dev/zero of=/dev/shm/b bs=1M count=5
rm -f /dev/shm/b
name=tmp-rest ok dd if=/dev/zero of=/tmp/a bs=1M count=10
cp $r /out/r
grep -E ' /dev(/shm)? ' /proc/mounts > /out/mounts
`)
	s.TmpBytes, s.FileSize = 16<<20, 16<<20
	ex, _, stderr, files := run(t, b, s, 3*time.Minute)
	if ex.Code != 0 {
		t.Fatalf("exit %+v stderr %s", ex, stderr)
	}
	r := lines(files["r"])
	for k, want := range map[string]string{"dev-write": "refused", "dev-mkdir": "refused", "dev-null": "ok",
		"shm-small": "ok", "shm-past": "refused", "tmp-rest": "ok"} {
		if r[k] != want {
			t.Errorf("%s: %q, want %s (all: %v; mounts %s)", k, r[k], want, r, files["mounts"])
		}
	}
}

// qemuRecorder records the QEMU process a launch creates.
type qemuRecorder struct {
	partial.Nop
	mu  sync.Mutex
	pid int
}

func (r *qemuRecorder) Created(rs ...backend.Resource) error {
	for _, res := range rs {
		if res.Kind == vm.KindQEMU {
			pid, _ := strconv.Atoi(res.Identity["pid"])
			r.mu.Lock()
			r.pid = pid
			r.mu.Unlock()
		}
	}
	return nil
}

func (r *qemuRecorder) qemu() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pid
}

// TestQEMUHasNoNetworkOrStrayFDs: QEMU runs in a network namespace of its
// own, not the host's (where custodyd runs), and holds none of the
// descriptors this process has open without close-on-exec, as a daemon
// inherits them from whoever started it.
func TestQEMUHasNoNetworkOrStrayFDs(t *testing.T) {
	canary := filepath.Join(t.TempDir(), "stray-fd-canary")
	fd, err := syscall.Open(canary, syscall.O_CREAT|syscall.O_RDWR, 0o600) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	b := newBackend(t, pins(t))
	s := spec(t, testenv.BusyboxRootfs(t), "/bin/sh", "-c", "sleep 4; echo done")
	ctx := context.Background()
	rec := &qemuRecorder{}
	sb, err := b.Prepare(ctx, "t-qemu-confined", s, rec)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if rep := sb.Cleanup(ctx); !rep.Verified {
			t.Errorf("cleanup not verified: %+v", rep.Steps)
		}
	}()
	type seen struct {
		netns string
		fds   []string
	}
	got := make(chan seen, 1)
	go func() {
		for i := 0; i < 3000; i++ {
			if pid := rec.qemu(); pid > 0 {
				dir := "/proc/" + strconv.Itoa(pid)
				ns, _ := os.Readlink(dir + "/ns/net")
				ents, _ := os.ReadDir(dir + "/fd")
				var fds []string
				for _, e := range ents {
					target, _ := os.Readlink(dir + "/fd/" + e.Name())
					fds = append(fds, e.Name()+" -> "+target)
				}
				got <- seen{ns, fds}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		close(got)
	}()
	var stdout bytes.Buffer
	ex, err := sb.Run(ctx, 3*time.Minute, backend.IO{Stdout: &stdout})
	if err != nil || ex.Code != 0 || stdout.String() != "done\n" {
		t.Fatalf("run: %v %+v %q", err, ex, stdout.String())
	}
	// One digest per stream, the runner's, with its length: the vm
	// backend names none of its own (another prefix's).
	if ev := sb.Evidence(); ev["stdout"] != "" || ev["stderr"] != "" {
		t.Errorf("the vm evidence has its own stream digests: %v", ev)
	}
	q, ok := <-got
	if !ok {
		t.Fatal("QEMU's pid was never recorded")
	}
	own, _ := os.Readlink("/proc/self/ns/net")
	t.Logf("QEMU's netns %s (ours %s), fds %v", q.netns, own, q.fds)
	if q.netns == "" || q.netns == own {
		t.Errorf("QEMU runs in the host's network namespace %s", own)
	}
	if i := slices.IndexFunc(q.fds, func(f string) bool { return strings.HasSuffix(f, canary) }); i >= 0 {
		t.Errorf("QEMU inherited a stray descriptor: %s", q.fds[i])
	}
}

// TestMitigationsOnlyUnderTCG: the guest kernel runs without its
// speculative-execution mitigations only under TCG, where no guest
// instruction runs on the host's CPU; under KVM it keeps them. TCG's
// translation cache is bounded (QEMU's default, 1 GiB, is more than its
// whole host overhead).
func TestMitigationsOnlyUnderTCG(t *testing.T) {
	b := newBackend(t, pins(t))
	line := func(accel string) string {
		args := vm.BaseArgs(b, accel)
		i := slices.Index(args, "-append")
		if i < 0 || i+1 >= len(args) {
			t.Fatalf("no -append in %v", args)
		}
		return args[i+1]
	}
	if l := line("kvm"); strings.Contains(l, "mitigations=off") {
		t.Errorf("a KVM guest boots with mitigations off: %s", l)
	}
	if l := line("tcg"); !strings.Contains(l, "mitigations=off") {
		t.Errorf("a TCG guest keeps mitigations it cannot use: %s", l)
	}
	// TCG's translation cache is bounded, within QEMU's host overhead.
	args := vm.BaseArgs(b, "tcg")
	if i := slices.Index(args, "-accel"); i < 0 || args[i+1] != "tcg,tb-size=128" || vm.TCGCacheBytes >= vm.QEMUOverheadBytes {
		t.Errorf("TCG's translation cache is not bounded within QEMU's overhead: %v", args)
	}
}

// TestHostOOMKillOfQEMUIsRecorded: when QEMU's host cgroup OOM-kills it
// while the workload runs (here its limit is made smaller than the guest
// needs), Run fails and says so, and the exit it returns says what the
// host saw: an OOM kill, QEMU's peak memory and CPU time, the time; the
// workload's exit code unobserved, not 0.
func TestHostOOMKillOfQEMUIsRecorded(t *testing.T) {
	b := newBackend(t, pins(t))
	if len(b.Capabilities().Tiers["development"]) != 0 {
		testenv.Missing(t, "a host cgroup v1 memory hierarchy for QEMU (the host bound this test checks)")
	}
	var limit int64
	vm.SetHostMemoryLimit(b, func(memory int64) int64 { limit = memory; return memory })
	s := spec(t, testenv.BusyboxRootfs(t), "/bin/sh", "-c", "echo started; dd if=/dev/zero of=/dev/null bs=200M count=3; echo survived")
	s.Memory = 256 << 20
	ctx := context.Background()
	sb, err := b.Prepare(ctx, "t-host-oom", s, partial.Nop{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if rep := sb.Cleanup(ctx); !rep.Verified {
			t.Errorf("cleanup not verified: %+v", rep.Steps)
		}
	}()
	var stdout bytes.Buffer
	ex, err := sb.Run(ctx, 3*time.Minute, backend.IO{Stdout: &stdout})
	t.Logf("host limit %d: run %v; exit %+v; stdout %q", limit, err, ex, stdout.String())
	var se *vm.StartError
	if errors.As(err, &se) {
		t.Fatalf("QEMU died before the workload started (the limit is too small for the boot): %v", err)
	}
	if err == nil || ex == nil {
		t.Fatalf("a QEMU the host OOM-killed: err %v, exit %+v", err, ex)
	}
	if !ex.OOMKilled || ex.Usage.OOMKills < 1 || !ex.CodeUnobserved {
		t.Errorf("exit %+v: want OOMKilled, OOM kills >= 1, the code unobserved", ex)
	}
	if ex.Usage.PeakMemoryBytes <= 0 || ex.Usage.CPUTimeNanos <= 0 || !ex.Finished.After(ex.Started) {
		t.Errorf("usage %+v, %s..%s: the host observed QEMU's peak memory, CPU time and the time", ex.Usage, ex.Started, ex.Finished)
	}
	if ex.Observation == nil || ex.Observation.At.IsZero() {
		t.Errorf("no observation: %+v", ex.Observation)
	}
}

// TestDeepOutputTreeReportArrives: an output tree 180 directories deep,
// which goes on the streams' port and takes the host a while to extract,
// still comes back whole with the guest's report: the init waits for the
// host's acknowledgement of the report before it resets the machine, so
// no frame still queued in the port is lost.
func TestDeepOutputTreeReportArrives(t *testing.T) {
	b := newBackend(t, pins(t))
	s := spec(t, testenv.BusyboxRootfs(t), "/bin/sh", "-c", `
d=/out; i=0
while [ $i -lt 180 ]; do d=$d/d; i=$((i+1)); mkdir $d; echo $i > $d/n; done
echo bottom > $d/f && echo made`)
	s.OutputFiles = 1024
	ex, stdout, stderr, files := run(t, b, s, 5*time.Minute)
	if ex.Code != 0 || stdout != "made\n" {
		t.Fatalf("exit %+v stdout %q stderr %s", ex, stdout, stderr)
	}
	bottom := strings.Repeat("d/", 180) + "f"
	if string(files[bottom]) != "bottom\n" || len(files) != 181 {
		t.Errorf("the deep tree came back with %d files, bottom %q", len(files), files[bottom])
	}
}

// TestQEMUHeldToCPUBudget: with a CPU budget of 0.5, a workload that
// floods stdout (the init's copying and QEMU's own threads work with it)
// holds QEMU itself to half a core: its host cpu cgroup has the quota,
// and QEMU's CPU time over its lifetime stays near half (how often it was
// throttled depends on how busy the host is, so it is only logged).
func TestQEMUHeldToCPUBudget(t *testing.T) {
	b := newBackend(t, pins(t))
	if len(b.Capabilities().Tiers["development"]) != 0 {
		testenv.Missing(t, "host cgroup v1 hierarchies for QEMU (the cpu quota this test checks)")
	}
	s := spec(t, testenv.BusyboxRootfs(t), "/bin/sh", "-c", "yes 0123456789abcdef0123456789abcdef | head -c 8000000")
	s.CPU = 0.5
	ctx := context.Background()
	const id = "t-qemu-cpu"
	sb, err := b.Prepare(ctx, id, s, partial.Nop{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if rep := sb.Cleanup(ctx); !rep.Verified {
			t.Errorf("cleanup not verified: %+v", rep.Steps)
		}
	}()
	ex, err := sb.Run(ctx, 5*time.Minute, backend.IO{})
	if err != nil || ex.Code != 0 {
		t.Fatalf("run: %v %+v", err, ex)
	}
	rs, err := b.Intents(id)
	if err != nil {
		t.Fatal(err)
	}
	quota, throttled := "", ""
	for _, r := range rs {
		// cgroup v1's cpu.cfs_quota_us, or the quota of v2's cpu.max.
		data, err := os.ReadFile(filepath.Join(r.Name, "cpu.cfs_quota_us"))
		if err != nil {
			data, err = os.ReadFile(filepath.Join(r.Name, "cpu.max"))
			data, _, _ = bytes.Cut(data, []byte(" "))
		}
		if err == nil {
			quota = strings.TrimSpace(string(data))
			stat, _ := os.ReadFile(filepath.Join(r.Name, "cpu.stat"))
			throttled = lines([]byte(strings.ReplaceAll(string(stat), " ", "=")))["nr_throttled"]
		}
	}
	life := ex.Finished.Sub(ex.Started)
	share := float64(ex.Usage.CPUTimeNanos) / float64(life)
	t.Logf("QEMU: cpu.cfs_quota_us %q, nr_throttled %q, CPU %s over %s (%.2f cores); notes %q", quota, throttled,
		time.Duration(ex.Usage.CPUTimeNanos), life, share, ex.Observation.Notes)
	if quota != "50000" {
		t.Fatalf("QEMU's host cpu cgroup quota %q, want 50000 (0.5 of a 100 ms period)", quota)
	}
	if share > 0.6 {
		t.Errorf("QEMU used %.2f cores under a budget of 0.5", share)
	}
}

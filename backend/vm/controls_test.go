package vm_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/vm/guest"
	"github.com/custody-dev/custody/internal/testenv"
)

// lines parses "key=value" lines.
func lines(data []byte) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// TestIsolationControls runs one guest that checks, each with a
// legitimate case beside the refusal: the input is readable but not
// writable and the host's copy is unchanged; the rootfs is read-only while
// /tmp and the output are writable; the environment holds the declared
// variables only (a canary in the host's environment is absent); the only
// interface is loopback, which works, and a connect out fails; the root
// workload reads /proc/self/status and /proc/sys, but its writes to
// kernel.core_pattern and /proc/sysrq-trigger fail and core_pattern, read
// back through the output, is unchanged, and /proc/kcore and
// /proc/timer_list are masked.
// burn runs a CPU burner for two seconds and writes its user and system
// ticks (of 100 a second) to /out/burn.
const burn = `
sh -c 'while :; do :; done' & p=$!
sleep 2
cut -d' ' -f14,15 /proc/$p/stat > /out/burn
kill $p
`

const burnTicksAll = 200

func burnTicks(t *testing.T, data []byte) int {
	f := strings.Fields(string(data))
	if len(f) != 2 {
		t.Fatalf("burner ticks %q", data)
	}
	u, err1 := strconv.Atoi(f[0])
	s, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		t.Fatalf("burner ticks %q", data)
	}
	return u + s
}

func TestIsolationControls(t *testing.T) {
	opts := pins(t)
	b := newBackend(t, opts)
	rootfs := testenv.BusyboxRootfs(t)
	in := t.TempDir()
	if err := os.WriteFile(filepath.Join(in, "data"), []byte("input bytes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CUSTODY_HOST_CANARY", "leaked")
	s := spec(t, rootfs, "/bin/sh", "-c", `
r=/out/r
ok() { if "$@" >/dev/null 2>&1; then echo "$name=ok" >> $r; else echo "$name=refused" >> $r; fi; }
name=input-read ok cat /in/data
name=input-write ok sh -c 'echo x > /in/data'
name=input-create ok touch /in/new
name=rootfs-write ok touch /bin/new
name=tmp-write ok sh -c 'echo x > /tmp/x'
name=out-write ok sh -c 'echo x > /out/x'
env > /out/env
sed -n 's/^ *\([a-z0-9]*\):.*/\1/p' /proc/net/dev > /out/net
(nc -l -p 7000 127.0.0.1 > /out/lo & sleep 1; echo hello | nc 127.0.0.1 7000; wait) 2>/dev/null
name=egress ok sh -c 'echo x | nc -w 2 10.0.2.2 80'
name=egress-public ok sh -c 'echo x | nc -w 2 1.1.1.1 53'
grep '^Uid:' /proc/self/status > /out/status
cat /proc/sys/kernel/core_pattern > /out/core_pattern.before
name=sysctl-write ok sh -c 'echo "|/bin/false" > /proc/sys/kernel/core_pattern'
name=sysrq-write ok sh -c 'echo h > /proc/sysrq-trigger'
cat /proc/sys/kernel/core_pattern > /out/core_pattern
name=kcore-masked ok test -c /proc/kcore
head -c 64 /proc/timer_list | wc -c > /out/timer_list
`+burn)
	s.Inputs = []backend.Mount{{Source: in, Target: "/in"}}
	s.Env = []string{"DECLARED=yes", "PATH=/bin"}
	ex, _, stderr, files := run(t, b, s, 2*time.Minute)
	if ex.Code != 0 {
		t.Fatalf("exit %+v stderr %s", ex, stderr)
	}
	r := lines(files["r"])
	for k, want := range map[string]string{
		"input-read": "ok", "input-write": "refused", "input-create": "refused", "rootfs-write": "refused",
		"tmp-write": "ok", "out-write": "ok", "egress": "refused", "egress-public": "refused",
		"sysctl-write": "refused", "sysrq-write": "refused", "kcore-masked": "ok",
	} {
		if r[k] != want {
			t.Errorf("%s: %q, want %s (all: %v)", k, r[k], want, r)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(in, "data")); string(data) != "input bytes\n" {
		t.Errorf("the host's input changed: %q", data)
	}
	env := lines(files["env"])
	if env["DECLARED"] != "yes" {
		t.Errorf("declared variable missing: %v", env)
	}
	for k := range env {
		if k == "CUSTODY_HOST_CANARY" || !map[string]bool{"DECLARED": true, "PATH": true, "PWD": true, "SHLVL": true, "r": true, "name": true, "_": true}[k] {
			t.Errorf("undeclared variable %s in the guest", k)
		}
	}
	if got := strings.Fields(string(files["net"])); len(got) != 1 || got[0] != "lo" {
		t.Errorf("interfaces %v, want only lo (no NIC)", got)
	}
	if string(files["lo"]) != "hello\n" {
		t.Errorf("loopback: %q, want hello", files["lo"])
	}
	if ex.Observation == nil || len(ex.Observation.Interfaces) != 1 {
		t.Errorf("observation %+v", ex.Observation)
	}
	if f := strings.Fields(string(files["status"])); len(f) < 2 || f[1] != "0" {
		t.Errorf("/proc/self/status: %q, want the root workload's Uid line", files["status"])
	}
	before, after := string(files["core_pattern.before"]), string(files["core_pattern"])
	if before == "" || after != before || strings.Contains(after, "/bin/false") {
		t.Errorf("kernel.core_pattern %q before the write, %q after: want it read and unchanged", before, after)
	}
	if got := strings.TrimSpace(string(files["timer_list"])); got != "0" {
		t.Errorf("/proc/timer_list gave %s bytes, want it masked (0)", got)
	}
	// CPU 1 on the guest's one vCPU: no quota, and a burner has the CPU.
	if ticks := burnTicks(t, files["burn"]); ticks < burnTicksAll*7/10 {
		t.Errorf("a CPU burner without a quota ran %d of %d ticks", ticks, burnTicksAll)
	}
	if q := ex.Observation.Cgroup.CPUQuotaMicros; q != 0 || !slices.Contains(ex.Observation.Notes, guest.CPUHeldNote(1, 1)) {
		t.Errorf("CPU 1 on one vCPU: quota %d µs, notes %q; want none, held by the vCPU", q, ex.Observation.Notes)
	}
	ro := map[string]bool{}
	for _, m := range ex.Observation.Mounts {
		ro[m.Target] = m.ReadOnly
	}
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger"} {
		if !ro[p] {
			t.Errorf("the guest does not report %s mounted read-only: %+v", p, ex.Observation.Mounts)
		}
	}
}

// TestBudgets runs one guest that checks the output bound (within it a
// write succeeds, past it ENOSPC), the memory bound (a small allocation
// succeeds, a hog is OOM-killed by the guest's cgroup), the pids bound
// (a few processes start, a fork past pids.max fails), the file size
// limit, and the workload's read-only view of its cgroup (its limits
// readable, not writable); the host reads back what the guest's cgroup
// enforced.
func TestBudgets(t *testing.T) {
	opts := pins(t)
	b := newBackend(t, opts)
	rootfs := testenv.BusyboxRootfs(t)
	// The burner first: pids-many leaves the pids bound full for a while.
	s := spec(t, rootfs, "/bin/sh", "-c", burn+`
r=/tmp/r
ok() { if "$@" >/dev/null 2>&1; then echo "$name=ok" >> $r; else echo "$name=refused" >> $r; fi; }
name=out-small ok dd if=/dev/zero of=/out/small bs=1k count=512
name=out-past ok dd if=/dev/zero of=/out/past bs=1M count=8
rm -f /out/past
name=mem-small ok dd if=/dev/zero of=/dev/null bs=8M count=1
name=mem-hog ok dd if=/dev/zero of=/dev/null bs=100M count=1
name=pids-few ok sh -c 'for i in 1 2 3; do sleep 1 & done; wait'
name=pids-many ok sh -c 'for i in $(seq 40); do sleep 3 & done; wait'
name=fsize-small ok dd if=/dev/zero of=/tmp/f bs=1k count=64
name=fsize-past ok dd if=/dev/zero of=/tmp/f bs=1M count=6
name=cgroup-read ok sh -c 'cat /sys/fs/cgroup/cpu.max /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max > /out/cgroup'
name=cgroup-raise ok sh -c 'echo max > /sys/fs/cgroup/memory.max'
name=cgroup-quota ok sh -c 'echo max > /sys/fs/cgroup/cpu.max'
name=cgroup-create ok mkdir /sys/fs/cgroup/sub
cp $r /out/r
`)
	s.OutputBytes, s.Pids, s.Memory, s.FileSize, s.CPU = 2<<20, 16, 64<<20, 4<<20, 0.5
	s.TmpBytes = 16 << 20
	ex, _, stderr, files := run(t, b, s, 3*time.Minute)
	if ex.Code != 0 {
		t.Fatalf("exit %+v stderr %s", ex, stderr)
	}
	r := lines(files["r"])
	for k, want := range map[string]string{
		"out-small": "ok", "out-past": "refused", "mem-small": "ok", "mem-hog": "refused",
		"pids-few": "ok", "pids-many": "refused", "fsize-small": "ok", "fsize-past": "refused",
		"cgroup-read": "ok", "cgroup-raise": "refused", "cgroup-quota": "refused", "cgroup-create": "refused",
	} {
		if r[k] != want {
			t.Errorf("%s: %q, want %s (all: %v)", k, r[k], want, r)
		}
	}
	// The guest's cgroup killed the hog: an OOM kill of the workload's,
	// reported as one (as the oci backend reports its container's), while
	// the host's cgroup held QEMU without one (checkHostUsage).
	if _, _, oom := guestUsage(t, ex); oom == 0 {
		t.Errorf("the guest did not report the hog OOM-killed: %+v", ex.Observation.Notes)
	}
	if !ex.OOMKilled || ex.Usage.OOMKills == 0 {
		t.Errorf("the guest's OOM kill is not reported as one: OOMKilled %v, usage %+v", ex.OOMKilled, ex.Usage)
	}
	if ex.Usage.MemoryLimitBytes != 64<<20 || ex.Usage.PidsLimit != 16 {
		t.Errorf("limits read back %+v, want memory 64 MiB, pids 16", ex.Usage)
	}
	// The workload sees its own cgroup's limits, read-only, at
	// /sys/fs/cgroup, and as uid 0 cannot raise them.
	if got := strings.Fields(string(files["cgroup"])); !slices.Equal(got, []string{"50000", "100000", strconv.Itoa(64 << 20), "16"}) {
		t.Errorf("the workload read %q from its cgroup, want cpu.max 50000 100000, memory.max 64 MiB, pids.max 16", files["cgroup"])
	}
	// CPU 0.5: the guest's cgroup has the quota, and it holds a burner.
	if cg := ex.Observation.Cgroup; cg.CPUQuotaMicros != 50000 || cg.CPUPeriodMicros != 100000 {
		t.Errorf("CPU quota read back %d/%d µs, want 50000/100000", cg.CPUQuotaMicros, cg.CPUPeriodMicros)
	}
	if ticks := burnTicks(t, files["burn"]); ticks > burnTicksAll*65/100 {
		t.Errorf("a CPU burner under a quota of 0.5 ran %d of %d ticks", ticks, burnTicksAll)
	}
}

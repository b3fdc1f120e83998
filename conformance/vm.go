package conformance

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/randid"
	"github.com/custody-dev/custody/probe"
)

// vmSpecs is the suite on the vm backend: every family, judged at the VM
// boundary. Checks that read the sandbox through the probe and hold in a
// guest run as they are; those that relied on what only a container shows
// (its cgroup files, host-visible processes, namespaces) are reformulated
// here on host-side facts: QEMU's process and host cgroup, the result's
// cleanup steps, the guest's own kernel.
func vmSpecs() []spec {
	return []spec{
		{FamilyInput, "read-input", Legitimate, checkReadInput},
		{FamilyInput, "write-input-refused", Refusal, checkWriteInput},
		{FamilyInput, "changed-after-issue-refused", Refusal, checkInputChanged},
		{FamilyInput, "rootfs-read-only", Refusal, checkRootfsReadOnly},

		{FamilyOutput, "output-kept-by-digest", Legitimate, checkOutputKept},
		{FamilyOutput, "output-bound-enforced", Refusal, checkOutputBound},

		{FamilyEnvironment, "declared-variable-visible", Legitimate, checkDeclaredEnv},
		{FamilyEnvironment, "ambient-variables-absent", Refusal, checkAmbientEnv},
		// The guest's init gives the workload the oci backend's minimal,
		// read-only /dev (the same nodes, never the guest's devtmpfs with
		// its disks and ports), and mknod is refused to it.
		{FamilyEnvironment, "minimal-devices-work", Legitimate, checkDevicesWork},
		{FamilyEnvironment, "host-devices-absent", Refusal, checkHostDevices},

		{FamilyEgress, "loopback-works", Legitimate, checkLoopback},
		{FamilyEgress, "host-listener-unreachable", Refusal, checkEgressDenied},

		{FamilyBudgets, "memory-within-budget", Legitimate, checkVMMemoryOK},
		{FamilyBudgets, "memory-hog-oom-killed", Refusal, checkVMMemoryHog},
		{FamilyBudgets, "pids-within-budget", Legitimate, checkPidsOK},
		{FamilyBudgets, "fork-bomb-capped", Refusal, checkVMForkBomb},
		// The guest's init applies the cpu quota in the workload's cgroup
		// v2 leaf (cpu.max), shows that cgroup read-only at /sys/fs/cgroup,
		// and mounts /tmp, /dev/shm and /out as bounded tmpfs: the oci
		// checks read them through the probe, in the guest. The burn is
		// judged on the guest's own counters (checkVMCPUBurn).
		{FamilyBudgets, "cpu-quota-applied", Legitimate, checkCPUQuota},
		{FamilyBudgets, "cpu-burn-throttled", Refusal, checkVMCPUBurn},
		{FamilyBudgets, "tmp-within-budget", Legitimate, checkTmpOK},
		{FamilyBudgets, "tmp-bound-enforced", Refusal, checkTmpBound},
		{FamilyBudgets, "scratch-within-budget", Legitimate, checkScratchOK},
		{FamilyBudgets, "writable-mounts-bounded", Refusal, checkWritableMounts},
		{FamilyBudgets, "wall-time-within-budget", Legitimate, checkWallOK},
		{FamilyBudgets, "wall-time-exceeded-killed", Refusal, checkVMWallTimeout},

		// A guest's processes are not host processes: the detached child
		// is seen running inside the guest, and what the host must see go
		// after the exit or the kill is QEMU, whose end is the guest's.
		{FamilyCleanup, "detached-child-runs", Legitimate, checkVMQEMURuns},
		{FamilyCleanup, "detached-child-gone-after-exit", Refusal, checkVMGoneAfterExit},
		{FamilyCleanup, "detached-child-gone-after-timeout", Refusal, checkVMGoneAfterTimeout},

		{FamilyEvidence, "genuine-receipt-verifies", Legitimate, checkGenuineReceipt},
		{FamilyEvidence, "tampered-receipt-rejected", Refusal, checkTamperedReceipt},

		{FamilyIsolation, "ordinary-operations-work", Legitimate, checkOrdinary},
		// The guest workload runs under the oci profile's compiled filter:
		// the same probe, in the guest, is refused the same operations.
		{FamilyIsolation, "privileged-syscalls-refused", Refusal, checkPrivileged},
		// The workload stage drops every capability from the bounding
		// set, sets no_new_privs and installs the filter, as runc does.
		{FamilyIsolation, "no-capabilities", Refusal, checkNoCapabilities},
		{FamilyIsolation, "own-kernel-host-unseen", Refusal, checkVMOwnKernel},
	}
}

// vmNotApplicable are the oci suite's checks that do not apply to a
// microVM, with why. They are listed in the row, never counted as passed.
func vmNotApplicable() []NotApplicable {
	na := func(family, name, reason string) NotApplicable {
		return NotApplicable{Family: family, Name: name, Reason: reason}
	}
	const noRestricted = "the vm backend does not serve restricted egress: a guest has no NIC, and a phase asking for restricted egress on vm is refused before its grant is spent, so a vm row covers denied egress only"
	return []NotApplicable{
		na(FamilyEgress, "restricted-allowed-host-reachable", noRestricted),
		na(FamilyEgress, "restricted-everything-else-refused", noRestricted),
		na(FamilyEgress, "restricted-intercept-terminated", noRestricted),
		na(FamilyEgress, "restricted-intercept-confined", noRestricted),
		na(FamilyIsolation, "own-namespaces", "the workload's namespaces are the guest kernel's, and every kernel gives its initial uts, ipc, user and cgroup namespaces the same fixed inode numbers (4026531838, 4026531839, 4026531837, 4026531835), so comparing them with the host's proves nothing; isolation/own-kernel-host-unseen judges the boundary instead (another boot id, no host process visible)"),
	}
}

// qemuSeen is a QEMU process of the vm backend, as the host saw it.
type qemuSeen struct {
	pid     int
	cmdline string
	// memLimit is the memory limit of its host cgroup, "" if none was read.
	memLimit, memWhere string
}

// watchQEMU returns the vm backend's QEMU processes now on the host (its
// -name is custody-vm-ID), with their host cgroup memory limits.
func watchQEMU() []qemuSeen {
	var out []qemuSeen
	for _, pid := range findProcs("custody-vm-") {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte("qemu")) {
			continue
		}
		q := qemuSeen{pid: pid, cmdline: string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))}
		q.memWhere, q.memLimit = hostMemoryLimit(pid)
		out = append(out, q)
	}
	return out
}

// hostMemoryLimit reads the memory limit of pid's host cgroup: cgroup v1
// memory.limit_in_bytes, else cgroup v2 memory.max.
func hostMemoryLimit(pid int) (where, limit string) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return "", ""
	}
	defer f.Close()
	var v2 string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			p := filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes")
			if b, err := os.ReadFile(p); err == nil {
				return p, strings.TrimSpace(string(b))
			}
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		}
	}
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		p := filepath.Join(root, v2, "memory.max")
		if b, err := os.ReadFile(p); v2 != "" && err == nil {
			return p, strings.TrimSpace(string(b))
		}
	}
	return "", ""
}

// qemuOfRun picks, from what was seen, the QEMU of run id.
func qemuOfRun(seen []qemuSeen, runID string) *qemuSeen {
	for i := range seen {
		if strings.Contains(seen[i].cmdline, "custody-vm-") && strings.Contains(seen[i].cmdline, runID) {
			return &seen[i]
		}
	}
	return nil
}

// vmLaunch runs p, recording the QEMU processes on the host when the
// workload prints "started"; once the result is in it returns the run's
// QEMU as seen then (nil if it was not seen) and whether it is gone now.
// o.sinceStarted is how long the result took after "started": the guest's
// boot is not part of its wall time.
func (s *suite) vmLaunch(ctx context.Context, j *judge, p phase) (o *outcome, q *qemuSeen, gone bool) {
	var seen []qemuSeen
	var startedAt time.Time
	p.onLine = func(line string) {
		if strings.TrimSpace(line) == "started" && seen == nil {
			startedAt = time.Now()
			seen = watchQEMU()
		}
	}
	o = s.launch(ctx, j, p)
	if !startedAt.IsZero() {
		o.sinceStarted = time.Since(startedAt)
	}
	if o.res == nil || o.res.RunID == "" {
		return o, nil, false
	}
	q = qemuOfRun(seen, o.res.RunID)
	gone = true
	if q != nil {
		if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(q.pid), "cmdline")); err == nil && strings.Contains(string(b), o.res.RunID) {
			gone = false
		}
	}
	return o, q, gone
}

// cleanupSteps requires the result's cleanup to hold each named step, OK.
func cleanupSteps(j *judge, o *outcome, names ...string) {
	if o.res == nil || o.res.Cleanup == nil {
		j.fail("no cleanup record")
		return
	}
	for _, n := range names {
		found := false
		for _, st := range o.res.Cleanup.Steps {
			if st.Name == n {
				found = true
				j.require(st.OK, "cleanup step %q failed: %s", n, st.Detail)
			}
		}
		j.require(found, "the cleanup record has no step %q (steps: %s)", n, stepNames(o.res.Cleanup))
	}
}

func stepNames(c *api.Cleanup) string {
	var out []string
	for _, st := range c.Steps {
		out = append(out, st.Name)
	}
	return strings.Join(out, ", ")
}

// vmCleanupSteps are the host-side steps the vm backend's cleanup verifies.
var vmCleanupSteps = []string{"qemu gone", "output unmounted", "host cgroup removed", "bundle removed"}

func checkVMMemoryOK(ctx context.Context, s *suite, j *judge) {
	limit := 64 * mib
	o, q, _ := s.vmLaunch(ctx, j, phase{name: "q-vm-memory-ok",
		command: []string{"/bin/sh", "-c", "echo started; sleep 1; exec " + s.env.Probe + " -alloc 16Mi"}, memory: limit, wall: time.Minute})
	if !s.ran(j, o, api.StatusOK) {
		return
	}
	j.require(o.res.Usage.MemoryLimitBytes == limit, "the guest's cgroup held a memory limit of %d, want %d", o.res.Usage.MemoryLimitBytes, limit)
	if rep := j.reported(o); rep != nil {
		j.require(rep.Alloc != nil && rep.Alloc.Touched == 16*mib, "the 16Mi allocation did not complete: %+v", rep.Alloc)
	}
	s.hostHolds(j, q, limit)
	j.note("16Mi allocated and touched in a guest whose workload cgroup holds %d bytes; peak %d", limit, o.res.Usage.PeakMemoryBytes)
}

// hostHolds requires that the run's QEMU was seen on the host in a host
// cgroup whose memory limit is finite and at least the workload's budget
// (the guest's RAM is the budget plus the guest's overhead). At the
// production tier that cgroup must be a cgroup v2 leaf that also holds
// QEMU's threads and CPU (a finite pids.max and cpu.max beside its
// memory.max): what production on vm means on the host's side.
func (s *suite) hostHolds(j *judge, q *qemuSeen, budget int64) {
	if !j.require(q != nil, "the run's QEMU was not seen on the host during the run") {
		return
	}
	n, err := strconv.ParseInt(q.memLimit, 10, 64)
	if !j.require(err == nil && n >= budget && n < 1<<50, "QEMU (pid %d) is in a host cgroup with memory limit %q (%s), want a finite limit of at least %d",
		q.pid, q.memLimit, q.memWhere, budget) {
		return
	}
	if s.env.Tier != TierProduction {
		j.note("QEMU (pid %d) held by its host cgroup at %d bytes (%s)", q.pid, n, q.memWhere)
		return
	}
	if !j.require(filepath.Base(q.memWhere) == "memory.max", "at the production tier QEMU (pid %d) must be in a cgroup v2 leaf; its memory limit is %s", q.pid, q.memWhere) {
		return
	}
	leaf := filepath.Dir(q.memWhere)
	pids, _ := os.ReadFile(filepath.Join(leaf, "pids.max"))
	cpu, _ := os.ReadFile(filepath.Join(leaf, "cpu.max"))
	p, c := strings.TrimSpace(string(pids)), strings.TrimSpace(string(cpu))
	j.require(p != "" && p != "max", "QEMU's cgroup v2 leaf %s holds no finite pids.max (%q)", leaf, p)
	j.require(c != "" && !strings.HasPrefix(c, "max"), "QEMU's cgroup v2 leaf %s holds no finite cpu.max (%q)", leaf, c)
	j.note("QEMU (pid %d) held by its cgroup v2 leaf %s: memory.max %d, pids.max %s, cpu.max %s", q.pid, leaf, n, p, c)
}

func checkVMMemoryHog(ctx context.Context, s *suite, j *judge) {
	limit := 32 * mib
	o, q, _ := s.vmLaunch(ctx, j, phase{name: "q-vm-memory-hog",
		command: []string{"/bin/sh", "-c", "cp " + s.env.Probe + " /tmp/hog && echo started; sleep 1; exec /tmp/hog -alloc 256Mi"}, memory: limit, tmpBytes: 16 * mib,
		// The probe runs from the guest's /tmp (tmpfs, no swap), so its
		// own text is not reclaimable file cache: run from the image, the
		// kernel evicts and refaults the hog's text for as long as that
		// counts as progress before it OOM-kills, which under TCG on a
		// loaded host outlasted the minute below (seen in CI: 65 s, then
		// the wall kill). Reclaim is still slow under TCG; the wall time
		// is not what this check judges.
		wall: time.Minute})
	// The guest's cgroup OOM-kills the hog, and the run reports that as
	// an OOM, as the oci backend does (status oom, the kill counted),
	// inside a guest whose QEMU stayed within its host cgroup.
	if !s.ran(j, o, api.StatusOOM) {
		return
	}
	u := o.res.Usage
	j.require(o.res.Signal == "SIGKILL", "the hog ended by %q, want SIGKILL (the guest's OOM kill)", o.res.Signal)
	j.require(u.OOMKills > 0, "the result reports no OOM kill")
	j.require(o.report == nil || o.report.Alloc == nil || o.report.Alloc.Touched < 256*mib, "the probe touched all 256Mi")
	s.hostHolds(j, q, limit)
	if q != nil {
		if n, err := strconv.ParseInt(q.memLimit, 10, 64); err == nil {
			j.require(u.PeakMemoryBytes > 0 && u.PeakMemoryBytes <= n, "QEMU's host peak %d is not within its host cgroup limit %d", u.PeakMemoryBytes, n)
		}
	}
	cleanupSteps(j, o, vmCleanupSteps...)
	j.note("a 256Mi allocation under a %d-byte budget was OOM-killed in the guest (status oom, SIGKILL, %d kill(s)); QEMU's host peak %d stayed within its host cgroup", limit, u.OOMKills, u.PeakMemoryBytes)
}

func checkVMForkBomb(ctx context.Context, s *suite, j *judge) {
	const budget = 16
	o := s.launch(ctx, j, phase{name: "q-vm-fork-bomb", command: []string{s.env.Probe, "-spawn", "256", "-spawn-cmd", "/bin/sleep 30"}, pids: budget})
	if !s.ran(j, o, api.StatusOK) {
		return
	}
	j.require(o.res.Usage.PidsLimit == budget, "the guest's cgroup held a pids limit of %d, want %d", o.res.Usage.PidsLimit, budget)
	rep := j.reported(o)
	if rep == nil || !j.require(rep.Spawn != nil, "the probe did not spawn") {
		return
	}
	j.require(rep.Spawn.Started < budget, "%d processes started under a budget of %d", rep.Spawn.Started, budget)
	j.require(rep.Spawn.Errno == "EAGAIN", "spawning stopped with %s (%s), not EAGAIN", orNone(rep.Spawn.Errno), rep.Spawn.Error)
	j.note("of 256 processes asked, %d started before fork failed with %s (guest cgroup pids.max %d)", rep.Spawn.Started, rep.Spawn.Errno, budget)
}

func checkVMWallTimeout(ctx context.Context, s *suite, j *judge) {
	vmTimeout(ctx, s, j, "q-vm-wall-timeout", "echo started; sleep 120", "a 120 s sleep")
}

// checkVMGoneAfterTimeout: a detached child still sleeping in the guest
// when the wall budget kills the phase does not keep QEMU alive.
func checkVMGoneAfterTimeout(ctx context.Context, s *suite, j *judge) {
	vmTimeout(ctx, s, j, "q-vm-gone-after-timeout", "(setsid sleep 300 </dev/null >/dev/null 2>&1 &); echo started; sleep 120",
		"a 120 s sleep beside a detached child")
}

// vmTimeout runs script under a 3 s wall budget and requires the kill:
// status timeout within the budget of the workload's start, QEMU gone,
// cleanup verified.
func vmTimeout(ctx context.Context, s *suite, j *judge, name, script, what string) {
	wall := 3 * time.Second
	o, q, gone := s.vmLaunch(ctx, j, phase{name: name, command: []string{"/bin/sh", "-c", script}, wall: wall})
	if !s.ran(j, o, api.StatusTimeout) {
		return
	}
	// The guest's boot (seconds under TCG) is not wall time: the budget
	// runs from the workload's start, which it announced.
	if j.require(q != nil, "the run's QEMU was not seen on the host during the run, so its kill proves nothing") {
		j.require(gone, "QEMU (pid %d) still runs after the timeout", q.pid)
		j.require(o.sinceStarted < wall+15*time.Second, "the result came %s after the workload started, under a %s budget", o.sinceStarted.Round(time.Millisecond), wall)
	}
	cleanupSteps(j, o, vmCleanupSteps...)
	j.note("%s was stopped %s after it started (budget %s, judged from the workload's start: the boot is not wall time; %d ms with the boot), status timeout; QEMU killed and gone, cleanup verified",
		what, o.sinceStarted.Round(time.Millisecond), wall, o.res.Usage.WallMillis)
}

// guestChildRunning lists the guest's processes and prints child-running
// if a "sleep 300" is among them.
const guestChildRunning = `for f in /proc/[0-9]*/cmdline; do c=$(tr '\0' ' ' < "$f" 2>/dev/null); case "$c" in "sleep 300 ") echo child-running;; esac; done`

func checkVMQEMURuns(ctx context.Context, s *suite, j *judge) {
	o, q, _ := s.vmLaunch(ctx, j, phase{name: "q-vm-qemu-runs", command: []string{"/bin/sh", "-c",
		"(setsid sleep 300 </dev/null >/dev/null 2>&1 &); sleep 1; " + guestChildRunning + "; echo started; sleep 1"}})
	if !s.ran(j, o, api.StatusOK) {
		return
	}
	j.require(strings.Contains(o.stdout.String(), "child-running"), "the detached child was not seen running in the guest: %q", o.stdout.String())
	if j.require(q != nil, "the run's QEMU was not seen on the host while the workload ran") {
		j.require(!strings.Contains(q.cmdline, "-netdev") && !strings.Contains(q.cmdline, "-nic "), "QEMU was given a network device: %s", q.cmdline)
		j.note("a double-forked, setsid'd child ran in the guest (seen there); QEMU (pid %d) ran the phase with no network device, and the child did not hold the run", q.pid)
	}
}

func checkVMGoneAfterExit(ctx context.Context, s *suite, j *judge) {
	o, q, gone := s.vmLaunch(ctx, j, phase{name: "q-vm-gone-after-exit", command: []string{"/bin/sh", "-c", "(setsid sleep 300 </dev/null >/dev/null 2>&1 &); echo started; sleep 1"}})
	if !s.ran(j, o, api.StatusOK) {
		return
	}
	if j.require(q != nil, "the run's QEMU was not seen on the host during the run, so its absence proves nothing") {
		j.require(gone, "QEMU (pid %d) still runs after the phase's exit", q.pid)
	}
	cleanupSteps(j, o, vmCleanupSteps...)
	j.note("with a detached child still sleeping in the guest, QEMU was gone once the phase exited; cleanup verified: %s", stepNames(o.res.Cleanup))
}

// checkVMOwnKernel: the workload, root of its guest, sees a kernel of its
// own (another boot id than the host's) and none of the host's processes
// (a marker process the suite runs on the host is not among them).
func checkVMOwnKernel(ctx context.Context, s *suite, j *judge) {
	hostBoot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if !j.require(err == nil, "read the host's boot id: %v", err) {
		return
	}
	marker := "custody-qualify-host-" + randid.New(8)
	cmd := exec.Command("sleep", "300")
	cmd.Args[0] = marker
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		j.fail("start the host marker process: %v", err)
		return
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// The marker comes in the environment, so that no command line in the
	// guest holds it but a host process's would.
	script := `cat /proc/sys/kernel/random/boot_id; n=0; for f in /proc/[0-9]*/cmdline; do n=$((n+1)); c=$(tr '\0' ' ' < "$f" 2>/dev/null); case "$c" in *"$QUALIFY_MARKER"*) echo HOST-PROCESS-SEEN;; esac; done; echo "procs=$n"`
	o := s.launch(ctx, j, phase{name: "q-vm-own-kernel", command: []string{"/bin/sh", "-c", script}, env: map[string]string{"QUALIFY_MARKER": marker}})
	if !s.ran(j, o, api.StatusOK) {
		return
	}
	out := o.stdout.String()
	lines := strings.Fields(out)
	guestBoot := ""
	if len(lines) > 0 {
		guestBoot = lines[0]
	}
	host := strings.TrimSpace(string(hostBoot))
	j.require(len(guestBoot) == 36 && guestBoot != host, "the workload's boot id %q is not its own (the host's is %s)", guestBoot, host)
	j.require(!strings.Contains(out, "HOST-PROCESS-SEEN"), "the workload saw the suite's host process %s", marker)
	j.require(strings.Contains(out, "procs="), "the workload did not list its processes: %q", out)
	j.note("the workload ran on its own kernel (boot id %s, the host's %s) and saw none of the host's processes (%s)",
		guestBoot, host, strings.TrimSpace(out[strings.LastIndex(out, "procs="):]))
}

// checkVMCPUBurn: a spinner under a quota of 0.2 cores is held to it by
// the guest kernel. The run's usage is QEMU's host CPU over the whole
// launch, boot included, and QEMU's own host quota holds it near the
// budget whether or not the guest enforces anything, so the judgement is
// the guest cgroup's: its cpu.stat, read by the probe before and after
// the burn, must charge the burn at most twice the quota and show the
// kernel throttling it.
func checkVMCPUBurn(ctx context.Context, s *suite, j *judge) {
	cpuBurn(ctx, s, j, "q-vm-cpu-burn", func(cores float64, o *outcome, b *probe.BurnResult) (bool, string) {
		ok, detail := judgeGuestBurn(cores, b)
		return ok, detail + fmt.Sprintf("; QEMU's host CPU over the whole launch, boot included: %d ms in %d ms", o.res.Usage.CPUTimeMillis, o.res.Usage.WallMillis)
	})
}

// judgeGuestBurn judges a burn by its cgroup's own cpu.stat: the CPU the
// cgroup was charged while the probe spun (usage_usec) over the burn's
// wall time, within twice the quota plus 300 ms, as judgeBurn allows, and
// throttled in at least one period.
func judgeGuestBurn(cores float64, b *probe.BurnResult) (bool, string) {
	before, okB := b.Before["usage_usec"]
	after, okA := b.After["usage_usec"]
	if b.CPUStat == "" || !okB || !okA {
		return false, fmt.Sprintf("no usage was readable from the cgroup's cpu.stat (%q) around the burn", b.CPUStat)
	}
	wall := max(b.WallMillis, 1)
	used := (after - before) / 1000
	periods, throttled := b.After["nr_periods"]-b.Before["nr_periods"], b.After["nr_throttled"]-b.Before["nr_throttled"]
	allowed := int64(2*cores*float64(wall)) + 300
	detail := fmt.Sprintf("%d threads spinning for %d ms were charged %d ms of CPU by the guest's cgroup (%.2f cores) at a quota of %g cores (limit %d ms); the guest kernel throttled it in %d of %d periods",
		b.Threads, b.WallMillis, used, float64(used)/float64(wall), cores, allowed, throttled, periods)
	return used <= allowed && throttled > 0, detail
}

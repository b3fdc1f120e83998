package vm

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/internal/outputfs"
	"github.com/custody-dev/custody/internal/procfs"
)

// KindCgroup is a host cgroup dir the backend puts QEMU in.
const KindCgroup = "vm-cgroup"

// QEMUOverheadBytes is what QEMU itself may use beyond guest RAM (its
// code, TCG's translation cache, device state): the host cgroup's memory
// limit is guest RAM plus this. Measured under TCG here: a 64 MiB phase's
// QEMU peaks at 170-185 MB in its host cgroup, guest RAM (192 MiB, not all
// of it touched) and the page cache of the images it reads included. Its
// one unbounded part was TCG's translation cache, 1 GiB by QEMU's
// default, which a workload that keeps writing new code filled (QEMU grew
// from 186 to 644 MB and was OOM-killed): it is now TCGCacheBytes. So
// 384 MiB holds the cache, QEMU's own few tens of MB and the page cache,
// with room to spare; a QEMU that passes it anyway is OOM-killed by the
// host and the receipt says so.
const QEMUOverheadBytes = 384 << 20

// TCGCacheBytes bounds TCG's translation cache (-accel tcg,tb-size): a
// guest's boot and a phase's code fit in it many times over; a workload
// that outgrows it has it flushed, slower but bounded.
const TCGCacheBytes = 128 << 20

// hostMemoryLimit is the memory limit of QEMU's host cgroup for a
// launch of memory bytes: the guest's RAM and QEMU's own overhead.
func (b *Backend) hostMemoryLimit(memory int64) int64 {
	if b.hostLimit != nil {
		return b.hostLimit(memory) // a test's
	}
	return memory + GuestOverheadBytes + QEMUOverheadBytes
}

// cpuPeriodMicros is the CFS period of QEMU's host cpu cgroup.
const cpuPeriodMicros = 100000

// hostCPUQuota is the CFS quota, per cpuPeriodMicros, of QEMU's host cpu
// cgroup for a phase of cpu cores: the budget itself, at least 1 ms.
func hostCPUQuota(cpu float64) int64 {
	return max(int64(math.Ceil(cpu*cpuPeriodMicros)), 1000)
}

// QEMUPids bounds QEMU's threads in its host cgroup.
const QEMUPids = 64

// unified is the key of cgroupParents and cgroupMounts on a cgroup v2
// host: one directory holds QEMU's memory, pids and cpu limits.
const unified = "unified"

// hostCgroupParents are where QEMU's host cgroups go: on a cgroup v2
// (unified-only) host, this process's own cgroup v2 dir under the key
// unified, where a leaf per launch gets memory.max, pids.max and cpu.max
// from the controllers custodyd's cgroup delegates (the platform probe's
// V2Delegated is exactly that set: it reads a child of the same dir); on
// a cgroup v1 or hybrid host, per v1 controller custody limits QEMU with
// (memory, pids, cpu) or accounts it by (cpuacct), the dir of this
// process's own cgroup in that hierarchy. Either way QEMU's cgroups go
// under the one custodyd started in, as the oci backend's do. Custody
// never mounts a hierarchy; where one is not mounted, that controller is
// left out and the capability says so (cpuacct: the usage has no CPU
// time). The second map is each key's mount point.
func hostCgroupParents() (map[string]string, map[string]string) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, nil
	}
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil, nil
	}
	if rel, ok := unifiedOnly(own); ok {
		for _, m := range mounts {
			if m.FSType == "cgroup2" && m.Root == "/" {
				return map[string]string{unified: filepath.Join(m.Mountpoint, rel)}, map[string]string{unified: m.Mountpoint}
			}
		}
		return nil, nil
	}
	out, mnts := map[string]string{}, map[string]string{}
	for _, ctl := range []string{"memory", "pids", "cpu", "cpuacct"} {
		var mnt string
		for _, m := range mounts {
			if m.FSType == "cgroup" && slices.Contains(strings.Split(m.VFSOptions, ","), ctl) {
				mnt = m.Mountpoint
			}
		}
		if mnt == "" {
			continue
		}
		mnts[ctl] = mnt
		for _, c := range procfs.ParseCgroup(own) {
			if slices.Contains(strings.Split(c.Controllers, ","), ctl) {
				out[ctl] = filepath.Join(mnt, c.Path)
			}
		}
	}
	if out["cpu"] != "" && out["cpu"] == out["cpuacct"] {
		// Mounted together (cpu,cpuacct): one dir limits and accounts.
		delete(out, "cpuacct")
	}
	return out, mnts
}

// unifiedOnly returns this process's cgroup v2 path when the unified
// hierarchy is its only one (no v1 line in /proc/self/cgroup).
func unifiedOnly(procCgroup []byte) (string, bool) {
	lines := procfs.ParseCgroup(procCgroup)
	if len(lines) != 1 || lines[0].Controllers != "" || !strings.HasPrefix(lines[0].Path, "/") {
		return "", false
	}
	return lines[0].Path, true
}

// v2 says whether QEMU's host cgroup is a cgroup v2 leaf.
func (b *Backend) v2() bool { return b.cgroupParents[unified] != "" }

// cgroupDirs are the launch's host cgroup dirs, by controller.
func (b *Backend) cgroupDirs(id string) map[string]string {
	out := map[string]string{}
	for ctl, parent := range b.cgroupParents {
		out[ctl] = filepath.Join(parent, "custody-vm-"+id)
	}
	return out
}

func sortedCtls(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// makeCgroups creates the launch's host cgroups with QEMU's limits.
func (m *Machine) makeCgroups() error {
	dirs := m.b.cgroupDirs(m.id)
	for _, ctl := range sortedCtls(dirs) {
		dir := dirs[ctl]
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("host cgroup %s: %w", dir, err)
		}
		m.cgroups = append(m.cgroups, dir)
		idn, err := outputfs.PathIdentity(dir)
		if err != nil {
			return err
		}
		m.cgroupIDs = append(m.cgroupIDs, idn)
		if err := m.rec.Created(backend.Resource{Kind: KindCgroup, Name: dir, Identity: idn}); err != nil {
			return err
		}
		if ctl == unified {
			if err := m.limitV2(dir); err != nil {
				return err
			}
			continue
		}
		var file, value string
		switch ctl {
		case "memory":
			file, value = "memory.limit_in_bytes", strconv.FormatInt(m.b.hostMemoryLimit(m.spec.Memory), 10)
		case "pids":
			file, value = "pids.max", strconv.Itoa(QEMUPids)
		case "cpu":
			// QEMU as a whole, the guest's kernel, the init's copying of
			// the streams and QEMU's own threads with the workload, gets
			// the phase's CPU budget: the guest's cpu.max holds only the
			// workload. A 100 ms period, as the guest's.
			period := filepath.Join(dir, "cpu.cfs_period_us")
			if err := os.WriteFile(period, []byte(strconv.Itoa(cpuPeriodMicros)), 0o644); err != nil {
				return fmt.Errorf("host cgroup %s: cpu.cfs_period_us: %w", dir, err)
			}
			file, value = "cpu.cfs_quota_us", strconv.FormatInt(hostCPUQuota(m.spec.CPU), 10)
		default: // cpuacct accounts only
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
			return fmt.Errorf("host cgroup %s: %s=%s: %w", dir, file, value, err)
		}
	}
	return nil
}

// limitV2 writes QEMU's limits into its cgroup v2 leaf dir: memory.max
// (guest RAM and QEMU's overhead), pids.max and cpu.max (the phase's CPU
// budget per 100 ms, as on v1). A file that is not there is a controller
// custodyd's cgroup does not delegate: refused, never skipped (R5).
func (m *Machine) limitV2(dir string) error {
	for _, f := range [][2]string{
		{"memory.max", strconv.FormatInt(m.b.hostMemoryLimit(m.spec.Memory), 10)},
		{"pids.max", strconv.Itoa(QEMUPids)},
		{"cpu.max", fmt.Sprintf("%d %d", hostCPUQuota(m.spec.CPU), cpuPeriodMicros)},
	} {
		if err := os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0o644); err != nil {
			return fmt.Errorf("host cgroup %s: %s=%s: %w; fix: delegate memory, pids and cpu to custodyd's cgroup (Delegate=yes in its unit)", dir, f[0], f[1], err)
		}
	}
	return nil
}

// ErrCgroupJoin is returned by Run when QEMU could not be started inside
// its host cgroups: it was never started (R5).
var ErrCgroupJoin = errors.New("qemu cannot start inside its host cgroup")

// startInCgroups starts cmd from a thread that has first joined the
// launch's host cgroups, so that QEMU is born inside them: a cgroup v1
// hierarchy places a thread by its tid (the tasks file), and a forked
// child starts in its parent thread's cgroups. This host's cgroups are v1,
// where clone3's CLONE_INTO_CGROUP does not apply. The join and the start
// run on a goroutine of their own whose thread is locked for the while, so
// no other goroutine runs in QEMU's cgroups, and goes back to where it was
// before it is unlocked. Should going back fail, the goroutine exits still
// locked, so the Go runtime ends the thread and no daemon code ever runs
// in QEMU's cgroups; a QEMU started from it is killed and waited for
// (ErrCgroupJoin). If a join fails, nothing is started. After a start,
// the thread, back in its own cgroups, stays locked until exited closes
// (the caller closes it once QEMU is waited for): QEMU's Pdeathsig follows
// the thread that forked it, and a thread handed back to the scheduler
// could be ended by any goroutine that exits locked on it (the oci
// backend's namespace threads do), killing a running guest.
func (m *Machine) startInCgroups(cmd *exec.Cmd, exited <-chan struct{}) error {
	errc := make(chan error, 1)
	go func() {
		err := m.joinAndStart(cmd)
		errc <- err
		if err == nil {
			<-exited
			runtime.UnlockOSThread()
		}
	}()
	return <-errc
}

// joinAndStart is startInCgroups on its own goroutine. It returns nil with
// the thread still locked and back in its own cgroups; an error with the
// thread unlocked only if it is back there.
func (m *Machine) joinAndStart(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	if m.b.v2() {
		return m.startIntoV2(cmd)
	}
	tid := strconv.Itoa(unix.Gettid())
	own, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("%w: R5: this thread's cgroups: %v", ErrCgroupJoin, err)
	}
	var back []string
	for ctl := range m.b.cgroupDirs(m.id) {
		for _, c := range procfs.ParseCgroup(own) {
			if slices.Contains(strings.Split(c.Controllers, ","), ctl) {
				back = append(back, filepath.Join(m.b.cgroupMounts[ctl], c.Path))
			}
		}
	}
	goBack := func() error {
		for _, dir := range back {
			if err := os.WriteFile(filepath.Join(dir, "tasks"), []byte(tid), 0o644); err != nil {
				return err // still locked: see above
			}
		}
		return nil
	}
	for _, dir := range m.cgroups {
		if err := os.WriteFile(filepath.Join(dir, "tasks"), []byte(tid), 0o644); err != nil {
			if berr := goBack(); berr != nil {
				return fmt.Errorf("%w: R5: join %s: %v; and back: %v", ErrCgroupJoin, dir, err, berr)
			}
			runtime.UnlockOSThread()
			return fmt.Errorf("%w: R5: join %s: %v; fix: check that custodyd may write the cgroup v1 hierarchies it started in", ErrCgroupJoin, dir, err)
		}
	}
	closeOnExec()
	if err := cmd.Start(); err != nil {
		if berr := goBack(); berr != nil {
			return fmt.Errorf("%w: R5: start qemu: %v; and leave its cgroups: %v", ErrCgroupJoin, err, berr)
		}
		runtime.UnlockOSThread()
		return err
	}
	if berr := goBack(); berr != nil {
		// The thread ends with this goroutine (still locked); QEMU, its
		// child, must not outlive a launch that failed.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		m.b.log.Error("vm: a thread could not leave QEMU's cgroups; it ends and QEMU is killed", "launch", m.id, "err", berr)
		return fmt.Errorf("%w: R5: the starting thread cannot leave QEMU's cgroups: %v; fix: check that custodyd may write the cgroup v1 hierarchies it started in", ErrCgroupJoin, berr)
	}
	return nil
}

// startIntoV2 starts cmd born in its cgroup v2 leaf (clone3's
// CLONE_INTO_CGROUP): no thread of custodyd's ever joins it. Called with
// the thread locked; an error leaves it unlocked.
func (m *Machine) startIntoV2(cmd *exec.Cmd) error {
	if len(m.cgroups) != 1 {
		runtime.UnlockOSThread()
		return fmt.Errorf("%w: R5: no cgroup v2 leaf was made for qemu", ErrCgroupJoin)
	}
	fd, err := unix.Open(m.cgroups[0], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("%w: R5: open %s: %v", ErrCgroupJoin, m.cgroups[0], err)
	}
	defer unix.Close(fd)
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	closeOnExec()
	if err := cmd.Start(); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("%w: R5: start qemu in %s: %v", ErrCgroupJoin, m.cgroups[0], err)
	}
	return nil
}

// closeOnExec marks every descriptor of this process above stderr
// close-on-exec: Go opens its own so, but one custodyd inherited from
// whoever started it is not, and QEMU would inherit it. QEMU gets its
// standard streams and the files cmd passes (dup'ed for the child), and
// nothing else.
func closeOnExec() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
}

// checkCgroups confirms the started QEMU sits in every one of its host
// cgroups: what the host asserts about its limits and usage rests on it.
func (m *Machine) checkCgroups(pid int) error {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return fmt.Errorf("%w: R5: read qemu %d's cgroups: %v", ErrCgroupJoin, pid, err)
	}
	for ctl, dir := range m.b.cgroupDirs(m.id) {
		if !slices.Contains(m.cgroups, dir) {
			continue
		}
		found := false // the launch's cgroup name is unique to it
		for _, c := range procfs.ParseCgroup(data) {
			in := slices.Contains(strings.Split(c.Controllers, ","), ctl)
			if ctl == unified {
				in = c.Controllers == ""
			}
			if in && path.Base(c.Path) == filepath.Base(dir) {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("%w: R5: qemu %d is not in its %s cgroup %s", ErrCgroupJoin, pid, ctl, dir)
		}
	}
	return nil
}

// cpuBoundNote says whether QEMU's host CPU is held to the phase's budget.
func (m *Machine) cpuBoundNote() string {
	if d := m.b.cgroupDirs(m.id)[unified]; d != "" && slices.Contains(m.cgroups, d) {
		return fmt.Sprintf("QEMU's host CPU was held to %g core(s) by its cgroup v2 leaf (cpu.max %d %d)", m.spec.CPU, hostCPUQuota(m.spec.CPU), cpuPeriodMicros)
	}
	if d := m.b.cgroupDirs(m.id)["cpu"]; d != "" && slices.Contains(m.cgroups, d) {
		return fmt.Sprintf("QEMU's host CPU was held to %g core(s) by its host cpu cgroup (cpu.cfs_quota_us %d per %d)", m.spec.CPU, hostCPUQuota(m.spec.CPU), cpuPeriodMicros)
	}
	return "QEMU's host CPU was not bounded: this host has no cgroup v1 cpu hierarchy to put it in (the guest's cgroup still holds the workload)"
}

// hostUsage is what the host kernel accounted to QEMU's cgroups once it
// has exited: its peak memory, CPU time and the OOM kills in its memory
// cgroup, and how often that cgroup hit its limit (failcnt). These, not
// the guest's report, are what the receipt asserts (R3). A figure whose
// controller is not there, or that cannot be read, is -1: unobserved.
func (m *Machine) hostUsage() (u backend.Usage, failcnt int64) {
	dirs := m.b.cgroupDirs(m.id)
	made := func(ctl string) string {
		if d := dirs[ctl]; slices.Contains(m.cgroups, d) {
			return d
		}
		return ""
	}
	u.PeakMemoryBytes, u.OOMKills, u.CPUTimeNanos, failcnt = -1, -1, -1, -1
	if d := made(unified); d != "" {
		// memory.peak is there from Linux 5.19; older kernels leave the
		// peak unobserved. failcnt's counterpart is memory.events' max.
		u.PeakMemoryBytes = cgroupValue(d, "memory.peak", "")
		u.OOMKills = cgroupValue(d, "memory.events", "oom_kill")
		failcnt = cgroupValue(d, "memory.events", "max")
		if us := cgroupValue(d, "cpu.stat", "usage_usec"); us >= 0 {
			u.CPUTimeNanos = us * 1000
		}
		return u, failcnt
	}
	if d := made("memory"); d != "" {
		u.PeakMemoryBytes = cgroupValue(d, "memory.max_usage_in_bytes", "")
		u.OOMKills = cgroupValue(d, "memory.oom_control", "oom_kill")
		failcnt = cgroupValue(d, "memory.failcnt", "")
	}
	d := made("cpuacct")
	if d == "" {
		d = made("cpu") // cpu,cpuacct mounted together
	}
	if d != "" {
		u.CPUTimeNanos = cgroupValue(d, "cpuacct.usage", "")
	}
	return u, failcnt
}

// cgroupValue reads a cgroup file: a number, or with key the number on
// the line "key N"; -1 when it cannot be read.
func cgroupValue(dir, file, key string) int64 {
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return -1
	}
	v := strings.TrimSpace(string(data))
	if key != "" {
		v = ""
		for _, line := range strings.Split(string(data), "\n") {
			if k, n, ok := strings.Cut(line, " "); ok && k == key {
				v = n
			}
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// removeCgroup removes a host cgroup dir once it holds no process; a dir
// whose identity is not the recorded one is not touched.
func removeCgroup(dir string, want map[string]string) error {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if want != nil && !pathMatches(dir, want) {
		return fmt.Errorf("%s is not the cgroup the journal recorded: %w", dir, errNotOwned)
	}
	// A killed QEMU that another process must still reap keeps its
	// cgroup busy for a moment: retry for a while.
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := os.Remove(dir)
		switch {
		case err == nil || errors.Is(err, os.ErrNotExist):
			return nil
		case errors.Is(err, syscall.EBUSY) && time.Now().Before(deadline):
			time.Sleep(20 * time.Millisecond)
		default:
			return fmt.Errorf("remove host cgroup %s: %w", dir, err)
		}
	}
}

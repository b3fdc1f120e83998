package oci

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/internal/procfs"
)

// cgroupDirs are the directories of one container's cgroup, one per mounted
// hierarchy. runc resolves a relative cgroupsPath against the cgroup of the
// process that runs it in each hierarchy; runc is our child, so it is ours.
// Resolving the same way lets us read, kill and verify exactly the cgroup
// runc made, and nothing beside it.
type cgroupDirs struct {
	unified bool              // the host is cgroup v2 only
	dirs    map[string]string // hierarchy key ("memory", "cpu,cpuacct", "" for cgroup2) -> dir
	// parents are custody's own cgroup directly above dirs, one per
	// hierarchy: runc removes dirs when the container ends, the parent
	// keeps the memory limit and the accounting until custody removes it.
	// nil when cleaning up after another process (then dirs has them all).
	parents map[string]string
	// oomEvents is the v1 leaf's OOM eventfd while it is watched.
	oomEvents *os.File
	oomDone   chan struct{}
	ooms      atomic.Int64
	// oomLate counts the firings read only once the leaf was gone: the
	// leaf's removal fires once too, and a read that came late (a loaded
	// host) may hold an OOM's firing, the removal's, or both.
	oomLate atomic.Int64
	// pids is the leaf's pids limit watch while it is armed.
	pids *pidsWatch
}

// resolveLaunchCgroups resolves a launch's parent cgroup (rel) and the
// runtime's leaf below it (rel/leaf).
func resolveLaunchCgroups(rel, leaf string, mounts []*mountinfo.Info, own []byte) (*cgroupDirs, error) {
	cg, err := resolveCgroups(filepath.Join(rel, leaf), mounts, own)
	if err != nil {
		return nil, err
	}
	cg.parents = map[string]string{}
	for k, d := range cg.dirs {
		cg.parents[k] = filepath.Dir(d)
	}
	return cg, nil
}

// all lists every directory, leaves and parents, deepest first: the order
// they can be removed in.
func (cg *cgroupDirs) all() []string {
	var out []string
	for _, d := range cg.dirs {
		out = append(out, d)
	}
	for _, d := range cg.parents {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b string) int {
		if n := strings.Count(b, "/") - strings.Count(a, "/"); n != 0 {
			return n
		}
		return strings.Compare(a, b)
	})
	return slices.Compact(out)
}

// accounting is the directory whose counters cover the whole launch for
// controller c: the parent where there is one.
func (cg *cgroupDirs) accounting(c string) string {
	d := cg.dir(c)
	if d != "" && cg.parents != nil {
		return filepath.Dir(d)
	}
	return d
}

// watchOOM counts OOM kills in the runtime's leaf on cgroup v1, where the
// kernel counts oom_kill on the victim's own memory cgroup only, which runc
// deletes as the container ends. An eventfd registered on the leaf's
// memory.oom_control fires for each OOM, and once more when the leaf is
// removed; a firing while the leaf still exists is an OOM. cgroup v2 needs
// none of this: memory.events propagate to custody's parent.
func (cg *cgroupDirs) watchOOM() error {
	if cg.unified {
		return nil
	}
	d := cg.dir("memory")
	if d == "" {
		return nil
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("OOM notification: %w", err)
	}
	ctl, err := os.Open(filepath.Join(d, "memory.oom_control"))
	if err != nil {
		unix.Close(efd)
		return fmt.Errorf("OOM notification: %w", err)
	}
	defer ctl.Close()
	reg := fmt.Sprintf("%d %d", efd, ctl.Fd())
	if err := os.WriteFile(filepath.Join(d, "cgroup.event_control"), []byte(reg), 0); err != nil {
		unix.Close(efd)
		return fmt.Errorf("OOM notification: %w", err)
	}
	// Non-blocking and owned by the runtime poller, so Close wakes the read.
	f := os.NewFile(uintptr(efd), "oom-eventfd")
	cg.oomEvents = f
	cg.oomDone = make(chan struct{})
	go func() {
		defer close(cg.oomDone)
		var b [8]byte
		for {
			if _, err := io.ReadFull(f, b[:]); err != nil {
				return
			}
			n := int64(binary.NativeEndian.Uint64(b[:]))
			if _, err := os.Lstat(d); err != nil {
				cg.oomLate.Add(n) // see oomLate
				return
			}
			cg.ooms.Add(n)
		}
	}()
	return nil
}

// oomNotified stops watching and returns the OOM kills seen (-1: not
// watched), and the firings read only after the leaf was gone (oomLate).
// Call it once runc has deleted the leaf.
func (cg *cgroupDirs) oomNotified() (ooms, late int64) {
	if cg.oomEvents == nil {
		return -1, 0
	}
	cg.oomEvents.Close()
	<-cg.oomDone
	cg.oomEvents = nil
	return cg.ooms.Load(), cg.oomLate.Load()
}

func resolveCgroups(rel string, mounts []*mountinfo.Info, own []byte) (*cgroupDirs, error) {
	if filepath.IsAbs(rel) || strings.Contains(rel, "..") {
		return nil, fmt.Errorf("cgroups path %q must be relative and clean", rel)
	}
	var err error
	if own == nil {
		if own, err = os.ReadFile("/proc/self/cgroup"); err != nil {
			return nil, fmt.Errorf("read own cgroup: %w", err)
		}
	}
	if mounts == nil {
		if mounts, err = cgroupMounts(); err != nil {
			return nil, err
		}
	}
	cg := &cgroupDirs{dirs: map[string]string{}}
	v1 := false
	for _, m := range mounts {
		if m.FSType == "cgroup" {
			v1 = true
		}
	}
	cg.unified = !v1
	for _, line := range procfs.ParseCgroup(own) {
		key, path := line.Controllers, line.Path
		mp := hierarchyMount(mounts, key)
		if mp == "" {
			continue
		}
		cg.dirs[key] = filepath.Join(mp, path, rel)
	}
	if len(cg.dirs) == 0 {
		return nil, errors.New("no cgroup hierarchy found for this process")
	}
	return cg, nil
}

// cgroupMounts lists the mounted cgroup hierarchies.
func cgroupMounts() ([]*mountinfo.Info, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return mounts, nil
}

// hierarchyMount finds where the hierarchy named by a /proc/self/cgroup key
// is mounted ("" key = cgroup2). Only mounts of the hierarchy root count.
func hierarchyMount(mounts []*mountinfo.Info, key string) string {
	for _, m := range mounts {
		if m.Root != "/" {
			continue
		}
		if key == "" {
			if m.FSType == "cgroup2" {
				return m.Mountpoint
			}
			continue
		}
		if m.FSType != "cgroup" {
			continue
		}
		want := strings.Split(key, ",")
		have := map[string]bool{}
		for _, o := range strings.Split(m.VFSOptions, ",") {
			have[o] = true
		}
		ok := true
		for _, w := range want {
			if !have[w] {
				ok = false
			}
		}
		if ok {
			return m.Mountpoint
		}
	}
	return ""
}

// dir returns the directory of the hierarchy that carries controller c.
func (cg *cgroupDirs) dir(c string) string {
	if cg.unified || c == "" {
		return cg.dirs[""]
	}
	for key, d := range cg.dirs {
		for _, k := range strings.Split(key, ",") {
			if k == c || k == "name="+c {
				return d
			}
		}
	}
	return ""
}

// procs returns every pid still in the container's cgroup, in any hierarchy.
func (cg *cgroupDirs) procs() ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for _, d := range cg.all() {
		b, err := procfs.ReadFile(filepath.Join(d, "cgroup.procs"), 512)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", d, err)
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err == nil && !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	return out, nil
}

// leafProcs lists the members of the leaf in the hierarchy of controller c
// (the unified one on cgroup v2).
func (cg *cgroupDirs) leafProcs(c string) ([]int, error) {
	d := cg.dir(c)
	if d == "" {
		return cg.procs()
	}
	b, err := procfs.ReadFile(filepath.Join(d, "cgroup.procs"), 512)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", d, err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// usage reads the launch's accounting (peak memory, OOM kills, CPU) from
// the parent, which outlives runc's leaf, so it is still there once the
// runtime has deleted the container.
func (cg *cgroupDirs) usage() backend.Usage {
	var u backend.Usage
	if cg.unified {
		d := cg.accounting("")
		u.PeakMemoryBytes = readInt(filepath.Join(d, "memory.peak"))
		u.OOMKills = readKeyed(filepath.Join(d, "memory.events"), "oom_kill")
		u.CPUTimeNanos = readKeyed(filepath.Join(d, "cpu.stat"), "usage_usec") * 1000
		return u
	}
	if d := cg.accounting("memory"); d != "" {
		u.PeakMemoryBytes = readInt(filepath.Join(d, "memory.max_usage_in_bytes"))
		u.OOMKills = readKeyed(filepath.Join(d, "memory.oom_control"), "oom_kill")
	}
	if d := cg.accounting("cpuacct"); d != "" {
		u.CPUTimeNanos = readInt(filepath.Join(d, "cpuacct.usage"))
	}
	return u
}

// limits reads the memory and pids limits the kernel enforces on the leaf,
// while it exists.
func (cg *cgroupDirs) limits() (memory, pids int64) {
	if cg.unified {
		return readInt(filepath.Join(cg.dirs[""], "memory.max")), readInt(filepath.Join(cg.dirs[""], "pids.max"))
	}
	memory, pids = -1, -1
	if d := cg.dir("memory"); d != "" {
		memory = readInt(filepath.Join(d, "memory.limit_in_bytes"))
	}
	if d := cg.dir("pids"); d != "" {
		pids = readInt(filepath.Join(d, "pids.max"))
	}
	return memory, pids
}

// readInt and readKeyed read a cgroup file of a few lines, several per
// launch: procfs.ReadFile does it with no stat, poller registration or
// finalizer, in one read and the read that says end of file.
func readInt(p string) int64 {
	b, err := procfs.ReadFile(p, 64)
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return -1 // "max" and friends: no numeric limit
	}
	return n
}

func readKeyed(p, key string) int64 {
	b, err := procfs.ReadFile(p, 1024)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// swapAccounted reports whether memory+swap can be limited: always on
// cgroup v2, and on v1 only where the memsw files exist.
func (cg *cgroupDirs) swapAccounted() bool {
	if cg.unified {
		return true
	}
	d := cg.dir("memory")
	if d == "" {
		return false
	}
	// The container's own cgroup does not exist yet; its parent chain does.
	for p := filepath.Dir(d); len(p) > 1; p = filepath.Dir(p) {
		if _, err := os.Stat(filepath.Join(p, "memory.memsw.limit_in_bytes")); err == nil {
			return true
		}
		if _, err := os.Stat(filepath.Join(p, "memory.limit_in_bytes")); err == nil {
			return false
		}
	}
	return false
}

// cpuQuota returns the CFS quota and period in force (-1 quota: none).
func (cg *cgroupDirs) cpuQuota() (quota, period int64) {
	if cg.unified {
		b, err := os.ReadFile(filepath.Join(cg.dirs[""], "cpu.max"))
		if err != nil {
			return -1, -1
		}
		f := strings.Fields(string(b))
		if len(f) != 2 {
			return -1, -1
		}
		period, _ = strconv.ParseInt(f[1], 10, 64)
		if f[0] == "max" {
			return -1, period
		}
		quota, _ = strconv.ParseInt(f[0], 10, 64)
		return quota, period
	}
	d := cg.dir("cpu")
	return readInt(filepath.Join(d, "cpu.cfs_quota_us")), readInt(filepath.Join(d, "cpu.cfs_period_us"))
}

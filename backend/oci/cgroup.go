package oci

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// cgroupDirs are the directories of one container's cgroup, one per mounted
// hierarchy. runc resolves a relative cgroupsPath against the cgroup of the
// process that runs it in each hierarchy; runc is our child, so it is ours.
// Resolving the same way lets us read, kill and verify exactly the cgroup
// runc made, and nothing beside it.
type cgroupDirs struct {
	unified bool              // the host is cgroup v2 only
	dirs    map[string]string // hierarchy key ("memory", "cpu,cpuacct", "" for cgroup2) -> dir
}

func resolveCgroups(rel string) (*cgroupDirs, error) {
	if filepath.IsAbs(rel) || strings.Contains(rel, "..") {
		return nil, fmt.Errorf("cgroups path %q must be relative and clean", rel)
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("read own cgroup: %w", err)
	}
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	cg := &cgroupDirs{dirs: map[string]string{}}
	v1 := false
	for _, m := range mounts {
		if m.FSType == "cgroup" {
			v1 = true
		}
	}
	cg.unified = !v1
	sc := bufio.NewScanner(bytes.NewReader(own))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		key, path := parts[1], parts[2]
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
	if cg.unified {
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
	for _, d := range cg.dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
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

// remaining lists the cgroup directories that still exist.
func (cg *cgroupDirs) remaining() []string {
	var out []string
	for _, d := range cg.dirs {
		if _, err := os.Lstat(d); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// Usage is what the kernel accounted for the container's cgroup.
type Usage struct {
	PeakMemoryBytes int64 `json:"peakMemoryBytes"`
	CPUTimeNanos    int64 `json:"cpuTimeNanos"`
	OOMKills        int64 `json:"oomKills"`
	// MemoryLimitBytes and PidsLimit are read back from the live cgroup:
	// what the kernel enforced, not what was asked.
	MemoryLimitBytes int64 `json:"memoryLimitBytes"`
	PidsLimit        int64 `json:"pidsLimit"`
}

// usage reads accounting from the cgroup; call it before runc deletes it.
func (cg *cgroupDirs) usage() Usage {
	var u Usage
	if cg.unified {
		d := cg.dirs[""]
		u.PeakMemoryBytes = readInt(filepath.Join(d, "memory.peak"))
		u.OOMKills = readKeyed(filepath.Join(d, "memory.events"), "oom_kill")
		u.CPUTimeNanos = readKeyed(filepath.Join(d, "cpu.stat"), "usage_usec") * 1000
		u.MemoryLimitBytes = readInt(filepath.Join(d, "memory.max"))
		u.PidsLimit = readInt(filepath.Join(d, "pids.max"))
		return u
	}
	if d := cg.dir("memory"); d != "" {
		u.PeakMemoryBytes = readInt(filepath.Join(d, "memory.max_usage_in_bytes"))
		u.OOMKills = readKeyed(filepath.Join(d, "memory.oom_control"), "oom_kill")
		u.MemoryLimitBytes = readInt(filepath.Join(d, "memory.limit_in_bytes"))
	}
	if d := cg.dir("cpuacct"); d != "" {
		u.CPUTimeNanos = readInt(filepath.Join(d, "cpuacct.usage"))
	}
	if d := cg.dir("pids"); d != "" {
		u.PidsLimit = readInt(filepath.Join(d, "pids.max"))
	}
	return u
}

func readInt(p string) int64 {
	b, err := os.ReadFile(p)
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
	b, err := os.ReadFile(p)
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

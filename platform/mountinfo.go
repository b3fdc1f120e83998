package platform

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
)

const procSelfMountInfo = "/proc/self/mountinfo"

// mountInfo is the part of one /proc/<pid>/mountinfo line (see proc(5))
// that the cgroup probe uses, as parsed by github.com/moby/sys/mountinfo.
type mountInfo struct {
	ID, Parent   int
	Major, Minor uint32
	Root         string // path inside the filesystem that is mounted here
	MountPoint   string
	FSType       string
	Source       string
	SuperOptions []string
}

// readMountInfo parses the mountinfo file at path.
func readMountInfo(path string) ([]mountInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	mounts, err := parseMountInfo(f)
	if err != nil {
		return nil, fmt.Errorf("read mount table %s: %w", path, err)
	}
	return mounts, nil
}

// parseMountInfo parses the mountinfo format with the library, which also
// undoes the kernel's octal escaping of whitespace in paths.
func parseMountInfo(r io.Reader) ([]mountInfo, error) {
	infos, err := mountinfo.GetMountsFromReader(r, nil)
	if err != nil {
		return nil, err
	}
	mounts := make([]mountInfo, 0, len(infos))
	for _, in := range infos {
		m := mountInfo{ID: in.ID, Parent: in.Parent, Major: uint32(in.Major), Minor: uint32(in.Minor),
			Root: in.Root, MountPoint: in.Mountpoint, FSType: in.FSType, Source: in.Source}
		if in.VFSOptions != "" {
			m.SuperOptions = strings.Split(in.VFSOptions, ",")
		}
		mounts = append(mounts, m)
	}
	return mounts, nil
}

// hierarchy is one cgroup v1 hierarchy, identified by its superblock.
type hierarchy struct {
	// Controllers are the subsystems bound to the hierarchy, sorted; empty
	// for a named hierarchy such as name=systemd.
	Controllers []string
	// Name is the value of the name= mount option, if any.
	Name  string
	Mount mountInfo
}

// cgroupLayout is what the mount table says about cgroups.
type cgroupLayout struct {
	Mode    CgroupMode
	Unified *mountInfo  // the cgroup2 mount, if any
	V1      []hierarchy // sorted by mount point
}

// has reports whether the v1 hierarchy h has controller c bound to it.
func (h hierarchy) has(c string) bool { return slices.Contains(h.Controllers, c) }

// v1Hierarchy returns the v1 hierarchy that controller c is bound to.
func (l cgroupLayout) v1Hierarchy(c string) (hierarchy, bool) {
	for _, h := range l.V1 {
		if h.has(c) {
			return h, true
		}
	}
	return hierarchy{}, false
}

// classifyCgroups derives the cgroup layout from the mount table. The mode
// follows where the controllers live rather than which directory names
// exist: a cgroup2 mount with no v1 controller hierarchies is v2, both is
// hybrid (controllers are split between them), v1 controller hierarchies
// alone are v1. A v1 hierarchy with no controllers (name=systemd) does not
// make a host hybrid, because it bounds nothing.
//
// A hierarchy mounted several times (bind mounts, container runtimes) is
// reported once, preferring a mount under cgroupRoot.
func classifyCgroups(mounts []mountInfo, cgroupRoot string) cgroupLayout {
	var l cgroupLayout
	under := func(p string) bool { return within(cgroupRoot, p) }

	type dev struct{ major, minor uint32 }
	byDev := make(map[dev]int) // index into l.V1
	for i := range mounts {
		m := mounts[i]
		switch m.FSType {
		case "cgroup2":
			if l.Unified == nil || preferMount(m, *l.Unified, cgroupRoot) {
				l.Unified = &m
			}
		case "cgroup":
			d := dev{m.Major, m.Minor}
			if j, ok := byDev[d]; ok {
				if !under(l.V1[j].Mount.MountPoint) && under(m.MountPoint) {
					l.V1[j].Mount = m
				}
				continue
			}
			h := hierarchy{Mount: m}
			for _, o := range m.SuperOptions {
				if name, ok := strings.CutPrefix(o, "name="); ok {
					h.Name = name
				} else if isV1Controller(o) {
					h.Controllers = append(h.Controllers, o)
				}
			}
			slices.Sort(h.Controllers)
			byDev[d] = len(l.V1)
			l.V1 = append(l.V1, h)
		}
	}
	slices.SortFunc(l.V1, func(a, b hierarchy) int { return strings.Compare(a.Mount.MountPoint, b.Mount.MountPoint) })

	v1 := slices.ContainsFunc(l.V1, func(h hierarchy) bool { return len(h.Controllers) > 0 })
	switch {
	case l.Unified != nil && !v1:
		l.Mode = CgroupV2
	case l.Unified != nil && v1:
		l.Mode = CgroupHybrid
	case v1:
		l.Mode = CgroupV1
	default:
		l.Mode = CgroupNone
	}
	return l
}

// preferMount reports whether cgroup2 mount a is a better choice than b:
// exactly at cgroupRoot beats under it, which beats elsewhere.
func preferMount(a, b mountInfo, cgroupRoot string) bool {
	rank := func(m mountInfo) int {
		switch {
		case filepath.Clean(m.MountPoint) == filepath.Clean(cgroupRoot):
			return 2
		case within(cgroupRoot, m.MountPoint):
			return 1
		}
		return 0
	}
	return rank(a) > rank(b)
}

// isV1Controller reports whether a cgroup v1 super option names a
// controller rather than a hierarchy option (see cgroup1_parse_param in the
// kernel).
func isV1Controller(opt string) bool {
	switch opt {
	case "", "rw", "ro", "none", "all", "noprefix", "clone_children",
		"xattr", "cpuset_v2_mode", "favordynmods":
		return false
	}
	return !strings.Contains(opt, "=")
}

// within reports whether path p is dir or below it.
func within(dir, p string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(p))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// isMounted reports whether anything is mounted at target according to
// the mountinfo file at path.
func isMounted(path, target string) (bool, error) {
	mounts, err := readMountInfo(path)
	if err != nil {
		return false, err
	}
	target = filepath.Clean(target)
	return slices.ContainsFunc(mounts, func(m mountInfo) bool { return m.MountPoint == target }), nil
}

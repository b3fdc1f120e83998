package platform

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const procSelfMountInfo = "/proc/self/mountinfo"

// mountInfo is one line of /proc/<pid>/mountinfo (see proc(5)).
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

// parseMountInfo parses the mountinfo format:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// The optional fields before the "-" separator vary in number, so the
// separator, not a column index, locates the filesystem type.
func parseMountInfo(r io.Reader) ([]mountInfo, error) {
	var mounts []mountInfo
	sc := bufio.NewScanner(r)
	// Lines with long option strings (overlay lowerdir lists) can exceed the
	// scanner's 64 KiB default.
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		m, err := parseMountInfoLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		mounts = append(mounts, m)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return mounts, nil
}

func parseMountInfoLine(line string) (mountInfo, error) {
	// Whitespace inside paths is octal-escaped by the kernel, so splitting
	// on whitespace is safe.
	f := strings.Fields(line)
	sep := slices.Index(f, "-")
	if sep < 6 || len(f) < sep+3 {
		return mountInfo{}, fmt.Errorf("malformed mountinfo line %q", line)
	}
	var m mountInfo
	var err error
	if m.ID, err = strconv.Atoi(f[0]); err != nil {
		return mountInfo{}, fmt.Errorf("mount id %q: %w", f[0], err)
	}
	if m.Parent, err = strconv.Atoi(f[1]); err != nil {
		return mountInfo{}, fmt.Errorf("parent id %q: %w", f[1], err)
	}
	major, minor, ok := strings.Cut(f[2], ":")
	if !ok {
		return mountInfo{}, fmt.Errorf("device %q: want major:minor", f[2])
	}
	maj, err := strconv.ParseUint(major, 10, 32)
	if err != nil {
		return mountInfo{}, fmt.Errorf("device %q: %w", f[2], err)
	}
	mnr, err := strconv.ParseUint(minor, 10, 32)
	if err != nil {
		return mountInfo{}, fmt.Errorf("device %q: %w", f[2], err)
	}
	m.Major, m.Minor = uint32(maj), uint32(mnr)
	m.Root = unescapeMountPath(f[3])
	m.MountPoint = unescapeMountPath(f[4])
	m.FSType = f[sep+1]
	m.Source = unescapeMountPath(f[sep+2])
	if len(f) > sep+3 {
		m.SuperOptions = strings.Split(f[sep+3], ",")
	}
	return m, nil
}

// unescapeMountPath undoes the kernel's octal escaping of space, tab,
// newline and backslash (\040, \011, \012, \134) in mountinfo paths.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
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

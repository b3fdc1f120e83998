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

// probePrefix starts the name of every directory, cgroup and mount point
// the probe creates, so leftovers are recognizable.
const probePrefix = "custody-probe-"

const procSelfCgroup = "/proc/self/cgroup"

// procCgroup is one line of /proc/<pid>/cgroup (see cgroups(7)):
// "hierarchy-ID:controller-list:cgroup-path".
type procCgroup struct {
	ID          int
	Controllers []string // empty for the unified hierarchy ("0::/path")
	Path        string
}

// readProcCgroup parses the /proc/<pid>/cgroup file at path.
func readProcCgroup(path string) ([]procCgroup, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read own cgroups: %w", err)
	}
	defer f.Close()
	cgs, err := parseProcCgroup(f)
	if err != nil {
		return nil, fmt.Errorf("read own cgroups %s: %w", path, err)
	}
	return cgs, nil
}

func parseProcCgroup(r io.Reader) ([]procCgroup, error) {
	var out []procCgroup
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		// The path is last and may itself contain colons.
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("line %d: malformed %q", n, line)
		}
		id, err := strconv.Atoi(parts[0])
		if err != nil {
			return nil, fmt.Errorf("line %d: hierarchy id %q: %w", n, parts[0], err)
		}
		cg := procCgroup{ID: id, Path: parts[2]}
		if parts[1] != "" {
			cg.Controllers = strings.Split(parts[1], ",")
		}
		out = append(out, cg)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// unifiedPath returns the process's cgroup in the unified hierarchy.
func unifiedPath(cgs []procCgroup) (string, error) {
	for _, cg := range cgs {
		if cg.ID == 0 && len(cg.Controllers) == 0 {
			return cg.Path, nil
		}
	}
	return "", fmt.Errorf("no unified (0::) entry in own cgroups")
}

// v1Path returns the process's cgroup in v1 hierarchy h. A hierarchy is
// matched by any controller it binds (a controller belongs to exactly one
// hierarchy) or, for a named hierarchy, by its name.
func v1Path(cgs []procCgroup, h hierarchy) (string, error) {
	for _, cg := range cgs {
		if cg.ID == 0 {
			continue
		}
		for _, c := range cg.Controllers {
			if name, ok := strings.CutPrefix(c, "name="); ok {
				if h.Name != "" && name == h.Name {
					return cg.Path, nil
				}
			} else if slices.Contains(h.Controllers, c) {
				return cg.Path, nil
			}
		}
	}
	return "", fmt.Errorf("no own cgroup for hierarchy %s", hierarchyLabel(h))
}

// hierarchyLabel names a v1 hierarchy the way /proc/self/cgroup does.
func hierarchyLabel(h hierarchy) string {
	l := slices.Clone(h.Controllers)
	if h.Name != "" {
		l = append(l, "name="+h.Name)
	}
	return strings.Join(l, ",")
}

// cgroupDir maps a cgroup path (as /proc/self/cgroup shows it) to a
// directory under mount m. The mount may expose only a subtree of the
// hierarchy (its root field, e.g. inside a container), so the path is made
// relative to that root; a cgroup outside the mounted subtree cannot be
// reached through this mount.
func cgroupDir(m mountInfo, cgPath string) (string, error) {
	rel, err := filepath.Rel(m.Root, cgPath)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("own cgroup %s is outside the subtree %s mounted at %s", cgPath, m.Root, m.MountPoint)
	}
	return filepath.Join(m.MountPoint, rel), nil
}

// v2Probe is what probeV2 found in the unified hierarchy.
type v2Probe struct {
	Parent            string   // this process's cgroup directory
	ParentControllers []string // Parent/cgroup.controllers
	RootControllers   []string // cgroup.controllers at the mount point
	Delegated         []string // cgroup.controllers of the probe child
}

// v2MissingReason explains why cgroup v2 controller c is not delegated.
func v2MissingReason(c string, l cgroupLayout, v2 v2Probe, v2Err error) string {
	// A controller can be attached to one hierarchy only; when v1 has it,
	// the unified hierarchy cannot, whatever its files say.
	if h, ok := l.v1Hierarchy(v1Name(c)); ok {
		return "bound to cgroup v1 at " + h.Mount.MountPoint
	}
	switch {
	case v2Err != nil:
		return v2Err.Error()
	case slices.Contains(v2.ParentControllers, c):
		return "not delegated: enable it in " + filepath.Join(v2.Parent, "cgroup.subtree_control")
	case !slices.Contains(v2.RootControllers, c):
		return "not available in the unified hierarchy: absent from " + filepath.Join(l.Unified.MountPoint, "cgroup.controllers")
	default:
		return "not delegated to " + v2.Parent + " by an ancestor: absent from its cgroup.controllers"
	}
}

// v1Name is the cgroup v1 name of a cgroup v2 controller: the kernel's
// "io" controller is "blkio" in v1; the others keep their names.
func v1Name(v2 string) string {
	if v2 == "io" {
		return "blkio"
	}
	return v2
}

// v1MarkerFile is an interface file a child cgroup has when controller c
// is attached to its hierarchy, or "" when no single file is reliable
// (hugetlb files are named after page sizes; perf_event has none).
func v1MarkerFile(c string) string {
	switch c {
	case "memory":
		return "memory.limit_in_bytes"
	case "pids":
		return "pids.max"
	case "cpu":
		return "cpu.shares"
	case "cpuacct":
		return "cpuacct.usage"
	case "cpuset":
		return "cpuset.cpus"
	case "devices":
		return "devices.list"
	case "freezer":
		return "freezer.state"
	case "blkio":
		return "blkio.throttle.read_bps_device"
	case "net_cls":
		return "net_cls.classid"
	case "net_prio":
		return "net_prio.ifpriomap"
	case "rdma":
		return "rdma.max"
	case "misc":
		return "misc.max"
	}
	return ""
}

// readControllers reads a space-separated cgroup v2 controller list file
// (cgroup.controllers, cgroup.subtree_control).
func readControllers(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	l := strings.Fields(string(b))
	slices.Sort(l)
	return l, nil
}

// note puts each controller's note (Options.CgroupNotes) first in its
// missing reason, for the controllers the probe found missing.
func (cg *Cgroup) note(notes map[string]string) {
	for c, why := range cg.V2Missing {
		if n := notes[c]; n != "" {
			cg.V2Missing[c] = n + "; " + why
		}
	}
}

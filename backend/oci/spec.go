// Package oci launches one contained process tree under a pinned OCI runtime
// (runc). It writes a runtime-spec config.json for the reviewed profile, execs
// the verified runtime binary through a narrow command adapter, watches the
// container, kills the whole tree, and verifies that nothing it created is
// left behind. It knows nothing about grants, policy or evidence.
package oci

import (
	"fmt"
	"math"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/internal/scratch"
)

// Mount is one bind mount from the host into the container.
type Mount struct {
	Source string // absolute host path
	Target string // absolute container path
	// Writable binds it read-write: an input's writable copy, whose
	// Source is the overlay the backend made over the snapshot.
	Writable bool
}

// IDMap maps container ids 0..Size-1 to host ids HostID..HostID+Size-1.
type IDMap struct {
	HostID uint32
	Size   uint32
}

// Config is everything the reviewed profile needs for one launch. Every
// budget is required: a zero budget is an error, never "unlimited".
type Config struct {
	Rootfs   string // absolute path of the prepared (runner-owned) rootfs
	Args     []string
	Env      []string // KEY=value, declared variables only
	Cwd      string
	Hostname string
	// Nofile is the open-file limit; 0 means 1024.
	Nofile int64
	// StopSignal, if not 0, is sent to the workload before SIGKILL when
	// it is stopped (it is not part of the OCI config).
	StopSignal syscall.Signal
	// UID and GID are the workload's ids inside the container; within a
	// user namespace they must be mapped.
	UID, GID uint32

	Inputs []Mount // bound read-only
	Output Mount   // bound read-write; Source is a size-bounded filesystem
	// Files are small files bound read-only over the image's (/etc/hosts,
	// /etc/hostname, /etc/resolv.conf): the image tree is never modified.
	Files []Mount

	// TmpBytes bounds all the scratch space the workload can write outside
	// its output: the tmpfs at /tmp and the one at /dev/shm share it (see
	// scratchSizes); /dev itself is read-only.
	TmpBytes int64
	Memory   int64 // bytes
	Pids     int64
	CPU      float64 // cores; the CFS quota is CPU × period
	// FileSize caps any single file (RLIMIT_FSIZE); the output bound is
	// enforced by the output filesystem, this only stops a runaway write early.
	FileSize int64
	// NoSwap also limits memory+swap to Memory (when the host accounts swap).
	NoSwap bool

	CgroupsPath string
	// Gated makes the container's first process the custody gate, passed
	// as descriptor GateFD: it installs the compiled seccomp filter from
	// FilterFD, waits for the backend's go-ahead on ControlFD and then
	// execs Args in its place. The config then carries no seccomp profile
	// for runc to compile: the filter is the same one, compiled once.
	Gated bool
	// Pooled makes a gated container whose workload is not in its config:
	// the gate runs as "--pooled" and gets the argv, environment and
	// working directory with its go-ahead (pool.go). Args is then empty.
	Pooled bool
	// UserNS, when set, runs the container in a new user namespace with this
	// mapping for both uids and gids.
	UserNS *IDMap
	// DeviceOwners are the owners the container sees its device nodes
	// with, by path; a device not listed is owned by 0:0, as runc creates
	// it without a user namespace. Under one runc bind-mounts the host's
	// nodes instead, and the container sees their host owners through its
	// id mapping (deviceOwnersUnder).
	DeviceOwners map[string]Owner
	// CgroupV1 says runc will mount /sys/fs/cgroup the cgroup v1 way: a
	// tmpfs holding one mount per hierarchy. runc mounts that tmpfs
	// writable whatever the spec asks, so the profile adds a read-only
	// remount of it (cgroupfsMounts).
	CgroupV1 bool
}

// Owner is a uid and gid as the container sees them.
type Owner struct{ UID, GID uint32 }

// deviceOwnersUnder returns the owners the profile's device nodes have in
// a container with mapping m: a host node bind-mounted in keeps its host
// owner, which appears as its mapped id, or as the kernel's overflow id
// when it is outside the mapping (host root is). A nil m needs none.
func deviceOwnersUnder(m *IDMap) (map[string]Owner, error) {
	if m == nil {
		return nil, nil
	}
	overflow := func(name string) (uint32, error) {
		b, err := os.ReadFile("/proc/sys/kernel/" + name)
		if err != nil {
			return 0, fmt.Errorf("device owners: %w", err)
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
		if err != nil {
			return 0, fmt.Errorf("device owners: %s: %w", name, err)
		}
		return uint32(v), nil
	}
	ouid, err := overflow("overflowuid")
	if err != nil {
		return nil, err
	}
	ogid, err := overflow("overflowgid")
	if err != nil {
		return nil, err
	}
	inside := func(host, over uint32) uint32 {
		if host >= m.HostID && host-m.HostID < m.Size {
			return host - m.HostID
		}
		return over
	}
	out := map[string]Owner{}
	for _, d := range minimalDevices(nil) {
		var st unix.Stat_t
		if err := unix.Stat(d.Path, &st); err != nil {
			return nil, fmt.Errorf("device owners: host %s: %w", d.Path, err)
		}
		out[d.Path] = Owner{UID: inside(st.Uid, ouid), GID: inside(st.Gid, ogid)}
	}
	return out, nil
}

const cpuPeriod = 100000 // µs

// Spec builds the reviewed runtime-spec configuration for c.
func Spec(c Config) (*specs.Spec, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	memory := c.Memory
	pids := c.Pids
	quota := int64(math.Ceil(c.CPU * cpuPeriod))
	period := uint64(cpuPeriod)
	res := &specs.LinuxResources{
		// Deny every device node access except the minimal set below.
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
		Memory:  &specs.LinuxMemory{Limit: &memory},
		Pids:    &specs.LinuxPids{Limit: &pids},
		CPU:     &specs.LinuxCPU{Quota: &quota, Period: &period},
	}
	if c.NoSwap {
		swap := c.Memory
		res.Memory.Swap = &swap
	}
	for _, d := range minimalDevices(c.DeviceOwners) {
		major, minor := d.Major, d.Minor
		res.Devices = append(res.Devices, specs.LinuxDeviceCgroup{
			Allow: true, Type: d.Type, Major: &major, Minor: &minor, Access: "rwm",
		})
	}

	ns := []specs.LinuxNamespace{
		{Type: specs.PIDNamespace},
		{Type: specs.NetworkNamespace}, // fresh: loopback only
		{Type: specs.IPCNamespace},
		{Type: specs.UTSNamespace},
		{Type: specs.MountNamespace},
		{Type: specs.CgroupNamespace},
	}
	linux := &specs.Linux{
		Resources:     res,
		CgroupsPath:   c.CgroupsPath,
		Namespaces:    ns,
		Devices:       minimalDevices(c.DeviceOwners),
		MaskedPaths:   maskedPaths(),
		ReadonlyPaths: readonlyPaths(),
	}
	if !c.Gated {
		linux.Seccomp = seccompProfile()
	}
	if c.UserNS != nil {
		linux.Namespaces = append(linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: c.UserNS.HostID, Size: c.UserNS.Size}}
		linux.UIDMappings = m
		linux.GIDMappings = m
	}

	nofile := uint64(1024)
	if c.Nofile > 0 {
		nofile = uint64(c.Nofile)
	}
	s := &specs.Spec{
		Version:  specs.Version,
		Hostname: c.Hostname,
		Root:     &specs.Root{Path: c.Rootfs, Readonly: true},
		Process: &specs.Process{
			Terminal:        false,
			User:            specs.User{UID: c.UID, GID: c.GID},
			Args:            c.args(),
			Env:             c.Env,
			Cwd:             c.Cwd,
			NoNewPrivileges: true,
			// All five sets empty: no capability at all, inherited or ambient.
			Capabilities: &specs.LinuxCapabilities{
				Bounding: []string{}, Effective: []string{}, Inheritable: []string{},
				Permitted: []string{}, Ambient: []string{},
			},
			Rlimits: []specs.POSIXRlimit{
				{Type: "RLIMIT_NOFILE", Hard: nofile, Soft: nofile},
				{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
				{Type: "RLIMIT_FSIZE", Hard: uint64(c.FileSize), Soft: uint64(c.FileSize)},
				{Type: "RLIMIT_MEMLOCK", Hard: 64 << 10, Soft: 64 << 10},
				{Type: "RLIMIT_MSGQUEUE", Hard: 0, Soft: 0},
			},
		},
		Mounts: baseMounts(c),
		Linux:  linux,
	}
	return s, nil
}

// The gate's descriptors in the container: runc --preserve-fds 3 passes
// them as 3, 4 and 5.
const (
	ControlFD = 3
	GateFD    = 4
	FilterFD  = 5
)

// args is what runc executes: the workload's argv, behind the gate when
// the launch is gated. A cold gate gets the environment in its argv too
// ("-e" pairs) and execs the workload with exactly that, as a pooled gate
// does with its go-ahead's: runc adds HOME to the environment of the
// process it starts when the config has none.
func (c Config) args() []string {
	if !c.Gated {
		return c.Args
	}
	gate := fmt.Sprintf("/proc/self/fd/%d", GateFD)
	if c.Pooled {
		return []string{gate, "--pooled"}
	}
	args := make([]string, 0, 1+2*len(c.Env)+len(c.Args))
	args = append(args, gate)
	for _, kv := range c.Env {
		args = append(args, "-e", kv)
	}
	return append(args, c.Args...)
}

func (c Config) validate() error {
	switch {
	case !path.IsAbs(c.Rootfs):
		return fmt.Errorf("oci: rootfs %q is not absolute", c.Rootfs)
	case c.Pooled && (!c.Gated || len(c.Args) != 0):
		return fmt.Errorf("oci: a pooled container is gated and gets its args with the go-ahead, got %q", c.Args)
	case !c.Pooled && (len(c.Args) == 0 || !path.IsAbs(c.Args[0])):
		return fmt.Errorf("oci: args must start with an absolute path, got %q", c.Args)
	case !path.IsAbs(c.Cwd):
		return fmt.Errorf("oci: cwd %q is not absolute", c.Cwd)
	case c.Memory <= 0 || c.Pids <= 0 || c.CPU <= 0 || c.TmpBytes <= 0 || c.FileSize <= 0:
		return fmt.Errorf("oci: every budget must be positive (memory %d, pids %d, cpu %g, tmp %d, fsize %d)",
			c.Memory, c.Pids, c.CPU, c.TmpBytes, c.FileSize)
	case c.CgroupsPath == "":
		return fmt.Errorf("oci: cgroups path is required")
	case c.UserNS != nil && (c.UID >= c.UserNS.Size || c.GID >= c.UserNS.Size):
		return fmt.Errorf("oci: user %d:%d is outside the user namespace's %d ids", c.UID, c.GID, c.UserNS.Size)
	case len(c.Env) > maxPooledSlots:
		return fmt.Errorf("oci: %d variables, the gate takes at most %d", len(c.Env), maxPooledSlots)
	}
	for _, kv := range c.Env {
		// The gate reads each as KEY=VALUE, cold or pooled.
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("oci: variable %q is not KEY=VALUE", kv)
		}
	}
	for _, m := range append(append([]Mount{c.Output}, c.Inputs...), c.Files...) {
		if m.Source == "" || !path.IsAbs(m.Target) {
			return fmt.Errorf("oci: mount %+v is incomplete", m)
		}
		// A clean absolute path has no ".." left, so joining it under the
		// runner's upper layer cannot step outside it.
		if path.Clean(m.Target) != m.Target || m.Target == "/" {
			return fmt.Errorf("oci: mount target %q is not a clean absolute path", m.Target)
		}
	}
	return nil
}

// scratchSizes splits the tmp budget between /tmp and /dev/shm
// (scratch.Split), in this host's pages.
func scratchSizes(tmpBytes int64) (tmp, shm int64) {
	return scratch.Split(tmpBytes, int64(os.Getpagesize()))
}

// /dev holds only what runc puts there (the device nodes, a few symlinks,
// the mount points below it): runc makes them, then remounts it read-only
// (the "ro" option on /dev). The bounds are for that moment; nothing can
// be written there afterwards.
const (
	devBytes  = 4096
	devInodes = 32
)

func baseMounts(c Config) []specs.Mount {
	tmp, shm := scratchSizes(c.TmpBytes)
	shmOpts := []string{"nosuid", "noexec", "nodev", "mode=1777", fmt.Sprintf("size=%d", shm)}
	if shm == 0 {
		// tmpfs size=0 would mean unbounded: no shared memory at all instead.
		shmOpts = []string{"nosuid", "noexec", "nodev", "ro", "mode=1777", "size=4096", "nr_inodes=1"}
	}
	ms := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "noexec", "strictatime", "ro", "mode=755",
				fmt.Sprintf("size=%d", devBytes), fmt.Sprintf("nr_inodes=%d", devInodes)}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts",
			Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: shmOpts},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
	}
	ms = append(ms, cgroupfsMounts(c.CgroupV1)...)
	ms = append(ms, specs.Mount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs",
		Options: []string{"nosuid", "nodev", "mode=1777", fmt.Sprintf("size=%d", tmp)}})
	// An input's bind mount shows the workload, as its root in
	// mountinfo, the snapshot's path within the host filesystem that
	// holds it (<state dir>/snapshots/<digest>/data): the kernel prints a
	// bind mount's root so, and only a filesystem of its own per input (a
	// mount more to journal per input) would hide it. It names no key and
	// not the store; the digest is the grant's own.
	for _, in := range c.Inputs {
		rw := "ro"
		if in.Writable {
			rw = "rw"
		}
		ms = append(ms, specs.Mount{
			Destination: in.Target, Type: "bind", Source: in.Source,
			Options: []string{"rbind", rw, "nosuid", "nodev"},
		})
	}
	for _, f := range c.Files {
		ms = append(ms, specs.Mount{
			Destination: f.Target, Type: "bind", Source: f.Source,
			Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"},
		})
	}
	ms = append(ms, specs.Mount{
		Destination: c.Output.Target, Type: "bind", Source: c.Output.Source,
		Options: []string{"rbind", "rw", "nosuid", "nodev"},
	})
	return ms
}

// cgroupfsMounts mount the workload's own cgroups read-only at
// /sys/fs/cgroup (the probe reads its limits there).
//
// On cgroup v2 runc mounts cgroup2 with the spec's flags, "ro" included.
// On cgroup v1 runc 1.5.3 mounts a tmpfs there without the read-only flag,
// whatever the spec asks, and the hierarchies under it read-only: the
// tmpfs was unbounded scratch. Only tmpfs entries (and /dev) are remounted
// read-only, by path, once every mount is made (finalizeRootfs), so an
// empty read-only tmpfs is listed first at the same path: runc's tmpfs
// covers it, and the remount meant for it lands on runc's, the topmost.
// The covered one has one inode and no room, and nothing can reach it.
// (A bind remount cannot do it: bind sources are host paths, opened
// outside the container under a user namespace; leaving the mount out
// would hide the cgroup limits the conformance suite reads.)
func cgroupfsMounts(v1 bool) []specs.Mount {
	cg := specs.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup",
		Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}}
	if !v1 {
		return []specs.Mount{cg}
	}
	return []specs.Mount{{Destination: "/sys/fs/cgroup", Type: "tmpfs", Source: "tmpfs",
		Options: []string{"nosuid", "noexec", "nodev", "ro", "mode=755", "size=4096", "nr_inodes=1"}}, cg}
}

// minimalDevices are the only device nodes the workload gets, with the
// owners it sees them with (0:0 where owners has none).
func minimalDevices(owners map[string]Owner) []specs.LinuxDevice {
	mode := func(m uint32) *os.FileMode { v := os.FileMode(m); return &v }
	dev := func(p string, major, minor int64) specs.LinuxDevice {
		o := owners[p]
		return specs.LinuxDevice{Path: p, Type: "c", Major: major, Minor: minor,
			FileMode: mode(0o666), UID: &o.UID, GID: &o.GID}
	}
	return []specs.LinuxDevice{
		dev("/dev/null", 1, 3),
		dev("/dev/zero", 1, 5),
		dev("/dev/full", 1, 7),
		dev("/dev/random", 1, 8),
		dev("/dev/urandom", 1, 9),
		dev("/dev/tty", 5, 0),
	}
}

func maskedPaths() []string {
	return []string{
		"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/sched_debug", "/proc/scsi", "/proc/timer_list",
		"/proc/timer_stats", "/sys/firmware", "/sys/devices/virtual/powercap",
		"/sys/kernel/security", "/proc/kallsyms", "/sys/kernel/debug",
	}
}

func readonlyPaths() []string {
	return []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
}

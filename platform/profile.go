// Package platform probes the host and reports an evidenced capability
// profile: each fact is something the probe proved by doing it (creating and
// removing a cgroup, mounting a tmpfs, entering a user namespace), not
// something a name or a version string suggests.
package platform

// CgroupMode is how cgroups are mounted on the host.
type CgroupMode string

const (
	CgroupV2     CgroupMode = "v2"     // unified hierarchy only
	CgroupHybrid CgroupMode = "hybrid" // v1 hierarchies plus a cgroup2 mount
	CgroupV1     CgroupMode = "v1"     // v1 hierarchies only
	CgroupNone   CgroupMode = "none"   // neither cgroup2 nor a v1 controller hierarchy
)

// Profile is the evidenced capability profile of one host.
type Profile struct {
	Kernel string `json:"kernel"`           // uname release, e.g. "6.1.0-18-amd64"
	Arch   string `json:"arch"`             // GOARCH-style, e.g. "amd64"
	OS     string `json:"os"`               // "linux"
	Distro string `json:"distro,omitempty"` // PRETTY_NAME from /etc/os-release

	Cgroup Cgroup `json:"cgroup"`

	// Seccomp is true when a seccomp filter was installed (on a throwaway
	// thread of the probing process) and the kernel reported it in force.
	Seccomp Fact `json:"seccomp"`
	// UserNS is true when a child entered a new user namespace.
	UserNS Fact `json:"userns"`
	// Tmpfs is true when a size-bounded tmpfs was mounted and unmounted.
	Tmpfs Fact `json:"tmpfs"`
	// Overlay is true when an overlay mount was made and removed.
	Overlay Fact `json:"overlay"`
	// Idmap is true when the kernel idmapped a detached mount of the
	// scratch dir's filesystem (the state dir's, where images are stored),
	// as the oci backend does to show an image's owners in a user
	// namespace. Absent (How empty) from profiles made before it was
	// probed.
	Idmap Fact `json:"idmap,omitzero"`
	// PidfdNetns is true when a listener was opened inside a child's fresh
	// network namespace entered by setns on its pidfd: what restricted
	// egress needs.
	PidfdNetns Fact `json:"pidfdNetns"`

	// Runtime is the pinned OCI runtime, when a path was given to probe.
	Runtime *Runtime `json:"runtime,omitempty"`
}

// Fact is one proved (or disproved) capability with how it was tested.
type Fact struct {
	OK     bool   `json:"ok"`
	How    string `json:"how"`              // what the probe did
	Detail string `json:"detail,omitempty"` // error or extra detail when !OK
}

// Cgroup describes the cgroup hierarchies and what the probe proved usable.
type Cgroup struct {
	Mode CgroupMode `json:"mode"`
	// Unified is the cgroup2 mount point, if any.
	Unified string `json:"unified,omitempty"`
	// V2Delegated lists controllers that are enabled for a child cgroup that
	// the probe created under its own cgroup in the unified hierarchy (so a
	// runtime can set limits with them). Sorted.
	V2Delegated []string `json:"v2Delegated"`
	// V2Missing explains, per production controller (memory, pids, cpu, io)
	// not in V2Delegated, why: e.g. "bound to cgroup v1 at /sys/fs/cgroup/memory".
	V2Missing map[string]string `json:"v2Missing,omitempty"`
	// V1Usable lists v1 controllers in whose hierarchy the probe created and
	// removed a child cgroup (under its own cgroup of that hierarchy). Sorted.
	V1Usable []string `json:"v1Usable"`
	// V1Missing explains why each development controller (memory, pids, cpu,
	// cpuacct) not in V1Usable is missing.
	V1Missing map[string]string `json:"v1Missing,omitempty"`
}

// Runtime identifies the OCI runtime binary that was probed.
type Runtime struct {
	Path    string `json:"path"`
	Version string `json:"version"` // e.g. "1.5.3"
	SHA256  string `json:"sha256"`  // hex digest of the binary
	Spec    string `json:"spec"`    // OCI runtime-spec version it reports

	// Error says why the runtime could not be identified; when it is set,
	// only Path is meaningful.
	Error string `json:"error,omitempty"`
}

// ProductionControllers returns the cgroup-v2 controllers the production
// tier requires to be delegated.
func ProductionControllers() []string { return []string{"memory", "pids", "cpu", "io"} }

// DevelopmentControllers returns the cgroup-v1 controllers the development
// tier requires.
func DevelopmentControllers() []string { return []string{"memory", "pids", "cpu", "cpuacct"} }

// Package guest is the protocol between the vm backend on the host and
// custody's init inside the guest (cmd/custody-vminit): the launch
// configuration the host puts in the initramfs, the virtio-serial port
// and its streams (streams.go), the block devices' serials, and the
// report the init sends back. It imports only the standard library,
// because the init is a small static binary. Everything the init reports is an observation (R3): the
// host asserts only what it saw itself.
package guest

import "strconv"

// ConfigPath is where the launch configuration sits in the initramfs:
// Config.MarshalBinary's encoding.
const ConfigPath = "/custody/config"

// SeccompPath is where the seccomp filter the workload runs under sits in
// the initramfs, when the host gives one: a classic BPF program, raw
// struct sock_filter entries in host byte order.
const SeccompPath = "/custody/seccomp.bpf"

// BareCmdline on the kernel command line makes the init reset the machine
// at once: the bench's bare boot of a phase's own kernel and initrd.
const BareCmdline = "custody.bare"

// StagePath is where the workload stage (cmd/custody-vmstage) sits in the
// initramfs: the init starts it in the workload's namespaces and cgroup,
// and it execs the workload in its place.
const StagePath = "/custody/stage"

// ModulesDir is where the kernel modules the init loads sit in the
// initramfs.
const ModulesDir = "/custody/modules"

// InitramfsRoot is where a small rootfs sits in the initramfs when the
// host carries it there instead of on the SerialRootfs disk
// (Config.RootInInitramfs): the kernel unpacks it into guest RAM, a copy
// the host never sees again.
const InitramfsRoot = "/custody/root"

// SerialRootfs is the virtio-blk serial of the rootfs image; inputs are
// SerialInput followed by their index.
const (
	SerialRootfs = "rootfs"
	SerialInput  = "input"
)

// StartedLine is what the init writes on StreamControl once the workload
// has started, before its Report: the host's wall time runs from it.
const StartedLine = "started\n"

// MaxReportBytes bounds what the host reads of StreamControl.
const MaxReportBytes = 64 << 10

// CPUHeldNote is the report's note that a CPU limit of cores was not set
// in the guest's cgroup because the guest's vcpus hold it already.
func CPUHeldNote(cores float64, vcpus int) string {
	return "CPU limit " + strconv.FormatFloat(cores, 'g', -1, 64) + " core(s) held by the guest's " +
		strconv.Itoa(vcpus) + " vCPU(s): no cpu.max in its cgroup"
}

// Config is one launch, in the guest's terms, as the initramfs carries it
// (MarshalBinary).
type Config struct {
	// Modules are file names under ModulesDir, in load order: those the
	// init loads before the workload (the disks' drivers), then
	// PortModules, which it loads only when the streams move to the port
	// (EarlyBytes).
	Modules     []string
	PortModules []string
	Args        []string
	Env         []string
	Cwd         string
	Hostname    string
	UID         uint32
	GID         uint32
	// Inputs are mounted read-only; input i is the disk with serial
	// SerialInput+i.
	Inputs      []string
	OutputPath  string
	OutputBytes int64
	OutputFiles int64
	TmpBytes    int64
	Memory      int64
	Pids        int64
	CPU         float64
	FileSize    int64
	// Seccomp says the filter at SeccompPath is to be installed.
	Seccomp bool
	// RootInInitramfs says the rootfs is the tree at InitramfsRoot, not
	// the SerialRootfs disk; either way the workload's root is read-only.
	RootInInitramfs bool
	// Pooled says the guest is a warm one: the init loads Modules and
	// opens the port at boot, writes PooledReady on it, and then waits
	// for its launch's Config (a Take) on the port before anything else.
	// A Take is never Pooled itself.
	Pooled bool
	// Seed is fresh host entropy (a Take's, SeedBytes of it): the init
	// writes it to /dev/urandom, mixed into the pool the guest kernel
	// already seeded at its own boot, before the workload starts.
	Seed []byte
}

// PooledReady is the byte a warm guest's init writes on the port once it
// waits for its Take: the host counts the guest held from then.
const PooledReady byte = 'r'

// MaxTakeBytes bounds a Take's encoding on the port (its length is a
// 4-byte big-endian prefix): an argv and environment of the oci pool's
// own bound (256 KiB) with room for the targets.
const MaxTakeBytes = 1 << 20

// SeedBytes is the size of a Take's Seed.
const SeedBytes = 64

// Report is what the init sends on StreamControl once the workload is gone
// and the output stream is written: one JSON object (AppendJSON) and a
// newline.
type Report struct {
	// Error is set when the init could not set the launch up; the workload
	// then never ran.
	Error  string `json:"error,omitempty"`
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"`
	// Usage as the guest's cgroup accounted it.
	PeakMemory int64 `json:"peakMemory"`
	CPUUsec    int64 `json:"cpuUsec"`
	OOMKills   int64 `json:"oomKills"`
	// Limits read back from the guest's cgroup before the workload ran.
	MemoryMax int64  `json:"memoryMax"`
	PidsMax   int64  `json:"pidsMax"`
	CPUMax    string `json:"cpuMax"`
	// Mounts of the workload's root, read back before it ran.
	Mounts     []Mount  `json:"mounts"`
	Interfaces []string `json:"interfaces"`
	// Seccomp ("disabled", "strict", "filter") and NoNewPrivs are the
	// init's own as the workload inherits them, read before it starts.
	Seccomp    string   `json:"seccomp,omitempty"`
	NoNewPrivs bool     `json:"noNewPrivs"`
	Notes      []string `json:"notes,omitempty"`
	// OutputSHA256 is the init's own digest of the stream it wrote.
	OutputSHA256 string `json:"outputSha256"`
	// InitUptime and ReadyUptime are the guest's uptime (seconds) when the
	// init started and when the workload was about to start: the kernel's
	// boot and the init's setup, for the boot-time breakdown.
	InitUptime  float64 `json:"initUptime"`
	ReadyUptime float64 `json:"readyUptime"`
	// Steps are the guest's uptime (seconds) as each step of the init's
	// setup ended: the boot-time breakdown, an observation.
	Steps []Step `json:"steps,omitempty"`
	// Started and Finished are the guest's clock, Unix nanoseconds.
	Started  int64 `json:"started"`
	Finished int64 `json:"finished"`
}

// Mount is one mount the workload sees.
type Mount struct {
	Target   string `json:"target"`
	FSType   string `json:"fstype"`
	ReadOnly bool   `json:"readOnly"`
}

// Step is one step of the init and the guest's uptime when it ended.
type Step struct {
	Name   string  `json:"name"`
	Uptime float64 `json:"uptime"`
}

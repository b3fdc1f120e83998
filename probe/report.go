// Package probe is the in-sandbox observer of custody's conformance suite:
// built as a static binary (cmd/custody-probe, standard library only), it
// runs inside a contained phase and reports, as data, what it can see and
// what it can do — identity, capabilities, seccomp and no_new_privs,
// namespaces, mounts, network interfaces, environment variable names,
// device nodes, rlimits, the cgroup limits it can read, and the outcome of
// the attempts it was asked to make (writes, connects, privileged syscalls,
// allocations, process spawns, CPU burns, file fills, writes into every
// mount point).
//
// A Report never states a verdict. Whether what the probe saw is what the
// reviewed profile promises is decided outside the sandbox, by the
// conformance package, against the run's result and receipt: the workload's
// own opinion of its confinement is not evidence.
//
// The package imports nothing outside the standard library (a test
// enforces it), so the probe binary is small, static and has no cgo.
package probe

import "time"

// Schema identifies the report format; it changes when a field changes
// meaning.
const Schema = "custody.dev/probe/v1"

// Report is everything the probe observed. Fields are observations; an
// attempt records what the kernel answered, never whether that was right.
type Report struct {
	Schema string `json:"schema"`
	PID    int    `json:"pid"`
	PPID   int    `json:"ppid"`

	Identity   Identity          `json:"identity"`
	Status     ProcStatus        `json:"status"`
	Namespaces map[string]string `json:"namespaces"`
	Mounts     []Mount           `json:"mounts"`
	// Interfaces are the network interface names in /proc/net/dev.
	Interfaces []string `json:"interfaces"`
	// Env holds environment variable names only (never values), sorted.
	Env []string `json:"env"`
	// Devices are the device nodes found under /dev (not following
	// symlinks, descending into subdirectories).
	Devices []Device          `json:"devices"`
	Rlimits map[string]Rlimit `json:"rlimits"`
	Cgroup  Cgroup            `json:"cgroup"`

	// Attempts the probe was asked to make, in the order asked.
	Writes   []Attempt  `json:"writes,omitempty"`
	Reads    []Attempt  `json:"reads,omitempty"`
	Connects []Attempt  `json:"connects,omitempty"`
	Loopback *Attempt   `json:"loopback,omitempty"`
	Hashes   []FileHash `json:"hashes,omitempty"`
	// Ordinary are everyday operations a build or test needs (fork and
	// exec, pipes, sockets pairs, a temporary file, randomness).
	Ordinary []Attempt `json:"ordinary,omitempty"`
	// Syscalls are privileged operations attempted (unshare, mount,
	// ptrace, keyctl, mknod, raw sockets, ...).
	Syscalls []Attempt    `json:"syscalls,omitempty"`
	Alloc    *AllocResult `json:"alloc,omitempty"`
	Spawn    *SpawnResult `json:"spawn,omitempty"`
	Burn     *BurnResult  `json:"burn,omitempty"`
	Fills    []FillResult `json:"fills,omitempty"`
	// MountFills are the attempts to write into every mount point the
	// probe found in its own mountinfo, one per target, in its order.
	MountFills []MountFill `json:"mountFills,omitempty"`
	// TLS are the HTTPS requests made through the sandbox's proxy.
	TLS []TLSAttempt `json:"tls,omitempty"`
	// Keys is the search for private key material, when asked.
	Keys *KeyScan `json:"keys,omitempty"`

	// Problems lists what the probe could not observe (a file it could not
	// read, say). They are data too.
	Problems []string `json:"problems,omitempty"`
}

// Identity is who the probe runs as.
type Identity struct {
	UID    int   `json:"uid"`
	EUID   int   `json:"euid"`
	GID    int   `json:"gid"`
	EGID   int   `json:"egid"`
	Groups []int `json:"groups"`
	// UIDMap and GIDMap are /proc/self/{uid,gid}_map, whitespace-normalised
	// lines "inside outside count".
	UIDMap []string `json:"uidMap"`
	GIDMap []string `json:"gidMap"`
}

// ProcStatus holds the security fields of /proc/self/status.
type ProcStatus struct {
	// Capability sets as the kernel prints them (16 hex digits).
	CapInh string `json:"capInh"`
	CapPrm string `json:"capPrm"`
	CapEff string `json:"capEff"`
	CapBnd string `json:"capBnd"`
	CapAmb string `json:"capAmb"`
	// NoNewPrivs is 1 when no_new_privs is set; -1 when not reported.
	NoNewPrivs int `json:"noNewPrivs"`
	// Seccomp is 0 (off), 1 (strict) or 2 (filter); -1 when not reported.
	Seccomp int `json:"seccomp"`
	// SeccompFilters is the number of attached filters; -1 when not reported.
	SeccompFilters int `json:"seccompFilters"`
}

// Mount is one line of /proc/self/mountinfo.
type Mount struct {
	Target string `json:"target"`
	FSType string `json:"fstype"`
	Source string `json:"source"`
	// ReadOnly is true when the mount or its superblock is read-only.
	ReadOnly bool `json:"readOnly"`
	// Options are the per-mount options, then the superblock options.
	Options      string `json:"options"`
	SuperOptions string `json:"superOptions"`
}

// Device is one device node.
type Device struct {
	Path  string `json:"path"`
	Type  string `json:"type"` // "char" or "block"
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
}

// Rlimit is one resource limit; -1 means unlimited.
type Rlimit struct {
	Soft int64 `json:"soft"`
	Hard int64 `json:"hard"`
}

// Cgroup is what the probe can read of its own cgroup.
type Cgroup struct {
	// Self are the lines of /proc/self/cgroup.
	Self []string `json:"self"`
	// Files maps a path under /sys/fs/cgroup to its trimmed content, for
	// the limit files that exist (memory.max, memory.limit_in_bytes,
	// pids.max, cpu.max, cpu.cfs_quota_us, cpu.cfs_period_us, ...).
	Files map[string]string `json:"files"`
}

// Attempt is one thing the probe tried and what the kernel answered.
type Attempt struct {
	// Name is what was tried: a path, an address or an operation name.
	Name string `json:"name"`
	// OK says the operation succeeded.
	OK bool `json:"ok"`
	// Errno is the symbolic errno of a failure ("EROFS"), when there was one.
	Errno string `json:"errno,omitempty"`
	// Error is the failure as text.
	Error string `json:"error,omitempty"`
	// Detail says what exactly was done.
	Detail string `json:"detail,omitempty"`
}

// FileHash is a file's content digest as the probe read it.
type FileHash struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256,omitempty"`
	Size   int64  `json:"size"`
	Error  string `json:"error,omitempty"`
}

// AllocResult is a memory allocation attempt: Asked bytes allocated and
// touched page by page. When the kernel kills the probe first, there is no
// report at all; the run's result says why.
type AllocResult struct {
	Asked   int64 `json:"asked"`
	Touched int64 `json:"touched"`
}

// SpawnResult is an attempt to start Asked processes at once.
type SpawnResult struct {
	Asked   int    `json:"asked"`
	Started int    `json:"started"`
	Command string `json:"command"`
	Errno   string `json:"errno,omitempty"`
	Error   string `json:"error,omitempty"`
}

// BurnResult is a CPU burn: Threads spinning for Wall, the CPU time the
// probe process was charged meanwhile, and the kernel's CFS bandwidth
// counters of the probe's cgroup (cpu.stat) right before and after.
type BurnResult struct {
	Threads    int   `json:"threads"`
	WallMillis int64 `json:"wallMillis"`
	CPUMillis  int64 `json:"cpuMillis"`
	// CPUStat is the path of the cpu.stat read, "" if none was readable.
	CPUStat string `json:"cpuStat,omitempty"`
	// Before and After are its key/value lines (nr_periods, nr_throttled,
	// throttled_usec or throttled_time, ...).
	Before map[string]int64 `json:"before,omitempty"`
	After  map[string]int64 `json:"after,omitempty"`
}

// FillResult is an attempt to write Asked bytes into a file.
type FillResult struct {
	Path    string `json:"path"`
	Asked   int64  `json:"asked"`
	Written int64  `json:"written"`
	Errno   string `json:"errno,omitempty"`
	Error   string `json:"error,omitempty"`
}

// MountFill is an attempt to write Asked bytes into one mount point, in
// as many new files as the file size limit needs; they are removed after.
// For a target several mounts are stacked on, the topmost is what the
// probe reaches; FSType and ReadOnly are that one's.
type MountFill struct {
	Target   string `json:"target"`
	FSType   string `json:"fstype"`
	ReadOnly bool   `json:"readOnly"`
	Asked    int64  `json:"asked"`
	Written  int64  `json:"written"`
	// Files is how many files were created.
	Files int `json:"files"`
	// Errno and Error are what stopped the writing, if it stopped short.
	Errno string `json:"errno,omitempty"`
	Error string `json:"error,omitempty"`
	// Skipped says why nothing was tried (a mount on a file, not a
	// directory: a device node or a masked path).
	Skipped string `json:"skipped,omitempty"`
}

// Fill asks for Bytes bytes to be written to Path.
type Fill struct {
	Path  string
	Bytes int64
}

// Options say which attempts to make besides the observations every report
// carries.
type Options struct {
	// TryWrite: for each path, an existing directory gets a new file created
	// and removed in it; an existing file or device is opened for writing
	// (a device also gets one byte written; a regular file is never
	// changed); a missing path is created and removed.
	TryWrite []string
	// TryRead: read up to 16 bytes from each path.
	TryRead []string
	// TryConnect: dial each TCP host:port with ConnectTimeout.
	TryConnect     []string
	ConnectTimeout time.Duration
	// Loopback: listen on 127.0.0.1, connect to it and echo one byte.
	Loopback bool
	// Hash: sha256 of each file.
	Hash []string
	// Ordinary: everyday operations (fork+exec, pipe, socketpair, temp file,
	// randomness).
	Ordinary bool
	// Syscalls: privileged operations that a contained workload should be
	// refused (their outcome is recorded; anything that succeeds is undone).
	Syscalls bool
	// Alloc: bytes to allocate and touch.
	Alloc int64
	// Spawn: processes to start at once (each running SpawnCommand, or the
	// probe itself holding for 30s), then kill and reap.
	Spawn        int
	SpawnCommand []string
	// Burn: spin on every CPU for this long.
	Burn time.Duration
	// Fills: files to write.
	Fills []Fill
	// FillMounts: bytes to try writing into every mount point listed in
	// the probe's own /proc/self/mountinfo (0: none).
	FillMounts int64
	// Self is the probe binary (for fork+exec); default os.Executable.
	Self string
	// TLSViaProxy: host:port targets to reach over TLS through
	// $HTTPS_PROXY, each chain checked against TLSCA.
	TLSViaProxy []string
	TLSCA       string
	// ScanKeys: search the files and environment for private keys.
	ScanKeys bool
}

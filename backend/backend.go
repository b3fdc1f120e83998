// Package backend is the contract between custody's launch pipeline and the
// runtimes that run work: the Backend and Sandbox interfaces and the neutral
// types they speak (Spec, Resource, Exit, Observation, CleanupReport,
// Capabilities, Identity). It imports no other custody package, so
// admission, grants, journal and evidence never learn which backend runs;
// only cmd/custodyd wires concrete backends (backend/oci, later docker and
// vm). Every implementation passes backend/backendtest.Suite.
package backend

import (
	"context"
	"io"
	"net"
	"syscall"
	"time"
)

// Backend makes sandboxes of one kind on this host.
type Backend interface {
	// Name is the backend's name in receipts and qualification rows,
	// e.g. "oci".
	Name() string
	// Identity is what a grant binds of the backend and what a receipt
	// records: its kind, version and the digests of what runs.
	Identity() Identity
	// Capabilities are what the backend enforces on this host, as values.
	Capabilities() Capabilities
	// Intents lists everything a launch with this id may create, before
	// anything is created: the caller journals them durably (in the same
	// transaction that spends the grant).
	Intents(id string) ([]Resource, error)
	// Prepare creates the launch's native resources up to the point where
	// the workload would start, recording each on rec as it goes (intent
	// before create, identity once it exists). On error the returned
	// Sandbox, if non-nil, still needs Cleanup.
	Prepare(ctx context.Context, id string, s Spec, rec Recorder) (Sandbox, error)
	// VerifyAbsent checks, without a runtime, that none of a launch's
	// recorded resources exists: for an attempt that was consumed but never
	// prepared.
	VerifyAbsent(id string, recorded []Resource) CleanupReport
	// Recover cleans up after an attempt this process did not see through,
	// acting only where the journal and the native identity agree; a
	// look-alike is reported and left alone.
	Recover(ctx context.Context, id string, recorded []Resource, rec Recorder) CleanupReport
	// Foreign lists what carries this backend's naming but that known (the
	// journal) does not hold. Such look-alikes are reported, never touched.
	Foreign(known func(kind, name string) bool) []Resource
}

// Sandbox is one prepared launch.
type Sandbox interface {
	// Run starts the workload and waits until its whole process tree is
	// gone, or ctx ends or the wall time passes (then it kills the tree).
	// The Exit carries what was observed in the live sandbox.
	Run(ctx context.Context, wall time.Duration, out IO) (*Exit, error)
	// Output is the sandbox's bounded output filesystem on the host, valid
	// until Cleanup.
	Output() Output
	// Evidence names backend-specific digests for the receipt, e.g.
	// "config", "gate" and "seccomp" for oci: lowercase hex SHA-256 each.
	Evidence() map[string]string
	// Cleanup removes everything the launch created and verifies each part
	// is gone. It is safe to call once, whatever happened before.
	Cleanup(ctx context.Context) CleanupReport
}

// Output is a sandbox's output filesystem as the host sees it.
type Output interface {
	// Dir is the host path of the output tree.
	Dir() string
	// Used is how many bytes it holds.
	Used() (int64, error)
}

// IO is where a sandbox's standard streams go. A writer must never block
// for long: a slow reader must not hold the workload or its cleanup.
type IO struct {
	Stdout, Stderr io.Writer
}

// Mount is one host directory bound into a sandbox.
type Mount struct {
	Source string // host path
	Target string // absolute path in the sandbox
	// Writable asks for a writable copy over the read-only Source, its
	// writes bounded by the Spec's TmpBytes (in a filesystem of their own)
	// and discarded; only a backend whose Capabilities say WritableInputs
	// is given one.
	Writable bool
}

// SealedImage is an image as one sealed erofs file: its path, and the
// identity (device, inode, generation, size, mtime, ctime, in the form
// internal/sealed writes) the runner verified it by.
type SealedImage struct {
	File     string
	Identity string
	// Mount, when not nil, returns a new descriptor of the detached
	// erofs mount the runner made of the file when it verified it (see
	// image.Sealed.Mount), which the backend mounts instead of opening
	// File again: what was verified before the grant was spent is what
	// runs, even if the file's name was changed since. The backend
	// closes the descriptor.
	Mount func(ctx context.Context) (int, error)
	// Layers, when not nil, returns new descriptors of the detached,
	// read-only mounts of the image's sealed layers, top first, that the
	// runner verified with the tree Mount gives (their overlay): a backend
	// makes its own overlay of them, idmapping each when it maps users
	// (overlayfs cannot be idmapped itself). The backend closes them.
	Layers func(ctx context.Context) ([]int, error)
}

// Spec is the reviewed profile of one launch in neutral terms. Every budget
// is finite and required; what a backend cannot enforce, admission refuses
// from its Capabilities before a Spec is made.
type Spec struct {
	// Rootfs is the read-only image tree; it is never written.
	Rootfs string
	// Image is the image's custody digest (sha256:<hex> of its tree), and
	// ImageManifest the OCI manifest digest it was imported with (empty
	// for a plain rootfs): what a backend that pulls images names them by.
	Image, ImageManifest string
	// Sealed, when not nil, is the same tree as one sealed erofs file,
	// which a backend whose Capabilities say SealedImages mounts instead
	// of Rootfs (after checking the file's identity on the descriptor it
	// mounts); other backends use Rootfs.
	Sealed *SealedImage
	Args   []string
	// Env is exactly the declared variables, KEY=VALUE, sorted.
	Env      []string
	Cwd      string
	Hostname string
	// UID and GID are the ids the workload runs as inside its sandbox;
	// 0:0 is the sandbox's root.
	UID, GID uint32
	// Nofile is the open-file limit (RLIMIT_NOFILE); 0 means the
	// backend's default.
	Nofile int64
	// StopSignal, if not 0, is sent to the workload first when it is
	// stopped (timeout, cancellation); SIGKILL follows after a grace
	// period.
	StopSignal syscall.Signal
	// Inputs are bound read-only.
	Inputs []Mount
	// OutputPath is where the fresh, bounded output filesystem appears.
	OutputPath  string
	OutputBytes int64
	OutputFiles int64
	TmpBytes    int64
	Memory      int64
	Pids        int64
	CPU         float64
	FileSize    int64
	// Egress, when set, gives the sandbox restricted egress: a network
	// namespace of its own with loopback only, whose sole way out is the
	// listeners Attach opens in it. Nil is denied egress (loopback only).
	// A backend whose Capabilities lack RestrictedEgress never gets one.
	Egress *Egress
}

// Egress is a launch's restricted egress in neutral terms. The proxy and
// the broker are the caller's (they run outside the sandbox); the backend
// gives the sandbox a network namespace of its own with loopback only, lets
// Attach open listeners inside it before the workload starts, and closes
// them in Cleanup. Nothing else in the namespace leads anywhere.
type Egress struct {
	// Allow are the host:port destinations granted, for the record.
	Allow []string
	// Credentials are the brokered credentials' names, for the record.
	Credentials []string
	// Env is added to the workload's environment (KEY=VALUE), replacing a
	// declared variable of the same name: where Attach's listeners will
	// be. Their addresses are fixed loopback ones, free in a namespace
	// that is the sandbox's alone, so they are known before it starts.
	Env []string
	// CACert, when set, is a PEM certificate (public) the sandbox must
	// trust: the caller's per-run interception CA. The backend binds it
	// read-only at EgressCAPath; Env points TLS stacks at it.
	CACert []byte
	// Attach is called while the sandbox is held before its workload
	// starts. listen opens a TCP listener inside the sandbox's network
	// namespace; Attach starts serving what it opens and returns. An error
	// stops the launch before the workload runs.
	Attach func(ctx context.Context, listen func(addr string) (net.Listener, error)) error
}

// EgressCAPath is where a sandbox finds Egress.CACert.
const EgressCAPath = "/etc/custody/egress-ca.pem"

// ProbeAttemptPrefix starts the journal attempt of every engine probe
// (probe-<nonce>), which sets them apart from workspaces' attempts.
const ProbeAttemptPrefix = "probe-"

// ProbeJournal keeps an engine probe's attempts. The probe's throwaway
// objects are recorded before they are created, like any attempt's (P8),
// so that a process killed mid-probe leaves a record recovery acts on.
type ProbeJournal interface {
	// Begin opens the record of a probe attempt; the probe records what
	// it creates on the Recorder returned.
	Begin(attempt string) (Recorder, error)
	// Finish closes it: clean when every recorded object is verified
	// gone, residual otherwise, with detail saying why.
	Finish(attempt string, clean bool, detail string) error
}

// Resource is one native resource a launch records: its kind, its name
// and, once it exists, the identity that proves it is the one custody made
// (never its name alone).
type Resource struct {
	Kind     string
	Name     string
	State    string // "intent", "created" or "removed", as recovery gets it back
	Identity map[string]string
}

// Recorder is told about native resources before they are created, once
// they exist (with their identities), and once they are verified gone. Each
// call is one durable record; a failing Intent stops the create, so nothing
// is made that is not recorded.
type Recorder interface {
	Intent(rs ...Resource) error
	Created(rs ...Resource) error
	Removed(rs ...Resource) error
}

// Exit is how a sandbox's workload ended. A backend whose Run fails after
// the workload may have started returns what it did observe with the
// error: an Exit whose unobserved values say so (CodeUnobserved, a usage
// figure of -1), never a zero it did not see.
type Exit struct {
	Code   int
	Signal string
	// CodeUnobserved says the sandbox did not report how the workload
	// ended: Code and Signal mean nothing.
	CodeUnobserved bool
	TimedOut       bool
	Cancelled      bool
	OOMKilled      bool
	Started        time.Time
	Finished       time.Time
	Usage          Usage
	// Observation is read from the live sandbox, never from the config.
	Observation *Observation
}

// Usage is what the kernel accounted to a launch; -1 is a figure that was
// not observed.
type Usage struct {
	PeakMemoryBytes int64
	CPUTimeNanos    int64
	OOMKills        int64
	// MemoryLimitBytes and PidsLimit are read back from the live sandbox:
	// what was enforced, not what was asked.
	MemoryLimitBytes int64
	PidsLimit        int64
	// PidsLimitHits counts the forks the pids limit refused: 0 when none
	// was seen or the backend does not watch, -1 when its watch failed.
	PidsLimitHits int64
}

// Observation is what a backend read back from the live sandbox.
type Observation struct {
	At           time.Time
	Namespaces   []string
	Capabilities map[string]string
	NoNewPrivs   bool
	Seccomp      string
	Mounts       []ObservedMount
	Cgroup       ObservedCgroup
	Interfaces   []string
	Notes        []string
	// Placement is what a cluster backend's API server reported of the
	// launch (nil for a backend that runs on this host).
	Placement *Placement
}

// Placement is where a cluster placed a launch and what its API server
// reported of it, read back after the fact, never what was sent. An empty
// string is a value the cluster did not report.
type Placement struct {
	// Server, CASHA256 and Version identify the cluster.
	Server, CASHA256, Version string
	Namespace                 string
	// Pod and Parent are the launch's objects by name and UID.
	PodName, PodUID, ParentName, ParentUID string
	Node                                   string
	RuntimeClass, Handler                  string
	ImageID                                string
	// SpecSHA256 is the digest of the pod spec read back after create;
	// Spec its reviewed controls by name.
	SpecSHA256 string
	Spec       map[string]string
	// Terminated says the container's termination was reported; the
	// four fields after it are meaningful only then.
	Terminated       bool
	ExitCode         int
	Reason           string
	OOMKilled        bool
	DeadlineExceeded bool
	// NetworkPolicy is the launch's NetworkPolicy read back (empty name:
	// none), and whether its enforcement on this cluster was proved.
	NetworkPolicyName, NetworkPolicyUID, NetworkPolicySHA256 string
	NetworkPolicyProved                                      bool
}

// ObservedMount is one mount seen in the sandbox.
type ObservedMount struct {
	Target   string
	FSType   string
	ReadOnly bool
}

// ObservedCgroup is the limits the kernel enforces on the sandbox.
type ObservedCgroup struct {
	MemoryLimitBytes int64
	PidsLimit        int64
	CPUQuotaMicros   int64
	CPUPeriodMicros  int64
}

// CleanupReport says what cleanup did and whether every part was verified.
type CleanupReport struct {
	Verified bool
	Steps    []CleanupStep
}

// CleanupStep is one verified part of cleanup.
type CleanupStep struct {
	Name   string
	OK     bool
	Detail string
}

// Capabilities are what a backend enforces on this host, as values that
// admission and receipts read; nothing observed at run time changes them.
type Capabilities struct {
	// UserNamespace says sandboxes run in a user namespace that maps their
	// root to an unprivileged host range.
	UserNamespace bool
	// HostImageOwners says the sandbox sees an image's owners as host ids
	// (no user namespace shifts them): an image that gives entries to ids
	// other than 0:0 would give them to the host users of those ids, so
	// admission refuses such an image. A backend whose sandboxes have ids
	// of their own (a user namespace, a VM guest) leaves it false.
	HostImageOwners bool
	// WritableInputs says the backend can give an input as a writable
	// copy (Mount.Writable) whose writes are bounded by the tmp budget.
	WritableInputs bool
	// Tiers lists, per tier the backend knows ("production",
	// "development"), what it cannot enforce for that tier here; an empty
	// list means it enforces the tier. A tier that is absent is unknown.
	Tiers map[string][]Gap
	// Controls lists the prerequisites of the backend's reviewed profile
	// that it could not prove on this host; empty when all hold.
	Controls []Gap
	// SealedImages says the backend mounts Spec.Sealed, when given, as
	// the image: the runner then verifies the image by its sealed file's
	// identity, not by a walk of the tree, since the tree is not what runs.
	SealedImages bool
	// RestrictedEgress says the backend can run a Spec with Egress: the
	// sandbox reaches the attached listeners and nothing else. False
	// refuses every egress and credential request as unsupported.
	RestrictedEgress bool
	// EgressGaps says why RestrictedEgress is false on a backend asked to
	// serve it: the platform facts it stands on that the probe could not
	// prove.
	EgressGaps []Gap
	// DeniedEgressGaps says why the backend cannot prove that a sandbox
	// reaches nothing beyond itself: a request that asks for denied
	// egress is refused as unsupported, naming them. Empty: it can.
	DeniedEgressGaps []Gap
	// QuarantineTarget, when set, names what an unverified cleanup on this
	// backend quarantines (one cluster, say) instead of the whole runner:
	// the runner's other backends keep taking work.
	QuarantineTarget string
	// InputGaps says why the backend cannot give a sandbox inputs: a
	// request with inputs is refused as unsupported. Empty: it can.
	InputGaps []Gap
}

// Gap is one thing a backend cannot prove it enforces: the requirement,
// a stable code, why, and what would fix it.
type Gap struct {
	Requirement string
	Code        string
	Detail      string
	Fix         string
}

// Identity is what a grant binds of a backend and a receipt records.
type Identity struct {
	// Kind is the backend's name, as Backend.Name.
	Kind string
	// Version is the runtime's version, e.g. runc's.
	Version string
	// Path is the runtime binary that runs, if there is one.
	Path string
	// SHA256 is the lowercase hex digest of the runtime that runs.
	SHA256 string
}

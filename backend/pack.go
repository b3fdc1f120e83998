package backend

// The neutral realization types of a pack workspace: what the domain
// (package workspace) asks an engine to create, and what it reads back,
// without naming the engine. A backend converts them to its native API.

import (
	"errors"
	"time"
)

// PackOwner is who a workspace's native objects belong to; a backend puts
// it on every object it creates (labels) and checks it before every act.
type PackOwner struct {
	// Workspace is the unguessable workspace id.
	Workspace string
	// Attempt is the attempt that creates or removes the objects.
	Attempt string
	// Grant is the pack grant's id; Config the admitted plan's digest.
	Grant  string
	Config string
}

// PackNetwork is one network to create.
type PackNetwork struct {
	// Name is the pack's name for it ("back").
	Name     string
	Internal bool
	// Subnet is the CIDR admission chose.
	Subnet string
}

// PackMount is one mount of a container: "bind" (Source a host path),
// "volume" (Source the pack's volume name) or "tmpfs".
type PackMount struct {
	Type       string
	Source     string
	Target     string
	ReadOnly   bool
	TmpfsBytes int64
}

// PackPort is one published port.
type PackPort struct {
	HostIP        string
	HostPort      uint16
	ContainerPort uint16
	Protocol      string
}

// PackUlimit is one resource limit of a container's processes.
type PackUlimit struct {
	Name       string
	Soft, Hard int64
}

// PackContainer is one service's container, with every setting effective.
type PackContainer struct {
	// Service is the pack's name for it; Image the reference to run.
	Service    string
	Image      string
	Command    []string
	Entrypoint []string
	Env        []string
	User       string
	WorkingDir string
	Hostname   string
	// Networks are the pack's names of the networks it joins; Aliases on
	// each are the service name, so services find each other, and the
	// further names in Aliases (its container_name).
	Networks    []string
	Aliases     []string
	Ports       []PackPort
	Mounts      []PackMount
	Privileged  bool
	CapAdd      []string
	CapDrop     []string
	Devices     []PackDevice
	SecurityOpt []string
	Sysctls     map[string]string
	ReadOnly    bool
	StopSignal  string
	Init        bool  // the engine's init as PID 1
	ShmBytes    int64 // the size of /dev/shm; 0 is the engine's
	// StopTimeout is the engine's own grace after the stop signal, in
	// seconds; nil leaves the engine's default.
	StopTimeout *int
	// Ulimits are the container's resource limits; none leaves the
	// engine's defaults.
	Ulimits []PackUlimit
	// ExtraHosts are NAME:ADDRESS lines added to the container's
	// /etc/hosts.
	ExtraHosts []string
	// RestartRetries, if not 0, lets the engine restart the container
	// after it fails, at most that many times; 0 never restarts it.
	RestartRetries int
	// DNS are the container's resolvers; none leaves the engine's.
	DNS []string
	// Healthcheck is the container's health check; nil leaves the
	// image's own.
	Healthcheck *PackHealthcheck
	// LogDriver and LogOptions are the container's logging driver ("" is
	// the engine's default).
	LogDriver  string
	LogOptions map[string]string
	// Cgroupns is "private" or "host"; "" the engine's default.
	Cgroupns    string
	PidMode     string
	IpcMode     string
	UTSMode     string
	UsernsMode  string
	MemoryBytes int64
	NanoCPUs    int64
	PidsLimit   int64
	Labels      map[string]string
	// NetworkIDs are the native IDs of the networks it joins, by the
	// pack's name: the workspace's own records, so the container is
	// attached by verified ID, never by a name.
	NetworkIDs map[string]string
}

// PackHealthcheck is a container's health check. Test ["NONE"] turns
// the image's own off.
type PackHealthcheck struct {
	Test                           []string
	Interval, Timeout, StartPeriod time.Duration
	Retries                        int
}

// PackDevice is one host device passed into a container: the host's node,
// the path it has inside, and its cgroup permissions ("r", "w", "m").
type PackDevice struct {
	Host, Container, Permissions string
}

// String is the compose form, HOST:CONTAINER:PERMISSIONS.
func (d PackDevice) String() string { return d.Host + ":" + d.Container + ":" + d.Permissions }

// ErrEngineNotProved: no settled profile of the engine as it is now is
// kept, and the caller may not probe it (a client's dry run).
var ErrEngineNotProved = errors.New("engine not yet proved")

// EngineNotProvedError is ErrEngineNotProved with why the last probe's
// proof did not settle, when one ran.
type EngineNotProvedError struct{ Unsettled string }

func (e *EngineNotProvedError) Error() string {
	return ErrEngineNotProved.Error() + ": the last probe did not settle (" + e.Unsettled + ")"
}

func (e *EngineNotProvedError) Unwrap() error { return ErrEngineNotProved }

// PackObject is one recorded object as the engine reports it now, by
// native ID, after its labels were checked.
type PackObject struct {
	Kind string
	ID   string
	Name string
	// State is "running", "exited", "created", "present" (a network or
	// volume), "missing" or "foreign" (the ID holds something else).
	State  string
	Detail string
	// ImageID and the HostConfig are a container's, read back from the
	// engine: HostConfigSHA256 is the lowercase hex SHA-256 of the
	// compacted HostConfig member of the inspect response.
	ImageID          string
	HostConfigSHA256 string
	HostConfig       *PackHostConfig
	Internal         bool
	// PID is a running container's init process on the host, 0 otherwise.
	PID int
	// Health is a container's health as its check last said: "starting",
	// "healthy" or "unhealthy"; "" when it has no check.
	Health string
}

// PackHostConfig is the security-relevant part of a container's effective
// HostConfig, as the engine reported it.
type PackHostConfig struct {
	Privileged     bool
	CapAdd         []string
	CapDrop        []string
	NetworkMode    string
	PidMode        string
	IpcMode        string
	UTSMode        string
	UsernsMode     string
	CgroupnsMode   string
	Mounts         []PackMount
	Devices        []PackDevice
	PortBindings   []PackPort
	ReadonlyRootfs bool
	SecurityOpt    []string
	MemoryBytes    int64
	NanoCPUs       int64
	PidsLimit      int64
}

// PackNames are the pack's names of everything an up creates, for the
// engine to list its intents before anything is created.
type PackNames struct {
	Networks, Volumes, Containers []string
}

// PackEngine is the evidenced capability profile of the container engine a
// pack would run on, as admission reads it. A backend fills it by talking
// to the engine; nothing in it is taken from the pack or the policy.
type PackEngine struct {
	Name       string // "docker"
	Version    string
	APIVersion string
	OS         string
	// Arch is the engine's architecture in OCI terms (amd64, arm64);
	// empty when the probe predates it.
	Arch   string `json:"arch,omitempty"`
	Kernel string
	// Boundary is the kernel boundary the containers really share:
	// "native-linux" or "vm" (Docker Desktop, a remote VM).
	Boundary      string
	StorageDriver string
	CgroupDriver  string
	CgroupVersion string
	Rootless      bool
	UsernsRemap   bool
	Runtimes      []string
	Seccomp       bool
	AppArmor      bool
	// InternalBlocksEgress is true only when a throwaway container on an
	// internal network was shown unable to reach outside it, while a
	// control connection inside the network worked.
	InternalBlocksEgress bool
	// EgressUnproved says why InternalBlocksEgress is false: the probe's
	// error, what its proof saw, or that no probe image is configured.
	EgressUnproved string `json:"egressUnproved,omitempty"`
	// Notes are what the probe saw that admission should report.
	Notes []string
}

// Package pack is a scenario pack: an ordinary compose-spec file, loaded
// without ambient interpolation, as the typed requirements it asks for. A
// pack requests authority and never grants it; admission intersects its
// requirements with the engine's evidenced profile and the operator's
// policy. The package is pure data and parsing: it talks to no engine.
package pack

import "time"

// Pack is one loaded compose file. Every slice is sorted by name so that
// two loads of the same bytes are equal.
type Pack struct {
	// Project is the compose project name: the file's top-level name:,
	// or when it has none the one ProjectFrom says. It names nothing
	// native: custody's workspace id does.
	Project string
	// ProjectFrom is "" when the file names the project, else where the
	// name came from, as compose takes it: ProjectFromOperator (the
	// operator's --project-name) or ProjectFromDirectory (the pack file's
	// directory).
	ProjectFrom string
	// Profiles are the compose profiles the operator selected, sorted.
	// Services holds the services without profiles: and those with a
	// selected one; Unselected names the others, sorted.
	Profiles   []string
	Unselected []string
	// Digest is the lowercase hex SHA-256 of the file's bytes.
	Digest string
	// Version is the obsolete top-level version: as written, kept only so
	// that admission notes it was ignored, as compose ignores it.
	Version  string
	Services []Service
	Networks []Network
	Volumes  []Volume
	Secrets  []Secret
	Configs  []Config
}

// Config is one top-level config: literal content written in the pack,
// or a file inside the pack's directory. Either is pack content, never a
// credential; a grant binds it by digest.
type Config struct {
	Name string
	// File is the absolute path of a file config, lexically inside the
	// pack's directory ("" for content). Load reads no file: the runner
	// reads it beneath the directory without following links (ReadConfig)
	// and puts its bytes in Content, setting Read.
	File    string
	Content string
	Read    bool
}

// Service is one compose service, with every security-relevant setting as
// a typed field. A setting custody does not model makes Load fail; it is
// never dropped.
type Service struct {
	Name string
	// Image is the reference as written; Build is non-nil for build:.
	Image string
	Build *Build
	// Command and Entrypoint are nil when the image's own are used.
	Command    []string
	Entrypoint []string
	// Environment is the literal KEY=VALUE pairs written in the file,
	// sorted. They are content, never taken from the caller's environment.
	Environment []string
	User        string
	WorkingDir  string
	Hostname    string
	// Labels are the labels written in the file; none is under
	// ReservedLabelPrefix (Load refuses those, P4).
	Labels map[string]string
	// DependsOn are the services started before this one, sorted.
	DependsOn []string
	// Conditions are the depends_on conditions other than
	// service_started (ConditionHealthy, ConditionCompleted), by the
	// service depended on; nil when every dependency is only started
	// first.
	Conditions map[string]string
	// Healthcheck is healthcheck: as written; nil when the file does not
	// say (then the image's own check, if any, is not one up waits for).
	Healthcheck *Healthcheck
	// Networks are the pack networks the service joins, sorted. compose's
	// implicit default network is listed as "default"; empty only with a
	// NetworkMode.
	Networks []string
	Ports    []Port
	Mounts   []Mount
	Secrets  []SecretUse
	// Privileged is never implied by anything else.
	Privileged bool
	// CapAdd and CapDrop are canonical names ("CAP_NET_ADMIN"), sorted;
	// "ALL" stays "ALL".
	CapAdd  []string
	CapDrop []string
	// Devices are "host:container:permissions", defaults filled in
	// ("/dev/fuse:/dev/fuse:rwm"), sorted.
	Devices []string
	// NetworkMode, PID, IPC, UTS and Userns are the raw values ("" when
	// unset): "host", "none", "service:db", "container:x", ...
	NetworkMode string
	PID         string
	IPC         string
	UTS         string
	Userns      string
	// SecurityOpt canonical "key=value" (docker's "key:value" rewritten,
	// bare no-new-privileges as "no-new-privileges=true"), sorted.
	SecurityOpt []string
	Sysctls     map[string]string
	// CgroupParent and Cgroup ("host" or "private") as written.
	CgroupParent string
	Cgroup       string
	Restart      string
	ReadOnly     bool
	Resources    Resources
	// Systemd asks for the named systemd-in-container authority
	// (x-custody-systemd: true), never privileged.
	Systemd bool
	// StopSignal as written, e.g. "SIGRTMIN+3".
	StopSignal string
	// Expose is the service's expose: ports ("8080/tcp"), sorted. It asks
	// for nothing: a pack's services reach each other's ports on its
	// networks without it, and an exposed port is published nowhere.
	Expose []string
	// ContainerName is container_name: as written. Custody names
	// containers itself (ownership, P4); this name becomes an alias of
	// the service on the pack's networks.
	ContainerName string
	// Init runs the engine's minimal init as the container's PID 1
	// (init: true), which reaps zombies and forwards signals.
	Init bool
	// ShmBytes is shm_size: the size of /dev/shm (0: the engine's).
	ShmBytes int64
	// StopGrace is stop_grace_period: how long the service has after its
	// stop signal before it is killed; nil when the file does not say.
	StopGrace *time.Duration
	// Ulimits are the service's ulimits, sorted by name; the single
	// form is soft = hard.
	Ulimits []Ulimit
	// ExtraHosts are extra_hosts: names added to the service's
	// /etc/hosts, sorted. IP is an address, or "host-gateway" as written.
	ExtraHosts []HostEntry
	// DNS are the dns: resolver addresses, in the file's order (the
	// order is the order of lookups).
	DNS []string
	// Platform is platform: as written (os/arch[/variant]).
	Platform string
	// Logging is logging: as written; nil when the file does not say.
	Logging *Logging
	// Role is x-custody-role: RoleParticipant, RoleEvaluator, or "" for
	// a service with no role (the scenario's own plumbing).
	Role string
	// Configs are the service's uses of configs, sorted like Secrets;
	// a use without a target gets /NAME, as compose gives it.
	Configs []SecretUse
	// Profiles are the service's profiles: as written, sorted; the
	// service is in the pack only when one of them is selected.
	Profiles []string
}

// Where a project name the file does not give came from.
const (
	ProjectFromOperator  = "project-name"
	ProjectFromDirectory = "directory"
)

// depends_on conditions beyond compose's default service_started.
const (
	ConditionStarted   = "service_started"
	ConditionHealthy   = "service_healthy"
	ConditionCompleted = "service_completed_successfully"
)

// Healthcheck is a service's health check. A nil duration or retry count
// is one the file does not give (the engine's default applies).
type Healthcheck struct {
	// Test is the check as the engine takes it: "CMD" and its argv, or
	// "CMD-SHELL" and one shell command; nil with Disable.
	Test                           []string
	Interval, Timeout, StartPeriod *time.Duration
	Retries                        *uint64
	// Disable turns off any check the image defines (disable: true, or
	// test: NONE).
	Disable bool
}

// Roles a pack gives its services and volumes (x-custody-role).
const (
	// RoleParticipant marks a participant-facing service: it never
	// reaches an evaluator-only service or volume, an engine or custody
	// socket, an operator credential, or anything outside the world.
	RoleParticipant = "participant"
	// RoleEvaluator marks an evaluator-only service or volume: no
	// participant-facing service reaches it.
	RoleEvaluator = "evaluator"
)

// Logging is a service's logging driver and its options.
type Logging struct {
	Driver  string
	Options map[string]string
}

// HostEntry is one extra_hosts name and the address it resolves to.
type HostEntry struct {
	Name, IP string
}

// Ulimit is one resource limit of the service's processes.
type Ulimit struct {
	Name       string
	Soft, Hard int64
}

// Build is a service's build: section.
type Build struct {
	Context    string
	Dockerfile string
	Args       []string // KEY=VALUE, sorted, literal
}

// Port is one published port. HostPort 0 is an open choice the backend
// makes; any other value is exact.
type Port struct {
	HostIP        string
	HostPort      uint16
	ContainerPort uint16
	Protocol      string // "tcp" or "udp"
}

// MountType is how a path reaches a service.
type MountType string

const (
	Bind  MountType = "bind"
	Named MountType = "volume"
	Tmpfs MountType = "tmpfs"
)

// Mount is one bind, named volume or tmpfs of a service.
type Mount struct {
	Type MountType
	// Source is the host path of a bind (absolute, as resolved against the
	// pack's directory, not yet checked against the filesystem) or the
	// pack volume's name.
	Source   string
	Target   string
	ReadOnly bool
	// TmpfsBytes is a tmpfs size; 0 means unset.
	TmpfsBytes int64
}

// Resources are a service's limits; 0 means unset.
type Resources struct {
	MemoryBytes int64
	CPUs        float64
	Pids        int64
}

// Network is one pack network.
type Network struct {
	Name string
	// Internal: no route out of the pack's world.
	Internal bool
	Driver   string // "" or "bridge"
	// External names a network custody did not create; refused unless
	// granted.
	External bool
}

// Volume is one pack volume.
type Volume struct {
	Name     string
	Driver   string // "" or "local"
	External bool
	// Role is RoleEvaluator for an evaluator-only volume, else "".
	Role string
}

// Secret is one top-level secret: a file the operator's credential source
// must provide, or literal fixture content written in the pack.
type Secret struct {
	Name string
	// Credential names the operator credential it asks for (from
	// x-custody-credential, or the secret's name); empty for fixtures.
	Credential string
	// Content is a fixture's literal value: pack content, not a secret.
	Content string
}

// SecretUse is a service's use of a secret.
type SecretUse struct {
	Name   string
	Target string // absolute path in the container
	UID    string
	GID    string
	Mode   uint32 // 0 means the default 0400
}

// Kind is the kind of a requirement.
type Kind string

const (
	KindImage        Kind = "image"
	KindBuild        Kind = "build"
	KindPrivileged   Kind = "privileged"
	KindCapability   Kind = "capability"
	KindDevice       Kind = "device"
	KindNamespace    Kind = "namespace"     // value "network=host", "pid=host", ...
	KindBind         Kind = "bind"          // value the host path
	KindDaemonSocket Kind = "daemon-socket" // a bind that reaches an engine socket
	KindVolume       Kind = "volume"
	KindTmpfs        Kind = "tmpfs"
	KindPort         Kind = "port"   // value "127.0.0.1:8080->80/tcp", host port 0 is open
	KindEgress       Kind = "egress" // a network that is not internal
	KindExternal     Kind = "external"
	KindSecurityOpt  Kind = "security-opt"
	KindSysctl       Kind = "sysctl"
	KindUser         Kind = "user"
	KindCgroup       Kind = "cgroup"
	KindCredential   Kind = "credential"
	KindMemory       Kind = "memory"
	KindCPU          Kind = "cpu"
	KindPids         Kind = "pids"
	KindRestart      Kind = "restart"
	KindSystemd      Kind = "systemd"
)

// Requirement is one thing a pack asks for. Admission gives each one
// verdict, and a grant binds the admitted set.
type Requirement struct {
	// Service is the service that asks, or "" for the pack as a whole.
	Service string
	Kind    Kind
	// Value is canonical for its kind, so equal asks compare equal.
	Value string
	// Exact is false for an open choice (a host port 0, a subnet) that the
	// backend makes and records; an exact requirement is never satisfied
	// by a choice.
	Exact bool
}

package admission

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/pack"
	"github.com/custody-dev/custody/policy"
)

// PackFacts are what the runner knows about the world when it admits a
// pack, as values. Nothing in them comes from the pack or the policy.
type PackFacts struct {
	// Engine is the engine's evidenced profile; nil refuses everything.
	Engine *backend.PackEngine
	// EngineSocket is the engine's socket path, so that a bind of it is
	// recognised whatever the pack calls it.
	EngineSocket string
	// Binds are the facts about every bind source and build context, by
	// host path (pack.InspectBind). A source without facts is refused.
	Binds map[string]pack.BindFact
	// PathOnly judges bind sources and build contexts by their path
	// against the bind roots alone, with no facts: a client's dry run,
	// which must not learn through custodyd what lies at a host path it
	// may not be able to see. The checks say what is left for the grant
	// issue to find out.
	PathOnly bool
	// PortsInUse are host ports known to be taken; a chosen port avoids
	// them and an exact one in the list is refused.
	PortsInUse []uint16
	// SubnetPool is where the backend takes pack network subnets from,
	// one /24 (or the pool's own size, if smaller) per network.
	SubnetPool netip.Prefix
	// SubnetsInUse are subnets a chosen subnet must not overlap.
	SubnetsInUse []netip.Prefix
	// ConfigErrs say why a config file could not be read beneath the
	// pack's directory (pack.ReadConfig), by its path.
	ConfigErrs map[string]string
}

// PackPlan is an admitted pack with every open choice made: what a grant
// binds (by Digest) and what up realizes. It is a plain value; equal
// inputs give equal plans.
type PackPlan struct {
	Project string `json:"project"`
	// ProjectFrom is where the project name came from when the file has
	// no name: ("project-name": the operator's; "directory": the pack
	// file's directory, as compose names it); absent when the file names
	// it, and before.
	ProjectFrom string `json:"projectFrom,omitempty"`
	// Profiles are the compose profiles the operator selected: Services
	// holds only the services without profiles and those with a selected
	// one. Absent when none is selected, and before.
	Profiles   []string   `json:"profiles,omitempty"`
	PackDigest string     `json:"packDigest"`
	Actor      string     `json:"actor"`
	Engine     PlanEngine `json:"engine"`
	// HostRootEquivalent is true when the plan hands a service authority
	// equal to root on the host (the engine's socket, privileged);
	// HostRootReasons say which (P3).
	HostRootEquivalent bool          `json:"hostRootEquivalent"`
	HostRootReasons    []string      `json:"hostRootReasons,omitempty"`
	Services           []PlanService `json:"services"`
	Networks           []PlanNetwork `json:"networks"`
	Volumes            []PlanVolume  `json:"volumes"`
	Totals             PlanResources `json:"totals"`
	Checks             []Check       `json:"checks"`
}

// PlanEngine is the part of the engine profile the plan relies on.
type PlanEngine struct {
	Name                 string `json:"name"`
	Version              string `json:"version"`
	APIVersion           string `json:"apiVersion"`
	Boundary             string `json:"boundary"`
	InternalBlocksEgress bool   `json:"internalBlocksEgress"`
}

// PlanService is one admitted service, effective settings only.
type PlanService struct {
	Name string `json:"name"`
	// Image is the reference to run; ImageDigest the digest the policy
	// pins it to ("" when the policy allowed the reference itself, and
	// the backend records the image ID it resolves).
	Image       string            `json:"image,omitempty"`
	ImageDigest string            `json:"imageDigest,omitempty"`
	Build       *PlanBuild        `json:"build,omitempty"`
	Command     []string          `json:"command,omitempty"`
	Entrypoint  []string          `json:"entrypoint,omitempty"`
	Environment []string          `json:"environment,omitempty"`
	User        string            `json:"user,omitempty"`
	WorkingDir  string            `json:"workingDir,omitempty"`
	Hostname    string            `json:"hostname,omitempty"`
	Networks    []string          `json:"networks,omitempty"`
	Aliases     []string          `json:"aliases,omitempty"` // container_name, on every network; absent before
	NetworkMode string            `json:"networkMode,omitempty"`
	PID         string            `json:"pid,omitempty"`
	IPC         string            `json:"ipc,omitempty"`
	UTS         string            `json:"uts,omitempty"`
	Userns      string            `json:"userns,omitempty"`
	Cgroup      string            `json:"cgroup,omitempty"`
	Ports       []PlanPort        `json:"ports,omitempty"`
	Mounts      []PlanMount       `json:"mounts,omitempty"`
	Secrets     []PlanSecret      `json:"secrets,omitempty"`
	Privileged  bool              `json:"privileged"`
	CapAdd      []string          `json:"capAdd,omitempty"`
	CapDrop     []string          `json:"capDrop,omitempty"`
	Devices     []PlanDevice      `json:"devices,omitempty"`
	SecurityOpt []string          `json:"securityOpt,omitempty"`
	Sysctls     map[string]string `json:"sysctls,omitempty"`
	ReadOnly    bool              `json:"readOnly"`
	StopSignal  string            `json:"stopSignal,omitempty"`
	Systemd     bool              `json:"systemd"`
	Init        bool              `json:"init,omitempty"`     // the engine's init as PID 1; absent before
	ShmBytes    int64             `json:"shmBytes,omitempty"` // the size of /dev/shm; absent before
	// StopGraceSeconds is stop_grace_period in whole seconds (rounded
	// up): the service's time after its stop signal, at down and in the
	// engine's own stop. Absent: custody's default; absent before.
	StopGraceSeconds *int `json:"stopGraceSeconds,omitempty"`
	// Ulimits are the granted ulimits, by name; absent before.
	Ulimits []PlanUlimit `json:"ulimits,omitempty"`
	// ExtraHosts are the granted extra_hosts entries, NAME:ADDRESS as the
	// engine takes them; absent before.
	ExtraHosts []string `json:"extraHosts,omitempty"`
	// RestartRetries is restart: on-failure:N, the most times the engine
	// restarts the service's container after it fails; absent (before,
	// and for "no") the engine never restarts it.
	RestartRetries int `json:"restartRetries,omitempty"`
	// DNS are the granted resolver addresses, in order; absent before.
	DNS []string `json:"dns,omitempty"`
	// Platform is the granted platform: (the engine's own); absent
	// before.
	Platform string `json:"platform,omitempty"`
	// Logging is the granted logging driver and options; absent before
	// (the engine's default driver).
	Logging *PlanLogging `json:"logging,omitempty"`
	// DaemonSocket: the service can reach the engine (a socket bind or
	// DOCKER_HOST): host-root-equivalent.
	DaemonSocket bool          `json:"daemonSocket"`
	Resources    PlanResources `json:"resources"`
	// Labels are the pack's own labels, none under custody's reserved
	// prefix; DependsOn are the services started first.
	Labels    map[string]string `json:"labels,omitempty"`
	DependsOn []string          `json:"dependsOn,omitempty"`
	// Conditions are the depends_on conditions up waits for before it
	// starts the service (service_healthy, service_completed_successfully),
	// by the service depended on; absent for service_started and before.
	Conditions map[string]string `json:"dependsOnConditions,omitempty"`
	// Healthcheck is the granted health check; absent when the file gives
	// none, and before.
	Healthcheck *PlanHealthcheck `json:"healthcheck,omitempty"`
	// Configs are the service's config files: pack content bound by
	// digest (FixtureSHA256), delivered read-only at Target; absent when
	// it uses none, and before.
	Configs []PlanSecret `json:"configs,omitempty"`
}

// PlanBuild is an admitted build: section.
type PlanBuild struct {
	Context    string   `json:"context"`
	Dockerfile string   `json:"dockerfile,omitempty"`
	Args       []string `json:"args,omitempty"`
}

// PlanLogging is a service's granted logging driver.
type PlanLogging struct {
	Driver  string            `json:"driver"`
	Options map[string]string `json:"options,omitempty"`
}

// PlanUlimit is one granted resource limit of a service's processes.
type PlanUlimit struct {
	Name string `json:"name"`
	Soft int64  `json:"soft"`
	Hard int64  `json:"hard"`
}

// PlanResources are a service's (or the pack's) effective limits.
type PlanResources struct {
	MemoryBytes int64   `json:"memoryBytes"`
	CPUs        float64 `json:"cpus"`
	Pids        int64   `json:"pids"`
}

// PlanPort is one published port; Chosen marks a host port or address
// the backend chose.
type PlanPort struct {
	HostIP        string `json:"hostIP"`
	HostPort      uint16 `json:"hostPort"`
	ContainerPort uint16 `json:"containerPort"`
	Protocol      string `json:"protocol"`
	Chosen        bool   `json:"chosen,omitempty"`
}

// PlanMount is one mount. A bind names the root it was resolved beneath.
type PlanMount struct {
	Type         pack.MountType `json:"type"`
	Source       string         `json:"source,omitempty"`
	Target       string         `json:"target"`
	ReadOnly     bool           `json:"readOnly"`
	TmpfsBytes   int64          `json:"tmpfsBytes,omitempty"`
	Root         string         `json:"root,omitempty"`
	DaemonSocket bool           `json:"daemonSocket,omitempty"`
	// Dir: a bind source was a directory at grant time, so up can
	// refuse one replaced by a file of the same name (or the reverse).
	Dir bool `json:"dir,omitempty"`
}

// PlanSecret is one secret file a service receives. Credential names an
// operator credential (its value is never in the plan); a fixture is pack
// content, bound by its digest.
type PlanSecret struct {
	Name          string `json:"name"`
	Target        string `json:"target"`
	UID           string `json:"uid,omitempty"`
	GID           string `json:"gid,omitempty"`
	Mode          uint32 `json:"mode"`
	Credential    string `json:"credential,omitempty"`
	FixtureSHA256 string `json:"fixtureSha256,omitempty"`
}

// PlanDevice is one host device passed in.
type PlanDevice struct {
	Host        string `json:"host"`
	Container   string `json:"container"`
	Permissions string `json:"permissions"`
}

// PlanNetwork is one network custody creates; its subnet is the
// backend's choice.
type PlanNetwork struct {
	Name     string `json:"name"`
	Internal bool   `json:"internal"`
	Subnet   string `json:"subnet"`
	// Implicit: the pack's default network, which custody adds (internal)
	// for services that name none.
	Implicit bool `json:"implicit,omitempty"`
}

// PlanVolume is one named volume custody creates.
type PlanVolume struct {
	Name string `json:"name"`
}

// Digest returns "sha256:<hex>" of the plan's canonical JSON, without its
// checks: the checks explain the plan, their wording is not authority.
func (p *PackPlan) Digest() string {
	c := *p
	c.Checks = nil
	b, err := json.Marshal(&c)
	if err != nil {
		// Only unsupported values (NaN) fail, and admission refuses them.
		panic(fmt.Sprintf("admission: plan does not marshal: %v", err))
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Systemd's minimal set (P7): what the named authority expands to.
var (
	SystemdTmpfs      = []string{"/run", "/run/lock", "/tmp"}
	SystemdStopSignal = "SIGRTMIN+3"
)

// DefaultNetwork is the network a service joins when it names none.
const DefaultNetwork = "default"

// AdmitPack computes the plan for p as actor, or a *RefusedError naming
// every requirement that is unsupported or not granted. It judges the
// pack's typed settings, never strings; a setting it does not model is
// refused. A nil pack, policy or engine profile, a policy without a packs
// section or an actor without pack grants refuses everything.
func AdmitPack(p *pack.Pack, pol *policy.Policy, actor string, facts PackFacts) (*PackPlan, error) {
	if p == nil || pol == nil || facts.Engine == nil {
		return nil, refuse("admission", "no-pack-policy-or-profile",
			"no valid pack, operator policy or engine profile is loaded",
			"load a valid policy (custody policy check) and let the runner probe the engine")
	}
	if pol.Packs == nil {
		return nil, refuse("packs", "no-pack-authority",
			"the operator policy has no packs section, so no pack is granted anything",
			"an operator may add a packs: section with an actor for "+actor+" to the policy")
	}
	pa, ok := pol.PackActor(actor)
	if !ok {
		return nil, refuse("actor", "actor-not-granted",
			fmt.Sprintf("actor %q has no pack grants", actor),
			fmt.Sprintf("an operator may add %q to the policy's packs.actors", actor))
	}
	if !pa.HasSubmitters() {
		return nil, refuse("actor", "actor-no-submitters",
			fmt.Sprintf("pack actor %q has no submitters, so a grant for it could launch nothing", actor),
			"an operator may list the actor's submitters (uids or gids) in packs.actors")
	}
	a := &packAdmitter{p: p, pa: pa, facts: facts}
	plan := &PackPlan{Project: p.Project, PackDigest: p.Digest, Actor: actor}
	a.plan = plan
	a.engine()
	a.unmodelled("pack", *p)
	a.selection()
	if p.Version != "" {
		a.add(Check{Requirement: "version", Verdict: Chosen, Code: "obsolete-ignored",
			Detail: fmt.Sprintf("version %q is obsolete and ignored, as compose ignores it", p.Version)})
	}
	if len(p.Services) > pa.Ceilings.Services {
		a.add(Check{Requirement: "pack.services", Verdict: NotGranted, Code: "too-many-services",
			Detail: fmt.Sprintf("%d services, the policy allows at most %d", len(p.Services), pa.Ceilings.Services),
			Fix:    "split the pack, or an operator may raise packs.actors[].ceilings.services"})
	}
	if len(p.Services) == 0 {
		a.add(Check{Requirement: "pack.services", Verdict: NotGranted, Code: "no-services",
			Detail: "the pack has no services", Fix: "add a service"})
	}
	a.names()
	a.volumes()
	a.secrets()
	res := a.resources()
	a.choosePorts()
	for i := range p.Services {
		plan.Services = append(plan.Services, a.service(&p.Services[i], res[i]))
	}
	a.networks()
	a.roles()
	plan.Checks = a.checks
	// Empty lists are [] in the plan's JSON, never null.
	plan.Services, plan.Networks, plan.Volumes = emptyIfNil(plan.Services), emptyIfNil(plan.Networks), emptyIfNil(plan.Volumes)
	if err := refusedOf(a.checks); err != nil {
		return nil, err
	}
	return plan, nil
}

func emptyIfNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func refuse(req, code, detail, fix string) error {
	return &RefusedError{Checks: []Check{{Requirement: req, Verdict: NotGranted, Code: code, Detail: detail, Fix: fix}}}
}

type packAdmitter struct {
	p      *pack.Pack
	pa     *policy.PackActor
	facts  PackFacts
	plan   *PackPlan
	checks []Check
	// ports are the host ports chosen for port 0, by service and index.
	ports map[string][]PlanPort
}

func (a *packAdmitter) add(c Check) { a.checks = append(a.checks, c) }

// grantFix names the policy field an operator would set.
func (a *packAdmitter) grantFix(field string) string {
	return fmt.Sprintf("an operator may grant it in packs.actors[%s].%s", a.pa.Name, field)
}

func (a *packAdmitter) hostRoot(reason string) {
	a.plan.HostRootEquivalent = true
	a.plan.HostRootReasons = append(a.plan.HostRootReasons, reason)
}

func (a *packAdmitter) engine() {
	e := a.facts.Engine
	a.plan.Engine = PlanEngine{Name: e.Name, Version: e.Version, APIVersion: e.APIVersion, Boundary: e.Boundary, InternalBlocksEgress: e.InternalBlocksEgress}
	if e.Name != string(backend.KindDocker) {
		a.add(Check{Requirement: "engine", Verdict: Unsupported, Code: "engine-unknown",
			Detail: fmt.Sprintf("engine %q is not one custody models", e.Name), Fix: "run packs on a Docker engine"})
		return
	}
	switch e.Boundary {
	case "native-linux":
		a.add(Check{Requirement: "engine.boundary", Verdict: Granted, Code: "boundary-native",
			Detail: fmt.Sprintf("containers share this host's Linux kernel %s (Docker %s, API %s, rootless=%v, userns-remap=%v)", e.Kernel, e.Version, e.APIVersion, e.Rootless, e.UsernsRemap)})
	case "vm":
		a.add(Check{Requirement: "engine.boundary", Verdict: Granted, Code: "boundary-vm",
			Detail: fmt.Sprintf("containers share the kernel %s of Docker's VM, not this host's (Docker %s, API %s)", e.Kernel, e.Version, e.APIVersion)})
	default:
		a.add(Check{Requirement: "engine.boundary", Verdict: Unsupported, Code: "boundary-unknown",
			Detail: fmt.Sprintf("the engine's kernel boundary %q is not known", e.Boundary),
			Fix:    "let the runner probe the engine; it must report native-linux or vm"})
	}
	if len(e.Notes) > 0 {
		a.add(Check{Requirement: "engine.notes", Verdict: Granted, Code: "engine-notes", Detail: strings.Join(e.Notes, "; ")})
	}
	if !e.Seccomp {
		a.add(Check{Requirement: "engine.seccomp", Verdict: Unsupported, Code: "engine-no-seccomp",
			Detail: "the engine does not apply its default seccomp filter", Fix: "use a Docker engine built with seccomp"})
	}
}

// modelled lists, per pack type, the fields admission judges. A non-zero
// field not listed is refused, so a setting the model gains is never
// silently admitted before admission learns it.
var modelled = map[reflect.Type][]string{
	reflect.TypeFor[pack.Pack](): {"Project", "ProjectFrom", "Profiles", "Unselected", "Digest", "Version", "Services", "Networks", "Volumes", "Secrets", "Configs"},
	reflect.TypeFor[pack.Service](): {"Name", "Image", "Build", "Command", "Entrypoint", "Environment", "User",
		"WorkingDir", "Hostname", "Networks", "Ports", "Mounts", "Secrets", "Privileged", "CapAdd", "CapDrop",
		"Devices", "NetworkMode", "PID", "IPC", "UTS", "Userns", "SecurityOpt", "Sysctls", "CgroupParent", "Expose", "ContainerName", "Init", "ShmBytes", "StopGrace", "Ulimits", "ExtraHosts", "DNS", "Platform", "Logging",
		"Cgroup", "Restart", "ReadOnly", "Resources", "Systemd", "StopSignal", "Labels", "DependsOn", "Conditions", "Healthcheck", "Profiles", "Configs", "Role"},
	reflect.TypeFor[pack.Build]():     {"Context", "Dockerfile", "Args"},
	reflect.TypeFor[pack.Port]():      {"HostIP", "HostPort", "ContainerPort", "Protocol"},
	reflect.TypeFor[pack.Mount]():     {"Type", "Source", "Target", "ReadOnly", "TmpfsBytes"},
	reflect.TypeFor[pack.Resources](): {"MemoryBytes", "CPUs", "Pids"},
	reflect.TypeFor[pack.Network]():   {"Name", "Internal", "Driver", "External"},
	reflect.TypeFor[pack.Volume]():    {"Name", "Driver", "External", "Role"},
	reflect.TypeFor[pack.Secret]():    {"Name", "Credential", "Content"},
	reflect.TypeFor[pack.SecretUse](): {"Name", "Target", "UID", "GID", "Mode"},
}

// unmodelled refuses every set field of v that admission does not judge.
func (a *packAdmitter) unmodelled(where string, v any) {
	rv := reflect.ValueOf(v)
	known := modelled[rv.Type()]
	for i := range rv.NumField() {
		f := rv.Type().Field(i)
		if !slices.Contains(known, f.Name) && !rv.Field(i).IsZero() {
			a.add(Check{Requirement: where + "." + f.Name, Verdict: Unsupported, Code: "unmodelled",
				Detail: fmt.Sprintf("custody does not model %s of %s, so it is refused rather than ignored", f.Name, where),
				Fix:    "remove the setting"})
		}
	}
}

var (
	digestRe  = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	signalRe  = regexp.MustCompile(`^SIG([A-Z]{2,8}|RTMIN\+[0-9]{1,2}|RTMAX-[0-9]{1,2})$`)
	idRe      = regexp.MustCompile(`^[0-9]{1,10}$`)
	devPermRe = regexp.MustCompile(`^[rwm]{1,3}$`)
)

func (a *packAdmitter) service(s *pack.Service, r pack.Resources) PlanService {
	res := PlanResources{MemoryBytes: r.MemoryBytes, CPUs: r.CPUs, Pids: r.Pids}
	w := "services." + s.Name
	a.unmodelled(w, *s)
	ps := PlanService{
		Name: s.Name, Command: slices.Clone(s.Command), Entrypoint: slices.Clone(s.Entrypoint),
		Environment: slices.Clone(s.Environment), User: s.User, WorkingDir: s.WorkingDir, Hostname: s.Hostname,
		Privileged: s.Privileged, ReadOnly: s.ReadOnly, Systemd: s.Systemd, StopSignal: s.StopSignal,
		Cgroup: s.Cgroup, Resources: res,
	}
	if len(s.Expose) > 0 {
		a.add(Check{Requirement: w + ".expose", Verdict: Granted, Code: "expose-in-world",
			Detail: strings.Join(s.Expose, ", ") + ": reachable by the pack's services on its networks and published on no host address, as expose means; it asks the engine for nothing"})
	}
	ps.Image, ps.ImageDigest, ps.Build = a.image(w, s)
	a.add(Check{Requirement: w + ".container_name", Verdict: Chosen, Code: "name-chosen",
		Detail: "custody names the container from the workspace id and the service at up; a name never proves ownership (labels, journal and native id do)"})
	if s.Privileged {
		if a.pa.Privileged {
			a.add(Check{Requirement: w + ".privileged", Verdict: Granted, Code: "privileged-granted",
				Detail: "privileged: every capability and device, no seccomp or AppArmor: host-root-equivalent"})
			a.hostRoot(s.Name + ": privileged")
		} else {
			a.add(Check{Requirement: w + ".privileged", Verdict: NotGranted, Code: "privileged-not-granted",
				Detail: "privileged is host-root-equivalent and the policy does not grant it",
				Fix:    "remove privileged (ask for the capabilities or the systemd authority it needs), or " + a.grantFix("privileged: true")})
		}
	}
	ps.CapAdd, ps.CapDrop = a.capabilities(w, s), slices.Clone(s.CapDrop)
	ps.Devices = a.devices(w, s)
	ps.NetworkMode = a.namespace(w, s, "network_mode", "network", s.NetworkMode)
	ps.PID = a.namespace(w, s, "pid", "pid", s.PID)
	ps.IPC = a.namespace(w, s, "ipc", "ipc", s.IPC)
	ps.UTS = a.namespace(w, s, "uts", "uts", s.UTS)
	ps.Userns = a.namespace(w, s, "userns_mode", "userns", s.Userns)
	ps.Cgroup = a.namespace(w, s, "cgroup", "cgroup", s.Cgroup)
	ps.SecurityOpt = a.securityOpts(w, s)
	ps.Sysctls = a.sysctls(w, s)
	a.misc(w, s)
	ps.Labels = a.labels(w, s)
	ps.DependsOn = a.dependsOn(w, s)
	ps.Conditions = a.conditions(w, s)
	ps.Healthcheck = a.healthcheck(w, s)
	ps.Networks = a.serviceNetworks(w, s)
	ps.Aliases = a.containerName(w, s, ps.Networks)
	ps.Init = a.init(w, s)
	ps.ShmBytes = a.shm(w, s, res)
	ps.StopGraceSeconds = a.stopGrace(w, s)
	ps.Ulimits = a.ulimits(w, s)
	ps.ExtraHosts = a.extraHosts(w, s)
	ps.RestartRetries = a.restart(w, s)
	ps.DNS = a.dns(w, s)
	ps.Platform = a.platform(w, s)
	ps.Logging = a.logging(w, s)
	ps.Ports = a.ports[s.Name]
	ps.Mounts, ps.DaemonSocket = a.mounts(w, s, res)
	for _, kv := range s.Environment {
		if k, _, _ := strings.Cut(kv, "="); k == "DOCKER_HOST" {
			ps.DaemonSocket = a.daemonSocket(w+".environment.DOCKER_HOST", s.Name, "DOCKER_HOST points the service at an engine") || ps.DaemonSocket
		}
	}
	ps.Secrets = a.secretUses(w, s)
	ps.Configs = a.configUses(w, s)
	if s.Systemd {
		a.systemd(w, s, &ps)
	}
	return ps
}

// image admits the service's image or build.
func (a *packAdmitter) image(w string, s *pack.Service) (ref, digest string, build *PlanBuild) {
	if s.Build != nil {
		a.unmodelled(w+".build", *s.Build)
		b := PlanBuild{Context: s.Build.Context, Dockerfile: s.Build.Dockerfile, Args: slices.Clone(s.Build.Args)}
		if df := b.Dockerfile; df != "" && (path.IsAbs(df) || !filepath.IsLocal(df)) {
			a.add(Check{Requirement: w + ".build.dockerfile", Verdict: NotGranted, Code: "dockerfile-outside-context",
				Detail: fmt.Sprintf("dockerfile %q is not a path inside the build context", df), Fix: "put the Dockerfile in the context and name it relative to it"})
		}
		if !a.pa.Builds {
			a.add(Check{Requirement: w + ".build", Verdict: NotGranted, Code: "build-not-granted",
				Detail: "building reads a host context and may pull: acquisition authority, separate from running",
				Fix:    "use an allowed image, or " + a.grantFix("builds: true")})
		} else if root, ok := a.bindSource(w+".build.context", b.Context, false); ok {
			how := "no symlinks followed"
			if a.facts.PathOnly {
				how = pathOnly
			}
			a.add(Check{Requirement: w + ".build", Verdict: Granted, Code: "build-granted",
				Detail: fmt.Sprintf("build from %s (beneath root %s, %s)", b.Context, root, how)})
		}
		return s.Image, "", &b
	}
	if s.Image == "" {
		a.add(Check{Requirement: w + ".image", Verdict: NotGranted, Code: "no-image",
			Detail: "the service names neither an image nor a build", Fix: "set image:"})
		return "", "", nil
	}
	refDigest := ""
	if i := strings.LastIndexByte(s.Image, '@'); i >= 0 {
		refDigest = s.Image[i+1:]
	} else if digestRe.MatchString(s.Image) {
		refDigest = s.Image
	}
	for _, im := range a.pa.Images {
		var pinned string
		switch {
		case im.Reference != "" && im.Digest != "":
			if s.Image != im.Reference && s.Image != im.Reference+"@"+im.Digest {
				continue
			}
			pinned = im.Digest
		case im.Reference != "":
			if s.Image != im.Reference {
				continue
			}
			pinned = refDigest
		default:
			if refDigest != im.Digest {
				continue
			}
			pinned = im.Digest
		}
		detail := s.Image
		if pinned != "" {
			detail += " pinned to " + pinned
		} else {
			detail += " (by exact reference; the backend records the image ID it resolves)"
		}
		a.add(Check{Requirement: w + ".image", Verdict: Granted, Code: "image-allowed", Detail: detail})
		return s.Image, pinned, nil
	}
	a.add(Check{Requirement: w + ".image", Verdict: NotGranted, Code: "image-not-allowed",
		Detail: fmt.Sprintf("image %s is not among the actor's allowed images", s.Image),
		Fix:    "use an allowed image, or " + a.grantFix("images")})
	return s.Image, "", nil
}

// hostRootCaps are the capabilities that, granted to a container's root,
// reach the host: mounts and namespaces, kernel modules, tracing host
// processes through shared namespaces, and reading any file by handle.
var hostRootCaps = []string{"ALL", "CAP_SYS_ADMIN", "CAP_SYS_MODULE", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"}

func (a *packAdmitter) capabilities(w string, s *pack.Service) []string {
	for _, c := range s.CapDrop {
		if c != "ALL" && !slices.Contains(policy.Capabilities, c) {
			a.add(Check{Requirement: w + ".cap_drop." + c, Verdict: Unsupported, Code: "unmodelled",
				Detail: fmt.Sprintf("%q is not a capability custody knows", c), Fix: "write a capability such as CAP_NET_RAW"})
		}
	}
	var add []string
	for _, c := range s.CapAdd {
		req := w + ".cap_add." + c
		switch {
		case c != "ALL" && !slices.Contains(policy.Capabilities, c):
			a.add(Check{Requirement: req, Verdict: Unsupported, Code: "unmodelled",
				Detail: fmt.Sprintf("%q is not a capability custody knows", c), Fix: "write a capability such as CAP_NET_ADMIN"})
		case !slices.Contains(a.pa.Capabilities, c):
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "capability-not-granted",
				Detail: fmt.Sprintf("adding %s is not granted", c), Fix: "remove it from cap_add, or " + a.grantFix("capabilities")})
		case slices.Contains(hostRootCaps, c):
			a.add(Check{Requirement: req, Verdict: Granted, Code: "capability-granted",
				Detail: "adds " + c + ": host-root-equivalent (it escapes the container's confinement)"})
			a.hostRoot(s.Name + ": cap_add " + c)
		default:
			a.add(Check{Requirement: req, Verdict: Granted, Code: "capability-granted", Detail: "adds " + c})
		}
		add = append(add, c)
	}
	return add
}

func (a *packAdmitter) devices(w string, s *pack.Service) []PlanDevice {
	var ds []PlanDevice
	for i, d := range s.Devices {
		req := fmt.Sprintf("%s.devices[%d]", w, i)
		parts := strings.Split(d, ":")
		dev := PlanDevice{Host: parts[0], Container: parts[0], Permissions: "rwm"}
		if len(parts) > 1 {
			dev.Container = parts[1]
		}
		if len(parts) > 2 {
			dev.Permissions = parts[2]
		}
		switch {
		case len(parts) > 3 || !strings.HasPrefix(dev.Host, "/dev/") || !cleanPath(dev.Host) || !cleanPath(dev.Container) || !devPermRe.MatchString(dev.Permissions):
			a.add(Check{Requirement: req, Verdict: Unsupported, Code: "unmodelled",
				Detail: fmt.Sprintf("%q is not a host device mapping custody models", d), Fix: "write /dev/HOST[:/dev/CONTAINER[:rwm]]"})
		case !slices.Contains(a.pa.Devices, dev.Host):
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "device-not-granted",
				Detail: fmt.Sprintf("host device %s is not granted", dev.Host), Fix: "remove it, or " + a.grantFix("devices")})
		default:
			a.add(Check{Requirement: req, Verdict: Granted, Code: "device-granted",
				Detail: fmt.Sprintf("%s as %s (%s)", dev.Host, dev.Container, dev.Permissions)})
		}
		ds = append(ds, dev)
	}
	return ds
}

// namespace admits one namespace setting. key is the compose key, ns the
// policy's name for the namespace.
func (a *packAdmitter) namespace(w string, s *pack.Service, key, ns, v string) string {
	req := w + "." + key
	target, isService := strings.CutPrefix(v, "service:")
	switch {
	case v == "":
		return ""
	case v == "host":
		if !slices.Contains(a.pa.HostNamespaces, ns) {
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "host-namespace-not-granted",
				Detail: fmt.Sprintf("sharing the host's %s namespace is not granted", ns),
				Fix:    "remove " + key + ": host, or " + a.grantFix("hostNamespaces")})
			return v
		}
		if ns == "network" && !a.pa.Egress {
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "egress-not-granted",
				Detail: "the host's network reaches out of the pack's world and the host's loopback services, and egress is not granted",
				Fix:    "use pack networks, or " + a.grantFix("egress: true")})
			return v
		}
		if ns == "userns" && a.facts.Engine.UsernsRemap {
			// On a remapping engine, the host's user namespace undoes the
			// remap: the container's root is the host's root.
			a.add(Check{Requirement: req, Verdict: Granted, Code: "host-namespace-granted",
				Detail: "shares the host's userns namespace, leaving the engine's userns-remap: host-root-equivalent"})
			a.hostRoot(s.Name + ": userns_mode host on a userns-remap engine")
			return v
		}
		a.add(Check{Requirement: req, Verdict: Granted, Code: "host-namespace-granted",
			Detail: fmt.Sprintf("shares the host's %s namespace", ns)})
	case isService && (ns == "network" || ns == "pid" || ns == "ipc") && target != s.Name && a.hasService(target):
		// In-world, but up cannot realize it yet: the engine joins a
		// namespace by container ID, and up neither starts the target
		// first nor binds its verified ID into the join. Admission never
		// grants what up cannot do.
		a.add(Check{Requirement: req, Verdict: Unsupported, Code: "namespace-service-unrealized",
			Detail: fmt.Sprintf("sharing the %s namespace of pack service %s stays in the pack's world, but up does not yet realize it (the engine joins by container ID, which up does not bind)", ns, target),
			Fix:    "remove " + key + " and put both services on a pack network (they reach each other by service name)"})
	case strings.HasPrefix(v, "container:"):
		a.add(Check{Requirement: req, Verdict: NotGranted, Code: "foreign-container",
			Detail: fmt.Sprintf("%s joins a container custody did not create", v),
			Fix:    "join a pack service with service:NAME, or remove " + key})
	case (ns == "network" && v == "none") || (ns == "ipc" && (v == "private" || v == "shareable" || v == "none")) || (ns == "cgroup" && v == "private"):
		a.add(Check{Requirement: req, Verdict: Granted, Code: "namespace-private", Detail: key + ": " + v})
	default:
		a.add(Check{Requirement: req, Verdict: Unsupported, Code: "unmodelled",
			Detail: fmt.Sprintf("%s: %q is not a value custody models", key, v), Fix: "remove it, or use service:NAME of a pack service"})
	}
	return v
}

func (a *packAdmitter) hasService(name string) bool {
	return slices.ContainsFunc(a.p.Services, func(s pack.Service) bool { return s.Name == name })
}

// securityOpts admits each option in its canonical key=value form:
// hardening needs no grant, a known weakening needs one, anything else is
// refused.
func (a *packAdmitter) securityOpts(w string, s *pack.Service) []string {
	var out []string
	for _, o := range s.SecurityOpt {
		c := canonicalOpt(o)
		req := w + ".security_opt." + c
		switch {
		case c == "no-new-privileges=true":
			a.add(Check{Requirement: req, Verdict: Granted, Code: "hardening", Detail: "no-new-privileges"})
		case slices.Contains(policy.PackSecurityOpts, c) && slices.Contains(a.pa.SecurityOpts, c):
			a.add(Check{Requirement: req, Verdict: Granted, Code: "security-opt-granted", Detail: c + " weakens the container's confinement"})
		case slices.Contains(policy.PackSecurityOpts, c):
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "security-opt-not-granted",
				Detail: c + " weakens the container's confinement and is not granted", Fix: "remove it, or " + a.grantFix("securityOpts")})
		default:
			a.add(Check{Requirement: req, Verdict: Unsupported, Code: "unmodelled",
				Detail: fmt.Sprintf("security_opt %q is not one custody models (custom profiles and labels included)", o),
				Fix:    "remove it; custody models no-new-privileges and " + strings.Join(policy.PackSecurityOpts, ", ")})
		}
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// canonicalOpt writes a security option as key=value (Docker accepts
// both ':' and '='); no-new-privileges alone means true.
func canonicalOpt(o string) string {
	if o == "no-new-privileges" {
		return "no-new-privileges=true"
	}
	i := strings.IndexAny(o, ":=")
	if i < 0 {
		return o
	}
	return o[:i] + "=" + o[i+1:]
}

func (a *packAdmitter) sysctls(w string, s *pack.Service) map[string]string {
	if len(s.Sysctls) == 0 {
		return nil
	}
	keys := make([]string, 0, len(s.Sysctls))
	for k := range s.Sysctls {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := map[string]string{}
	for _, k := range keys {
		req := w + ".sysctls." + k
		if slices.Contains(a.pa.Sysctls, k) {
			a.add(Check{Requirement: req, Verdict: Granted, Code: "sysctl-granted", Detail: k + "=" + s.Sysctls[k]})
		} else {
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "sysctl-not-granted",
				Detail: fmt.Sprintf("setting %s is not granted", k), Fix: "remove it, or " + a.grantFix("sysctls")})
		}
		out[k] = s.Sysctls[k]
	}
	return out
}

// misc admits the settings without a policy grant.
func (a *packAdmitter) misc(w string, s *pack.Service) {
	if s.CgroupParent != "" {
		a.add(Check{Requirement: w + ".cgroup_parent", Verdict: NotGranted, Code: "cgroup-parent-not-granted",
			Detail: fmt.Sprintf("cgroup_parent %s would place the service outside the pack's resource ceilings; no policy grants it", s.CgroupParent),
			Fix:    "remove cgroup_parent"})
	}
	if s.StopSignal != "" && !signalRe.MatchString(s.StopSignal) {
		a.add(Check{Requirement: w + ".stop_signal", Verdict: Unsupported, Code: "unmodelled",
			Detail: fmt.Sprintf("stop_signal %q is not a signal name custody models", s.StopSignal), Fix: "write a name such as SIGTERM"})
	}
	if s.User != "" {
		a.add(Check{Requirement: w + ".user", Verdict: Granted, Code: "container-user",
			Detail: fmt.Sprintf("runs as %q inside the container (userns-remap=%v, rootless=%v)", s.User, a.facts.Engine.UsernsRemap, a.facts.Engine.Rootless)})
	}
}

// labels admits the pack's labels as content. Custody's prefix is
// refused: its labels are how ownership is proved (P4).
func (a *packAdmitter) labels(w string, s *pack.Service) map[string]string {
	if len(s.Labels) == 0 {
		return nil
	}
	out := map[string]string{}
	for k, v := range s.Labels {
		if strings.HasPrefix(k, pack.ReservedLabelPrefix) {
			a.add(Check{Requirement: w + ".labels." + k, Verdict: NotGranted, Code: "reserved-label",
				Detail: fmt.Sprintf("labels under %s are custody's proof of ownership; a pack may not set them", pack.ReservedLabelPrefix),
				Fix:    "rename the label"})
			continue
		}
		out[k] = v
	}
	return out
}

// dependsOn admits the start order: every named service exists, none is
// the service itself, and the order has no cycle.
func (a *packAdmitter) dependsOn(w string, s *pack.Service) []string {
	if len(s.DependsOn) == 0 {
		return nil
	}
	deps := map[string][]string{}
	for _, o := range a.p.Services {
		deps[o.Name] = o.DependsOn
	}
	var out []string
	for _, d := range s.DependsOn {
		if _, ok := deps[d]; !ok || d == s.Name {
			a.add(Check{Requirement: w + ".depends_on." + d, Verdict: NotGranted, Code: "unknown-dependency",
				Detail: fmt.Sprintf("depends_on names %q, which is not another service of the pack", d),
				Fix:    "name a service the pack defines"})
			continue
		}
		out = append(out, d)
	}
	// A cycle through s: walk what s needs and look for s itself.
	seen := map[string]bool{}
	stack := slices.Clone(out)
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n == s.Name {
			a.add(Check{Requirement: w + ".depends_on", Verdict: NotGranted, Code: "dependency-cycle",
				Detail: "depends_on leads back to the service itself, so no start order exists",
				Fix:    "break the cycle"})
			break
		}
		if !seen[n] {
			seen[n] = true
			stack = append(stack, deps[n]...)
		}
	}
	return out
}

// daemonSocket admits engine access for the service, reporting it as
// host-root-equivalent (P3).
func (a *packAdmitter) daemonSocket(req, service, what string) bool {
	if !a.pa.DaemonSocket {
		a.add(Check{Requirement: req, Verdict: NotGranted, Code: "daemon-socket-not-granted",
			Detail: what + ": engine access is host-root-equivalent and is not granted",
			Fix:    "remove it, or " + a.grantFix("daemonSocket: true")})
		return true
	}
	a.add(Check{Requirement: req, Verdict: Granted, Code: "daemon-socket-granted",
		Detail: what + ": host-root-equivalent; the holder can create any container, and its child workloads are not restricted by the pack"})
	a.hostRoot(service + ": " + what)
	return true
}

// pathOnly is what a client's dry run says of a bind source it judged by
// its path alone.
const pathOnly = "checked by its path only: whether it exists, passes through a link, or holds a socket or a device is checked when the grant is issued"

// bindSource checks a host path against the facts: resolved beneath a
// policy bind root with no symlink, existing, and (unless sockets is true)
// holding no socket. It returns the root and whether it was admitted; a
// socket found is left to the caller when sockets is true.
func (a *packAdmitter) bindSource(req, src string, sockets bool) (string, bool) {
	f, ok := a.facts.Binds[src]
	root, inRoot := a.pa.BindRoot(src)
	switch {
	case a.facts.PathOnly && !inRoot:
		a.add(Check{Requirement: req, Verdict: NotGranted, Code: "bind-outside-roots",
			Detail: fmt.Sprintf("%s is outside the actor's bind roots (%s)", src, strings.Join(a.pa.BindRoots, ", ")),
			Fix:    "move the source under a bind root, or " + a.grantFix("bindRoots")})
	case a.facts.PathOnly:
		return root, true
	case !ok:
		a.add(Check{Requirement: req, Verdict: Unsupported, Code: "bind-no-facts",
			Detail: fmt.Sprintf("%s was not inspected on the host", src), Fix: "let the runner inspect the source (pack.InspectBind)"})
	case f.Symlink:
		what := ""
		switch {
		case f.EngineSocket:
			what = ", and leads to the engine's socket: host-root-equivalent"
		case f.LeadsToSocket:
			what = ", and leads to a socket, which custody treats as an engine socket: host-root-equivalent"
		}
		a.add(Check{Requirement: req, Verdict: NotGranted, Code: "bind-symlink",
			Detail: fmt.Sprintf("%s passes through a symlink (%s)%s; links are never followed", src, f.SymlinkAt, what),
			Fix:    "bind the real path, inside a bind root"})
	case f.Err != "":
		a.add(Check{Requirement: req, Verdict: Unsupported, Code: "bind-uninspectable",
			Detail: fmt.Sprintf("%s: %s", src, f.Err), Fix: "bind a smaller, plain directory inside a bind root"})
	case !inRoot || f.Root != root:
		a.add(Check{Requirement: req, Verdict: NotGranted, Code: "bind-outside-roots",
			Detail: fmt.Sprintf("%s is outside the actor's bind roots (%s)", src, strings.Join(a.pa.BindRoots, ", ")),
			Fix:    "move the source under a bind root, or " + a.grantFix("bindRoots")})
	case !f.Exists || !f.Resolved:
		a.add(Check{Requirement: req, Verdict: NotGranted, Code: "bind-missing",
			Detail: fmt.Sprintf("%s does not exist; the engine would create it as root", src), Fix: "create it first"})
	case f.Device:
		a.add(Check{Requirement: req, Verdict: NotGranted, Code: "bind-device",
			Detail: fmt.Sprintf("%s is a device node; a bind would bypass the device grants", src), Fix: "ask for the device with devices:"})
	case len(f.DevicesInside) > 0:
		a.add(Check{Requirement: req, Verdict: NotGranted, Code: "bind-device",
			Detail: fmt.Sprintf("%s holds device nodes (%s); a bind would reach them past the device grants", src, strings.Join(f.DevicesInside, ", ")),
			Fix:    "bind a directory without device nodes, and ask for a device with devices:"})
	case !sockets && (f.Socket || len(f.SocketsInside) > 0 || f.EngineSocket):
		a.add(Check{Requirement: req, Verdict: NotGranted, Code: "bind-socket",
			Detail: fmt.Sprintf("%s is or holds a socket", src), Fix: "use a directory without sockets"})
	default:
		return root, true
	}
	return root, false
}

func (a *packAdmitter) mounts(w string, s *pack.Service, res PlanResources) ([]PlanMount, bool) {
	var ms []PlanMount
	daemon := false
	for i, m := range s.Mounts {
		req := fmt.Sprintf("%s.volumes[%d]", w, i)
		a.unmodelled(req, m)
		pm := PlanMount{Type: m.Type, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly, TmpfsBytes: m.TmpfsBytes}
		if !cleanPath(m.Target) {
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "mount-target",
				Detail: fmt.Sprintf("target %q is not a clean absolute path", m.Target), Fix: "write an absolute container path"})
		}
		switch m.Type {
		case pack.Bind:
			f := a.facts.Binds[m.Source]
			if m.Source == a.facts.EngineSocket && (a.facts.PathOnly || f.EngineSocket && f.Socket && !f.Symlink && f.Err == "") {
				pm.DaemonSocket = a.daemonSocket(req, s.Name, "binds the engine's socket "+m.Source)
				daemon = true
				break
			}
			root, ok := a.bindSource(req, m.Source, true)
			pm.Root, pm.Dir = root, f.Dir
			if !ok {
				break
			}
			if f.Socket || len(f.SocketsInside) > 0 || f.EngineSocket {
				pm.DaemonSocket = a.daemonSocket(req, s.Name, fmt.Sprintf("binds %s, which is or holds a socket (treated as an engine socket)", m.Source))
				daemon = true
				break
			}
			mode := "read-write"
			if m.ReadOnly {
				mode = "read-only"
			}
			how := "no symlinks followed"
			if a.facts.PathOnly {
				how = pathOnly
			}
			a.add(Check{Requirement: req, Verdict: Granted, Code: "bind-granted",
				Detail: fmt.Sprintf("%s (beneath root %s, %s) at %s, %s", m.Source, root, how, m.Target, mode)})
		case pack.Named:
			switch {
			case m.Source == "":
				a.add(Check{Requirement: req, Verdict: Granted, Code: "anonymous-volume", Detail: "a fresh volume custody creates at " + m.Target})
			case !slices.ContainsFunc(a.p.Volumes, func(v pack.Volume) bool { return v.Name == m.Source }):
				a.add(Check{Requirement: req, Verdict: NotGranted, Code: "volume-undeclared",
					Detail: fmt.Sprintf("volume %q is not declared by the pack; a volume found by name is not custody's", m.Source),
					Fix:    "declare it under the pack's top-level volumes"})
			default:
				a.add(Check{Requirement: req, Verdict: Granted, Code: "volume", Detail: fmt.Sprintf("pack volume %s at %s", m.Source, m.Target)})
			}
		case pack.Tmpfs:
			switch {
			case m.TmpfsBytes < 0 || m.TmpfsBytes > res.MemoryBytes:
				a.add(Check{Requirement: req, Verdict: NotGranted, Code: "tmpfs-too-large",
					Detail: fmt.Sprintf("tmpfs of %d bytes at %s exceeds the service's memory %d", m.TmpfsBytes, m.Target, res.MemoryBytes),
					Fix:    "ask for a smaller tmpfs"})
			case m.TmpfsBytes == 0:
				pm.TmpfsBytes = res.MemoryBytes
				a.add(Check{Requirement: req, Verdict: Chosen, Code: "tmpfs-size",
					Detail: fmt.Sprintf("tmpfs at %s bounded by the service's memory, %d bytes", m.Target, res.MemoryBytes)})
			default:
				a.add(Check{Requirement: req, Verdict: Granted, Code: "tmpfs", Detail: fmt.Sprintf("tmpfs at %s, %d bytes", m.Target, m.TmpfsBytes)})
			}
		default:
			a.add(Check{Requirement: req, Verdict: Unsupported, Code: "unmodelled",
				Detail: fmt.Sprintf("mount type %q is not one custody models", m.Type), Fix: "use a bind, a pack volume or a tmpfs"})
		}
		ms = append(ms, pm)
	}
	return ms, daemon
}

// systemd expands the named authority to its minimal set, refusing what
// would conflict with it. It never sets privileged.
func (a *packAdmitter) systemd(w string, s *pack.Service, ps *PlanService) {
	req := w + ".x-custody-systemd"
	if !a.pa.Systemd {
		a.add(Check{Requirement: req, Verdict: NotGranted, Code: "systemd-not-granted",
			Detail: "the systemd-in-container authority is not granted", Fix: "remove it, or " + a.grantFix("systemd: true")})
		return
	}
	// Measured (workspace TestSystemdInContainer): on a cgroup v1 or
	// hybrid engine the minimal set leaves systemd a read-only cgroup
	// mount, and systemd 252 exits ("Failed to allocate manager object:
	// Read-only file system"); it boots only with the host's cgroup
	// hierarchies bound writable, which is host authority custody never
	// grants. So the authority is for cgroup v2 engines only.
	if v := a.facts.Engine.CgroupVersion; v != "2" {
		a.add(Check{Requirement: req, Verdict: Unsupported, Code: "systemd-unsupported",
			Detail: fmt.Sprintf("the engine reports cgroup version %q: systemd cannot create its cgroups on the read-only cgroup mount of the minimal set (measured: it exits with \"Failed to allocate manager object: Read-only file system\"), and a writable host cgroup hierarchy is never granted", v),
			Fix:    "run the pack on an engine whose host uses cgroup v2 (the unified hierarchy), or run the service without systemd as PID 1"})
		return
	}
	conflict := func(detail string) {
		a.add(Check{Requirement: req, Verdict: NotGranted, Code: "systemd-conflict", Detail: detail,
			Fix: "leave stop_signal, cgroup and the mounts at /run, /run/lock and /tmp to the systemd authority"})
	}
	if s.StopSignal != "" && s.StopSignal != SystemdStopSignal {
		conflict(fmt.Sprintf("stop_signal %s conflicts with systemd's %s", s.StopSignal, SystemdStopSignal))
	}
	if s.Cgroup == "host" {
		conflict("cgroup: host conflicts with systemd's private cgroup namespace")
	}
	for _, t := range SystemdTmpfs {
		i := slices.IndexFunc(ps.Mounts, func(m PlanMount) bool { return m.Target == t })
		switch {
		case i < 0:
			size := min(ps.Resources.MemoryBytes, 64<<20)
			ps.Mounts = append(ps.Mounts, PlanMount{Type: pack.Tmpfs, Target: t, TmpfsBytes: size})
		case ps.Mounts[i].Type != pack.Tmpfs:
			conflict(fmt.Sprintf("%s at %s conflicts with systemd's tmpfs there", ps.Mounts[i].Type, t))
		}
	}
	ps.StopSignal, ps.Cgroup = SystemdStopSignal, "private"
	a.add(Check{Requirement: req, Verdict: Granted, Code: "systemd-granted",
		Detail: fmt.Sprintf("expands to tmpfs %s, a private cgroup namespace and stop signal %s; not privileged, no capability added",
			strings.Join(SystemdTmpfs, ", "), SystemdStopSignal)})
}

func (a *packAdmitter) serviceNetworks(w string, s *pack.Service) []string {
	if s.NetworkMode != "" {
		if len(s.Networks) > 0 {
			a.add(Check{Requirement: w + ".networks", Verdict: NotGranted, Code: "network-mode-and-networks",
				Detail: "network_mode and networks together", Fix: "use one of them"})
		}
		return nil
	}
	if len(s.Networks) == 0 {
		return []string{DefaultNetwork}
	}
	for _, n := range s.Networks {
		if !slices.ContainsFunc(a.p.Networks, func(pn pack.Network) bool { return pn.Name == n }) {
			a.add(Check{Requirement: w + ".networks." + n, Verdict: NotGranted, Code: "network-undeclared",
				Detail: fmt.Sprintf("network %q is not declared by the pack", n), Fix: "declare it under the pack's top-level networks"})
		}
	}
	return slices.Clone(s.Networks)
}

// networks admits the pack's networks (and the implicit default one when
// a service uses it) and chooses their subnets.
func (a *packAdmitter) networks() {
	nets := slices.Clone(a.p.Networks)
	declared := slices.ContainsFunc(nets, func(n pack.Network) bool { return n.Name == DefaultNetwork })
	used := slices.ContainsFunc(a.plan.Services, func(s PlanService) bool { return slices.Contains(s.Networks, DefaultNetwork) })
	implicit := used && !declared
	if implicit {
		nets = append(nets, pack.Network{Name: DefaultNetwork, Internal: true})
	}
	taken := slices.Clone(a.facts.SubnetsInUse)
	for _, n := range nets {
		req := "networks." + n.Name
		a.unmodelled(req, n)
		pn := PlanNetwork{Name: n.Name, Internal: n.Internal, Implicit: implicit && n.Name == DefaultNetwork}
		switch {
		case n.External:
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "external-network",
				Detail: "an external network is not custody's to use; names never prove ownership",
				Fix:    "remove external; custody creates the pack's networks"})
		case n.Driver != "" && n.Driver != "bridge":
			a.add(Check{Requirement: req, Verdict: Unsupported, Code: "unmodelled",
				Detail: fmt.Sprintf("network driver %q is not one custody models", n.Driver), Fix: "use the bridge driver"})
		case n.Internal && !a.facts.Engine.InternalBlocksEgress:
			why := ""
			if w := a.facts.Engine.EgressUnproved; w != "" {
				why = ": " + w
			}
			a.add(Check{Requirement: req, Verdict: Unsupported, Code: "internal-unproved",
				Detail: "the engine did not prove that an internal network blocks egress" + why,
				Fix:    "let the runner probe the engine with a throwaway container on an internal network"})
		case n.Internal:
			detail := "internal: no route out of the pack's world (proved by the engine probe)"
			verdict := Granted
			if pn.Implicit {
				detail = "the pack's default network, added by custody as " + detail
				verdict = Chosen
			}
			a.add(Check{Requirement: req, Verdict: verdict, Code: "network-internal", Detail: detail})
		case !a.pa.Egress:
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "egress-not-granted",
				Detail: "a network that is not internal routes out of the pack's world, and egress is not granted",
				Fix:    "mark the network internal: true, or " + a.grantFix("egress: true")})
		default:
			a.add(Check{Requirement: req, Verdict: Granted, Code: "egress-granted",
				Detail: fmt.Sprintf("routes out of the pack's world through the engine (%s boundary)", a.facts.Engine.Boundary)})
		}
		if sub, ok := chooseSubnet(a.facts.SubnetPool, taken); ok {
			pn.Subnet = sub.String()
			taken = append(taken, sub)
			a.add(Check{Requirement: req + ".subnet", Verdict: Chosen, Code: "subnet", Detail: pn.Subnet + " (the backend's choice)"})
		} else {
			a.add(Check{Requirement: req + ".subnet", Verdict: Unsupported, Code: "no-subnet",
				Detail: fmt.Sprintf("no free subnet in the backend's pool %v", a.facts.SubnetPool),
				Fix:    "give the backend a larger subnet pool, or free one"})
		}
		a.plan.Networks = append(a.plan.Networks, pn)
	}
}

// chooseSubnet returns the first /24 (or the pool itself, if smaller) of
// pool that overlaps none of taken.
func chooseSubnet(pool netip.Prefix, taken []netip.Prefix) (netip.Prefix, bool) {
	if !pool.IsValid() || !pool.Addr().Is4() {
		return netip.Prefix{}, false
	}
	pool = pool.Masked()
	bits := max(pool.Bits(), 24)
	step := uint32(1) << (32 - bits)
	base := pool.Addr().As4()
	start := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	for n := uint64(0); n < uint64(1)<<(bits-pool.Bits()); n++ {
		v := start + uint32(n)*step
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), bits)
		if !slices.ContainsFunc(taken, p.Overlaps) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// names refuses a pack whose services, networks, volumes or secrets are
// not uniquely and validly named: every choice and check is keyed by name.
func (a *packAdmitter) names() {
	check := func(what string, names []string) {
		seen := map[string]bool{}
		for _, n := range names {
			if !policy.ServicePattern.MatchString(n) || seen[n] {
				a.add(Check{Requirement: what + "." + n, Verdict: NotGranted, Code: "bad-name",
					Detail: fmt.Sprintf("%s name %q is empty, invalid or repeated", what, n), Fix: "name each one once, with letters, digits, '_', '.' or '-'"})
			}
			seen[n] = true
		}
	}
	names := func(n int, name func(int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = name(i)
		}
		return out
	}
	check("services", names(len(a.p.Services), func(i int) string { return a.p.Services[i].Name }))
	check("networks", names(len(a.p.Networks), func(i int) string { return a.p.Networks[i].Name }))
	check("volumes", names(len(a.p.Volumes), func(i int) string { return a.p.Volumes[i].Name }))
	check("secrets", names(len(a.p.Secrets), func(i int) string { return a.p.Secrets[i].Name }))
}

func (a *packAdmitter) volumes() {
	for _, v := range a.p.Volumes {
		req := "volumes." + v.Name
		a.unmodelled(req, v)
		switch {
		case v.External:
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "external-volume",
				Detail: "an external volume is not custody's to use; names never prove ownership",
				Fix:    "remove external; custody creates the pack's volumes"})
		case v.Driver != "" && v.Driver != "local":
			a.add(Check{Requirement: req, Verdict: Unsupported, Code: "unmodelled",
				Detail: fmt.Sprintf("volume driver %q is not one custody models", v.Driver), Fix: "use the local driver"})
		default:
			a.add(Check{Requirement: req, Verdict: Granted, Code: "volume", Detail: "a fresh local volume custody creates"})
			a.plan.Volumes = append(a.plan.Volumes, PlanVolume{Name: v.Name})
		}
	}
}

func (a *packAdmitter) secrets() {
	for _, s := range a.p.Secrets {
		req := "secrets." + s.Name
		a.unmodelled(req, s)
		switch {
		case s.Credential != "" && s.Content != "":
			a.add(Check{Requirement: req, Verdict: Unsupported, Code: "unmodelled",
				Detail: "a secret that is both an operator credential and fixture content", Fix: "make it one or the other"})
		case s.Credential == "" && s.Content == "":
			a.add(Check{Requirement: req, Verdict: Unsupported, Code: "secret-source-unmodelled",
				Detail: "the secret has no source custody models (files and environment sources are refused: credentials come only from the operator)",
				Fix:    "name an operator credential with x-custody-credential, or write fixture content"})
		}
	}
}

func (a *packAdmitter) secretUses(w string, s *pack.Service) []PlanSecret {
	var out []PlanSecret
	for _, u := range s.Secrets {
		req := w + ".secrets." + u.Name
		a.unmodelled(req, u)
		i := slices.IndexFunc(a.p.Secrets, func(x pack.Secret) bool { return x.Name == u.Name })
		ps := PlanSecret{Name: u.Name, Target: u.Target, UID: u.UID, GID: u.GID, Mode: u.Mode}
		if ps.Target == "" {
			ps.Target = "/run/secrets/" + u.Name
		}
		if ps.Mode == 0 {
			ps.Mode = 0o400
		}
		switch {
		case !a.fileUse(req, "secret", i >= 0, ps):
		case a.p.Secrets[i].Credential != "":
			c := a.p.Secrets[i].Credential
			ps.Credential = c
			if a.pa.CredentialFor(c, s.Name) {
				a.add(Check{Requirement: req, Verdict: Granted, Code: "credential-granted",
					Detail: fmt.Sprintf("operator credential %s as a file at %s (mode %#o), from the operator's source, never the environment", c, ps.Target, ps.Mode)})
			} else {
				a.add(Check{Requirement: req, Verdict: NotGranted, Code: "credential-not-granted",
					Detail: fmt.Sprintf("operator credential %s is not granted to service %s", c, s.Name),
					Fix:    "remove it, or " + a.grantFix("credentials")})
			}
		case a.p.Secrets[i].Content != "":
			sum := sha256.Sum256([]byte(a.p.Secrets[i].Content))
			ps.FixtureSHA256 = hex.EncodeToString(sum[:])
			a.add(Check{Requirement: req, Verdict: Granted, Code: "fixture",
				Detail: fmt.Sprintf("fixture content written in the pack (pack content, not a secret) at %s", ps.Target)})
		}
		if u.Mode == 0 {
			a.add(Check{Requirement: req + ".mode", Verdict: Chosen, Code: "secret-mode-default", Detail: "0400"})
		}
		out = append(out, ps)
	}
	return out
}

// resources admits each service's limits against the service ceiling and
// chooses the unset ones: each unset limit gets an equal share of what
// the explicit ones leave of the pack ceiling, at most the service
// ceiling. No budget is ever dropped.
func (a *packAdmitter) resources() []pack.Resources {
	svc, pk := a.pa.Ceilings.Service, a.pa.Ceilings.Pack
	out := make([]pack.Resources, len(a.p.Services))
	for i, s := range a.p.Services {
		a.unmodelled("services."+s.Name+".resources", s.Resources)
		out[i] = s.Resources
	}
	type limit struct {
		name    string
		get     func(*pack.Resources) float64
		set     func(*pack.Resources, float64)
		svc, pk float64
		show    func(float64) string
	}
	bytes := func(v float64) string { return strconv.FormatInt(int64(v), 10) + " bytes" }
	count := func(v float64) string { return strconv.FormatInt(int64(v), 10) }
	cores := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) + " cores" }
	limits := []limit{
		{"memory", func(r *pack.Resources) float64 { return float64(r.MemoryBytes) }, func(r *pack.Resources, v float64) { r.MemoryBytes = int64(v) }, float64(svc.Memory), float64(pk.Memory), bytes},
		{"cpus", func(r *pack.Resources) float64 { return r.CPUs }, func(r *pack.Resources, v float64) { r.CPUs = v }, svc.CPU, pk.CPU, cores},
		{"pids", func(r *pack.Resources) float64 { return float64(r.Pids) }, func(r *pack.Resources, v float64) { r.Pids = int64(v) }, float64(svc.Pids), float64(pk.Pids), count},
	}
	for _, l := range limits {
		explicit, unset := 0.0, 0
		for i, s := range a.p.Services {
			v := l.get(&out[i])
			req := "services." + s.Name + ".resources." + l.name
			switch {
			case math.IsNaN(v) || math.IsInf(v, 0) || v < 0:
				a.add(Check{Requirement: req, Verdict: NotGranted, Code: "budget-invalid",
					Detail: fmt.Sprintf("%v is not a finite, positive limit", v), Fix: "ask for a positive limit"})
				l.set(&out[i], 0)
			case v == 0:
				unset++
			case v > l.svc:
				a.add(Check{Requirement: req, Verdict: NotGranted, Code: "ceiling-exceeded",
					Detail: fmt.Sprintf("asked %s, the service ceiling is %s", l.show(v), l.show(l.svc)),
					Fix:    fmt.Sprintf("ask for at most %s, or an operator may raise packs.actors[%s].ceilings.service", l.show(l.svc), a.pa.Name)})
				explicit += v
			default:
				a.add(Check{Requirement: req, Verdict: Granted, Code: "within-ceiling", Detail: l.show(v)})
				explicit += v
			}
		}
		share := 0.0
		if unset > 0 {
			share = min(l.svc, (l.pk-explicit)/float64(unset))
			if l.name == "cpus" {
				share = math.Floor(share*100) / 100
			} else {
				share = math.Floor(share)
			}
		}
		for i, s := range a.p.Services {
			if l.get(&out[i]) != 0 || unset == 0 {
				continue
			}
			req := "services." + s.Name + ".resources." + l.name
			if share <= 0 {
				a.add(Check{Requirement: req, Verdict: NotGranted, Code: "no-room",
					Detail: fmt.Sprintf("unset, and the explicit limits leave nothing of the pack ceiling %s", l.show(l.pk)),
					Fix:    "set smaller limits on the other services"})
				continue
			}
			l.set(&out[i], share)
			a.add(Check{Requirement: req, Verdict: Chosen, Code: "share-of-pack-ceiling",
				Detail: fmt.Sprintf("%s (an equal share of the pack ceiling, within the service ceiling)", l.show(share))})
		}
		if explicit > l.pk {
			a.add(Check{Requirement: "pack.resources." + l.name, Verdict: NotGranted, Code: "ceiling-exceeded",
				Detail: fmt.Sprintf("the services ask %s in all, the pack ceiling is %s", l.show(explicit), l.show(l.pk)),
				Fix:    "lower the services' limits, or an operator may raise packs.actors[].ceilings.pack"})
		}
	}
	for _, r := range out {
		a.plan.Totals.MemoryBytes += r.MemoryBytes
		a.plan.Totals.CPUs += r.CPUs
		a.plan.Totals.Pids += r.Pids
	}
	a.plan.Totals.CPUs = math.Round(a.plan.Totals.CPUs*100) / 100
	return out
}

// choosePorts admits every published port of the pack: exact host ports
// first, then a free port of the policy range for each port 0, so that a
// choice never takes a port an exact requirement asked for. A host port
// is one requirement per protocol: 53/tcp and 53/udp do not collide. A
// port of a service without a route out of the pack's world is refused:
// the engine never publishes it, and nothing is recorded that is not
// bound.
func (a *packAdmitter) choosePorts() {
	a.ports = map[string][]PlanPort{}
	// taken: in use on the host (either protocol), or already given to
	// another requirement (exact, by port and protocol; chosen, the port).
	taken := map[uint16]bool{}
	for _, p := range a.facts.PortsInUse {
		taken[p] = true
	}
	type at struct {
		svc string
		i   int
	}
	var open []at
	exact := map[string]string{}
	exactPort := map[uint16]bool{}
	for _, s := range a.p.Services {
		closed := a.withoutRouteOut(&s)
		for i, p := range s.Ports {
			req := fmt.Sprintf("services.%s.ports[%d]", s.Name, i)
			a.unmodelled(req, p)
			pp := PlanPort{HostIP: p.HostIP, HostPort: p.HostPort, ContainerPort: p.ContainerPort, Protocol: p.Protocol}
			if pp.Protocol == "" {
				pp.Protocol = "tcp"
			}
			a.ports[s.Name] = append(a.ports[s.Name], pp)
			ok := a.portIP(req, &a.ports[s.Name][i])
			pp = a.ports[s.Name][i]
			switch {
			case pp.Protocol != "tcp" && pp.Protocol != "udp":
				a.add(Check{Requirement: req, Verdict: Unsupported, Code: "unmodelled",
					Detail: fmt.Sprintf("protocol %q is not tcp or udp", pp.Protocol), Fix: "use tcp or udp"})
			case pp.ContainerPort == 0:
				a.add(Check{Requirement: req, Verdict: NotGranted, Code: "port-invalid",
					Detail: "container port 0", Fix: "name the container port"})
			case a.pa.Ports == nil:
				a.add(Check{Requirement: req, Verdict: NotGranted, Code: "ports-not-granted",
					Detail: "publishing ports is not granted", Fix: "remove ports, or " + a.grantFix("ports")})
			case !ok:
			case closed != "":
				a.add(Check{Requirement: req, Verdict: Unsupported, Code: "port-unpublishable",
					Detail: fmt.Sprintf("service %s %s, and the engine publishes no port of a container without a route out: nothing would listen on the host", s.Name, closed),
					Fix:    "remove the port (services reach each other on the pack's networks), or also put the service on a network that is not internal, which needs the actor's egress grant"})
			case pp.HostPort == 0:
				open = append(open, at{s.Name, i})
			case pp.HostPort < a.pa.Ports.Min || pp.HostPort > a.pa.Ports.Max:
				a.add(Check{Requirement: req, Verdict: NotGranted, Code: "port-outside-range",
					Detail: fmt.Sprintf("host port %d is outside %d-%d", pp.HostPort, a.pa.Ports.Min, a.pa.Ports.Max),
					Fix:    "use a port in the range, or 0 to let the backend choose"})
			case taken[pp.HostPort] || exact[portKey(pp)] != "":
				what := "in use on the host"
				if prev := exact[portKey(pp)]; prev != "" {
					what = "also asked by " + prev
				}
				a.add(Check{Requirement: req, Verdict: Unsupported, Code: "port-taken",
					Detail: fmt.Sprintf("host port %d/%s is %s", pp.HostPort, pp.Protocol, what), Fix: "use another port, or 0 to let the backend choose"})
			default:
				exactPort[pp.HostPort] = true
				exact[portKey(pp)] = req
				a.add(Check{Requirement: req, Verdict: Granted, Code: "port-published",
					Detail: fmt.Sprintf("%s:%d->%d/%s", pp.HostIP, pp.HostPort, pp.ContainerPort, pp.Protocol)})
			}
		}
	}
	for _, o := range open {
		req := fmt.Sprintf("services.%s.ports[%d]", o.svc, o.i)
		pp := &a.ports[o.svc][o.i]
		for p := int(a.pa.Ports.Min); p <= int(a.pa.Ports.Max); p++ {
			if !taken[uint16(p)] && !exactPort[uint16(p)] {
				taken[uint16(p)] = true
				pp.HostPort, pp.Chosen = uint16(p), true
				break
			}
		}
		if pp.HostPort == 0 {
			a.add(Check{Requirement: req, Verdict: Unsupported, Code: "no-free-port",
				Detail: fmt.Sprintf("no free host port in %d-%d", a.pa.Ports.Min, a.pa.Ports.Max), Fix: "an operator may widen packs.actors[].ports"})
			continue
		}
		a.add(Check{Requirement: req, Verdict: Chosen, Code: "port-chosen",
			Detail: fmt.Sprintf("%s:%d->%d/%s (the backend's choice)", pp.HostIP, pp.HostPort, pp.ContainerPort, pp.Protocol)})
	}
}

// portKey is an exact host port requirement's identity: its address is
// not part of it, since a port bound on 0.0.0.0 collides with 127.0.0.1.
func portKey(pp PlanPort) string { return fmt.Sprintf("%d/%s", pp.HostPort, pp.Protocol) }

// withoutRouteOut says why s has no network with a route out of the
// pack's world ("" if it has one): every network it joins is internal
// (the implicit default network is), or it joins none.
func (a *packAdmitter) withoutRouteOut(s *pack.Service) string {
	if s.NetworkMode != "" {
		return fmt.Sprintf("has network_mode %q", s.NetworkMode)
	}
	nets := s.Networks
	if len(nets) == 0 {
		nets = []string{DefaultNetwork}
	}
	for _, n := range nets {
		i := slices.IndexFunc(a.p.Networks, func(pn pack.Network) bool { return pn.Name == n })
		if i < 0 && n != DefaultNetwork {
			return "" // undeclared: refused as such
		}
		if i >= 0 && !a.p.Networks[i].Internal {
			return ""
		}
	}
	return fmt.Sprintf("joins only internal networks (%s)", strings.Join(nets, ", "))
}

// portIP admits the host address of a port: unset becomes 127.0.0.1 (a
// choice); a set one must be granted.
func (a *packAdmitter) portIP(req string, pp *PlanPort) bool {
	allowed := a.pa.Ports.AllowedHostIPs()
	if pp.HostIP == "" {
		pp.HostIP, pp.Chosen = policy.DefaultHostIP, true
		if !slices.Contains(allowed, policy.DefaultHostIP) && a.pa.Ports != nil {
			a.add(Check{Requirement: req + ".host_ip", Verdict: NotGranted, Code: "host-ip-not-granted",
				Detail: "the port would bind 127.0.0.1, which the policy does not list", Fix: "name a granted host_ip"})
			return false
		}
		a.add(Check{Requirement: req + ".host_ip", Verdict: Chosen, Code: "host-ip-default",
			Detail: policy.DefaultHostIP + " (unset: loopback only)"})
		return true
	}
	ip, err := netip.ParseAddr(pp.HostIP)
	if err != nil || ip.Zone() != "" {
		a.add(Check{Requirement: req + ".host_ip", Verdict: Unsupported, Code: "unmodelled",
			Detail: fmt.Sprintf("host_ip %q is not an IP address", pp.HostIP), Fix: "write an IP address, or leave it unset for 127.0.0.1"})
		return false
	}
	pp.HostIP = ip.String()
	if !slices.ContainsFunc(allowed, func(s string) bool { x, err := netip.ParseAddr(s); return err == nil && x == ip }) {
		a.add(Check{Requirement: req + ".host_ip", Verdict: NotGranted, Code: "host-ip-not-granted",
			Detail: fmt.Sprintf("binding %s is not granted (only %s)", pp.HostIP, strings.Join(allowed, ", ")),
			Fix:    "leave host_ip unset for 127.0.0.1, or " + a.grantFix("ports.hostIPs")})
		return false
	}
	return true
}

// cleanPath reports whether p is an absolute, clean path without NUL.
func cleanPath(p string) bool {
	return strings.HasPrefix(p, "/") && !strings.ContainsRune(p, 0) && path.Clean(p) == p
}

// containerName realizes container_name: as a network alias of the
// service on its pack networks. The container's engine name stays
// custody's, which proves ownership; the alias must not answer for
// another service, and a service on no pack network has nowhere to hold it.
func (a *packAdmitter) containerName(w string, s *pack.Service, networks []string) []string {
	n := s.ContainerName
	if n == "" {
		return nil
	}
	req := w + ".container_name"
	if len(networks) == 0 {
		a.add(Check{Requirement: req, Verdict: Unsupported, Code: "container-name-no-network",
			Detail: fmt.Sprintf("%q would be a network alias, and the service is on no pack network; custody names containers itself to prove ownership", n),
			Fix:    "attach the service to a pack network, or remove container_name"})
		return nil
	}
	for _, o := range a.p.Services {
		if o.Name == s.Name {
			continue
		}
		if strings.EqualFold(o.Name, n) || strings.EqualFold(o.ContainerName, n) {
			a.add(Check{Requirement: req, Verdict: Unsupported, Code: "container-name-taken",
				Detail: fmt.Sprintf("%q is also the name of service %s, so one name would answer for two services", n, o.Name),
				Fix:    "give each service a container_name no other service uses as its name or container_name"})
			return nil
		}
	}
	a.add(Check{Requirement: req, Verdict: Granted, Code: "container-name-alias",
		Detail: fmt.Sprintf("%q answers for this service on its networks (%s); the engine's container name stays custody's", n, strings.Join(networks, ", "))})
	return []string{n}
}

// init realizes init: true: the engine's minimal init runs as PID 1 and
// starts the service's command. It asks for no authority; with the
// systemd authority it is refused, since systemd must be PID 1 itself.
func (a *packAdmitter) init(w string, s *pack.Service) bool {
	if !s.Init {
		return false
	}
	if s.Systemd {
		a.add(Check{Requirement: w + ".init", Verdict: Unsupported, Code: "init-with-systemd",
			Detail: "systemd must be the container's PID 1, and init: true would put the engine's init there",
			Fix:    "remove init, or remove x-custody-systemd"})
		return false
	}
	a.add(Check{Requirement: w + ".init", Verdict: Granted, Code: "init-process",
		Detail: "the engine's minimal init runs as PID 1, reaping zombies and forwarding signals to the service's command"})
	return true
}

// MaxStopGrace bounds stop_grace_period. Down waits out each service's
// grace (all at once) before it removes what is left, so a pack's grace
// is time the operator's teardown is held; a scenario that needs more to
// shut down cleanly is not one down should wait for.
const MaxStopGrace = 2 * time.Minute

// stopGrace realizes stop_grace_period within MaxStopGrace, in whole
// seconds (the engine's unit), rounded up so the service never gets less
// than it asked for.
func (a *packAdmitter) stopGrace(w string, s *pack.Service) *int {
	if s.StopGrace == nil {
		return nil
	}
	if *s.StopGrace > MaxStopGrace {
		a.add(Check{Requirement: w + ".stop_grace_period", Verdict: NotGranted, Code: "stop-grace-too-long",
			Detail: fmt.Sprintf("a grace period of %s would hold down longer than the %s custody waits for any service", *s.StopGrace, MaxStopGrace),
			Fix:    fmt.Sprintf("ask for at most %s", MaxStopGrace)})
		return nil
	}
	secs := int((*s.StopGrace + time.Second - 1) / time.Second)
	a.add(Check{Requirement: w + ".stop_grace_period", Verdict: Granted, Code: "stop-grace",
		Detail: fmt.Sprintf("%ds after the stop signal before the service is killed, at down and in the engine's own stop", secs)})
	return &secs
}

// localLogOptions are the options of the local logging drivers custody
// grants: rotation only. Every one keeps the output in the engine's own
// data root, where down removes it with the container.
var localLogOptions = map[string][]string{
	"json-file": {"max-size", "max-file", "compress"},
	"local":     {"max-size", "max-file", "compress"},
	"none":      nil,
}

// logging realizes logging: with a local driver: json-file, local or
// none. Every other driver ships output off the host (syslog, gelf,
// fluentd, awslogs, ...) or into host services (journald), which is
// egress or host authority no policy grants a pack; options other than
// rotation are refused too (a tag or label set is harmless, but not
// modelled). Options without a driver would apply to the engine's
// default driver, which the pack does not name, and are refused.
func (a *packAdmitter) logging(w string, s *pack.Service) *PlanLogging {
	l := s.Logging
	if l == nil || l.Driver == "" && len(l.Options) == 0 {
		return nil
	}
	allowed, local := localLogOptions[l.Driver]
	if !local {
		d := l.Driver
		if d == "" {
			d = "(the engine's default)"
		}
		a.add(Check{Requirement: w + ".logging.driver", Verdict: NotGranted, Code: "logging-not-local",
			Detail: fmt.Sprintf("logging driver %s is not one of custody's local drivers: it can ship the service's output off the host or into host services", d),
			Fix:    "use driver: json-file, local or none, or remove logging"})
		return nil
	}
	ok := true
	for _, k := range slices.Sorted(maps.Keys(l.Options)) {
		if !slices.Contains(allowed, k) {
			a.add(Check{Requirement: w + ".logging.options." + k, Verdict: Unsupported, Code: "logging-option-unmodelled",
				Detail: fmt.Sprintf("%s is not a rotation option of the %s driver that custody models", k, l.Driver),
				Fix:    "keep only max-size, max-file and compress (json-file and local), or remove it"})
			ok = false
		}
	}
	if !ok {
		return nil
	}
	a.add(Check{Requirement: w + ".logging.driver", Verdict: Granted, Code: "logging-local",
		Detail: fmt.Sprintf("the %s driver keeps the service's output in the engine's own storage, removed with the container at down", l.Driver)})
	return &PlanLogging{Driver: l.Driver, Options: maps.Clone(l.Options)}
}

// platform realizes platform: as the engine's own: custody runs no
// emulation, so a service can run only on the platform of the engine's
// host; another is refused rather than left to the engine to pull or
// emulate. A variant (amd64/v2) is not checked against the host's CPU and
// is refused.
func (a *packAdmitter) platform(w string, s *pack.Service) string {
	if s.Platform == "" {
		return ""
	}
	own := a.facts.Engine.OS + "/" + a.facts.Engine.Arch
	switch {
	case a.facts.Engine.OS == "" || a.facts.Engine.Arch == "":
		a.add(Check{Requirement: w + ".platform", Verdict: Unsupported, Code: "platform-unknown",
			Detail: "the engine's platform was not read by its probe", Fix: "probe the engine again (custody doctor), or remove platform"})
	case strings.ToLower(s.Platform) == own:
		a.add(Check{Requirement: w + ".platform", Verdict: Granted, Code: "platform-engine",
			Detail: fmt.Sprintf("%s is the engine's own platform", own)})
		return own
	default:
		a.add(Check{Requirement: w + ".platform", Verdict: Unsupported, Code: "platform-mismatch",
			Detail: fmt.Sprintf("%s is not the engine's platform %s, and custody does not emulate another", s.Platform, own),
			Fix:    fmt.Sprintf("write platform: %s, or remove it (images must match the engine's platform)", own)})
	}
	return ""
}

// dns realizes dns: resolvers. A resolver is a destination the
// service's names are sent to, so each is egress: granted only with the
// actor's egress. A loopback resolver is refused even so: the engine's
// embedded resolver, which answers the pack's service names, may reach
// such an upstream from the engine host's own namespace, outside the
// pack's world. Unspecified, link-local and multicast addresses are
// refused as for extra_hosts. Without dns, the engine's embedded
// resolver answers the pack's service names.
func (a *packAdmitter) dns(w string, s *pack.Service) []string {
	var out []string
	for i, d := range s.DNS {
		req := fmt.Sprintf("%s.dns[%d]", w, i)
		ip, err := netip.ParseAddr(d)
		switch {
		case err != nil:
			a.add(Check{Requirement: req, Verdict: Unsupported, Code: "unmodelled",
				Detail: fmt.Sprintf("%q is not an IP address", d), Fix: "write a resolver's IP address"})
		case ip.IsLoopback():
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "dns-host-loopback",
				Detail: fmt.Sprintf("a loopback resolver (%s) may be queried by the engine from its host's own namespace, outside the pack's world", d),
				Fix:    "remove it: the engine's resolver answers the pack's service names"})
		case ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast():
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "dns-out-of-world",
				Detail: fmt.Sprintf("%s is not an address custody lets a pack name (unspecified, link-local or multicast)", d),
				Fix:    "remove it: the engine's resolver answers the pack's service names"})
		case a.pa.Egress:
			a.add(Check{Requirement: req, Verdict: Granted, Code: "dns-egress",
				Detail: fmt.Sprintf("names the service cannot resolve in the pack go to %s, outside the pack's world: reachable only through the egress the policy grants", d)})
			out = append(out, ip.String())
		default:
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "dns-out-of-world",
				Detail: fmt.Sprintf("a resolver at %s is a destination outside the pack's world, and the policy grants no egress", d),
				Fix:    "remove it: the engine's resolver answers the pack's service names; or " + a.grantFix("egress: true")})
		}
	}
	return out
}

// MaxRestarts bounds on-failure:N.
const MaxRestarts = 10

var onFailureRe = regexp.MustCompile(`^on-failure(:([0-9]{1,9}))?$`)

// restart realizes restart: "no" (custody's default: a service that ends
// stays ended until down) and on-failure:N with 1 <= N <= MaxRestarts.
// A restarted container keeps its native ID and custody's ownership
// labels, so ownership, down, recovery and the receipt's container all
// still name it; the receipt records the restart policy through the
// container's host config, not how often it restarted. always and
// unless-stopped are refused: the engine revives those containers at its
// own start, without end, also while the workspace is down, being
// recovered or its custodyd is not running, so they could run with no
// attempt bringing them up (P8). on-failure without N is unbounded too.
func (a *packAdmitter) restart(w string, s *pack.Service) int {
	switch m := onFailureRe.FindStringSubmatch(s.Restart); {
	case s.Restart == "" || s.Restart == "no":
		return 0
	case m != nil && m[2] != "":
		n, _ := strconv.Atoi(m[2])
		if n >= 1 && n <= MaxRestarts {
			a.add(Check{Requirement: w + ".restart", Verdict: Granted, Code: "restart-on-failure",
				Detail: fmt.Sprintf("the engine restarts the service's container after it fails, at most %d times; a restarted container keeps its ID and ownership, and down removes it", n)})
			return n
		}
		a.add(Check{Requirement: w + ".restart", Verdict: NotGranted, Code: "restart-unbounded",
			Detail: fmt.Sprintf("on-failure:%d is outside 1-%d restarts", n, MaxRestarts),
			Fix:    fmt.Sprintf("write on-failure:N with N from 1 to %d", MaxRestarts)})
	case m != nil:
		a.add(Check{Requirement: w + ".restart", Verdict: NotGranted, Code: "restart-unbounded",
			Detail: "on-failure without a count restarts a failing service without end",
			Fix:    fmt.Sprintf("write on-failure:N with N from 1 to %d", MaxRestarts)})
	case s.Restart == "always" || s.Restart == "unless-stopped":
		a.add(Check{Requirement: w + ".restart", Verdict: Unsupported, Code: "restart-unsupported",
			Detail: fmt.Sprintf("restart: %s lets the engine revive the container at its own start, without end, even while the workspace is down, being recovered or custody is not running: it would run with no attempt bringing it up", s.Restart),
			Fix:    fmt.Sprintf(`write restart: on-failure:N (N from 1 to %d), or restart: "no"`, MaxRestarts)})
	default:
		a.add(Check{Requirement: w + ".restart", Verdict: Unsupported, Code: "unmodelled",
			Detail: fmt.Sprintf("restart: %q is not a restart policy", s.Restart),
			Fix:    `write "no", on-failure:N, always or unless-stopped`})
	}
	return 0
}

// extraHosts realizes extra_hosts. A name only resolves; the network
// decides what is reached. Still, a name is how a pack points a service
// somewhere, so: a loopback address stays in the service's own world; an
// address out of the world is a destination, granted only with the
// actor's egress; the engine's host (host-gateway) is where the
// operator's APIs and the engine's socket listen, and is never named for
// a pack (P6); nor are unspecified, link-local (cloud metadata) and
// multicast addresses.
func (a *packAdmitter) extraHosts(w string, s *pack.Service) []string {
	var out []string
	for _, h := range s.ExtraHosts {
		req := w + ".extra_hosts." + h.Name
		if h.IP == pack.HostGateway {
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "extra-host-gateway",
				Detail: "host-gateway names the engine's host, where the operator's APIs and the engine's socket listen; no policy grants a pack a name for it",
				Fix:    "remove the entry; reach the pack's services by their service names"})
			continue
		}
		ip, err := netip.ParseAddr(h.IP)
		switch {
		case err != nil:
			a.add(Check{Requirement: req, Verdict: Unsupported, Code: "unmodelled",
				Detail: fmt.Sprintf("%q is not an IP address", h.IP), Fix: "write an IP address such as 127.0.0.1"})
			continue
		case ip.IsLoopback():
			a.add(Check{Requirement: req, Verdict: Granted, Code: "extra-host-in-world",
				Detail: fmt.Sprintf("%s resolves to %s, the service's own loopback", h.Name, h.IP)})
		case ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast():
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "extra-host-out-of-world",
				Detail: fmt.Sprintf("%s is not an address custody lets a pack name (unspecified, link-local or multicast)", h.IP),
				Fix:    "remove the entry; reach the pack's services by their service names"})
			continue
		case a.pa.Egress:
			a.add(Check{Requirement: req, Verdict: Granted, Code: "extra-host-egress",
				Detail: fmt.Sprintf("%s resolves to %s, outside the pack's world: reachable only through the egress the policy grants", h.Name, h.IP)})
		default:
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "extra-host-out-of-world",
				Detail: fmt.Sprintf("%s would resolve to %s, outside the pack's world, and the policy grants no egress", h.Name, h.IP),
				Fix:    "reach the pack's services by their service names (an address of the pack's own networks is chosen at up), or " + a.grantFix("egress: true")})
			continue
		}
		out = append(out, h.Name+":"+h.IP)
	}
	return out
}

// ulimits realizes nofile and nproc within the policy's ceilings: the
// hard limit is what the service can raise its soft limit to, so it is
// the one bounded. Other limits are refused: memlock, rtprio and the like
// reach kernel memory and scheduling that no ceiling models, and core
// writes files the pack's mounts do not name.
func (a *packAdmitter) ulimits(w string, s *pack.Service) []PlanUlimit {
	var out []PlanUlimit
	for _, u := range s.Ulimits {
		req := w + ".ulimits." + u.Name
		var ceiling int64
		switch u.Name {
		case "nofile":
			ceiling = a.pa.Ceilings.Nofile
		case "nproc":
			ceiling = a.pa.Ceilings.Nproc
		default:
			a.add(Check{Requirement: req, Verdict: Unsupported, Code: "ulimit-unmodelled",
				Detail: fmt.Sprintf("custody bounds only nofile and nproc; %s is not bounded by any policy ceiling", u.Name),
				Fix:    "remove it"})
			continue
		}
		if u.Hard > ceiling {
			detail := fmt.Sprintf("a hard %s limit of %d is above the policy's ceiling %d", u.Name, u.Hard, ceiling)
			if ceiling == 0 {
				detail = fmt.Sprintf("the policy sets no %s ceiling, so a pack may not set that limit", u.Name)
			}
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "ulimit-above-ceiling", Detail: detail,
				Fix: fmt.Sprintf("ask for a hard limit within the ceiling, or %s", a.grantFix("ceilings."+u.Name))})
			continue
		}
		a.add(Check{Requirement: req, Verdict: Granted, Code: "ulimit",
			Detail: fmt.Sprintf("%s soft %d, hard %d, within the policy's ceiling %d", u.Name, u.Soft, u.Hard, ceiling)})
		out = append(out, PlanUlimit{Name: u.Name, Soft: u.Soft, Hard: u.Hard})
	}
	return out
}

// shm realizes shm_size within the memory budget: /dev/shm is memory, so
// like a tmpfs it may not exceed the service's memory.
func (a *packAdmitter) shm(w string, s *pack.Service, res PlanResources) int64 {
	if s.ShmBytes == 0 {
		return 0
	}
	if s.ShmBytes > res.MemoryBytes {
		a.add(Check{Requirement: w + ".shm_size", Verdict: NotGranted, Code: "shm-too-large",
			Detail: fmt.Sprintf("/dev/shm of %d bytes exceeds the service's memory %d", s.ShmBytes, res.MemoryBytes),
			Fix:    "ask for a smaller shm_size, or more memory for the service"})
		return 0
	}
	a.add(Check{Requirement: w + ".shm_size", Verdict: Granted, Code: "shm-size",
		Detail: fmt.Sprintf("/dev/shm of %d bytes, within the service's memory %d", s.ShmBytes, res.MemoryBytes)})
	return s.ShmBytes
}

package policy

import (
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/custody-dev/custody/quantity"
)

// Packs is the optional packs: section: the authority the operator grants
// to scenario packs on a local container engine. Absent, no pack is
// admitted at all. Every grant is per actor and explicit; nothing a pack
// asks for is implied by another grant (privileged by none).
type Packs struct {
	// Actors are the principals that may bring packs up, each with its
	// own grants. A pack actor is separate from the phase actors of the
	// same name: phase stages grant no pack authority and the reverse.
	Actors []PackActor `yaml:"actors" json:"actors"`
}

// PackActor is one principal and what its packs may do.
type PackActor struct {
	Name string `yaml:"name" json:"name"`
	// Submitters are the local peers that may submit a pack grant issued
	// to this actor (as for phase actors). Without them, admission
	// refuses the actor's packs.
	Submitters Submitters `yaml:"submitters,omitempty" json:"submitters,omitempty"`
	// Images are the images the actor's services may run.
	Images []PackImage `yaml:"images,omitempty" json:"images,omitempty"`
	// Builds allows build: sections (the engine reads a build context
	// from the host and may pull). It is acquisition authority, separate
	// from running (P6); a build context must lie under BindRoots.
	Builds bool `yaml:"builds,omitempty" json:"builds,omitempty"`
	// Privileged allows privileged: true. Nothing else implies it.
	Privileged bool `yaml:"privileged,omitempty" json:"privileged,omitempty"`
	// Capabilities may be added with cap_add ("CAP_NET_ADMIN"; "ALL"
	// only when listed as such).
	Capabilities []string `yaml:"capabilities,omitempty" json:"capabilities,omitempty"`
	// Devices are host device paths that may be passed in ("/dev/fuse").
	Devices []string `yaml:"devices,omitempty" json:"devices,omitempty"`
	// HostNamespaces are the namespaces a service may share with the
	// host: network, pid, ipc, uts, userns, cgroup.
	HostNamespaces []string `yaml:"hostNamespaces,omitempty" json:"hostNamespaces,omitempty"`
	// BindRoots are absolute, clean host directories under which bind
	// sources may live, each reached from its root without following any
	// symlink (as InputRoots). Empty: no bind is granted.
	BindRoots []string `yaml:"bindRoots,omitempty" json:"bindRoots,omitempty"`
	// DaemonSocket allows a bind of the engine's socket (or any socket):
	// host-root-equivalent authority, reported as such (P3).
	DaemonSocket bool `yaml:"daemonSocket,omitempty" json:"daemonSocket,omitempty"`
	// Ports bounds published ports; absent, nothing may be published.
	Ports *PackPorts `yaml:"ports,omitempty" json:"ports,omitempty"`
	// Egress allows pack networks that are not internal (a route out of
	// the pack's world).
	Egress bool `yaml:"egress,omitempty" json:"egress,omitempty"`
	// Credentials grant operator credentials, by name, to named services.
	// The policy holds names only: each name's source, a 0600 file that
	// custodyd reads, is in custodyd's configuration, never here.
	Credentials []PackCredential `yaml:"credentials,omitempty" json:"credentials,omitempty"`
	// Sysctls are the sysctl keys a service may set ("net.ipv4.ip_forward").
	Sysctls []string `yaml:"sysctls,omitempty" json:"sysctls,omitempty"`
	// SecurityOpts are the weakening security options a service may use,
	// in canonical form (see PackSecurityOpts). Hardening options need no
	// grant.
	SecurityOpts []string `yaml:"securityOpts,omitempty" json:"securityOpts,omitempty"`
	// Systemd allows the systemd-in-container authority, which expands to
	// a fixed minimal set (never privileged).
	Systemd bool `yaml:"systemd,omitempty" json:"systemd,omitempty"`
	// Ceilings bound every service and the pack as a whole. Required.
	Ceilings PackCeilings `yaml:"ceilings" json:"ceilings"`
}

// PackImage is one allowed image: by content digest, by exact reference,
// or both (the reference, pinned to the digest).
type PackImage struct {
	Digest    string `yaml:"digest,omitempty" json:"digest,omitempty"`
	Reference string `yaml:"reference,omitempty" json:"reference,omitempty"`
}

// PackPorts bounds published host ports.
type PackPorts struct {
	// HostIPs are the host addresses a port may bind; empty means
	// 127.0.0.1 only.
	HostIPs []string `yaml:"hostIPs,omitempty" json:"hostIPs,omitempty"`
	// Min and Max bound the host port numbers, exact or chosen.
	Min uint16 `yaml:"min" json:"min"`
	Max uint16 `yaml:"max" json:"max"`
}

// DefaultHostIP is the only host address a port binds unless granted more.
const DefaultHostIP = "127.0.0.1"

// AllowedHostIPs returns the host addresses ports may bind.
func (p *PackPorts) AllowedHostIPs() []string {
	if p == nil {
		return nil
	}
	if len(p.HostIPs) == 0 {
		return []string{DefaultHostIP}
	}
	return p.HostIPs
}

// PackCredential grants one operator credential to some services.
type PackCredential struct {
	Name     string   `yaml:"name" json:"name"`
	Services []string `yaml:"services" json:"services"`
}

// PackCeilings bound a pack's resources. Every value is required and
// positive: an unset service limit is chosen within them, never dropped.
type PackCeilings struct {
	Service  PackResources `yaml:"service" json:"service"`
	Pack     PackResources `yaml:"pack" json:"pack"`
	Services int           `yaml:"services" json:"services"`
	// Nofile and Nproc bound the hard limits a service's ulimits may set
	// (RLIMIT_NOFILE, RLIMIT_NPROC). Absent, a pack may not set that
	// ulimit at all: the engine's own default applies.
	Nofile int64 `yaml:"nofile,omitempty" json:"nofile,omitempty"`
	Nproc  int64 `yaml:"nproc,omitempty" json:"nproc,omitempty"`
}

// PackResources is one set of ceilings.
type PackResources struct {
	Memory quantity.Bytes `yaml:"memory" json:"memory"`
	CPU    float64        `yaml:"cpu" json:"cpu"`
	Pids   int64          `yaml:"pids" json:"pids"`
}

// PackNamespaces are the namespaces hostNamespaces may name.
var PackNamespaces = []string{"network", "pid", "ipc", "uts", "userns", "cgroup"}

// PackSecurityOpts are the weakening security options a policy may grant,
// in the canonical key=value form admission compares.
var PackSecurityOpts = []string{
	"apparmor=unconfined", "label=disable", "no-new-privileges=false", "seccomp=unconfined", "systempaths=unconfined",
}

// Capabilities are the Linux capability names cap_add may name.
var Capabilities = []string{
	"CAP_AUDIT_CONTROL", "CAP_AUDIT_READ", "CAP_AUDIT_WRITE", "CAP_BLOCK_SUSPEND", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER",
	"CAP_FSETID", "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_KILL", "CAP_LEASE", "CAP_LINUX_IMMUTABLE",
	"CAP_MAC_ADMIN", "CAP_MAC_OVERRIDE", "CAP_MKNOD", "CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_RAW", "CAP_PERFMON", "CAP_SETFCAP", "CAP_SETGID", "CAP_SETPCAP",
	"CAP_SETUID", "CAP_SYSLOG", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_CHROOT", "CAP_SYS_MODULE",
	"CAP_SYS_NICE", "CAP_SYS_PACCT", "CAP_SYS_PTRACE", "CAP_SYS_RAWIO", "CAP_SYS_RESOURCE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_WAKE_ALARM",
}

var (
	// ServicePattern matches a compose service name.
	ServicePattern   = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)
	referencePattern = regexp.MustCompile(`^[a-z0-9][a-zA-Z0-9._/:@-]{0,254}$`)
	sysctlPattern    = regexp.MustCompile(`^[a-z0-9_]+(\.[a-z0-9_-]+)+$`)
	devicePattern    = regexp.MustCompile(`^/dev/[a-zA-Z0-9._/-]+$`)
)

// PackActor returns the pack grants of actor, or false when the policy
// has no packs section or no such pack actor.
func (p *Policy) PackActor(actor string) (*PackActor, bool) {
	if p == nil || p.Packs == nil {
		return nil, false
	}
	i := slices.IndexFunc(p.Packs.Actors, func(a PackActor) bool { return a.Name == actor })
	if i < 0 {
		return nil, false
	}
	return &p.Packs.Actors[i], true
}

// HasSubmitters reports whether anyone at all may submit for the actor.
func (a *PackActor) HasSubmitters() bool {
	return len(a.Submitters.UIDs)+len(a.Submitters.GIDs) > 0
}

// BindRoot returns the bind root that hostPath lies in lexically (the
// longest), or false. As with InputRoot, the reader must then reach the
// path from the root without following a symlink.
func (a *PackActor) BindRoot(hostPath string) (string, bool) {
	return rootOf(a.BindRoots, hostPath)
}

// CredentialFor reports whether the credential name is granted to service.
func (a *PackActor) CredentialFor(name, service string) bool {
	return slices.ContainsFunc(a.Credentials, func(c PackCredential) bool {
		return c.Name == name && slices.Contains(c.Services, service)
	})
}

// Fixes for the pack section's patterns.
const (
	serviceFix   = "name a compose service: 1 to 63 letters, digits, '_', '.' or '-', starting with a letter or digit"
	referenceFix = "write an exact image reference such as registry.example/range/web:1.2 or name@sha256:<64 hex>"
	sysctlFix    = "write a sysctl key such as net.ipv4.ip_forward"
	deviceFix    = "write a host device path such as /dev/fuse"
)

func (p *Policy) validatePacks(add adder) {
	if p.Packs == nil {
		return
	}
	names := firsts{}
	for i, a := range p.Packs.Actors {
		f := fmt.Sprintf("packs.actors[%d]", i)
		if !actorPattern.MatchString(a.Name) {
			add(f+".name", fmt.Sprintf("%q is not a valid actor name", a.Name), actorFix)
		} else if j, dup := names.repeat(a.Name, i); dup {
			add(f+".name", fmt.Sprintf("%q is also packs.actors[%d].name", a.Name, j), "list each pack actor once, with all its grants")
		}
		a.validate(f, add)
	}
}

func (a *PackActor) validate(f string, add adder) {
	validateSubmitters(add, f, a.Submitters)
	seen := firsts{}
	for k, im := range a.Images {
		ff := fmt.Sprintf("%s.images[%d]", f, k)
		switch {
		case im.Digest == "" && im.Reference == "":
			add(ff, "names neither a digest nor a reference", "set digest, reference or both")
		case im.Digest != "" && !digestPattern.MatchString(im.Digest):
			add(ff+".digest", fmt.Sprintf("%q is not an image digest", im.Digest), "use the sha256:<64 lowercase hex> digest of the image")
		case im.Reference != "" && !referencePattern.MatchString(im.Reference):
			add(ff+".reference", fmt.Sprintf("%q is not an image reference", im.Reference), referenceFix)
		default:
			if j, dup := seen.repeat(im.Digest+" "+im.Reference, k); dup {
				add(ff, fmt.Sprintf("is also %s.images[%d]", f, j), "list each image once")
			}
		}
	}
	distinct(add, f+".capabilities", "capability", a.Capabilities, func(c string) (string, string, string) {
		if c != "ALL" && !slices.Contains(Capabilities, c) {
			return "", fmt.Sprintf("%q is not a Linux capability", c), "write a capability such as CAP_NET_ADMIN, or ALL"
		}
		return c, "", ""
	})
	distinct(add, f+".devices", "device", a.Devices, func(d string) (string, string, string) {
		if !devicePattern.MatchString(d) || !cleanAbs(d) {
			return "", fmt.Sprintf("%q is not a clean host device path under /dev", d), deviceFix
		}
		return d, "", ""
	})
	distinct(add, f+".hostNamespaces", "namespace", a.HostNamespaces, oneOf(PackNamespaces, "a namespace"))
	distinct(add, f+".bindRoots", "root", a.BindRoots, func(r string) (string, string, string) {
		reason, fix := rootProblem(r)
		return r, reason, fix
	})
	if a.Ports != nil {
		pf := f + ".ports"
		distinct(add, pf+".hostIPs", "address", a.Ports.HostIPs, func(s string) (string, string, string) {
			ip, err := netip.ParseAddr(s)
			if err != nil || ip.Zone() != "" {
				return "", fmt.Sprintf("%q is not an IP address without a zone", s), "write a host address such as 127.0.0.1, or 0.0.0.0 for every address"
			}
			return ip.String(), "", ""
		})
		if a.Ports.Min == 0 || a.Ports.Max < a.Ports.Min {
			add(pf, fmt.Sprintf("range %d-%d is not from 1 up", a.Ports.Min, a.Ports.Max), "set min and max, 1 <= min <= max <= 65535, e.g. min: 20000, max: 20999")
		}
	}
	creds := firsts{}
	for k, c := range a.Credentials {
		cf := fmt.Sprintf("%s.credentials[%d]", f, k)
		if !credentialPattern.MatchString(c.Name) {
			add(cf+".name", fmt.Sprintf("%q is not a valid credential name", c.Name), credentialFix)
		} else if j, dup := creds.repeat(c.Name, k); dup {
			add(cf+".name", fmt.Sprintf("%q is also %s.credentials[%d].name", c.Name, f, j), "list each credential once, with all the services it goes to")
		}
		if len(c.Services) == 0 {
			add(cf+".services", "is empty", "name the services that may receive it, or remove the grant")
		}
		distinct(add, cf+".services", "service", c.Services, matching(ServicePattern, "a service name", serviceFix))
	}
	distinct(add, f+".sysctls", "sysctl", a.Sysctls, matching(sysctlPattern, "a sysctl key", sysctlFix))
	distinct(add, f+".securityOpts", "option", a.SecurityOpts, oneOf(PackSecurityOpts, "a grantable security option"))
	a.Ceilings.validate(f+".ceilings", add)
}

// oneOf checks that an item is one of valid; what names a valid item.
func oneOf(valid []string, what string) func(string) (string, string, string) {
	return func(s string) (string, string, string) {
		if !slices.Contains(valid, s) {
			return "", fmt.Sprintf("%q is not %s", s, what), "use one of " + strings.Join(valid, ", ")
		}
		return s, "", ""
	}
}

// matching checks that an item matches re; what names a valid item.
func matching(re *regexp.Regexp, what, fix string) func(string) (string, string, string) {
	return func(s string) (string, string, string) {
		if !re.MatchString(s) {
			return "", fmt.Sprintf("%q is not %s", s, what), fix
		}
		return s, "", ""
	}
}

func (c PackCeilings) validate(f string, add adder) {
	for _, r := range []struct {
		name string
		res  PackResources
	}{{"service", c.Service}, {"pack", c.Pack}} {
		rf := f + "." + r.name
		if r.res.Memory <= 0 {
			add(rf+".memory", "must be greater than zero", "set it, e.g. 512Mi")
		}
		if math.IsNaN(r.res.CPU) || math.IsInf(r.res.CPU, 0) || r.res.CPU <= 0 {
			add(rf+".cpu", fmt.Sprintf("%v is not a positive number of cores", r.res.CPU), "set cores such as 0.5 or 2")
		}
		if r.res.Pids <= 0 {
			add(rf+".pids", "must be greater than zero", "set it, e.g. 256")
		}
	}
	if c.Service.Memory > c.Pack.Memory && c.Pack.Memory > 0 {
		add(f+".service.memory", fmt.Sprintf("%s is above the pack ceiling %s", c.Service.Memory, c.Pack.Memory), "lower the service ceiling or raise the pack's")
	}
	if c.Service.CPU > c.Pack.CPU && c.Pack.CPU > 0 {
		add(f+".service.cpu", fmt.Sprintf("%v is above the pack ceiling %v", c.Service.CPU, c.Pack.CPU), "lower the service ceiling or raise the pack's")
	}
	if c.Service.Pids > c.Pack.Pids && c.Pack.Pids > 0 {
		add(f+".service.pids", fmt.Sprintf("%d is above the pack ceiling %d", c.Service.Pids, c.Pack.Pids), "lower the service ceiling or raise the pack's")
	}
	if c.Services <= 0 {
		add(f+".services", "must be greater than zero", "set the most services a pack may have, e.g. 8")
	}
	if c.Nofile < 0 {
		add(f+".nofile", "must be greater than zero", "set the highest open-file limit a service may ask for, e.g. 65536, or remove it")
	}
	if c.Nproc < 0 {
		add(f+".nproc", "must be greater than zero", "set the highest process limit a service may ask for, e.g. 4096, or remove it")
	}
}

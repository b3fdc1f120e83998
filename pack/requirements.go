package pack

import (
	"cmp"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// String is the port's canonical requirement value,
// "127.0.0.1:8080->80/tcp"; an unset host IP is left out ("8080->80/tcp")
// and an open host port is 0 ("127.0.0.1:0->80/tcp").
func (p Port) String() string {
	host := strconv.FormatUint(uint64(p.HostPort), 10)
	if a, err := netip.ParseAddr(p.HostIP); err == nil {
		host = netip.AddrPortFrom(a, p.HostPort).String()
	} else if p.HostIP != "" {
		// Load never makes one; a hand-built Port still prints.
		host = p.HostIP + ":" + host
	}
	return host + "->" + strconv.FormatUint(uint64(p.ContainerPort), 10) + "/" + p.Protocol
}

// Requirements is everything the pack asks for, one entry per ask, sorted
// by service ("" first: the pack as a whole), kind and value, without
// duplicates. Values are canonical for their kind. Settings that only take
// authority away (cap_drop, read_only, an internal network, network_mode
// none, restart no) are fields of Service but no requirement; every
// security_opt is one, restrictive or not, so admission rules on each.
func (p *Pack) Requirements() []Requirement {
	var rs []Requirement
	add := func(service string, k Kind, v string) {
		rs = append(rs, Requirement{Service: service, Kind: k, Value: v, Exact: true})
	}
	for _, n := range p.Networks {
		if n.External {
			add("", KindExternal, "network:"+n.Name)
		}
		if !n.Internal {
			add("", KindEgress, n.Name)
		}
	}
	for _, v := range p.Volumes {
		if v.External {
			add("", KindExternal, "volume:"+v.Name)
		}
	}
	credentials := map[string]string{}
	for _, s := range p.Secrets {
		if s.Credential != "" {
			credentials[s.Name] = s.Credential
		}
	}
	for _, s := range p.Services {
		rs = append(rs, s.requirements(credentials)...)
	}
	slices.SortFunc(rs, func(a, b Requirement) int {
		return cmp.Or(strings.Compare(a.Service, b.Service), strings.Compare(string(a.Kind), string(b.Kind)),
			strings.Compare(a.Value, b.Value), compareBool(a.Exact, b.Exact))
	})
	return slices.Compact(rs)
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	default:
		return 1
	}
}

func (s Service) requirements(credentials map[string]string) []Requirement {
	var rs []Requirement
	add := func(k Kind, v string) { rs = append(rs, Requirement{Service: s.Name, Kind: k, Value: v, Exact: true}) }
	switch {
	case s.Build != nil:
		// With build:, image: only names the result; the build context
		// is what is asked for.
		add(KindBuild, s.Build.Context)
	case s.Image != "":
		add(KindImage, s.Image)
	}
	if s.Privileged {
		add(KindPrivileged, "true")
	}
	for _, c := range s.CapAdd {
		add(KindCapability, c)
	}
	for _, d := range s.Devices {
		add(KindDevice, d)
	}
	for _, ns := range []struct{ name, value string }{
		{"network", s.NetworkMode}, {"pid", s.PID}, {"ipc", s.IPC}, {"uts", s.UTS}, {"userns", s.Userns},
	} {
		// "none" only takes a namespace's contents away.
		if ns.value != "" && ns.value != "none" {
			add(KindNamespace, ns.name+"="+ns.value)
		}
	}
	for _, m := range s.Mounts {
		switch m.Type {
		case Bind:
			add(KindBind, m.Source)
			if DaemonSocketPath(m.Source) {
				add(KindDaemonSocket, m.Source)
			}
		case Named:
			add(KindVolume, m.Source)
		case Tmpfs:
			add(KindTmpfs, m.Target)
		}
	}
	for _, e := range s.Environment {
		if k, _, _ := strings.Cut(e, "="); k == "DOCKER_HOST" {
			add(KindDaemonSocket, e)
		}
	}
	for _, p := range s.Ports {
		rs = append(rs, Requirement{Service: s.Name, Kind: KindPort, Value: p.String(), Exact: p.HostPort != 0})
	}
	for _, o := range s.SecurityOpt {
		add(KindSecurityOpt, o)
	}
	for k, v := range s.Sysctls {
		add(KindSysctl, k+"="+v)
	}
	if s.User != "" {
		add(KindUser, s.User)
	}
	if s.CgroupParent != "" {
		add(KindCgroup, "parent="+s.CgroupParent)
	}
	if s.Cgroup != "" {
		add(KindCgroup, "cgroup="+s.Cgroup)
	}
	for _, u := range s.Secrets {
		if c, ok := credentials[u.Name]; ok {
			add(KindCredential, c)
		}
	}
	if r := s.Resources; r.MemoryBytes != 0 {
		add(KindMemory, strconv.FormatInt(r.MemoryBytes, 10))
	}
	if r := s.Resources; r.CPUs != 0 {
		add(KindCPU, strconv.FormatFloat(r.CPUs, 'f', -1, 64))
	}
	if r := s.Resources; r.Pids != 0 {
		add(KindPids, strconv.FormatInt(r.Pids, 10))
	}
	if s.Restart != "" && s.Restart != "no" {
		add(KindRestart, s.Restart)
	}
	if s.Systemd {
		add(KindSystemd, "true")
	}
	return rs
}

// knownSockets are engine and runtime sockets a bind could reach.
var knownSockets = []string{
	"/var/run/docker.sock", "/run/docker.sock",
	"/run/containerd/containerd.sock", "/var/run/containerd/containerd.sock",
	"/run/podman/podman.sock", "/var/run/podman/podman.sock",
	"/run/crio/crio.sock", "/var/run/crio/crio.sock",
	"/run/buildkit/buildkitd.sock", "/var/run/buildkit/buildkitd.sock",
	"/run/docker/docker.sock",
}

// DaemonSocketPath reports whether a bind source is, contains, or could be
// an engine socket, by its text alone: a known socket or any ancestor of
// one (/, /run, /var/run, /var, ...), anything named *.sock, anything under
// /run or /var/run (rootless engines keep sockets under /run/user), and
// anything under /proc (/proc/1/root/... reaches every host path). This is
// the lexical model only: a source that is a symlink to a socket, or a
// renamed socket elsewhere, is found by admission and the backend, which
// resolve the real path on the host; they must not rely on this alone.
func DaemonSocketPath(src string) bool {
	p := filepath.Clean(src)
	if !filepath.IsAbs(p) {
		return true
	}
	if strings.HasSuffix(p, ".sock") || strings.Contains(p, ".sock/") {
		return true
	}
	for _, root := range []string{"/run", "/var/run", "/proc"} {
		if p == root || strings.HasPrefix(p, root+"/") {
			return true
		}
	}
	for _, s := range knownSockets {
		if p == "/" || s == p || strings.HasPrefix(s, p+"/") {
			return true
		}
	}
	return false
}

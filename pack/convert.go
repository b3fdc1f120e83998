package pack

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/sys/capability"
)

// ReservedLabelPrefix is custody's ownership label prefix (P4); a pack may
// not set labels under it.
const ReservedLabelPrefix = "dev.custody."

// convert turns compose-go's project into the typed model. The allowlist
// has already refused every key custody does not model; this refuses the
// values that a modelled key can carry inside a string (short syntax) or
// that compose-go fills in on its own.
func convert(project *types.Project, dir string, fixtures map[string]string, profiles []string) (*Pack, []error) {
	p := &Pack{}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(project.Networks)) {
		n := project.Networks[name]
		if n.Driver != "" && n.Driver != "bridge" {
			errs = append(errs, &ValueError{Path: "networks." + name + ".driver", Value: n.Driver, Reason: "only bridge networks are modelled", Fix: "use driver: bridge or omit it"})
			continue
		}
		p.Networks = append(p.Networks, Network{Name: name, Internal: n.Internal, Driver: n.Driver, External: bool(n.External)})
	}
	for _, name := range slices.Sorted(maps.Keys(project.Volumes)) {
		v := project.Volumes[name]
		if v.Driver != "" && v.Driver != "local" {
			errs = append(errs, &ValueError{Path: "volumes." + name + ".driver", Value: v.Driver, Reason: "only local volumes are modelled (a volume plugin is engine authority)", Fix: "use driver: local or omit it"})
			continue
		}
		r, _ := v.Extensions[extRole].(string) // the allowlist vetted it
		p.Volumes = append(p.Volumes, Volume{Name: name, Driver: v.Driver, External: bool(v.External), Role: r})
	}
	for _, name := range slices.Sorted(maps.Keys(project.Configs)) {
		c, err := convertConfig(name, project.Configs[name], dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.Configs = append(p.Configs, c)
	}
	for _, name := range slices.Sorted(maps.Keys(project.Secrets)) {
		sc := project.Secrets[name]
		content, isFixture := fixtures[name]
		s, err := convertSecret(name, sc, content, isFixture)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.Secrets = append(p.Secrets, s)
	}
	if len(project.DisabledServices) > 0 {
		// The loader is asked for every profile (select below), so
		// nothing is disabled; if something is, a service would silently
		// vanish.
		errs = append(errs, &ValueError{Path: "services", Reason: "the compose loader disabled services, which would silently vanish", Fix: "remove profiles"})
	}
	p.Profiles = slices.Compact(slices.Sorted(slices.Values(profiles)))
	for _, name := range slices.Sorted(maps.Keys(project.Services)) {
		sc := project.Services[name]
		if !sc.HasProfile(p.Profiles) {
			p.Unselected = append(p.Unselected, name)
			continue
		}
		s, err := convertService(name, sc, dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.Services = append(p.Services, s)
	}
	for _, s := range p.Services {
		for _, d := range s.DependsOn {
			if slices.Contains(p.Unselected, d) {
				errs = append(errs, &ValueError{Path: "services." + s.Name + ".depends_on." + d, Value: d,
					Reason: fmt.Sprintf("%s is in profiles %s, none of which is selected, so it is not brought up", d, strings.Join(project.Services[d].Profiles, ", ")),
					Fix:    "select one of its profiles, or give " + s.Name + " a profile of its own"})
			}
		}
	}
	return p, errs
}

var credentialName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func convertSecret(name string, s types.SecretConfig, content string, isFixture bool) (Secret, error) {
	path := "secrets." + name
	if isFixture {
		// takeFixtures put a placeholder environment: in for compose-go.
		s.Environment = ""
	}
	if s.Environment != "" {
		return Secret{}, &ValueError{Path: path + ".environment", Value: s.Environment,
			Reason: "a secret is never taken from the caller's environment (P5: ambient membership is never a grant)",
			Fix:    "use file: (the operator's credential source provides it) or content: for a fixture"}
	}
	cred, hasCred := s.Extensions[extCredential]
	switch {
	case s.File != "" && isFixture:
		return Secret{}, &ValueError{Path: path, Reason: "both file: and content:", Fix: "use one"}
	case isFixture:
		if hasCred {
			return Secret{}, &ValueError{Path: path + "." + extCredential, Reason: "a content: secret is a fixture, not a credential", Fix: "remove " + extCredential + " or use file:"}
		}
		return Secret{Name: name, Content: content}, nil
	case s.File != "":
		c := name
		if hasCred {
			cs, ok := cred.(string)
			if !ok {
				return Secret{}, &ValueError{Path: path + "." + extCredential, Value: fmt.Sprint(cred), Reason: "not a string", Fix: "name the operator credential"}
			}
			c = cs
		}
		if !credentialName.MatchString(c) {
			return Secret{}, &ValueError{Path: path, Value: c, Reason: "not a valid credential name", Fix: "use letters, digits, '.', '_' and '-'"}
		}
		// The file path is deliberately not kept: the operator's
		// credential source provides the bytes (P5), never the pack's
		// directory.
		return Secret{Name: name, Credential: c}, nil
	default:
		return Secret{}, &ValueError{Path: path, Reason: "no source", Fix: "use file: or content:"}
	}
}

func convertService(name string, s types.ServiceConfig, dir string) (Service, error) {
	path := "services." + name
	out := Service{
		Name: name, Image: s.Image, Command: s.Command, Entrypoint: s.Entrypoint,
		User: s.User, WorkingDir: s.WorkingDir, Hostname: s.Hostname,
		Privileged: s.Privileged, NetworkMode: s.NetworkMode, PID: s.Pid, IPC: s.Ipc, UTS: s.Uts, Userns: s.UserNSMode,
		CgroupParent: s.CgroupParent, Cgroup: s.Cgroup, Restart: s.Restart, ReadOnly: s.ReadOnly, StopSignal: s.StopSignal,
	}
	var err error
	if s.Build != nil {
		if out.Build, err = convertBuild(path+".build", s.Build, dir); err != nil {
			return Service{}, err
		}
	}
	if out.Environment, err = literalPairs(path+".environment", s.Environment); err != nil {
		return Service{}, err
	}
	out.ContainerName = s.ContainerName
	out.Init = s.Init != nil && *s.Init
	if out.ShmBytes = int64(s.ShmSize); out.ShmBytes < 0 {
		return Service{}, &ValueError{Path: path + ".shm_size", Value: strconv.FormatInt(out.ShmBytes, 10), Reason: "a negative size (unlimited) is not modelled", Fix: "write a size such as 64m"}
	}
	if s.StopGracePeriod != nil {
		d := time.Duration(*s.StopGracePeriod)
		if d < 0 {
			return Service{}, &ValueError{Path: path + ".stop_grace_period", Value: d.String(), Reason: "a negative grace period is not a duration", Fix: "write a duration such as 30s"}
		}
		out.StopGrace = &d
	}
	if out.ExtraHosts, err = convertExtraHosts(path+".extra_hosts", s.ExtraHosts); err != nil {
		return Service{}, err
	}
	out.Platform = s.Platform
	if len(s.Profiles) > 0 {
		out.Profiles = slices.Sorted(slices.Values(s.Profiles))
	}
	if s.Logging != nil {
		out.Logging = &Logging{Driver: s.Logging.Driver}
		if len(s.Logging.Options) > 0 {
			out.Logging.Options = maps.Clone(map[string]string(s.Logging.Options))
		}
	}
	for i, d := range s.DNS {
		a, err := netip.ParseAddr(d)
		if err != nil || a.Zone() != "" {
			return Service{}, &ValueError{Path: fmt.Sprintf("%s.dns[%d]", path, i), Value: d, Reason: "not an IP address", Fix: "write a resolver's IP address"}
		}
		out.DNS = append(out.DNS, a.String())
	}
	if out.Ulimits, err = convertUlimits(path+".ulimits", s.Ulimits); err != nil {
		return Service{}, err
	}
	if out.Expose, err = convertExpose(path+".expose", s.Expose); err != nil {
		return Service{}, err
	}
	if len(s.Labels) > 0 {
		out.Labels = map[string]string{}
		for k, v := range s.Labels {
			if strings.HasPrefix(strings.ToLower(k), ReservedLabelPrefix) {
				return Service{}, &ValueError{Path: path + ".labels", Value: k, Code: "reserved-label", Reason: "labels under " + ReservedLabelPrefix + " are custody's ownership labels and a pack may not set them (P4)", Fix: "use another label prefix"}
			}
			out.Labels[k] = v
		}
	}
	for _, dep := range slices.Sorted(maps.Keys(s.DependsOn)) {
		switch c := s.DependsOn[dep].Condition; c {
		case "", ConditionStarted:
		case ConditionHealthy, ConditionCompleted:
			if out.Conditions == nil {
				out.Conditions = map[string]string{}
			}
			out.Conditions[dep] = c
		default:
			return Service{}, &ValueError{Path: path + ".depends_on." + dep + ".condition", Value: c, Reason: "not a depends_on condition",
				Fix: "use service_started, service_healthy or service_completed_successfully"}
		}
		out.DependsOn = append(out.DependsOn, dep)
	}
	if out.Healthcheck, err = convertHealthcheck(path+".healthcheck", s.HealthCheck); err != nil {
		return Service{}, err
	}
	out.Networks = slices.Sorted(maps.Keys(s.Networks))
	for _, pc := range s.Ports {
		port, err := convertPort(path+".ports", pc)
		if err != nil {
			return Service{}, err
		}
		out.Ports = append(out.Ports, port)
	}
	slices.SortFunc(out.Ports, func(a, b Port) int { return strings.Compare(a.String(), b.String()) })
	if out.Mounts, err = convertMounts(path, s, dir); err != nil {
		return Service{}, err
	}
	for _, u := range s.Secrets {
		su, err := convertSecretUse(path+".secrets", u)
		if err != nil {
			return Service{}, err
		}
		out.Secrets = append(out.Secrets, su)
	}
	slices.SortFunc(out.Secrets, func(a, b SecretUse) int { return strings.Compare(a.Name+"\x00"+a.Target, b.Name+"\x00"+b.Target) })
	for _, u := range s.Configs {
		if u.Target == "" {
			u.Target = "/" + u.Source
		}
		cu, err := convertSecretUse(path+".configs", types.ServiceSecretConfig(u))
		if err != nil {
			return Service{}, err
		}
		out.Configs = append(out.Configs, cu)
	}
	slices.SortFunc(out.Configs, func(a, b SecretUse) int { return strings.Compare(a.Name+"\x00"+a.Target, b.Name+"\x00"+b.Target) })
	if out.CapAdd, err = canonicalCaps(path+".cap_add", s.CapAdd); err != nil {
		return Service{}, err
	}
	if out.CapDrop, err = canonicalCaps(path+".cap_drop", s.CapDrop); err != nil {
		return Service{}, err
	}
	for _, d := range s.Devices {
		if !filepath.IsAbs(d.Source) {
			return Service{}, &ValueError{Path: path + ".devices", Value: d.Source, Reason: "a device is an absolute host path", Fix: "write /dev/..."}
		}
		target, perms := d.Target, d.Permissions
		if target == "" {
			target = d.Source
		}
		if perms == "" {
			perms = "rwm"
		}
		out.Devices = append(out.Devices, d.Source+":"+target+":"+perms)
	}
	slices.Sort(out.Devices)
	for _, o := range s.SecurityOpt {
		c, err := canonicalSecurityOpt(path+".security_opt", o)
		if err != nil {
			return Service{}, err
		}
		out.SecurityOpt = append(out.SecurityOpt, c)
	}
	slices.Sort(out.SecurityOpt)
	out.SecurityOpt = slices.Compact(out.SecurityOpt)
	if len(s.Sysctls) > 0 {
		out.Sysctls = maps.Clone(map[string]string(s.Sysctls))
	}
	if out.Resources, err = convertResources(path, s); err != nil {
		return Service{}, err
	}
	if v, ok := s.Extensions[extSystemd]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return Service{}, &ValueError{Path: path + "." + extSystemd, Value: fmt.Sprint(v), Reason: "not a boolean", Fix: "write true or false"}
		}
		out.Systemd = b
	}
	out.Role, _ = s.Extensions[extRole].(string) // the allowlist vetted it
	return out, nil
}

func convertBuild(path string, b *types.BuildConfig, dir string) (*Build, error) {
	if !filepath.IsAbs(b.Context) {
		return nil, &ValueError{Path: path + ".context", Value: b.Context, Reason: "only a local build context is modelled (a remote one is acquisition, a separate authority, P6)", Fix: "use a directory relative to the pack"}
	}
	df := filepath.Clean(b.Dockerfile)
	if filepath.IsAbs(df) || df == ".." || strings.HasPrefix(df, "../") {
		return nil, &ValueError{Path: path + ".dockerfile", Value: b.Dockerfile, Reason: "the Dockerfile must lie inside the build context", Fix: "give a path relative to the context"}
	}
	args, err := literalPairs(path+".args", b.Args)
	if err != nil {
		return nil, err
	}
	return &Build{Context: filepath.Clean(b.Context), Dockerfile: df, Args: args}, nil
}

// literalPairs turns a compose mapping into sorted KEY=VALUE pairs. The
// allowlist already refused keys without a value (literalKV); this is the
// same refusal should compose-go ever produce one.
func literalPairs(path string, m types.MappingWithEquals) ([]string, error) {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] == nil {
			return nil, ambientValue(path, k)
		}
		out = append(out, k+"="+*m[k])
	}
	return out, nil
}

func convertPort(path string, pc types.ServicePortConfig) (Port, error) {
	proto := pc.Protocol
	if proto == "" {
		proto = "tcp"
	}
	if proto != "tcp" && proto != "udp" {
		return Port{}, &ValueError{Path: path, Value: pc.Protocol, Reason: "only tcp and udp are modelled", Fix: "use tcp or udp"}
	}
	if pc.Target == 0 || pc.Target > 65535 {
		return Port{}, &ValueError{Path: path, Value: strconv.FormatUint(uint64(pc.Target), 10), Reason: "not a port", Fix: "use 1-65535"}
	}
	var host uint64
	if pc.Published != "" {
		var err error
		if host, err = strconv.ParseUint(pc.Published, 10, 16); err != nil {
			return Port{}, &ValueError{Path: path, Value: pc.Published, Reason: "not a port", Fix: "use 1-65535, or omit it to let custody choose"}
		}
	}
	ip := pc.HostIP
	if ip != "" {
		a, err := netip.ParseAddr(ip)
		if err != nil || a.Zone() != "" {
			return Port{}, &ValueError{Path: path, Value: ip, Reason: "not an IP address", Fix: "use e.g. 127.0.0.1"}
		}
		ip = a.String()
	}
	return Port{HostIP: ip, HostPort: uint16(host), ContainerPort: uint16(pc.Target), Protocol: proto}, nil
}

func convertMounts(path string, s types.ServiceConfig, dir string) ([]Mount, error) {
	var out []Mount
	for _, v := range s.Volumes {
		vp := path + ".volumes"
		if v.Consistency != "" {
			return nil, &UnmodelledError{Path: vp, Key: "consistency"}
		}
		if !filepath.IsAbs(v.Target) {
			return nil, &ValueError{Path: vp, Value: v.Target, Reason: "a mount target is an absolute container path", Fix: "write /path"}
		}
		m := Mount{Type: MountType(v.Type), Target: filepath.Clean(v.Target), ReadOnly: v.ReadOnly}
		switch v.Type {
		case types.VolumeTypeBind:
			if b := v.Bind; b != nil && (b.Propagation != "" || b.SELinux != "" || b.Recursive != "") {
				return nil, &ValueError{Path: vp, Value: v.Source, Reason: "bind propagation, SELinux relabelling (z/Z) and recursive modes are not modelled", Fix: "use plain :ro or :rw"}
			}
			src := v.Source
			if !filepath.IsAbs(src) {
				src = filepath.Join(dir, src)
			}
			m.Source = filepath.Clean(src)
		case types.VolumeTypeVolume:
			if v.Source == "" {
				return nil, &ValueError{Path: vp, Value: v.Target, Reason: "anonymous volumes are not modelled (an unnamed engine resource)", Fix: "declare a named volume under volumes: and use name:" + v.Target}
			}
			if vv := v.Volume; vv != nil && (vv.NoCopy || vv.Subpath != "") {
				return nil, &ValueError{Path: vp, Value: v.Source, Reason: "volume nocopy and subpath are not modelled", Fix: "remove them"}
			}
			m.Source = v.Source
		case types.VolumeTypeTmpfs:
			if t := v.Tmpfs; t != nil {
				if t.Mode != 0 {
					return nil, &ValueError{Path: vp, Value: v.Target, Reason: "tmpfs mode is not modelled", Fix: "remove it"}
				}
				if t.Size < 0 {
					return nil, &ValueError{Path: vp, Value: v.Target, Reason: "negative tmpfs size", Fix: "write a positive size"}
				}
				m.TmpfsBytes = int64(t.Size)
			}
		default:
			return nil, &ValueError{Path: vp, Value: v.Type, Reason: "only bind, volume and tmpfs mounts are modelled", Fix: "use one of them"}
		}
		out = append(out, m)
	}
	for _, t := range s.Tmpfs {
		m, err := shortTmpfs(path+".tmpfs", t)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Mount) int {
		return strings.Compare(a.Target+"\x00"+string(a.Type)+"\x00"+a.Source, b.Target+"\x00"+string(b.Type)+"\x00"+b.Source)
	})
	for i := 1; i < len(out); i++ {
		if out[i].Target == out[i-1].Target {
			return nil, &ValueError{Path: path, Value: out[i].Target, Reason: "two mounts on one target", Fix: "mount each path once"}
		}
	}
	return out, nil
}

// shortTmpfs parses "PATH" or "PATH:size=N" (the only option modelled).
func shortTmpfs(path, t string) (Mount, error) {
	target, opts, _ := strings.Cut(t, ":")
	if !filepath.IsAbs(target) {
		return Mount{}, &ValueError{Path: path, Value: t, Reason: "a tmpfs target is an absolute container path", Fix: "write /path"}
	}
	m := Mount{Type: Tmpfs, Target: filepath.Clean(target)}
	if opts == "" {
		return m, nil
	}
	size, ok := strings.CutPrefix(opts, "size=")
	if !ok || strings.Contains(size, ",") {
		return Mount{}, &ValueError{Path: path, Value: t, Reason: "only the size= tmpfs option is modelled", Fix: "write PATH or PATH:size=64m"}
	}
	var ub types.UnitBytes
	if err := ub.DecodeMapstructure(size); err != nil || ub <= 0 {
		return Mount{}, &ValueError{Path: path, Value: t, Reason: "not a size", Fix: "write e.g. size=64m"}
	}
	m.TmpfsBytes = int64(ub)
	return m, nil
}

func convertSecretUse(path string, u types.ServiceSecretConfig) (SecretUse, error) {
	target := u.Target
	if target == "" {
		target = u.Source
	}
	if !filepath.IsAbs(target) {
		target = "/run/secrets/" + target
	}
	su := SecretUse{Name: u.Source, Target: filepath.Clean(target), UID: u.UID, GID: u.GID}
	for _, id := range []string{u.UID, u.GID} {
		if id == "" {
			continue
		}
		if _, err := strconv.ParseUint(id, 10, 32); err != nil {
			return SecretUse{}, &ValueError{Path: path, Value: id, Reason: "uid and gid are numeric", Fix: "write a number"}
		}
	}
	if u.Mode != nil {
		// A delivered credential is read-only (P5); a mode may narrow who
		// reads it, never let anyone write or run it.
		mode := int64(*u.Mode)
		if mode <= 0 || mode&^0o444 != 0 {
			return SecretUse{}, &ValueError{Path: path, Value: "0" + strconv.FormatInt(mode, 8), Reason: "a secret file is read-only: only read bits (0400, 0440, 0444) are modelled (P5)", Fix: "use 0400 or omit mode"}
		}
		su.Mode = uint32(mode)
	}
	return su, nil
}

// canonicalCaps maps "sys_admin", "SYS_ADMIN" and "CAP_SYS_ADMIN" to
// "CAP_SYS_ADMIN", checked against the kernel capabilities moby knows.
func canonicalCaps(path string, in []string) ([]string, error) {
	var out []string
	for _, c := range in {
		u := strings.ToUpper(strings.TrimSpace(c))
		if u == "ALL" {
			out = append(out, "ALL")
			continue
		}
		u = "CAP_" + strings.TrimPrefix(u, "CAP_")
		if !knownCap(u) {
			return nil, &ValueError{Path: path, Value: c, Reason: "not a Linux capability", Fix: "use a name such as NET_ADMIN"}
		}
		out = append(out, u)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func knownCap(name string) bool {
	for _, c := range capability.ListKnown() {
		if "CAP_"+strings.ToUpper(c.String()) == name {
			return true
		}
	}
	return false
}

// canonicalSecurityOpt writes "key=value", accepting docker's older
// "key:value" form, and "no-new-privileges" alone as
// "no-new-privileges=true".
func canonicalSecurityOpt(path, o string) (string, error) {
	if o == "no-new-privileges" {
		return "no-new-privileges=true", nil
	}
	i := strings.IndexAny(o, "=:")
	if i <= 0 || i == len(o)-1 {
		return "", &ValueError{Path: path, Value: o, Reason: "not key=value", Fix: "write e.g. seccomp=unconfined"}
	}
	return o[:i] + "=" + o[i+1:], nil
}

func convertResources(path string, s types.ServiceConfig) (Resources, error) {
	r := Resources{MemoryBytes: int64(s.MemLimit), CPUs: cpus(float32(s.CPUS)), Pids: s.PidsLimit}
	if d := s.Deploy; d != nil && d.Resources.Limits != nil {
		l := d.Resources.Limits
		twice := func(key string) error {
			return &ValueError{Path: path + ".deploy.resources.limits." + key, Reason: "set twice with different values (also as a service key)", Fix: "set it once"}
		}
		if m := int64(l.MemoryBytes); m != 0 {
			if r.MemoryBytes != 0 && r.MemoryBytes != m {
				return Resources{}, twice("memory")
			}
			r.MemoryBytes = m
		}
		if c := cpus(float32(l.NanoCPUs)); c != 0 {
			if r.CPUs != 0 && r.CPUs != c {
				return Resources{}, twice("cpus")
			}
			r.CPUs = c
		}
		if n := l.Pids; n != 0 {
			if r.Pids != 0 && r.Pids != n {
				return Resources{}, twice("pids")
			}
			r.Pids = n
		}
	}
	if r.MemoryBytes < 0 || r.CPUs < 0 || r.Pids < 0 {
		return Resources{}, &ValueError{Path: path, Reason: "a negative resource limit (unlimited) is not modelled", Fix: "write a positive limit or omit it"}
	}
	return r, nil
}

// cpus reads compose-go's float32 the way it was written ("0.1", not
// 0.10000000149).
func cpus(f float32) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'f', -1, 32), 64)
	return v
}

// convertExpose normalizes expose: entries to PORT/PROTO.
func convertExpose(path string, in []string) ([]string, error) {
	var out []string
	for i, e := range in {
		port, proto, _ := strings.Cut(e, "/")
		proto = cmp.Or(proto, "tcp")
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 || (proto != "tcp" && proto != "udp") {
			return nil, &ValueError{Path: fmt.Sprintf("%s[%d]", path, i), Value: e, Reason: "not a port", Fix: "write PORT or PORT/tcp or PORT/udp, PORT in 1-65535"}
		}
		out = append(out, fmt.Sprintf("%d/%s", n, proto))
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// convertUlimits takes ulimits in either form; unlimited (-1) and a soft
// limit above the hard one are refused.
func convertUlimits(path string, in map[string]*types.UlimitsConfig) ([]Ulimit, error) {
	var out []Ulimit
	for _, name := range slices.Sorted(maps.Keys(in)) {
		u := in[name]
		if u == nil {
			continue
		}
		l := Ulimit{Name: name, Soft: int64(u.Soft), Hard: int64(u.Hard)}
		if u.Single != 0 {
			l.Soft, l.Hard = int64(u.Single), int64(u.Single)
		}
		if l.Soft < 0 || l.Hard <= 0 || l.Soft > l.Hard {
			return nil, &ValueError{Path: path + "." + name, Value: fmt.Sprintf("soft %d, hard %d", l.Soft, l.Hard),
				Reason: "a ulimit needs a positive hard limit at least its soft one (unlimited is not modelled)",
				Fix:    "write a number, or soft and hard with soft <= hard"}
		}
		out = append(out, l)
	}
	return out, nil
}

var hostEntryName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]{0,251}[A-Za-z0-9])?$`)

// HostGateway is the engine's name for the address of its own host.
const HostGateway = "host-gateway"

// convertExtraHosts takes extra_hosts in either form; each address is an
// IP address or host-gateway (judged at admission).
func convertExtraHosts(path string, in types.HostsList) ([]HostEntry, error) {
	var out []HostEntry
	for _, name := range slices.Sorted(maps.Keys(in)) {
		if !hostEntryName.MatchString(name) {
			return nil, &ValueError{Path: path, Value: name, Reason: "not a host name", Fix: "write NAME:ADDRESS with a name of letters, digits, '.', '_' and '-'"}
		}
		for _, ip := range in[name] {
			if ip != HostGateway {
				a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(ip, "["), "]"))
				if err != nil || a.Zone() != "" {
					return nil, &ValueError{Path: path + "." + name, Value: ip, Reason: "not an IP address", Fix: "write an IP address such as 127.0.0.1"}
				}
				ip = a.String()
			}
			out = append(out, HostEntry{Name: name, IP: ip})
		}
	}
	slices.SortFunc(out, func(a, b HostEntry) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.IP, b.IP)) })
	return slices.Compact(out), nil
}

// convertHealthcheck takes healthcheck: in either test form; test: NONE is
// disable. Negative durations and a disable next to a test are refused.
func convertHealthcheck(path string, hc *types.HealthCheckConfig) (*Healthcheck, error) {
	if hc == nil {
		return nil, nil
	}
	h := &Healthcheck{Disable: hc.Disable, Retries: hc.Retries}
	if len(hc.Test) > 0 && hc.Test[0] == "NONE" {
		if len(hc.Test) > 1 {
			return nil, &ValueError{Path: path + ".test", Value: strings.Join(hc.Test, " "), Reason: "NONE takes no command", Fix: "write test: [\"NONE\"] or disable: true alone"}
		}
		h.Disable = true
	} else {
		h.Test = slices.Clone([]string(hc.Test))
	}
	if h.Disable && len(h.Test) > 0 {
		return nil, &ValueError{Path: path, Reason: "disable: true next to a test", Fix: "remove one of them"}
	}
	for _, d := range []struct {
		key string
		in  *types.Duration
		out **time.Duration
	}{{"interval", hc.Interval, &h.Interval}, {"timeout", hc.Timeout, &h.Timeout}, {"start_period", hc.StartPeriod, &h.StartPeriod}} {
		if d.in == nil {
			continue
		}
		v := time.Duration(*d.in)
		if v < 0 {
			return nil, &ValueError{Path: path + "." + d.key, Value: v.String(), Reason: "a negative duration", Fix: "write a duration such as 5s"}
		}
		*d.out = &v
	}
	return h, nil
}

// convertConfig takes a config's literal content or its file, which must
// lie inside the pack's directory (a config is pack content; the runner
// reads it beneath the directory without following links).
func convertConfig(name string, c types.ConfigObjConfig, dir string) (Config, error) {
	path := "configs." + name
	switch {
	case c.File != "" && c.Content != "":
		return Config{}, &ValueError{Path: path, Reason: "both file: and content:", Fix: "use one"}
	case c.Content != "":
		return Config{Name: name, Content: c.Content}, nil
	case c.File != "":
		f := c.File
		if !filepath.IsAbs(f) {
			f = filepath.Join(dir, f)
		}
		f = filepath.Clean(f)
		if rel, err := filepath.Rel(dir, f); err != nil || !filepath.IsLocal(rel) {
			return Config{}, &ValueError{Path: path + ".file", Value: c.File, Reason: "a config file must lie inside the pack's directory (it is pack content, read without following links out of it)",
				Fix: "put the file in the pack's directory and name it relative to the pack"}
		}
		return Config{Name: name, File: f}, nil
	default:
		return Config{}, &ValueError{Path: path, Reason: "no source", Fix: "use file: or content:"}
	}
}

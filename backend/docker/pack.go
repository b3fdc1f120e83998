package docker

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/go-connections/nat"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/internal/procfs"
)

// Packs is the engine a pack workspace realizes on: the workspace's
// requests in neutral terms (package backend), converted here to the
// engine's API and acted out through Workspace's owned primitives, so that
// every create is journalled first and every later act is by verified
// native ID. It keeps the engine's probed profile: one probe per daemon
// identity, not one per pack (a probe costs seconds).
type Packs struct {
	d    *Docker
	opts ProbeOptions

	mu sync.Mutex // held by Profile, across a probe
	// keptMu guards profile and key, which Profile changes under mu too:
	// Proved reads them without waiting for a probe.
	keptMu  sync.Mutex
	profile *backend.PackEngine
	key     engineKey // the identity profile was probed under
	// unsettled says why the last probe's egress proof did not settle
	// ("" after a settled one): Proved's refusal repeats it.
	unsettled string

	// Test hooks: probed runs on each probe; keyed may edit the identity
	// just read, to stand in for a daemon restarted with other options.
	probed func()
	keyed  func(*engineKey)
}

// engineKey is what must be unchanged for a kept profile to still describe
// the daemon: a dockerd restarted with other options gets a new pid and
// start time, and may change its security options; another daemon behind
// the same endpoint has another ID.
type engineKey struct {
	Version, APIVersion, ID string
	SecurityOptions         string
	PeerPid                 int    // the socket's server, 0 when not a visible local socket
	PeerStart               string // its start time (procfs), so a reused pid differs
}

// NewPacks returns the pack engine over d; opts say how to probe it.
func NewPacks(d *Docker, opts ProbeOptions) *Packs { return &Packs{d: d, opts: opts} }

// NewWorkspaceID returns a fresh unguessable workspace id.
func (p *Packs) NewWorkspaceID() string { return NewWorkspaceID() }

// Profile returns the engine's profile. The daemon's identity (engineKey)
// is read fresh on every call, which costs two API calls and a /proc read;
// the rest of the profile is re-probed whenever that identity differs from
// the kept one. A profile whose egress proof is not settled (see probe) is
// returned but not kept, so the next call proves again. A probe records
// its objects in j (nil: in memory only) before it creates them.
func (p *Packs) Profile(ctx context.Context, j backend.ProbeJournal) (*backend.PackEngine, error) {
	key, err := p.identity(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.kept(key); ok {
		return c, nil
	}
	if p.probed != nil {
		p.probed()
	}
	opts := p.opts
	opts.Journal = j
	e, settled, err := p.d.probe(ctx, opts)
	if err != nil && !errors.Is(err, ErrProbeResidue) {
		return nil, err
	}
	p.keptMu.Lock()
	p.profile, p.key, p.unsettled = nil, engineKey{}, ""
	if err == nil && settled {
		p.profile, p.key = e, key
	} else {
		p.unsettled = e.EgressUnproved
		if err != nil {
			p.unsettled = err.Error()
		}
	}
	p.keptMu.Unlock()
	c := *e
	return &c, nil
}

// kept is a copy of the kept profile if it was probed under key.
func (p *Packs) kept(key engineKey) (*backend.PackEngine, bool) {
	p.keptMu.Lock()
	defer p.keptMu.Unlock()
	if p.profile == nil || p.key != key {
		return nil, false
	}
	c := *p.profile
	return &c, true
}

// Proved is Profile without a probe: the kept profile, if the daemon's
// identity (read fresh, without side effects) is still the one it was
// probed under, or backend.ErrEngineNotProved, also while a probe runs (it does not
// wait). A client's dry run uses it: a probe creates objects on the
// engine, and only the operator's requests may.
func (p *Packs) Proved(ctx context.Context) (*backend.PackEngine, error) {
	key, err := p.identity(ctx)
	if err != nil {
		return nil, err
	}
	if c, ok := p.kept(key); ok {
		return c, nil
	}
	p.keptMu.Lock()
	why := p.unsettled
	p.keptMu.Unlock()
	if why != "" {
		return nil, &backend.EngineNotProvedError{Unsettled: why}
	}
	return nil, backend.ErrEngineNotProved
}

// identity reads the daemon's engineKey.
func (p *Packs) identity(ctx context.Context) (engineKey, error) {
	ver, err := p.d.cli.ServerVersion(ctx)
	if err != nil {
		return engineKey{}, fmt.Errorf("engine %s: version: %w: %w", p.d.host, ErrEndpoint, err)
	}
	info, err := p.d.cli.Info(ctx)
	if err != nil {
		return engineKey{}, fmt.Errorf("engine %s: info: %w: %w", p.d.host, ErrEndpoint, err)
	}
	k := engineKey{Version: ver.Version, APIVersion: ver.APIVersion, ID: info.ID,
		SecurityOptions: strings.Join(info.SecurityOptions, "\x00")}
	// A socket whose server cannot be seen leaves the pid out: the
	// boundary is then unknown, which admission refuses anyway.
	if path, ok := unixPath(p.d.host); ok {
		if pid, err := peerPid(ctx, path); err == nil {
			if st, err := procfs.ReadStat(pid); err == nil {
				k.PeerPid, k.PeerStart = pid, st.StartTime
			}
		}
	}
	if p.keyed != nil {
		p.keyed(&k)
	}
	return k, nil
}

// Foreign lists objects with custody's labels or names that known does
// not hold.
func (p *Packs) Foreign(ctx context.Context, known func(kind, id string) bool) ([]backend.Resource, error) {
	return p.d.Foreign(ctx, known)
}

func (p *Packs) owned(o backend.PackOwner, rec backend.Recorder) (*Workspace, error) {
	return p.d.Workspace(Owner{Workspace: o.Workspace, Attempt: o.Attempt, Grant: o.Grant, Config: o.Config}, rec)
}

// CreateNetwork creates one of the pack's networks with the chosen subnet.
func (p *Packs) CreateNetwork(ctx context.Context, o backend.PackOwner, rec backend.Recorder, n backend.PackNetwork) (backend.Resource, error) {
	w, err := p.owned(o, rec)
	if err != nil {
		return backend.Resource{}, err
	}
	spec := NetworkSpec{Internal: n.Internal}
	if n.Subnet != "" {
		pf, err := netip.ParsePrefix(n.Subnet)
		if err != nil {
			return backend.Resource{}, fmt.Errorf("network %s: subnet %q: %w", n.Name, n.Subnet, err)
		}
		spec.IPAM = &network.IPAM{Driver: "default", Config: []network.IPAMConfig{{Subnet: pf.String()}}}
	}
	return w.CreateNetwork(ctx, n.Name, spec)
}

// CreateVolume creates one of the pack's named volumes.
func (p *Packs) CreateVolume(ctx context.Context, o backend.PackOwner, rec backend.Recorder, name string) (backend.Resource, error) {
	w, err := p.owned(o, rec)
	if err != nil {
		return backend.Resource{}, err
	}
	return w.CreateVolume(ctx, name)
}

// CreateContainer creates one service's container, attached to its first
// network at create and to the others (by native ID) before it starts.
// It does not start it.
func (p *Packs) CreateContainer(ctx context.Context, o backend.PackOwner, rec backend.Recorder, c backend.PackContainer) (backend.Resource, error) {
	w, err := p.owned(o, rec)
	if err != nil {
		return backend.Resource{}, err
	}
	cfg, host, nets, err := containerSpec(o.Workspace, c)
	if err != nil {
		return backend.Resource{}, err
	}
	r, err := w.CreateContainer(ctx, c.Service, cfg, host, nets)
	if err != nil {
		return r, err
	}
	id, err := w.Verify(ctx, r)
	if err != nil {
		return r, err
	}
	for _, n := range c.Networks[min(1, len(c.Networks)):] {
		es := &network.EndpointSettings{Aliases: append([]string{c.Service}, c.Aliases...)}
		if err := p.d.cli.NetworkConnect(ctx, c.NetworkIDs[n], id, es); err != nil {
			return r, fmt.Errorf("attach %s to network %s (%s): %w", c.Service, n, c.NetworkIDs[n], err)
		}
	}
	return r, nil
}

func containerSpec(ws string, c backend.PackContainer) (*container.Config, *container.HostConfig, *network.NetworkingConfig, error) {
	cfg := &container.Config{
		Image: c.Image, Cmd: c.Command, Entrypoint: c.Entrypoint, Env: c.Env, User: c.User,
		WorkingDir: c.WorkingDir, Hostname: c.Hostname, Labels: c.Labels, StopSignal: c.StopSignal, StopTimeout: c.StopTimeout,
	}
	host := &container.HostConfig{
		Privileged: c.Privileged, CapAdd: c.CapAdd, CapDrop: c.CapDrop, SecurityOpt: c.SecurityOpt,
		Sysctls: c.Sysctls, ReadonlyRootfs: c.ReadOnly,
		CgroupnsMode: container.CgroupnsMode(c.Cgroupns), PidMode: container.PidMode(c.PidMode),
		IpcMode: container.IpcMode(c.IpcMode), UTSMode: container.UTSMode(c.UTSMode),
		UsernsMode: container.UsernsMode(c.UsernsMode),
		Resources:  container.Resources{Memory: c.MemoryBytes, NanoCPUs: c.NanoCPUs},
		// No restart policy unless granted: a container that ends stays
		// ended until the operator's down, never restarted behind
		// custody's back.
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
	}
	if c.RestartRetries > 0 {
		// Granted on-failure:N: bounded, and the restarted container
		// keeps its ID and ownership labels.
		host.RestartPolicy = container.RestartPolicy{Name: container.RestartPolicyOnFailure, MaximumRetryCount: c.RestartRetries}
	}
	if h := c.Healthcheck; h != nil {
		cfg.Healthcheck = &container.HealthConfig{Test: h.Test, Interval: h.Interval, Timeout: h.Timeout, StartPeriod: h.StartPeriod, Retries: h.Retries}
	}
	if c.ShmBytes > 0 {
		host.ShmSize = c.ShmBytes
	}
	host.ExtraHosts, host.DNS = c.ExtraHosts, c.DNS
	if c.LogDriver != "" {
		host.LogConfig = container.LogConfig{Type: c.LogDriver, Config: c.LogOptions}
	}
	for _, u := range c.Ulimits {
		host.Ulimits = append(host.Ulimits, &container.Ulimit{Name: u.Name, Soft: u.Soft, Hard: u.Hard})
	}
	if c.Init {
		// Only when asked: nil leaves the engine's default, as compose does.
		host.Init = &c.Init
	}
	if c.PidsLimit > 0 {
		pl := c.PidsLimit
		host.Resources.PidsLimit = &pl
	}
	for _, d := range c.Devices {
		host.Resources.Devices = append(host.Resources.Devices, container.DeviceMapping{PathOnHost: d.Host, PathInContainer: d.Container, CgroupPermissions: d.Permissions})
	}
	for _, m := range c.Mounts {
		switch m.Type {
		case "bind":
			host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly,
				// A missing source is an error, never created by the engine.
				BindOptions: &mount.BindOptions{CreateMountpoint: false}})
		case "volume":
			host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeVolume, Source: NativeName(ws, m.Source), Target: m.Target, ReadOnly: m.ReadOnly})
		case "tmpfs":
			host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeTmpfs, Target: m.Target, ReadOnly: m.ReadOnly,
				TmpfsOptions: &mount.TmpfsOptions{SizeBytes: m.TmpfsBytes}})
		default:
			return nil, nil, nil, fmt.Errorf("service %s: mount type %q is not modelled", c.Service, m.Type)
		}
	}
	if len(c.Ports) > 0 {
		cfg.ExposedPorts = nat.PortSet{}
		host.PortBindings = nat.PortMap{}
	}
	for _, pt := range c.Ports {
		port, err := nat.NewPort(pt.Protocol, strconv.Itoa(int(pt.ContainerPort)))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("service %s: port %d/%s: %w", c.Service, pt.ContainerPort, pt.Protocol, err)
		}
		cfg.ExposedPorts[port] = struct{}{}
		host.PortBindings[port] = append(host.PortBindings[port], nat.PortBinding{HostIP: pt.HostIP, HostPort: strconv.Itoa(int(pt.HostPort))})
	}
	var nets *network.NetworkingConfig
	if len(c.Networks) == 0 {
		// Not on a pack network: no network at all, never the default bridge.
		host.NetworkMode = "none"
	} else {
		first := c.Networks[0]
		id := c.NetworkIDs[first]
		if id == "" {
			return nil, nil, nil, fmt.Errorf("service %s: network %s has no recorded native ID", c.Service, first)
		}
		host.NetworkMode = container.NetworkMode(id)
		nets = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{id: {Aliases: append([]string{c.Service}, c.Aliases...)}}}
	}
	return cfg, host, nets, nil
}

// Start starts a recorded container by its verified ID.
func (p *Packs) Start(ctx context.Context, o backend.PackOwner, rec backend.Recorder, r backend.Resource) error {
	w, err := p.owned(o, rec)
	if err != nil {
		return err
	}
	return w.Start(ctx, r)
}

// PinnedImage resolves an image the policy pins to digest into the
// engine's native image ID: the image whose ID is digest (what a local
// import or build has), or whose repo digests hold ref's name@digest (what
// a pull records). The engine has nothing else that proves the content, so
// any other answer is ErrImageNotPinned; up runs the returned ID.
func (p *Packs) PinnedImage(ctx context.Context, ref, digest string) (string, error) {
	img, err := p.d.cli.ImageInspect(ctx, digest)
	switch {
	case err == nil && img.ID == digest:
		return img.ID, nil
	case err != nil && !cerrdefs.IsNotFound(err):
		return "", fmt.Errorf("inspect image %s: %w", digest, err)
	}
	if named, err := reference.ParseNormalizedNamed(ref); err == nil {
		want := reference.FamiliarName(named) + "@" + digest
		img, err := p.d.cli.ImageInspect(ctx, want)
		switch {
		case err == nil && slices.Contains(img.RepoDigests, want):
			return img.ID, nil
		case err != nil && !cerrdefs.IsNotFound(err):
			return "", fmt.Errorf("inspect image %s: %w", want, err)
		}
	}
	return "", fmt.Errorf("image %s pinned to %s: %w: no image on the engine has that ID or repo digest", ref, digest, ErrImageNotPinned)
}

// MountedAt reports the device and inode of what the running recorded
// container has mounted at target, read in its own root (Workspace.MountedAt).
func (p *Packs) MountedAt(ctx context.Context, o backend.PackOwner, rec backend.Recorder, r backend.Resource, target string) (dev, ino uint64, err error) {
	w, err := p.owned(o, rec)
	if err != nil {
		return 0, 0, err
	}
	return w.MountedAt(ctx, r, target)
}

// Stop sends a recorded container its stop signal, by verified ID, and
// kills it after grace. A container already gone is not an error here:
// the teardown after it confirms by ID.
func (p *Packs) Stop(ctx context.Context, o backend.PackOwner, rec backend.Recorder, r backend.Resource, signal string, grace time.Duration) error {
	w, err := p.owned(o, rec)
	if err != nil {
		return err
	}
	id, err := w.verifiedContainer(ctx, r)
	if err != nil {
		return err
	}
	secs := int(grace / time.Second)
	err = p.d.cli.ContainerStop(ctx, id, container.StopOptions{Signal: signal, Timeout: &secs})
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	return err
}

// Teardown removes the recorded objects (containers, networks, and
// volumes only when asked), each by verified native ID.
func (p *Packs) Teardown(ctx context.Context, o backend.PackOwner, rec backend.Recorder, recorded []backend.Resource, volumes bool) backend.CleanupReport {
	w, err := p.owned(o, rec)
	if err != nil {
		return backend.CleanupReport{Steps: []backend.CleanupStep{{Name: "workspace " + o.Workspace, Detail: partial.Detail(err.Error())}}}
	}
	return w.Teardown(ctx, recorded, volumes)
}

// Resolve finds the object an intent-only record made (crash between the
// create and the record of its ID) by its intent nonce, and records its ID
// if there is exactly one. found is false when nothing carries the nonce.
func (p *Packs) Resolve(ctx context.Context, o backend.PackOwner, rec backend.Recorder, r backend.Resource) (backend.Resource, bool, error) {
	w, err := p.owned(o, rec)
	if err != nil {
		return r, false, err
	}
	if err := w.mine(r); err != nil {
		return r, false, err
	}
	if r.State != "intent" {
		return r, r.State == "created", nil
	}
	return w.resolve(ctx, r)
}

// Inspect reports a recorded object as the engine holds it now: by its
// native ID, after its labels were checked. It changes nothing.
func (p *Packs) Inspect(ctx context.Context, o backend.PackOwner, rec backend.Recorder, r backend.Resource) (backend.PackObject, error) {
	obj := backend.PackObject{Kind: r.Kind, ID: r.Identity[IdentityID], Name: r.Name}
	w, err := p.owned(o, rec)
	if err != nil {
		return obj, err
	}
	id, err := w.Verify(ctx, r)
	switch {
	case errors.Is(err, ErrNotOwned):
		obj.State, obj.Detail = "foreign", err.Error()
		return obj, nil
	case err != nil && cerrdefs.IsNotFound(err):
		obj.State, obj.Detail = "missing", "no object has the recorded native ID"
		return obj, nil
	case err != nil:
		return obj, err
	}
	switch r.Kind {
	case KindContainer:
		c, raw, err := p.d.cli.ContainerInspectWithRaw(ctx, id, false)
		if err != nil {
			return obj, fmt.Errorf("inspect container %s: %w", id, err)
		}
		obj.ImageID = c.Image
		if c.State != nil {
			obj.State, obj.PID = c.State.Status, c.State.Pid
			if c.State.Status == "exited" {
				obj.Detail = fmt.Sprintf("exit code %d", c.State.ExitCode)
			}
			if h := c.State.Health; h != nil && h.Status != "" && h.Status != "none" {
				obj.Health = h.Status
				if c.State.Status == "running" {
					obj.Detail = h.Status
					if n := len(h.Log); n > 0 && h.Status == "unhealthy" {
						obj.Detail += fmt.Sprintf(" (last check exit code %d)", h.Log[n-1].ExitCode)
					}
				}
			}
		}
		if obj.HostConfigSHA256, err = hostConfigDigest(raw); err != nil {
			return obj, fmt.Errorf("container %s: %w", id, err)
		}
		obj.HostConfig = summary(c.HostConfig)
	case KindNetwork:
		n, err := p.d.cli.NetworkInspect(ctx, id, network.InspectOptions{})
		if err != nil {
			return obj, fmt.Errorf("inspect network %s: %w", id, err)
		}
		obj.State, obj.Internal = "present", n.Internal
	default:
		obj.State = "present"
	}
	return obj, nil
}

// hostConfigDigest is the SHA-256 of the HostConfig member of the
// engine's inspect response, compacted: what the engine holds, byte for
// byte, not what custody sent.
func hostConfigDigest(raw []byte) (string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return "", fmt.Errorf("inspect response: %w", err)
	}
	hc, ok := top["HostConfig"]
	if !ok {
		return "", errors.New("inspect response has no HostConfig")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, hc); err != nil {
		return "", fmt.Errorf("HostConfig: %w", err)
	}
	sum := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(sum[:]), nil
}

func summary(h *container.HostConfig) *backend.PackHostConfig {
	if h == nil {
		return &backend.PackHostConfig{}
	}
	s := &backend.PackHostConfig{
		Privileged: h.Privileged, CapAdd: h.CapAdd, CapDrop: h.CapDrop, NetworkMode: string(h.NetworkMode),
		PidMode: string(h.PidMode), IpcMode: string(h.IpcMode), UTSMode: string(h.UTSMode),
		UsernsMode: string(h.UsernsMode), CgroupnsMode: string(h.CgroupnsMode), ReadonlyRootfs: h.ReadonlyRootfs,
		SecurityOpt: h.SecurityOpt, MemoryBytes: h.Memory, NanoCPUs: h.NanoCPUs,
	}
	if h.PidsLimit != nil {
		s.PidsLimit = *h.PidsLimit
	}
	for _, m := range h.Mounts {
		pm := backend.PackMount{Type: string(m.Type), Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly}
		if m.TmpfsOptions != nil {
			pm.TmpfsBytes = m.TmpfsOptions.SizeBytes
		}
		s.Mounts = append(s.Mounts, pm)
	}
	for _, d := range h.Devices {
		s.Devices = append(s.Devices, backend.PackDevice{Host: d.PathOnHost, Container: d.PathInContainer, Permissions: d.CgroupPermissions})
	}
	for port, bs := range h.PortBindings {
		for _, b := range bs {
			hp, _ := strconv.Atoi(b.HostPort)
			s.PortBindings = append(s.PortBindings, backend.PackPort{HostIP: b.HostIP, HostPort: uint16(hp), ContainerPort: uint16(port.Int()), Protocol: port.Proto()})
		}
	}
	// The engine's map has no order; the receipt's list does.
	slices.SortFunc(s.PortBindings, func(a, b backend.PackPort) int {
		return cmp.Or(cmp.Compare(a.ContainerPort, b.ContainerPort), cmp.Compare(a.Protocol, b.Protocol),
			cmp.Compare(a.HostIP, b.HostIP), cmp.Compare(a.HostPort, b.HostPort))
	})
	return s
}

// Intents are the records of everything an up of names may create, by the
// kind and native name the creates will record.
func (p *Packs) Intents(o backend.PackOwner, names backend.PackNames) []backend.Resource {
	var out []backend.Resource
	add := func(kind string, ns []string) {
		for _, n := range ns {
			out = append(out, backend.Resource{Kind: kind, Name: NativeName(o.Workspace, n), State: "intent"})
		}
	}
	add(KindNetwork, names.Networks)
	add(KindVolume, names.Volumes)
	add(KindContainer, names.Containers)
	return out
}

// Subnets are the IPv4 and IPv6 subnets every engine network holds.
func (p *Packs) Subnets(ctx context.Context) ([]netip.Prefix, error) {
	ns, err := p.d.cli.NetworkList(ctx, network.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list networks: %w", err)
	}
	var out []netip.Prefix
	for _, n := range ns {
		for _, c := range n.IPAM.Config {
			if pf, err := netip.ParsePrefix(c.Subnet); err == nil {
				out = append(out, pf)
			}
		}
	}
	return out, nil
}

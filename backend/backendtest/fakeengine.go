package backendtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/custody-dev/custody/backend"
)

// The FakeEngine's object kinds.
const (
	FakeKindNetwork   = "fake-network"
	FakeKindVolume    = "fake-volume"
	FakeKindContainer = "fake-container"
)

// ErrFakeNotOwned is wrapped by every refusal of an act on an object that
// another workspace owns, or whose record does not match it.
var ErrFakeNotOwned = errors.New("not owned by this workspace")

// FakeEngine is an in-memory PackEngine that passes EngineSuite: objects
// are records in a map by native ID, each labelled with its workspace and
// a nonce of its create, and every act checks both before it acts, as a
// real engine's backend does. Containers run nothing; Start and Stop only
// move their state.
type FakeEngine struct {
	mu   sync.Mutex
	objs map[string]*fakeObject // by native ID
	pid  int
}

type fakeObject struct {
	kind, id, name string
	workspace      string
	nonce          string
	state          string
	pid            int
	internal       bool
	subnet         netip.Prefix
	hc             backend.PackHostConfig
}

var _ PackEngine = (*FakeEngine)(nil)

// NewFakeEngine makes an empty FakeEngine.
func NewFakeEngine() *FakeEngine { return &FakeEngine{objs: map[string]*fakeObject{}, pid: 1000} }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NewWorkspaceID is 16 random bytes, hex.
func (e *FakeEngine) NewWorkspaceID() string { return randHex(16) }

func fakeName(o backend.PackOwner, logical string) string {
	return "custody-" + o.Workspace[:min(12, len(o.Workspace))] + "-" + logical
}

// Intents lists one record per name.
func (e *FakeEngine) Intents(o backend.PackOwner, names backend.PackNames) []backend.Resource {
	var out []backend.Resource
	for _, g := range []struct {
		kind  string
		names []string
	}{{FakeKindNetwork, names.Networks}, {FakeKindVolume, names.Volumes}, {FakeKindContainer, names.Containers}} {
		for _, n := range g.names {
			out = append(out, backend.Resource{Kind: g.kind, Name: fakeName(o, n), State: "intent"})
		}
	}
	return out
}

// Subnets are the networks' subnets.
func (e *FakeEngine) Subnets(ctx context.Context) ([]netip.Prefix, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []netip.Prefix
	for _, o := range e.objs {
		if o.kind == FakeKindNetwork && o.subnet.IsValid() {
			out = append(out, o.subnet)
		}
	}
	return out, nil
}

// create records the intent, makes the object under a fresh native ID
// (refusing a name in use) and records it.
func (e *FakeEngine) create(o backend.PackOwner, rec backend.Recorder, kind, logical string, fill func(*fakeObject)) (backend.Resource, error) {
	nonce := randHex(8)
	r := backend.Resource{Kind: kind, Name: fakeName(o, logical), State: "intent",
		Identity: map[string]string{"workspace": o.Workspace, "nonce": nonce}}
	if err := rec.Intent(r); err != nil {
		return r, fmt.Errorf("record the intent of %s %s: %w", kind, r.Name, err)
	}
	e.mu.Lock()
	for _, x := range e.objs {
		if x.kind == kind && x.name == r.Name {
			e.mu.Unlock()
			return r, fmt.Errorf("%s %s: the name is taken", kind, r.Name)
		}
	}
	obj := &fakeObject{kind: kind, id: randHex(32), name: r.Name, workspace: o.Workspace, nonce: nonce, state: "present"}
	if fill != nil {
		fill(obj)
	}
	e.objs[obj.id] = obj
	e.mu.Unlock()
	r.Identity = maps.Clone(r.Identity)
	r.Identity[PackIdentityID] = obj.id
	r.State = "created"
	return r, rec.Created(r)
}

// CreateNetwork makes a network with the subnet asked for.
func (e *FakeEngine) CreateNetwork(ctx context.Context, o backend.PackOwner, rec backend.Recorder, n backend.PackNetwork) (backend.Resource, error) {
	var subnet netip.Prefix
	if n.Subnet != "" {
		var err error
		if subnet, err = netip.ParsePrefix(n.Subnet); err != nil {
			return backend.Resource{}, fmt.Errorf("network %s: subnet %q: %w", n.Name, n.Subnet, err)
		}
	}
	return e.create(o, rec, FakeKindNetwork, n.Name, func(x *fakeObject) { x.internal, x.subnet = n.Internal, subnet })
}

// CreateVolume makes a volume.
func (e *FakeEngine) CreateVolume(ctx context.Context, o backend.PackOwner, rec backend.Recorder, name string) (backend.Resource, error) {
	return e.create(o, rec, FakeKindVolume, name, nil)
}

// CreateContainer makes a container on networks named by their recorded
// native IDs, each this workspace's; it is refused before it is made
// otherwise.
func (e *FakeEngine) CreateContainer(ctx context.Context, o backend.PackOwner, rec backend.Recorder, c backend.PackContainer) (backend.Resource, error) {
	e.mu.Lock()
	for _, n := range c.Networks {
		id := c.NetworkIDs[n]
		x := e.objs[id]
		if id == "" || x == nil || x.kind != FakeKindNetwork || x.workspace != o.Workspace {
			e.mu.Unlock()
			return backend.Resource{}, fmt.Errorf("service %s: network %s has no recorded native ID of this workspace's", c.Service, n)
		}
	}
	e.mu.Unlock()
	network := "none"
	if len(c.Networks) > 0 {
		network = c.NetworkIDs[c.Networks[0]]
	}
	return e.create(o, rec, FakeKindContainer, c.Service, func(x *fakeObject) {
		x.state = "created"
		x.hc = backend.PackHostConfig{Privileged: c.Privileged, CapAdd: c.CapAdd, CapDrop: c.CapDrop, NetworkMode: network,
			PidMode: c.PidMode, IpcMode: c.IpcMode, UTSMode: c.UTSMode, UsernsMode: c.UsernsMode, CgroupnsMode: c.Cgroupns,
			Mounts: c.Mounts, Devices: c.Devices, PortBindings: c.Ports, ReadonlyRootfs: c.ReadOnly, SecurityOpt: c.SecurityOpt,
			MemoryBytes: c.MemoryBytes, NanoCPUs: c.NanoCPUs, PidsLimit: c.PidsLimit}
	})
}

// verified is the object r records, if it is o's and the one r's create
// made; the caller holds e.mu. nil, nil: no object has the ID.
func (e *FakeEngine) verified(o backend.PackOwner, r backend.Resource) (*fakeObject, error) {
	x := e.objs[r.Identity[PackIdentityID]]
	switch {
	case x == nil:
		return nil, nil
	case x.workspace != o.Workspace:
		return nil, fmt.Errorf("%s %s: %w (it belongs to workspace %s)", r.Kind, r.Name, ErrFakeNotOwned, x.workspace)
	case x.kind != r.Kind || x.nonce != r.Identity["nonce"] || x.name != r.Name:
		return nil, fmt.Errorf("%s %s: %w (the native ID holds %s %s)", r.Kind, r.Name, ErrFakeNotOwned, x.kind, x.name)
	}
	return x, nil
}

func (e *FakeEngine) move(o backend.PackOwner, r backend.Resource, from []string, to string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, err := e.verified(o, r)
	if err != nil {
		return err
	}
	if x == nil || x.kind != FakeKindContainer {
		return fmt.Errorf("%s %s: no container has the recorded native ID", r.Kind, r.Name)
	}
	if !slices.Contains(from, x.state) {
		return fmt.Errorf("container %s is %s", r.Name, x.state)
	}
	x.state, x.pid = to, 0
	if to == "running" {
		e.pid++
		x.pid = e.pid
	}
	return nil
}

// Start moves a created or exited container to running.
func (e *FakeEngine) Start(ctx context.Context, o backend.PackOwner, rec backend.Recorder, r backend.Resource) error {
	return e.move(o, r, []string{"created", "exited"}, "running")
}

// Stop moves a running container to exited; one already ended is left.
func (e *FakeEngine) Stop(ctx context.Context, o backend.PackOwner, rec backend.Recorder, r backend.Resource, signal string, grace time.Duration) error {
	return e.move(o, r, []string{"running", "exited", "created"}, "exited")
}

// Inspect reports the object r records as it is now.
func (e *FakeEngine) Inspect(ctx context.Context, o backend.PackOwner, rec backend.Recorder, r backend.Resource) (backend.PackObject, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	obj := backend.PackObject{Kind: r.Kind, ID: r.Identity[PackIdentityID], Name: r.Name}
	x, err := e.verified(o, r)
	switch {
	case err != nil:
		obj.State, obj.Detail = "foreign", err.Error()
	case x == nil:
		obj.State, obj.Detail = "missing", "no object has the recorded native ID"
	default:
		obj.State, obj.PID, obj.Internal = x.state, x.pid, x.internal
		if x.kind == FakeKindContainer {
			hc := x.hc
			obj.HostConfig = &hc
			data, _ := json.Marshal(hc)
			sum := sha256.Sum256(data)
			obj.HostConfigSHA256 = hex.EncodeToString(sum[:])
		}
	}
	return obj, nil
}

// Teardown removes the recorded containers, then networks, then (when
// asked) volumes, each verified this workspace's and its create's; an
// object that is not is reported and left alone.
func (e *FakeEngine) Teardown(ctx context.Context, o backend.PackOwner, rec backend.Recorder, recorded []backend.Resource, volumes bool) backend.CleanupReport {
	rep := backend.CleanupReport{Verified: true}
	for _, kind := range []string{FakeKindContainer, FakeKindNetwork, FakeKindVolume} {
		if kind == FakeKindVolume && !volumes {
			continue
		}
		for _, r := range recorded {
			if r.Kind != kind {
				continue
			}
			e.mu.Lock()
			x, err := e.verified(o, r)
			if x != nil && err == nil {
				delete(e.objs, x.id)
			}
			e.mu.Unlock()
			if err == nil {
				gone := r
				gone.State = "removed"
				err = rec.Removed(gone)
			}
			step(&rep, r.Kind+" "+r.Name, err)
		}
	}
	return rep
}

// Foreign lists every object known does not hold.
func (e *FakeEngine) Foreign(ctx context.Context, known func(kind, id string) bool) ([]backend.Resource, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []backend.Resource
	for _, id := range slices.Sorted(maps.Keys(e.objs)) {
		x := e.objs[id]
		if !known(x.kind, id) {
			out = append(out, backend.Resource{Kind: x.kind, Name: x.name, State: "foreign",
				Identity: map[string]string{PackIdentityID: id, "workspace": x.workspace, "nonce": x.nonce}})
		}
	}
	return out, nil
}

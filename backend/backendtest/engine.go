package backendtest

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
)

// PackEngine is what the pack engine suite drives of a container engine:
// the realization half of the workspace lifecycle's Engine interface
// (package workspace), in the same neutral terms. Every engine a workspace
// can use implements it.
type PackEngine interface {
	NewWorkspaceID() string
	Intents(o backend.PackOwner, names backend.PackNames) []backend.Resource
	Subnets(ctx context.Context) ([]netip.Prefix, error)
	CreateNetwork(ctx context.Context, o backend.PackOwner, rec backend.Recorder, n backend.PackNetwork) (backend.Resource, error)
	CreateVolume(ctx context.Context, o backend.PackOwner, rec backend.Recorder, name string) (backend.Resource, error)
	CreateContainer(ctx context.Context, o backend.PackOwner, rec backend.Recorder, c backend.PackContainer) (backend.Resource, error)
	Start(ctx context.Context, o backend.PackOwner, rec backend.Recorder, r backend.Resource) error
	Stop(ctx context.Context, o backend.PackOwner, rec backend.Recorder, r backend.Resource, signal string, grace time.Duration) error
	Inspect(ctx context.Context, o backend.PackOwner, rec backend.Recorder, r backend.Resource) (backend.PackObject, error)
	Teardown(ctx context.Context, o backend.PackOwner, rec backend.Recorder, recorded []backend.Resource, volumes bool) backend.CleanupReport
	Foreign(ctx context.Context, known func(kind, id string) bool) ([]backend.Resource, error)
}

// PackIdentityID is the identity key of a pack object's native ID, as the
// workspace lifecycle reads it.
const PackIdentityID = "id"

// EngineFixture is what an engine gives the engine suite.
type EngineFixture struct {
	Engine PackEngine
	// Image is an image on the engine with /bin/sh and sleep.
	Image string
	// Subnet is a free IPv4 subnet the suite's network may take.
	Subnet string
}

// EngineFactory makes a fresh EngineFixture for one case.
type EngineFactory func(t *testing.T) EngineFixture

// EngineSuite runs every pack engine case against engines made by f.
func EngineSuite(t *testing.T, f EngineFactory) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, EngineFixture)
	}{
		{"Lifecycle", engineLifecycle},
		{"OtherWorkspaceRefused", engineOtherWorkspace},
		{"ForgedIdentityIsForeign", engineForgedIdentity},
		{"ForeignListsTheUnknown", engineForeign},
		{"UnrecordedNetworkRefused", engineUnrecordedNetwork},
	} {
		t.Run(c.name, func(t *testing.T) {
			fx := f(t)
			t.Cleanup(func() {
				if !t.Failed() {
					return
				}
				fs, err := fx.Engine.Foreign(context.Background(), func(string, string) bool { return false })
				t.Logf("engine state after the failure: %d object(s) carrying custody's naming (%v)", len(fs), err)
				for _, r := range fs {
					t.Logf("  %s %s %v", r.Kind, r.Name, r.Identity)
				}
			})
			c.run(t, fx)
		})
	}
}

// packWorkspace is one workspace's objects made by the suite.
type packWorkspace struct {
	o            backend.PackOwner
	j            *journal
	net, vol, cr backend.Resource
}

func packOwner(e PackEngine) backend.PackOwner {
	return backend.PackOwner{Workspace: e.NewWorkspaceID(), Attempt: "up-1", Grant: "suite-grant",
		Config: "0000000000000000000000000000000000000000000000000000000000000000"}
}

// up makes a network, a volume and a container on them, each recorded
// after its intent, and tears them down (verified) when the test ends.
func up(t *testing.T, f EngineFixture) *packWorkspace {
	t.Helper()
	ctx := context.Background()
	w := &packWorkspace{o: packOwner(f.Engine), j: newJournalFor(t)}
	intents := f.Engine.Intents(w.o, backend.PackNames{Networks: []string{"back"}, Volumes: []string{"data"}, Containers: []string{"app"}})
	if len(intents) != 3 {
		t.Fatalf("intents %+v, want one per network, volume and container", intents)
	}
	if err := w.j.Intent(intents...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rep := f.Engine.Teardown(context.Background(), w.o, w.j, w.j.created(), true)
		if !rep.Verified {
			t.Errorf("teardown at the end: %+v", rep.Steps)
		}
	})
	var err error
	if w.net, err = f.Engine.CreateNetwork(ctx, w.o, w.j, backend.PackNetwork{Name: "back", Internal: true, Subnet: f.Subnet}); err != nil {
		t.Fatalf("create network: %v", err)
	}
	if w.vol, err = f.Engine.CreateVolume(ctx, w.o, w.j, "data"); err != nil {
		t.Fatalf("create volume: %v", err)
	}
	w.cr, err = f.Engine.CreateContainer(ctx, w.o, w.j, backend.PackContainer{
		// It writes at the volume's root first, as a service does: the
		// engine may then report the volume differently (dockerd moves a
		// local volume's creation time), and it must stay the workspace's.
		Service: "app", Image: f.Image, Command: []string{"/bin/sh", "-c", "touch /data/up && exec sleep 300"},
		Hostname: "app", Networks: []string{"back"}, NetworkIDs: map[string]string{"back": w.net.Identity[PackIdentityID]},
		Mounts:  []backend.PackMount{{Type: "volume", Source: "data", Target: "/data"}},
		CapDrop: []string{"ALL"}, SecurityOpt: []string{"no-new-privileges"}, ReadOnly: true, StopSignal: "SIGTERM",
		MemoryBytes: 64 << 20, PidsLimit: 32,
	})
	if err != nil {
		t.Fatalf("create container: %v", err)
	}
	for _, r := range []backend.Resource{w.net, w.vol, w.cr} {
		if r.Identity[PackIdentityID] == "" {
			t.Fatalf("%s %s was created without its native ID", r.Kind, r.Name)
		}
	}
	w.j.check(t)
	return w
}

// created is every record not yet removed, as a workspace's journal holds
// them for teardown.
func (j *journal) created() []backend.Resource {
	var out []backend.Resource
	for _, r := range j.recorded() {
		if r.State == "created" {
			out = append(out, r)
		}
	}
	return out
}

func inspect(t *testing.T, f EngineFixture, w *packWorkspace, o backend.PackOwner, r backend.Resource) backend.PackObject {
	t.Helper()
	obj, err := f.Engine.Inspect(context.Background(), o, w.j, r)
	if err != nil {
		t.Fatalf("inspect %s %s: %v", r.Kind, r.Name, err)
	}
	return obj
}

// engineLifecycle: a workspace's objects are created after their intents,
// the container runs with the settings asked for as the engine reports
// them, stops, and teardown removes every object, verified; the network's
// subnet is held while it exists and free after.
func engineLifecycle(t *testing.T, f EngineFixture) {
	ctx := context.Background()
	w := up(t, f)
	if err := f.Engine.Start(ctx, w.o, w.j, w.cr); err != nil {
		t.Fatalf("start: %v", err)
	}
	obj := inspect(t, f, w, w.o, w.cr)
	if obj.State != "running" || obj.PID <= 0 {
		t.Errorf("after start: %+v, want running with a pid", obj)
	}
	if hc := obj.HostConfig; hc == nil || !hc.ReadonlyRootfs || !slices.Contains(hc.CapDrop, "ALL") || hc.MemoryBytes != 64<<20 || hc.PidsLimit != 32 || hc.Privileged {
		t.Errorf("the effective host config %+v, want the read-only, capability-less, bounded one asked for", obj.HostConfig)
	}
	if len(obj.HostConfigSHA256) != 64 {
		t.Errorf("host config digest %q", obj.HostConfigSHA256)
	}
	if n := inspect(t, f, w, w.o, w.net); n.State != "present" || !n.Internal {
		t.Errorf("the network %+v, want present and internal", n)
	}
	if f.Subnet != "" {
		want := netip.MustParsePrefix(f.Subnet)
		subs, err := f.Engine.Subnets(ctx)
		if err != nil || !slices.Contains(subs, want) {
			t.Errorf("subnets %v %v while the network exists, want %s among them", subs, err, want)
		}
	}
	if err := f.Engine.Stop(ctx, w.o, w.j, w.cr, "SIGTERM", 2*time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if obj := inspect(t, f, w, w.o, w.cr); obj.State != "exited" {
		t.Errorf("after stop: %+v, want exited", obj)
	}
	rep := f.Engine.Teardown(ctx, w.o, w.j, w.j.created(), true)
	wantVerified(t, "teardown", rep)
	for _, r := range []backend.Resource{w.cr, w.net, w.vol} {
		if obj := inspect(t, f, w, w.o, r); obj.State != "missing" {
			t.Errorf("%s %s after teardown: %+v, want missing", r.Kind, r.Name, obj)
		}
	}
	wantVerified(t, "a second teardown", f.Engine.Teardown(ctx, w.o, w.j, w.j.created(), true))
	if f.Subnet != "" {
		subs, _ := f.Engine.Subnets(ctx)
		if slices.Contains(subs, netip.MustParsePrefix(f.Subnet)) {
			t.Errorf("the subnet %s is still held after teardown", f.Subnet)
		}
	}
	w.j.check(t)
}

// engineOtherWorkspace: another workspace's owner cannot start, stop or
// tear down this workspace's objects; they are left as they were.
func engineOtherWorkspace(t *testing.T, f EngineFixture) {
	ctx := context.Background()
	w := up(t, f)
	other := packOwner(f.Engine)
	if err := f.Engine.Start(ctx, other, w.j, w.cr); err == nil {
		t.Error("another workspace started this one's container")
	}
	if obj := inspect(t, f, w, w.o, w.cr); obj.State != "created" {
		t.Errorf("after another workspace's start: %+v, want still created", obj)
	}
	if err := f.Engine.Start(ctx, w.o, w.j, w.cr); err != nil {
		t.Fatalf("the owner's start: %v", err)
	}
	if err := f.Engine.Stop(ctx, other, w.j, w.cr, "SIGKILL", 0); err == nil {
		t.Error("another workspace stopped this one's container")
	}
	if rep := f.Engine.Teardown(ctx, other, newJournal(), w.j.created(), true); rep.Verified {
		t.Errorf("another workspace's teardown of this one's objects verified: %+v", rep.Steps)
	}
	if obj := inspect(t, f, w, w.o, w.cr); obj.State != "running" {
		t.Errorf("after another workspace's stop and teardown: %+v, want still running", obj)
	}
	if obj := inspect(t, f, w, w.o, w.vol); obj.State != "present" {
		t.Errorf("the volume after another workspace's teardown: %+v, want present", obj)
	}
}

// engineForgedIdentity: a record whose native ID holds something else is
// reported foreign, and acting on it is refused; the real record still
// works.
func engineForgedIdentity(t *testing.T, f EngineFixture) {
	ctx := context.Background()
	w := up(t, f)
	forged := w.cr
	forged.Identity = maps.Clone(w.cr.Identity)
	forged.Identity[PackIdentityID] = w.net.Identity[PackIdentityID]
	// Inspect changes nothing: it reports the record foreign or missing,
	// or refuses it.
	if obj, err := f.Engine.Inspect(ctx, w.o, w.j, forged); err == nil && obj.State != "foreign" && obj.State != "missing" {
		t.Errorf("a container record naming the network's ID: %+v, want foreign", obj)
	}
	if err := f.Engine.Start(ctx, w.o, w.j, forged); err == nil {
		t.Error("a container record naming the network's ID was started")
	}
	if err := f.Engine.Start(ctx, w.o, w.j, w.cr); err != nil {
		t.Fatalf("the real record's start: %v", err)
	}
	if obj := inspect(t, f, w, w.o, w.cr); obj.State != "running" {
		t.Errorf("the real container: %+v, want running", obj)
	}
	if obj := inspect(t, f, w, w.o, w.net); obj.State != "present" {
		t.Errorf("the network after the forged start: %+v, want present", obj)
	}
}

// engineForeign: objects no journal knows are listed; once known, they
// are not.
func engineForeign(t *testing.T, f EngineFixture) {
	ctx := context.Background()
	w := up(t, f)
	ids := map[string]bool{}
	for _, r := range []backend.Resource{w.net, w.vol, w.cr} {
		ids[r.Kind+"\x00"+r.Identity[PackIdentityID]] = true
	}
	unknown, err := f.Engine.Foreign(ctx, func(string, string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, r := range unknown {
		if ids[r.Kind+"\x00"+r.Identity[PackIdentityID]] {
			found++
		}
	}
	if found != len(ids) {
		t.Errorf("Foreign with nothing known lists %d of the workspace's %d objects: %+v", found, len(ids), unknown)
	}
	known, err := f.Engine.Foreign(ctx, func(kind, id string) bool { return ids[kind+"\x00"+id] })
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range known {
		if ids[r.Kind+"\x00"+r.Identity[PackIdentityID]] {
			t.Errorf("Foreign lists %s %s, which the journal knows", r.Kind, r.Name)
		}
	}
}

// engineUnrecordedNetwork: a container on a network with no recorded
// native ID is refused before it is created; one on the recorded network
// is made.
func engineUnrecordedNetwork(t *testing.T, f EngineFixture) {
	ctx := context.Background()
	w := up(t, f)
	before, err := f.Engine.Foreign(ctx, func(string, string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	c := backend.PackContainer{Service: "stray", Image: f.Image, Command: []string{"sleep", "300"}, Networks: []string{"front"}}
	if _, err := f.Engine.CreateContainer(ctx, w.o, w.j, c); err == nil {
		t.Error("a container on a network with no recorded native ID was created")
	}
	after, err := f.Engine.Foreign(ctx, func(string, string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("the refused create left %d new object(s)", len(after)-len(before))
	}
	c.Networks, c.NetworkIDs = []string{"back"}, map[string]string{"back": w.net.Identity[PackIdentityID]}
	_ = w.j.Intent(f.Engine.Intents(w.o, backend.PackNames{Containers: []string{"stray"}})...)
	if _, err := f.Engine.CreateContainer(ctx, w.o, w.j, c); err != nil {
		t.Errorf("the same container on the recorded network: %v", err)
	}
	w.j.check(t)
}

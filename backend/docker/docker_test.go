package docker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/versions"
	"github.com/docker/docker/api/types/volume"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/internal/dockertest"
	"github.com/custody-dev/custody/internal/randid"
)

func TestMain(m *testing.M) { os.Exit(dockertest.Main(m)) }

func open(t *testing.T) (*Docker, *dockertest.Daemon) {
	t.Helper()
	dt := dockertest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := Open(ctx, dt.Host, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, dt
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// recorder is an in-memory journal: the calls in order, and the latest
// record per kind and name.
type recorder struct {
	mu    sync.Mutex
	calls []string
	last  map[string]backend.Resource
	fail  error
}

func newRecorder() *recorder { return &recorder{last: map[string]backend.Resource{}} }

func (r *recorder) note(op string, rs ...backend.Resource) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	for _, x := range rs {
		r.calls = append(r.calls, op+" "+x.Kind+" "+x.Name)
		x.Identity = maps.Clone(x.Identity)
		x.State = op
		r.last[x.Kind+"/"+x.Name] = x
	}
	return nil
}
func (r *recorder) Intent(rs ...backend.Resource) error  { return r.note("intent", rs...) }
func (r *recorder) Created(rs ...backend.Resource) error { return r.note("created", rs...) }
func (r *recorder) Removed(rs ...backend.Resource) error { return r.note("removed", rs...) }

func (r *recorder) known(kind, id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.last {
		if x.Kind == kind && x.Identity[IdentityID] == id {
			return true
		}
	}
	return false
}

func workspace(t *testing.T, d *Docker, rec backend.Recorder) *Workspace {
	t.Helper()
	w, err := d.Workspace(Owner{Workspace: NewWorkspaceID(), Attempt: "a1", Grant: "g1", Config: "c0ffee"}, rec)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func sleeper(d *dockertest.Daemon) *container.Config {
	return &container.Config{Image: d.Image, Cmd: []string{"sleep", "300"}}
}

// exists says whether an object with exactly this native ID is there.
func exists(t *testing.T, d *Docker, kind, id string) bool {
	t.Helper()
	o, err := d.inspect(context.Background(), kind, id)
	if cerrdefs.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return o.id == id
}

// The moby client (API 1.51) negotiates down to what dockerd 20.10 speaks
// and every call then works at that version.
func TestNegotiatesDownToTheDaemonsAPI(t *testing.T) {
	d, _ := open(t)
	ctx := testCtx(t)
	v, err := d.cli.ServerVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.APIVersion() != v.APIVersion {
		t.Fatalf("negotiated %s, the daemon speaks %s", d.APIVersion(), v.APIVersion)
	}
	if !versions.LessThan(v.APIVersion, api.DefaultVersion) {
		t.Logf("NOTE: the daemon speaks API %s, not older than the client's %s: nothing to negotiate down", v.APIVersion, api.DefaultVersion)
	}
	if _, err := d.cli.Info(ctx); err != nil {
		t.Fatalf("info at API %s: %v", d.APIVersion(), err)
	}
	t.Logf("client default API %s, daemon %s (%s), negotiated %s", api.DefaultVersion, v.Version, v.APIVersion, d.APIVersion())
}

func TestOpenNeedsAnExplicitHost(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	if _, err := Open(context.Background(), "", nil); !errors.Is(err, ErrEndpoint) {
		t.Fatalf("Open(\"\") = %v, want ErrEndpoint", err)
	}
	if _, err := Open(context.Background(), "unix:///nonexistent/docker.sock", nil); !errors.Is(err, ErrEndpoint) {
		t.Fatalf("Open(missing socket) = %v, want ErrEndpoint", err)
	}
}

// The profile as the daemon reports it, with the egress proof, and no
// probe object left behind.
func TestProbe(t *testing.T) {
	t.Parallel() // each waits out nc timeouts; the daemon serves them side by side
	d, dt := open(t)
	ctx := testCtx(t)
	start := time.Now()
	e, err := d.Probe(ctx, ProbeOptions{Image: dt.Image})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("probe took %v: %+v", time.Since(start).Round(time.Millisecond), *e)
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	want := unix.ByteSliceToString(uts.Release[:])
	if e.Name != "docker" || e.OS != "linux" || e.Kernel != want || e.Version != dt.Version || e.APIVersion == "" {
		t.Errorf("identity: %+v (want kernel %s, version %s)", *e, want, dt.Version)
	}
	if e.Boundary != BoundaryNative {
		t.Errorf("boundary %q, want %q: %v", e.Boundary, BoundaryNative, e.Notes)
	}
	if e.StorageDriver == "" || e.CgroupDriver == "" || e.CgroupVersion == "" || !slices.Contains(e.Runtimes, "runc") {
		t.Errorf("storage/cgroup/runtimes: %+v", *e)
	}
	if !e.Seccomp || e.Rootless || e.UsernsRemap {
		t.Errorf("security options: seccomp %v rootless %v userns %v", e.Seccomp, e.Rootless, e.UsernsRemap)
	}
	if e.EgressUnproved != "" {
		t.Errorf("EgressUnproved %q on a proved profile", e.EgressUnproved)
	}
	if !e.InternalBlocksEgress {
		t.Errorf("InternalBlocksEgress false on a daemon that isolates internal networks: %v", e.Notes)
	}
	noProbeResidue(t, d, e.Notes)
}

// noProbeResidue checks that nothing of the probe that wrote notes is left
// (other probes may run beside it).
func noProbeResidue(t *testing.T, d *Docker, notes []string) {
	t.Helper()
	nonce := ""
	for _, n := range notes {
		if _, v, ok := strings.Cut(n, LabelProbe+"="); ok {
			nonce = v
		}
	}
	if nonce == "" {
		t.Fatalf("no probe nonce in the notes %v", notes)
	}
	fs, err := d.Foreign(context.Background(), func(string, string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range fs {
		if r.Identity[LabelProbe] == nonce || strings.HasPrefix(r.Name, "custody-probe-"+nonce) {
			t.Errorf("probe left %s %s", r.Kind, r.Name)
		}
	}
}

// Legit: the peer on the internal network answers, and the other
// network's control query reaches the witness through the embedded
// resolver. Refusal: the world container, the gateway and the host's
// other address do not answer, and no query from the internal network
// reaches the witness, directly or forwarded by the embedded resolver
// (127.0.0.11) to its loopback upstream.
func TestEgressProofOnCustodysInternalNetwork(t *testing.T) {
	t.Parallel() // each waits out nc timeouts; the daemon serves them side by side
	d, dt := open(t)
	p, err := d.proveInternal(testCtx(t), randid.New(8), dt.Image, InternalNetworkOptions(), partial.Nop{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s raw=%v", p, p.Raw)
	if p.Peer != Reached {
		t.Errorf("peer %s: the in-network control failed (%q)", p.Peer, p.Raw["peer"])
	}
	for name, r := range map[string]Reach{"world": p.World, "gateway": p.Gateway, "host": p.Host, "dns": p.DNS, "resolver": p.Resolver} {
		if r != Blocked {
			t.Errorf("%s %s (%q), want blocked", name, r, p.Raw[name])
		}
	}
	if !p.Blocks() || !p.BlocksDNS() {
		t.Error("Blocks() or BlocksDNS() false")
	}
}

// The witness stands in for a loopback upstream, never at the stub
// resolver's 127.0.0.53: the daemon's namespace is often the host's, whose
// own lookups would get test answers during a probe. Legit: every stand-in
// is a loopback address the proof above uses.
func TestWitnessNeverTakesTheStubResolversAddress(t *testing.T) {
	if len(loopbackUpstreams) == 0 {
		t.Fatal("no loopback stand-ins: the resolver forwarding is never proved")
	}
	for _, ip := range loopbackUpstreams {
		a := net.ParseIP(ip)
		if a == nil || !a.IsLoopback() {
			t.Errorf("stand-in %q is not a loopback address", ip)
		}
		if ip == "127.0.0.53" {
			t.Errorf("stand-in %s is the stub resolver's address", ip)
		}
	}
}

// A plain internal network leaves the daemon's host reachable at the
// gateway on dockerd 20.10: the proof must fail there, or it proves nothing.
func TestPlainInternalReachesTheHost(t *testing.T) {
	t.Parallel() // each waits out nc timeouts; the daemon serves them side by side
	d, dt := open(t)
	p, err := d.proveInternal(testCtx(t), randid.New(8), dt.Image, nil, partial.Nop{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s raw=%v", p, p.Raw)
	if p.Peer != Reached || p.World != Blocked {
		t.Errorf("peer %s world %s: want reached, blocked", p.Peer, p.World)
	}
	if p.Gateway == Reached && p.Blocks() {
		t.Error("Blocks() true although the gateway answered")
	}
	// The same gateway answers UDP/53 from a resolver on the host: the
	// DNS part must see that query, or it proves nothing either.
	if p.Gateway == Reached && (p.DNS != Reached || p.BlocksDNS()) {
		t.Errorf("dns %s (%q) although the gateway is reachable: want reached", p.DNS, p.Raw["dns"])
	}
	// And the engine's embedded resolver, which forwards from the
	// container's namespace here, reaches the witness through it too: the
	// resolver part must see that, or it proves nothing.
	if p.Gateway == Reached && p.Resolver != Reached {
		t.Errorf("resolver %s (%q) although the gateway is reachable: want reached", p.Resolver, p.Raw["resolver"])
	}
	if p.Gateway != Reached {
		t.Logf("NOTE: this daemon does not answer at a plain internal network's gateway (%s): newer engines isolate it", p.Gateway)
	}
}

func TestProbeWithoutImageProvesNothing(t *testing.T) {
	d, _ := open(t)
	e, err := d.Probe(testCtx(t), ProbeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if e.InternalBlocksEgress {
		t.Fatal("InternalBlocksEgress true without a proof")
	}
	if !strings.Contains(e.EgressUnproved, "no probe image is configured") {
		t.Errorf("EgressUnproved %q does not say why", e.EgressUnproved)
	}
}

// A probe whose deadline passes mid-proof returns, reports no proof, and
// still removes everything it made, wherever the deadline lands: in a
// network's or a container's create (whose object the engine may make
// after the request was given up), a start, or the proof's wait.
func TestProbeTimeoutNeverHangs(t *testing.T) {
	t.Parallel() // each waits out nc timeouts; the daemon serves them side by side
	d, dt := open(t)
	for _, timeout := range []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, 900 * time.Millisecond, 1500 * time.Millisecond} {
		t.Run(timeout.String(), func(t *testing.T) {
			start := time.Now()
			e, err := d.Probe(context.Background(), ProbeOptions{Image: dt.Image, Timeout: timeout})
			took := time.Since(start)
			if took > 40*time.Second {
				t.Fatalf("probe with a %v timeout took %v", timeout, took)
			}
			switch {
			case e == nil:
				t.Fatalf("no profile: %v", err)
			case err == nil && e.InternalBlocksEgress:
				t.Logf("NOTE: the proof finished within %v", timeout)
			case err == nil:
				t.Fatalf("no error and no proof: %v", e.Notes)
			case !errors.Is(err, context.DeadlineExceeded):
				t.Fatalf("err %v, want the deadline", err)
			case e.InternalBlocksEgress:
				t.Fatalf("InternalBlocksEgress true after an error: %v", err)
			case !strings.Contains(e.EgressUnproved, "the egress probe failed: "):
				t.Fatalf("EgressUnproved %q does not say the probe failed (%v)", e.EgressUnproved, err)
			}
			t.Logf("took %v; err %v", took, err)
			noProbeResidue(t, d, e.Notes)
		})
	}
}

// Intent before create, labels on every object, verify by ID, remove,
// and remove again (idempotent).
func TestOwnedLifecycleAndRepeatedTeardown(t *testing.T) {
	d, dt := open(t)
	ctx := testCtx(t)
	rec := newRecorder()
	w := workspace(t, d, rec)
	net, err := w.CreateNetwork(ctx, "inside", NetworkSpec{Internal: true})
	if err != nil {
		t.Fatal(err)
	}
	vol, err := w.CreateVolume(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	host := &container.HostConfig{NetworkMode: container.NetworkMode(net.Name),
		Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: vol.Name, Target: "/data"}}}
	ctr, err := w.CreateContainer(ctx, "app", sleeper(dt), host, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"intent docker-network " + net.Name, "created docker-network " + net.Name,
		"intent docker-volume " + vol.Name, "created docker-volume " + vol.Name,
		"intent docker-container " + ctr.Name, "created docker-container " + ctr.Name,
	}
	if !slices.Equal(rec.calls, want) {
		t.Fatalf("journal calls\n%v\nwant\n%v", rec.calls, want)
	}
	in, err := d.cli.NetworkInspect(ctx, net.Identity[IdentityID], network.InspectOptions{})
	if err != nil || !in.Internal || in.Options["com.docker.network.bridge.inhibit_ipv4"] != "true" || in.Labels[LabelWorkspace] != w.owner.Workspace {
		t.Fatalf("network %+v, %v", in, err)
	}
	for _, r := range []backend.Resource{net, vol, ctr} {
		id, err := w.Verify(ctx, r)
		if err != nil || id != r.Identity[IdentityID] {
			t.Fatalf("Verify %s = %s, %v", r.Name, id, err)
		}
	}
	if err := d.cli.ContainerStart(ctx, ctr.Identity[IdentityID], container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ {
		for _, r := range []backend.Resource{ctr, vol, net} {
			step, err := w.Remove(ctx, r)
			if err != nil || !step.OK {
				t.Fatalf("round %d: Remove %s: %+v %v", round, r.Name, step, err)
			}
			if round == 1 && step.Detail != "already gone" {
				t.Errorf("second Remove %s: %q", r.Name, step.Detail)
			}
			if exists(t, d, r.Kind, r.Identity[IdentityID]) {
				t.Fatalf("%s still exists", r.Name)
			}
			if got := rec.last[r.Kind+"/"+r.Name].State; got != "removed" {
				t.Fatalf("journal says %s for %s", got, r.Name)
			}
		}
	}
}

// A failing journal stops the create: nothing exists that is not recorded.
func TestNoCreateWithoutRecordedIntent(t *testing.T) {
	d, _ := open(t)
	ctx := testCtx(t)
	rec := newRecorder()
	rec.fail = errors.New("disk full")
	w := workspace(t, d, rec)
	if _, err := w.CreateNetwork(ctx, "n", NetworkSpec{}); err == nil {
		t.Fatal("created with a failing journal")
	}
	if _, err := d.cli.NetworkInspect(ctx, NativeName(w.owner.Workspace, "n"), network.InspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Fatalf("network exists although its intent was not recorded: %v", err)
	}
}

// Look-alikes: objects with our names, and even our labels, that the
// journal does not hold are never touched and are reported.
func TestForeignLookAlikesAreUntouchedAndReported(t *testing.T) {
	d, dt := open(t)
	ctx := testCtx(t)
	rec := newRecorder()
	w := workspace(t, d, rec)
	// What an intruder (or a stale run) made: our names, our labels.
	stolen := w.labels("web")
	fc, err := d.cli.ContainerCreate(ctx, &container.Config{Image: dt.Image, Cmd: []string{"sleep", "300"}, Labels: stolen}, nil, nil, nil, NativeName(w.owner.Workspace, "web"))
	if err != nil {
		t.Fatal(err)
	}
	fn, err := d.cli.NetworkCreate(ctx, NativeName(w.owner.Workspace, "net"), network.CreateOptions{Labels: w.labels("net")})
	if err != nil {
		t.Fatal(err)
	}
	fv, err := d.cli.VolumeCreate(ctx, volume.CreateOptions{Name: NativeName(w.owner.Workspace, "data"), Labels: w.labels("data")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := context.Background()
		d.cli.ContainerRemove(bg, fc.ID, container.RemoveOptions{Force: true})
		d.cli.NetworkRemove(bg, fn.ID)
		d.cli.VolumeRemove(bg, fv.Name, false)
	})
	foreign := map[string]string{KindContainer: fc.ID, KindNetwork: fn.ID, KindVolume: fv.Name}

	// Creating over them is refused, by name, before any mutation.
	if _, err := w.CreateContainer(ctx, "web", sleeper(dt), nil, nil); !errors.Is(err, ErrNameTaken) {
		t.Errorf("CreateContainer over a look-alike: %v", err)
	}
	if _, err := w.CreateNetwork(ctx, "net", NetworkSpec{}); !errors.Is(err, ErrNameTaken) {
		t.Errorf("CreateNetwork over a look-alike: %v", err)
	}
	if _, err := w.CreateVolume(ctx, "data"); !errors.Is(err, ErrNameTaken) {
		t.Errorf("CreateVolume over a look-alike: %v", err)
	}
	// The engine hands back an existing volume on create: the labels
	// catch it (the race between the name check and the create).
	r := backend.Resource{Kind: KindVolume, Name: fv.Name, State: "intent", Identity: w.labels("data")}
	if _, err := w.created(ctx, r, fv.Name); !errors.Is(err, ErrNameTaken) {
		t.Errorf("adopting a volume whose nonce is not ours: %v", err)
	}
	// A record that names a look-alike's ID, with labels that differ from
	// the object's (another intent), is refused: zero destructive action.
	for kind, id := range foreign {
		lbl := w.labels("x")
		lbl[IdentityID] = id
		fake := backend.Resource{Kind: kind, Name: "custody-fake", State: "created", Identity: lbl}
		step, err := w.Remove(ctx, fake)
		if !errors.Is(err, ErrNotOwned) || step.OK {
			t.Errorf("Remove of %s look-alike: %+v %v, want ErrNotOwned", kind, step, err)
		}
		if _, err := w.Verify(ctx, fake); !errors.Is(err, ErrNotOwned) {
			t.Errorf("Verify of %s look-alike: %v, want ErrNotOwned", kind, err)
		}
	}
	// Intent-only records whose create never happened resolve to "never
	// created" and leave the same-named objects alone.
	for key, r := range rec.last {
		step, err := w.Remove(ctx, r)
		if err != nil || !step.OK || !strings.Contains(step.Detail, "left alone") {
			t.Errorf("Remove of intent %s: %+v %v", key, step, err)
		}
	}
	for kind, id := range foreign {
		if !exists(t, d, kind, id) {
			t.Fatalf("foreign %s %s was removed", kind, id)
		}
	}
	fs, err := d.Foreign(ctx, rec.known)
	if err != nil {
		t.Fatal(err)
	}
	for kind, id := range foreign {
		if !slices.ContainsFunc(fs, func(r backend.Resource) bool { return r.Kind == kind && r.Identity[IdentityID] == id }) {
			t.Errorf("Foreign does not report %s %s: %v", kind, id, fs)
		}
	}
}

// Two workspaces from one pack (same logical names) never touch each
// other: distinct native names, and one's teardown leaves the other's.
func TestTwoWorkspacesWithTheSameProjectName(t *testing.T) {
	d, dt := open(t)
	ctx := testCtx(t)
	recA, recB := newRecorder(), newRecorder()
	a, b := workspace(t, d, recA), workspace(t, d, recB)
	made := map[*Workspace][]backend.Resource{}
	for _, w := range []*Workspace{a, b} {
		n, err := w.CreateNetwork(ctx, "default", NetworkSpec{Internal: true})
		if err != nil {
			t.Fatal(err)
		}
		v, err := w.CreateVolume(ctx, "data")
		if err != nil {
			t.Fatal(err)
		}
		c, err := w.CreateContainer(ctx, "app", sleeper(dt), &container.HostConfig{NetworkMode: container.NetworkMode(n.Name)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		made[w] = []backend.Resource{c, v, n}
	}
	t.Cleanup(func() {
		for _, r := range made[b] {
			b.Remove(context.Background(), r)
		}
	})
	for i := range made[a] {
		if made[a][i].Name == made[b][i].Name {
			t.Fatalf("both workspaces named %s", made[a][i].Name)
		}
	}
	// a cannot act on b's records at all.
	for _, r := range made[b] {
		if _, err := a.Remove(ctx, r); !errors.Is(err, ErrNotRecorded) {
			t.Errorf("workspace a removing b's %s: %v, want ErrNotRecorded", r.Name, err)
		}
	}
	for _, r := range made[a] {
		if step, err := a.Remove(ctx, r); err != nil || !step.OK {
			t.Fatalf("a.Remove %s: %+v %v", r.Name, step, err)
		}
	}
	for _, r := range made[b] {
		if _, err := b.Verify(ctx, r); err != nil {
			t.Errorf("b's %s after a's teardown: %v", r.Name, err)
		}
	}
}

// NotFound is success only for what the journal proves custody created.
func TestNotFoundOfAnUnrecordedObjectIsNotSuccess(t *testing.T) {
	d, _ := open(t)
	ctx := testCtx(t)
	rec := newRecorder()
	w := workspace(t, d, rec)
	gone := strings.Repeat("ab", 32)
	cases := map[string]backend.Resource{
		"no record at all":      {Kind: KindContainer, Name: "custody-x", State: "created", Identity: map[string]string{IdentityID: gone}},
		"another workspace's":   {Kind: KindNetwork, Name: "custody-y", State: "created", Identity: map[string]string{IdentityID: gone, LabelWorkspace: NewWorkspaceID(), LabelIntent: "n"}},
		"created without an ID": {Kind: KindVolume, Name: "custody-z", State: "created", Identity: map[string]string{LabelWorkspace: w.owner.Workspace, LabelIntent: "n"}},
		"a foreign listing":     {Kind: KindVolume, Name: "custody-z", State: "foreign", Identity: map[string]string{IdentityID: "custody-z", LabelWorkspace: w.owner.Workspace, LabelIntent: "n"}},
	}
	for name, r := range cases {
		step, err := w.Remove(ctx, r)
		if !errors.Is(err, ErrNotRecorded) || step.OK {
			t.Errorf("%s: %+v %v, want ErrNotRecorded", name, step, err)
		}
	}
	if len(rec.calls) != 0 {
		t.Errorf("refusals recorded %v", rec.calls)
	}
	// Legit: our recorded network, removed behind our back, is gone.
	n, err := w.CreateNetwork(ctx, "n", NetworkSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cli.NetworkRemove(ctx, n.Identity[IdentityID]); err != nil {
		t.Fatal(err)
	}
	if step, err := w.Remove(ctx, n); err != nil || !step.OK || step.Detail != "already gone" {
		t.Fatalf("Remove of our vanished network: %+v %v", step, err)
	}
}

// "In use" is not success: the object stays recorded as there.
func TestInUseIsNotSuccess(t *testing.T) {
	d, dt := open(t)
	ctx := testCtx(t)
	rec := newRecorder()
	w := workspace(t, d, rec)
	n, err := w.CreateNetwork(ctx, "busy", NetworkSpec{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := w.CreateVolume(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	c, err := w.CreateContainer(ctx, "user", sleeper(dt), &container.HostConfig{NetworkMode: container.NetworkMode(n.Name),
		Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: v.Name, Target: "/v"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cli.ContainerStart(ctx, c.Identity[IdentityID], container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []backend.Resource{n, v} {
		step, err := w.Remove(ctx, r)
		if !errors.Is(err, ErrInUse) || step.OK {
			t.Errorf("Remove of in-use %s: %+v %v, want ErrInUse", r.Kind, step, err)
		}
		if !exists(t, d, r.Kind, r.Identity[IdentityID]) {
			t.Errorf("%s vanished", r.Name)
		}
		if rec.last[r.Kind+"/"+r.Name].State != "created" {
			t.Errorf("journal marked in-use %s %s", r.Name, rec.last[r.Kind+"/"+r.Name].State)
		}
	}
	for _, r := range []backend.Resource{c, v, n} {
		if step, err := w.Remove(ctx, r); err != nil || !step.OK {
			t.Fatalf("Remove %s: %+v %v", r.Name, step, err)
		}
	}
}

// A crash between create and the record of the ID: the intent's nonce
// finds the object, which is adopted (its ID recorded) and removed.
func TestIntentOnlyRecordIsResolvedByItsNonce(t *testing.T) {
	d, dt := open(t)
	ctx := testCtx(t)
	rec := newRecorder()
	w := workspace(t, d, rec)
	r, err := w.intent(KindContainer, "half")
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.cli.ContainerCreate(ctx, &container.Config{Image: dt.Image, Cmd: []string{"sleep", "300"}, Labels: r.Identity}, nil, nil, nil, r.Name)
	if err != nil {
		t.Fatal(err)
	}
	step, err := w.Remove(ctx, rec.last[KindContainer+"/"+r.Name])
	if err != nil || !step.OK || step.Detail != "removed" {
		t.Fatalf("Remove of intent-only record: %+v %v", step, err)
	}
	if exists(t, d, KindContainer, c.ID) {
		t.Fatal("half-made container still exists")
	}
	if got := rec.calls; !slices.Equal(got, []string{"intent docker-container " + r.Name, "created docker-container " + r.Name, "removed docker-container " + r.Name}) {
		t.Fatalf("journal %v", got)
	}
}

func TestPackLabelsUnderTheReservedPrefixAreRefused(t *testing.T) {
	d, dt := open(t)
	rec := newRecorder()
	w := workspace(t, d, rec)
	cfg := sleeper(dt)
	cfg.Labels = map[string]string{LabelWorkspace: "mine"}
	if _, err := w.CreateContainer(testCtx(t), "x", cfg, nil, nil); err == nil {
		t.Fatal("a pack label under dev.custody. was accepted")
	}
	if len(rec.calls) != 0 {
		t.Fatalf("recorded %v for a refused create", rec.calls)
	}
	if _, err := d.Workspace(Owner{Workspace: "ws1", Attempt: "a"}, rec); err == nil {
		t.Fatal("a guessable workspace id was accepted")
	}
}

// Logs, stats, copy, exec, start and inspect act only on a verified
// recorded container; a record naming a look-alike's ID gets ErrNotOwned
// and the look-alike sees no exec.
func TestVerifiedActsOnlyOnOurContainer(t *testing.T) {
	d, dt := open(t)
	ctx := testCtx(t)
	rec := newRecorder()
	w := workspace(t, d, rec)
	ours, err := w.CreateContainer(ctx, "svc", &container.Config{Image: dt.Image, Cmd: []string{"sh", "-c", "echo hello; exec sleep 300"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Remove(context.Background(), ours) })
	fc, err := d.cli.ContainerCreate(ctx, sleeper(dt), nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.cli.ContainerRemove(context.Background(), fc.ID, container.RemoveOptions{Force: true}) })
	if err := d.cli.ContainerStart(ctx, fc.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	fake := ours
	fake.Identity = maps.Clone(ours.Identity)
	fake.Identity[IdentityID] = fc.ID

	acts := map[string]func(r backend.Resource) error{
		"start": func(r backend.Resource) error { return w.Start(ctx, r) },
		"inspect": func(r backend.Resource) error {
			in, err := w.Inspect(ctx, r)
			if err == nil && in.HostConfig == nil {
				err = errors.New("no HostConfig read back")
			}
			return err
		},
		"logs": func(r backend.Resource) error {
			rc, err := w.Logs(ctx, r, container.LogsOptions{ShowStdout: true})
			if err == nil {
				rc.Close()
			}
			return err
		},
		"stats": func(r backend.Resource) error {
			s, err := w.Stats(ctx, r)
			if err == nil {
				s.Body.Close()
			}
			return err
		},
		"copy": func(r backend.Resource) error {
			rc, _, err := w.CopyFrom(ctx, r, "/etc/passwd")
			if err == nil {
				rc.Close()
			}
			return err
		},
		"exec": func(r backend.Resource) error {
			h, err := w.Exec(ctx, r, container.ExecOptions{Cmd: []string{"true"}, AttachStdout: true})
			if err == nil {
				h.Close()
			}
			return err
		},
	}
	for _, name := range []string{"start", "inspect", "logs", "stats", "copy", "exec"} {
		if err := acts[name](ours); err != nil {
			t.Errorf("%s on our container: %v", name, err)
		}
		if err := acts[name](fake); !errors.Is(err, ErrNotOwned) {
			t.Errorf("%s on a look-alike: %v, want ErrNotOwned", name, err)
		}
	}
	in, err := d.cli.ContainerInspect(ctx, fc.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.ExecIDs) != 0 {
		t.Errorf("the look-alike got execs %v", in.ExecIDs)
	}
}

// A same-named object that appears between the name check and the create
// (the replacement race) is detected: the create fails, or for a volume
// the engine hands back the intruder and its labels give it away. The
// intruder is left alone.
func TestSameNamedObjectAppearingMidCreate(t *testing.T) {
	d, dt := open(t)
	ctx := testCtx(t)
	w := workspace(t, d, newRecorder())
	var intruders []func()
	w.beforeCreate = func(kind, name string) {
		bg := context.Background()
		switch kind {
		case KindNetwork:
			n, err := d.cli.NetworkCreate(bg, name, network.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			intruders = append(intruders, func() {
				if !exists(t, d, kind, n.ID) {
					t.Error("the racing network was removed")
				}
				d.cli.NetworkRemove(bg, n.ID)
			})
		case KindVolume:
			v, err := d.cli.VolumeCreate(bg, volume.CreateOptions{Name: name})
			if err != nil {
				t.Fatal(err)
			}
			intruders = append(intruders, func() {
				if !exists(t, d, kind, v.Name) {
					t.Error("the racing volume was removed")
				}
				d.cli.VolumeRemove(bg, v.Name, false)
			})
		case KindContainer:
			c, err := d.cli.ContainerCreate(bg, sleeper(dt), nil, nil, nil, name)
			if err != nil {
				t.Fatal(err)
			}
			intruders = append(intruders, func() {
				if !exists(t, d, kind, c.ID) {
					t.Error("the racing container was removed")
				}
				d.cli.ContainerRemove(bg, c.ID, container.RemoveOptions{Force: true})
			})
		}
	}
	if _, err := w.CreateNetwork(ctx, "raced", NetworkSpec{}); !errors.Is(err, ErrNameTaken) {
		t.Errorf("network: %v, want ErrNameTaken", err)
	}
	if _, err := w.CreateVolume(ctx, "raced"); !errors.Is(err, ErrNameTaken) {
		t.Errorf("volume: %v, want ErrNameTaken", err)
	}
	if _, err := w.CreateContainer(ctx, "raced", sleeper(dt), nil, nil); !errors.Is(err, ErrNameTaken) {
		t.Errorf("container: %v, want ErrNameTaken", err)
	}
	if len(intruders) != 3 {
		t.Fatalf("%d intruders", len(intruders))
	}
	for _, check := range intruders {
		check()
	}
}

// Teardown says what it covers: without volumes they stay (and are said
// to stay); with volumes everything goes; again, it re-confirms.
func TestTeardownCoversWhatItSays(t *testing.T) {
	d, dt := open(t)
	ctx := testCtx(t)
	rec := newRecorder()
	w := workspace(t, d, rec)
	n, err := w.CreateNetwork(ctx, "net", NetworkSpec{Internal: true})
	if err != nil {
		t.Fatal(err)
	}
	v, err := w.CreateVolume(ctx, "vol")
	if err != nil {
		t.Fatal(err)
	}
	c, err := w.CreateContainer(ctx, "app", sleeper(dt), &container.HostConfig{NetworkMode: container.NetworkMode(n.Name),
		Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: v.Name, Target: "/v"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx, c); err != nil {
		t.Fatal(err)
	}
	other := workspace(t, d, newRecorder())
	theirs, err := other.CreateNetwork(ctx, "net", NetworkSpec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Remove(context.Background(), theirs) })
	// Volumes first in the list: the order is the teardown's, not the caller's.
	recorded := []backend.Resource{v, n, c}
	rep := w.Teardown(ctx, recorded, false)
	if !rep.Verified || len(rep.Steps) != 3 || !strings.HasPrefix(rep.Steps[2].Detail, "kept") {
		t.Fatalf("down without volumes: %+v", rep)
	}
	if exists(t, d, KindContainer, c.Identity[IdentityID]) || exists(t, d, KindNetwork, n.Identity[IdentityID]) || !exists(t, d, KindVolume, v.Name) {
		t.Fatal("down without volumes did not remove containers and networks, or removed the volume")
	}
	for i := 0; i < 2; i++ {
		rep = w.Teardown(ctx, append(recorded, theirs), true)
		if rep.Verified {
			t.Fatalf("a report that includes another workspace's record is Verified: %+v", rep)
		}
		for _, s := range rep.Steps {
			if s.OK == strings.Contains(s.Name, theirs.Name) {
				t.Errorf("round %d step %+v", i, s)
			}
		}
	}
	if exists(t, d, KindVolume, v.Name) {
		t.Fatal("down with volumes kept the volume")
	}
	if !exists(t, d, KindNetwork, theirs.Identity[IdentityID]) {
		t.Fatal("our teardown removed another workspace's network")
	}
	if rep := w.Teardown(ctx, recorded, true); !rep.Verified {
		t.Fatalf("repeated teardown: %+v", rep)
	}
}

// A create the engine answers with a warning (here: the OOM killer off
// with no memory limit) is refused, and the container is recorded, so a
// teardown removes it; a create without a warning is not refused.
func TestCreateWarningIsRefused(t *testing.T) {
	d, dt := open(t)
	ctx := testCtx(t)
	w := workspace(t, d, newRecorder())
	off := true
	ctr, err := w.CreateContainer(ctx, "warned", sleeper(dt), &container.HostConfig{NetworkMode: "none",
		Resources: container.Resources{OomKillDisable: &off}}, nil)
	if !errors.Is(err, ErrEngineWarned) {
		t.Fatalf("create with a warning: %v", err)
	}
	id := ctr.Identity[IdentityID]
	if id == "" || !exists(t, d, KindContainer, id) {
		t.Fatalf("the warned container is not recorded: %+v", ctr)
	}
	if step, err := w.Remove(ctx, ctr); err != nil || !step.OK || exists(t, d, KindContainer, id) {
		t.Fatalf("remove the warned container: %+v %v", step, err)
	}
	if _, err := w.CreateContainer(ctx, "plain", sleeper(dt), &container.HostConfig{NetworkMode: "none"}, nil); err != nil {
		t.Fatalf("create without a warning: %v", err)
	}
}

// A create whose caller's context ends mid-request still records what the
// engine made, and the teardown right after removes it. The deadlines
// sweep from before the create (nothing made, the intent resolves as never
// created) through it; once the engine has settled, no object of any name
// the workspace used is there. Before creates ran to their end, one given
// up mid-request could make its object after the teardown had looked.
func TestCreateGivenUpMidRequestLeavesNothing(t *testing.T) {
	t.Parallel()
	d, dt := open(t)
	w := workspace(t, d, newRecorder())
	var made []backend.Resource
	for i, deadline := range []time.Duration{time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond, 100 * time.Millisecond} {
		for _, create := range []func(ctx context.Context) (backend.Resource, error){
			func(ctx context.Context) (backend.Resource, error) {
				return w.CreateNetwork(ctx, fmt.Sprintf("net%d", i), NetworkSpec{Internal: true})
			},
			func(ctx context.Context) (backend.Resource, error) {
				return w.CreateVolume(ctx, fmt.Sprintf("vol%d", i))
			},
			func(ctx context.Context) (backend.Resource, error) {
				return w.CreateContainer(ctx, fmt.Sprintf("ctr%d", i), sleeper(dt), nil, nil)
			},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			r, err := create(ctx)
			cancel()
			if r.Name == "" {
				t.Fatalf("no resource from a create (%v)", err)
			}
			t.Logf("deadline %v: %s %s is %s (%v)", deadline, r.Kind, r.Name, r.State, err)
			made = append(made, r)
			// The caller's teardown, at once, as a failed pack-up's is.
			if step, err := w.Remove(testCtx(t), r); err != nil {
				t.Errorf("remove %s %s: %v (%+v)", r.Kind, r.Name, err, step)
			}
		}
	}
	ctx := testCtx(t)
	time.Sleep(2 * time.Second) // a create given up mid-request lands by now
	for _, r := range made {
		if _, err := d.inspect(ctx, r.Kind, r.Name); !cerrdefs.IsNotFound(err) {
			t.Errorf("%s %s is still there after the teardown (%v)", r.Kind, r.Name, err)
		}
	}
}

// A volume a service wrote to is still the workspace's: dockerd moves a
// local volume's reported creation time when something is written at its
// root, and the volume's identity (name, driver, custody's labels with the
// intent nonce) does not rest on it. A record from an older journal that
// still carries the creation time is judged the same way. A same-named
// volume made after ours was removed, without our nonce, is foreign and
// left alone.
func TestVolumeWrittenToStaysOursAndItsReplacementIsNot(t *testing.T) {
	d, dt := open(t)
	ctx := testCtx(t)
	rec := newRecorder()
	w := workspace(t, d, rec)
	v, err := w.CreateVolume(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	if v.Identity[IdentityDriver] != "local" {
		t.Errorf("recorded identity %v, want the local driver", v.Identity)
	}
	before, err := d.inspect(ctx, KindVolume, v.Name)
	if err != nil {
		t.Fatal(err)
	}
	// Write at the volume's root until the engine reports another
	// creation time (it has whole seconds): the premise of this test.
	for i := 0; ; i++ {
		if i == 5 {
			t.Fatalf("after %d writes the engine still reports the volume created at %s", i, before.created)
		}
		c, err := d.cli.ContainerCreate(ctx, &container.Config{Image: dt.Image, Cmd: []string{"/bin/sh", "-c", "sleep 1 && touch /data/up"}},
			&container.HostConfig{Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: v.Name, Target: "/data"}}}, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := d.cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
			t.Fatal(err)
		}
		waitC, errC := d.cli.ContainerWait(ctx, c.ID, container.WaitConditionNotRunning)
		select {
		case st := <-waitC:
			if st.StatusCode != 0 {
				t.Fatalf("the writer exited %d", st.StatusCode)
			}
		case err := <-errC:
			t.Fatal(err)
		}
		if err := d.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{}); err != nil {
			t.Fatal(err)
		}
		now, err := d.inspect(ctx, KindVolume, v.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !now.created.Equal(before.created) {
			break
		}
	}
	if _, err := w.Verify(ctx, v); err != nil {
		t.Errorf("Verify of the volume a service wrote to: %v", err)
	}
	older := v
	older.Identity = maps.Clone(v.Identity)
	delete(older.Identity, IdentityDriver)
	older.Identity[IdentityCreated] = before.created.UTC().Format(time.RFC3339Nano)
	if _, err := w.Verify(ctx, older); err != nil {
		t.Errorf("Verify of an older journal's record (with the creation time): %v", err)
	}

	// Replaced behind custody's back: the same name, custody's labels,
	// another nonce (or none).
	for _, nonce := range []string{"another", ""} {
		if err := d.cli.VolumeRemove(ctx, v.Name, false); err != nil && !cerrdefs.IsNotFound(err) {
			t.Fatal(err)
		}
		lbl := maps.Clone(v.Identity)
		delete(lbl, IdentityID)
		delete(lbl, IdentityDriver)
		if lbl[LabelIntent] = nonce; nonce == "" {
			delete(lbl, LabelIntent)
		}
		if _, err := d.cli.VolumeCreate(ctx, volume.CreateOptions{Name: v.Name, Driver: "local", Labels: lbl}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Verify(ctx, v); !errors.Is(err, ErrNotOwned) {
			t.Errorf("Verify of a replacement with nonce %q: %v, want ErrNotOwned", nonce, err)
		}
		step, err := w.Remove(ctx, v)
		if !errors.Is(err, ErrNotOwned) || step.OK {
			t.Errorf("Remove of a replacement with nonce %q: %+v %v, want ErrNotOwned", nonce, step, err)
		}
		if !exists(t, d, KindVolume, v.Name) {
			t.Fatalf("the replacement with nonce %q was removed", nonce)
		}
	}
	if err := d.cli.VolumeRemove(ctx, v.Name, false); err != nil {
		t.Fatal(err)
	}
}

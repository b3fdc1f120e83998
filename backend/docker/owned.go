package docker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/internal/randid"
)

// LabelPrefix is reserved: a pack may not set a label under it, and every
// native object custody creates carries the labels below.
const LabelPrefix = "dev.custody."

// Custody's labels.
const (
	LabelWorkspace = LabelPrefix + "workspace" // unguessable workspace id
	LabelAttempt   = LabelPrefix + "attempt"
	LabelGrant     = LabelPrefix + "grant"
	LabelConfig    = LabelPrefix + "config" // config hash
	// LabelResource is the object's name in the pack ("db", "backend").
	LabelResource = LabelPrefix + "resource"
	// LabelIntent is a fresh nonce per create, recorded in the intent
	// before the create: it finds the object again when a crash came
	// between the create and the record of its ID.
	LabelIntent = LabelPrefix + "intent"
	// LabelProbe marks the capability probe's throwaway objects.
	LabelProbe = LabelPrefix + "probe"
)

// NamePrefix starts the native name of everything custody creates.
const NamePrefix = "custody-"

// backend.Resource kinds.
const (
	KindNetwork   = "docker-network"
	KindVolume    = "docker-volume"
	KindContainer = "docker-container"
)

// Identity keys beside the labels.
const (
	IdentityID = "id" // the native ID (a volume's is its name)
	// IdentityDriver is a volume's driver. A volume's identity is its
	// name, its driver and custody's labels, the per-create intent nonce
	// among them: all set by custody and never changed by the engine.
	// Not its creation time: dockerd reports a local volume's as its
	// directory's modification time, which moves when a service writes
	// at the volume's root.
	IdentityDriver = "driver"
	// IdentityCreated is an unjournalled child's creation time, as the
	// engine reported it when the child was judged.
	IdentityCreated = "created"
)

// volumeDriver is the only driver custody creates volumes with.
const volumeDriver = "local"

// Typed refusals callers branch on.
var (
	// ErrNotOwned: the object's native ID or labels do not match the
	// journal's record. It is left alone.
	ErrNotOwned = errors.New("not owned by this workspace")
	// ErrNameTaken: something custody did not create in this intent holds
	// the native name. It is left alone.
	ErrNameTaken = errors.New("name held by an object custody did not create")
	// ErrEngineWarned: the engine created a container but warned, which
	// is how it says it dropped a setting asked for.
	ErrEngineWarned = errors.New("the engine warned at create")
	// ErrNotRecorded: the record is not a journal record of this
	// workspace, so nothing proves custody created the object.
	ErrNotRecorded = errors.New("not recorded by this workspace")
	// ErrInUse: the engine refused the delete because the object is in
	// use. Not success: the object is still there.
	ErrInUse = errors.New("in use")
	// ErrUncertain: the journal cannot tell which object is ours.
	ErrUncertain = errors.New("ownership uncertain")
	// ErrStillThere: the delete was answered but the object remains.
	ErrStillThere = errors.New("still exists after delete")
	// ErrImageNotPinned: no image on the engine has the pinned digest.
	ErrImageNotPinned = errors.New("no image with the pinned digest")
)

// Owner is who a workspace's objects belong to.
type Owner struct {
	// Workspace is unguessable (NewWorkspaceID): names never prove
	// ownership, and two workspaces of one pack never share it.
	Workspace string
	Attempt   string
	Grant     string
	// Config is the hash of the admitted configuration.
	Config string
}

// NewWorkspaceID returns a fresh unguessable workspace id.
func NewWorkspaceID() string { return randid.New(16) }

var (
	workspaceRe = regexp.MustCompile(`^[0-9a-f]{32}$`)
	logicalRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
)

// Workspace creates, checks and removes one workspace's objects. Every
// create is journalled on rec first; every later act is by native ID,
// after the object's labels were checked against the record.
type Workspace struct {
	d     *Docker
	owner Owner
	rec   backend.Recorder
	// beforeCreate, if set, runs between the name check and the create:
	// tests put a same-named object there to race the create.
	beforeCreate func(kind, name string)
}

func (w *Workspace) raceHook(r backend.Resource) {
	if w.beforeCreate != nil {
		w.beforeCreate(r.Kind, r.Name)
	}
}

// Workspace returns the primitives for owner's objects, recorded on rec.
func (d *Docker) Workspace(owner Owner, rec backend.Recorder) (*Workspace, error) {
	if !workspaceRe.MatchString(owner.Workspace) {
		return nil, fmt.Errorf("workspace id %q is not 32 lowercase hex digits from NewWorkspaceID: a guessable id would let names prove ownership", owner.Workspace)
	}
	if owner.Attempt == "" {
		return nil, errors.New("workspace: an attempt id is required (P4)")
	}
	if rec == nil {
		return nil, errors.New("workspace: a recorder is required: nothing is created unrecorded (P8)")
	}
	return &Workspace{d: d, owner: owner, rec: rec}, nil
}

// NativeName is the engine name of a workspace's object: custody's prefix,
// the workspace id's first 12 digits, and the pack's name for it.
func NativeName(workspace, logical string) string {
	return NamePrefix + workspace[:12] + "-" + logical
}

func (w *Workspace) labels(logical string) map[string]string {
	l := map[string]string{
		LabelWorkspace: w.owner.Workspace,
		LabelAttempt:   w.owner.Attempt,
		LabelResource:  logical,
		LabelIntent:    randid.New(12),
	}
	if w.owner.Grant != "" {
		l[LabelGrant] = w.owner.Grant
	}
	if w.owner.Config != "" {
		l[LabelConfig] = w.owner.Config
	}
	return l
}

// intent records what is about to be created, durably, before it is.
func (w *Workspace) intent(kind, logical string) (backend.Resource, error) {
	if !logicalRe.MatchString(logical) {
		return backend.Resource{}, fmt.Errorf("%s name %q: want [a-z0-9][a-z0-9_.-]*, at most 63", kind, logical)
	}
	r := backend.Resource{Kind: kind, Name: NativeName(w.owner.Workspace, logical), State: "intent", Identity: w.labels(logical)}
	if err := w.rec.Intent(r); err != nil {
		return backend.Resource{}, fmt.Errorf("record intent for %s %s: %w", kind, r.Name, err)
	}
	return r, nil
}

// created checks the new object's labels against the intent, then records
// its native identity.
func (w *Workspace) created(ctx context.Context, r backend.Resource, id string) (backend.Resource, error) {
	o, err := w.d.inspect(ctx, r.Kind, id)
	if err != nil {
		return r, fmt.Errorf("inspect new %s %s: %w", r.Kind, id, err)
	}
	if err := matches(r, o); err != nil {
		// Not what this intent made (a volume create returns an existing
		// volume of that name): leave it alone.
		return r, fmt.Errorf("%s %s: %w: %w", r.Kind, r.Name, ErrNameTaken, err)
	}
	if r.Kind == KindVolume && o.driver != volumeDriver {
		return r, fmt.Errorf("volume %s: %w: its driver is %q, custody creates %q volumes", r.Name, ErrNameTaken, o.driver, volumeDriver)
	}
	r.Identity = maps.Clone(r.Identity)
	r.Identity[IdentityID] = o.id
	if r.Kind == KindVolume {
		r.Identity[IdentityDriver] = o.driver
	}
	r.State = "created"
	if err := w.rec.Created(r); err != nil {
		return r, fmt.Errorf("record %s %s (%s): %w", r.Kind, r.Name, o.id, err)
	}
	return r, nil
}

// createdBefore is created for an object made under cctx (createContext
// of ctx): it records the object, then reports ctx's end if ctx ended
// meanwhile, so that the caller stops and its teardown removes the object
// by the ID recorded.
func (w *Workspace) createdBefore(ctx, cctx context.Context, r backend.Resource, id string) (backend.Resource, error) {
	r, err := w.created(cctx, r, id)
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("create %s %s: %w", r.Kind, r.Name, ctx.Err())
	}
	return r, err
}

// createTimeout bounds one engine create, which createContext lets run
// past its caller's end.
const createTimeout = 30 * time.Second

// createContext is the context of one engine create: ctx's values without
// its end, bounded by createTimeout. A create given up mid-request can
// still make its object in the engine after the caller has looked for it
// (a workspace intent resolved as never created, a probe that removes by
// ID), so every create runs to its end and its object is recorded; the
// caller checks ctx as soon as it returns.
func createContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
}

// nameFree refuses when an object already holds the name: checked before
// the create and again by the engine itself at create (a same-named object
// may appear in between; then the create fails with a conflict).
func (w *Workspace) nameFree(ctx context.Context, r backend.Resource) error {
	o, err := w.d.inspect(ctx, r.Kind, r.Name)
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check name %s: %w", r.Name, err)
	}
	if o.name != r.Name {
		return nil // an ID-prefix match, not the name
	}
	return fmt.Errorf("%s %s exists as %s with labels %v: %w; it is left alone (remove it yourself if it is yours)",
		r.Kind, r.Name, o.id, ownLabels(o.labels), ErrNameTaken)
}

// NetworkSpec is a network to create.
type NetworkSpec struct {
	// Internal networks get InternalNetworkOptions too.
	Internal bool
	IPAM     *network.IPAM
}

// CreateNetwork records the intent, creates the network with custody's
// labels, and records its ID.
func (w *Workspace) CreateNetwork(ctx context.Context, logical string, spec NetworkSpec) (backend.Resource, error) {
	r, err := w.intent(KindNetwork, logical)
	if err != nil {
		return r, err
	}
	if err := w.nameFree(ctx, r); err != nil {
		return r, err
	}
	opts := network.CreateOptions{Driver: "bridge", Internal: spec.Internal, IPAM: spec.IPAM, Labels: r.Identity}
	if spec.Internal {
		opts.Options = InternalNetworkOptions()
	}
	w.raceHook(r)
	cctx, cancel := createContext(ctx)
	defer cancel()
	resp, err := w.d.cli.NetworkCreate(cctx, r.Name, opts)
	if cerrdefs.IsConflict(err) {
		return r, fmt.Errorf("create network %s: %w: %w", r.Name, ErrNameTaken, err)
	}
	if err != nil {
		return r, fmt.Errorf("create network %s: %w", r.Name, err)
	}
	return w.createdBefore(ctx, cctx, r, resp.ID)
}

// CreateVolume records the intent, creates a local volume with custody's
// labels, and records its name and driver. The engine returns an existing
// volume of the name instead of failing, so the labels (the intent nonce
// among them) decide.
func (w *Workspace) CreateVolume(ctx context.Context, logical string) (backend.Resource, error) {
	r, err := w.intent(KindVolume, logical)
	if err != nil {
		return r, err
	}
	if err := w.nameFree(ctx, r); err != nil {
		return r, err
	}
	w.raceHook(r)
	cctx, cancel := createContext(ctx)
	defer cancel()
	v, err := w.d.cli.VolumeCreate(cctx, volume.CreateOptions{Name: r.Name, Driver: volumeDriver, Labels: r.Identity})
	if err != nil {
		return r, fmt.Errorf("create volume %s: %w", r.Name, err)
	}
	return w.createdBefore(ctx, cctx, r, v.Name)
}

// CreateContainer records the intent, creates the container with
// custody's labels added to cfg's (a pack's own label under LabelPrefix is
// refused), and records its ID. It does not start it.
func (w *Workspace) CreateContainer(ctx context.Context, logical string, cfg *container.Config, host *container.HostConfig, nets *network.NetworkingConfig) (backend.Resource, error) {
	if cfg == nil {
		return backend.Resource{}, errors.New("create container: no config")
	}
	for k := range cfg.Labels {
		if strings.HasPrefix(k, LabelPrefix) {
			return backend.Resource{}, fmt.Errorf("create container %s: label %q is under the reserved prefix %s, which only custody sets", logical, k, LabelPrefix)
		}
	}
	r, err := w.intent(KindContainer, logical)
	if err != nil {
		return r, err
	}
	if err := w.nameFree(ctx, r); err != nil {
		return r, err
	}
	c := *cfg
	c.Labels = maps.Clone(cfg.Labels)
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	maps.Copy(c.Labels, r.Identity)
	w.raceHook(r)
	cctx, cancel := createContext(ctx)
	defer cancel()
	resp, err := w.d.cli.ContainerCreate(cctx, &c, host, nets, nil, r.Name)
	if cerrdefs.IsConflict(err) {
		return r, fmt.Errorf("create container %s: %w: %w", r.Name, ErrNameTaken, err)
	}
	if err != nil {
		return r, fmt.Errorf("create container %s: %w", r.Name, err)
	}
	r, err = w.createdBefore(ctx, cctx, r, resp.ID)
	if err == nil && len(resp.Warnings) > 0 {
		// The engine drops a setting it cannot apply (a memory or pids
		// limit without its controller) and only warns: the container is
		// recorded, so the caller's teardown removes it.
		err = fmt.Errorf("create container %s: %w: %s; the container would run without them; fix the engine host or ask for less", r.Name, ErrEngineWarned, strings.Join(resp.Warnings, "; "))
	}
	return r, err
}

// object is what an inspect returned, in one shape for every kind.
type object struct {
	kind, id, name string
	labels         map[string]string
	created        time.Time
	// driver is a volume's.
	driver string
}

// inspect asks the engine for the object by ref (an ID, or a name where
// said); the caller compares the answer's ID, since the engine also
// resolves names and ID prefixes.
func (d *Docker) inspect(ctx context.Context, kind, ref string) (object, error) {
	switch kind {
	case KindNetwork:
		n, err := d.cli.NetworkInspect(ctx, ref, network.InspectOptions{})
		if err != nil {
			return object{}, err
		}
		return object{kind: kind, id: n.ID, name: n.Name, labels: n.Labels, created: n.Created}, nil
	case KindVolume:
		v, err := d.cli.VolumeInspect(ctx, ref)
		if err != nil {
			return object{}, err
		}
		t, _ := time.Parse(time.RFC3339, v.CreatedAt)
		return object{kind: kind, id: v.Name, name: v.Name, labels: v.Labels, created: t, driver: v.Driver}, nil
	case KindContainer:
		c, err := d.cli.ContainerInspect(ctx, ref)
		if err != nil {
			return object{}, err
		}
		var labels map[string]string
		if c.Config != nil {
			labels = c.Config.Labels
		}
		t, _ := time.Parse(time.RFC3339Nano, c.Created)
		return object{kind: kind, id: c.ID, name: strings.TrimPrefix(c.Name, "/"), labels: labels, created: t}, nil
	}
	return object{}, fmt.Errorf("unknown kind %q", kind)
}

// matches checks every custody label of the record against the object,
// its native ID and a volume's driver. A record's creation time (older
// journals hold a volume's) is not compared: the engine moves it.
func matches(r backend.Resource, o object) error {
	for k, want := range r.Identity {
		if !strings.HasPrefix(k, LabelPrefix) {
			continue
		}
		if got := o.labels[k]; got != want {
			return fmt.Errorf("label %s is %q, the journal recorded %q", k, got, want)
		}
	}
	if id := r.Identity[IdentityID]; id != "" && o.id != id {
		return fmt.Errorf("native ID is %s, the journal recorded %s", o.id, id)
	}
	if d := r.Identity[IdentityDriver]; d != "" && o.driver != d {
		return fmt.Errorf("driver is %q, the journal recorded %q", o.driver, d)
	}
	return nil
}

func ownLabels(l map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		if strings.HasPrefix(k, LabelPrefix) {
			out[k] = v
		}
	}
	return out
}

// mine refuses a record that is not this workspace's journal record of a
// create: nothing then proves custody made the object.
func (w *Workspace) mine(r backend.Resource) error {
	if r.Identity[LabelWorkspace] != w.owner.Workspace || r.Identity[LabelIntent] == "" {
		return fmt.Errorf("%s %s: %w (its record names workspace %q)", r.Kind, r.Name, ErrNotRecorded, r.Identity[LabelWorkspace])
	}
	switch r.State {
	case "intent", "removed":
		return nil
	case "created":
		if r.Identity[IdentityID] == "" {
			return fmt.Errorf("%s %s: %w: created without a native ID", r.Kind, r.Name, ErrNotRecorded)
		}
		return nil
	}
	return fmt.Errorf("%s %s: %w: state %q", r.Kind, r.Name, ErrNotRecorded, r.State)
}

// Verify inspects a recorded object by its native ID and checks its labels
// against the record; it returns the ID to act on. Call it before any
// reuse, exec, copy, logs, stats or delete, and act by that ID only.
func (w *Workspace) Verify(ctx context.Context, r backend.Resource) (string, error) {
	if err := w.mine(r); err != nil {
		return "", err
	}
	if r.State != "created" {
		return "", fmt.Errorf("%s %s: %w: state %s has no verified native ID", r.Kind, r.Name, ErrNotRecorded, r.State)
	}
	o, err := w.d.inspect(ctx, r.Kind, r.Identity[IdentityID])
	if err != nil {
		return "", fmt.Errorf("inspect %s %s: %w", r.Kind, r.Identity[IdentityID], err)
	}
	if err := matches(r, o); err != nil {
		return "", fmt.Errorf("%s %s: %w: %w", r.Kind, r.Name, ErrNotOwned, err)
	}
	return o.id, nil
}

// resolve finds the object an intent-only record made, by its intent
// nonce: none (never created), one (adopted: its ID is recorded), or
// several (uncertain: nothing is touched).
func (w *Workspace) resolve(ctx context.Context, r backend.Resource) (backend.Resource, bool, error) {
	f := filters.NewArgs(filters.Arg("label", LabelIntent+"="+r.Identity[LabelIntent]))
	var ids []string
	switch r.Kind {
	case KindNetwork:
		ns, err := w.d.cli.NetworkList(ctx, network.ListOptions{Filters: f})
		if err != nil {
			return r, false, err
		}
		for _, n := range ns {
			ids = append(ids, n.ID)
		}
	case KindVolume:
		vs, err := w.d.cli.VolumeList(ctx, volume.ListOptions{Filters: f})
		if err != nil {
			return r, false, err
		}
		for _, v := range vs.Volumes {
			ids = append(ids, v.Name)
		}
	case KindContainer:
		cs, err := w.d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
		if err != nil {
			return r, false, err
		}
		for _, c := range cs {
			ids = append(ids, c.ID)
		}
	default:
		return r, false, fmt.Errorf("unknown kind %q", r.Kind)
	}
	switch len(ids) {
	case 0:
		return r, false, nil
	case 1:
		r, err := w.created(ctx, r, ids[0])
		return r, err == nil, err
	}
	return r, false, fmt.Errorf("%s %s: %w: %d objects carry its intent nonce: %v", r.Kind, r.Name, ErrUncertain, len(ids), ids)
}

// Remove deletes a recorded object by its native ID after checking its
// labels, confirms it is gone, and records that. NotFound counts as
// success only because the record proves custody created the object with
// that ID; an object with other labels or another ID is not touched; "in
// use" is not success. Removing again is a no-op that re-confirms.
func (w *Workspace) Remove(ctx context.Context, r backend.Resource) (backend.CleanupStep, error) {
	step := backend.CleanupStep{Name: r.Kind + " " + r.Name}
	fail := func(err error) (backend.CleanupStep, error) {
		step.Detail = partial.Detail(err.Error())
		return step, err
	}
	if err := w.mine(r); err != nil {
		return fail(err)
	}
	if r.State == "intent" {
		var found bool
		var err error
		if r, found, err = w.resolve(ctx, r); err != nil {
			return fail(err)
		}
		if !found {
			// Nothing carries the nonce: the create never happened. A
			// same-named object is someone else's and stays.
			step.Detail = "never created"
			if o, err := w.d.inspect(ctx, r.Kind, r.Name); err == nil && o.name == r.Name {
				step.Detail += fmt.Sprintf("; %s %s holds the name and is not ours: left alone", o.id, r.Name)
			}
			if err := w.rec.Removed(r); err != nil {
				return fail(fmt.Errorf("record %s %s removed: %w", r.Kind, r.Name, err))
			}
			step.OK = true
			return step, nil
		}
	}
	id := r.Identity[IdentityID]
	if r.State == "removed" && id == "" {
		step.OK, step.Detail = true, "never created"
		return step, nil
	}
	o, err := w.d.inspect(ctx, r.Kind, id)
	switch {
	case cerrdefs.IsNotFound(err), err == nil && o.id != id:
		// Gone: the engine has no object with the recorded ID (a name
		// that happens to equal the ID is another object).
		return w.gone(r, step, "already gone")
	case err != nil:
		return fail(fmt.Errorf("inspect %s %s: %w", r.Kind, id, err))
	}
	if err := matches(r, o); err != nil {
		return fail(fmt.Errorf("%s %s: %w: %w; left alone", r.Kind, r.Name, ErrNotOwned, err))
	}
	// dockerd answers "in use" with 409 for a volume and 403 for a network
	// with endpoints; either way the object is still there.
	if err := w.d.remove(ctx, r.Kind, id); cerrdefs.IsConflict(err) || cerrdefs.IsPermissionDenied(err) {
		return fail(fmt.Errorf("remove %s %s (%s): %w: %w", r.Kind, r.Name, id, ErrInUse, err))
	} else if err != nil && !cerrdefs.IsNotFound(err) {
		return fail(fmt.Errorf("remove %s %s (%s): %w", r.Kind, r.Name, id, err))
	}
	if o, err := w.d.inspect(ctx, r.Kind, id); err == nil && o.id == id {
		return fail(fmt.Errorf("%s %s (%s): %w", r.Kind, r.Name, id, ErrStillThere))
	} else if err != nil && !cerrdefs.IsNotFound(err) {
		return fail(fmt.Errorf("confirm %s %s (%s) gone: %w", r.Kind, r.Name, id, err))
	}
	return w.gone(r, step, "removed")
}

func (w *Workspace) gone(r backend.Resource, step backend.CleanupStep, detail string) (backend.CleanupStep, error) {
	r.State = "removed"
	if err := w.rec.Removed(r); err != nil {
		step.Detail = partial.Detail(err.Error())
		return step, fmt.Errorf("record %s %s removed: %w", r.Kind, r.Name, err)
	}
	step.OK, step.Detail = true, detail
	return step, nil
}

// remove deletes by native ID. Containers are killed with it; a volume is
// never forced (in use stays in use).
func (d *Docker) remove(ctx context.Context, kind, id string) error {
	switch kind {
	case KindNetwork:
		return d.cli.NetworkRemove(ctx, id)
	case KindVolume:
		return d.cli.VolumeRemove(ctx, id, false)
	case KindContainer:
		return d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
	}
	return fmt.Errorf("unknown kind %q", kind)
}

// Foreign lists the engine's objects that carry custody's labels or name
// prefix but that known (the journal: kind and native ID) does not hold.
// They are reported, never touched.
func (d *Docker) Foreign(ctx context.Context, known func(kind, id string) bool) ([]backend.Resource, error) {
	var out []backend.Resource
	add := func(kind, id, name string, labels map[string]string) {
		own := ownLabels(labels)
		if (len(own) == 0 && !strings.HasPrefix(name, NamePrefix)) || known(kind, id) {
			return
		}
		ident := map[string]string{IdentityID: id}
		maps.Copy(ident, own)
		out = append(out, backend.Resource{Kind: kind, Name: name, State: "foreign", Identity: ident})
	}
	cs, err := d.cli.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	for _, c := range cs {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		add(KindContainer, c.ID, name, c.Labels)
	}
	ns, err := d.cli.NetworkList(ctx, network.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list networks: %w", err)
	}
	for _, n := range ns {
		add(KindNetwork, n.ID, n.Name, n.Labels)
	}
	vs, err := d.cli.VolumeList(ctx, volume.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	for _, v := range vs.Volumes {
		add(KindVolume, v.Name, v.Name, v.Labels)
	}
	slices.SortFunc(out, func(a, b backend.Resource) int {
		return strings.Compare(a.Kind+a.Name+a.Identity[IdentityID], b.Kind+b.Name+b.Identity[IdentityID])
	})
	return out, nil
}

// Teardown removes a workspace's recorded objects in dependency order:
// containers, then networks, then (only with volumes) volumes. The report
// has one step per record and says what it covers; it is Verified only
// when every covered object is confirmed gone. Kept volumes are steps too,
// marked kept. Records of other workspaces fail their step and are not
// touched. Running it again re-confirms.
func (w *Workspace) Teardown(ctx context.Context, recorded []backend.Resource, volumes bool) backend.CleanupReport {
	order := map[string]int{KindContainer: 0, KindNetwork: 1, KindVolume: 2}
	rs := slices.Clone(recorded)
	slices.SortStableFunc(rs, func(a, b backend.Resource) int { return order[a.Kind] - order[b.Kind] })
	rep := backend.CleanupReport{Verified: true}
	for _, r := range rs {
		if _, ok := order[r.Kind]; !ok {
			rep.Verified = false
			rep.Steps = append(rep.Steps, backend.CleanupStep{Name: r.Kind + " " + r.Name, Detail: "not a docker object kind"})
			continue
		}
		if r.Kind == KindVolume && !volumes {
			rep.Steps = append(rep.Steps, backend.CleanupStep{Name: r.Kind + " " + r.Name, OK: true, Detail: "kept: volumes are not covered without --volumes"})
			continue
		}
		step, err := w.Remove(ctx, r)
		if err != nil {
			rep.Verified = false
		}
		rep.Steps = append(rep.Steps, step)
	}
	return rep
}

// Package workspace is the lifecycle of pack workspaces: one admitted pack
// realized on a container engine under a single-use pack grant, with its
// state journalled, its status read back by native ID, its teardown and its
// recovery owned (P4, P5, P8). A workspace is the operator's name for one
// realization ([a-z0-9][a-z0-9-]{0,31}); its id is unguessable and is what
// every native object carries, so two workspaces of one pack file and
// project never touch each other.
//
// The engine is an interface (Engine) in neutral terms (package backend):
// this package never names a concrete engine; cmd/custodyd wires one.
//
// Store layout: store.Workspaces/<name> holds the workspace record (the
// grant, plan, receipts, attempts); store.PackJournal holds one journal
// attempt per up and per down or recovery, so the phase runner's recovery
// never sees them.
package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/pack"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/store"
)

// Engine is what a workspace needs of a container engine. Every method
// that acts on a recorded object verifies it by native ID and labels
// first; creates are journalled on rec before they happen.
type Engine interface {
	// NewWorkspaceID returns a fresh unguessable workspace id.
	NewWorkspaceID() string
	// Profile is the engine's evidenced profile, its identity read fresh.
	// A probe records its throwaway objects in j before creating them.
	Profile(ctx context.Context, j backend.ProbeJournal) (*backend.PackEngine, error)
	// Intents are the records of everything an up of names may create,
	// listed before anything is created (journalled with the grant).
	Intents(o backend.PackOwner, names backend.PackNames) []backend.Resource
	// Subnets are the subnets the engine's networks hold now.
	Subnets(ctx context.Context) ([]netip.Prefix, error)
	CreateNetwork(ctx context.Context, o backend.PackOwner, rec backend.Recorder, n backend.PackNetwork) (backend.Resource, error)
	CreateVolume(ctx context.Context, o backend.PackOwner, rec backend.Recorder, name string) (backend.Resource, error)
	CreateContainer(ctx context.Context, o backend.PackOwner, rec backend.Recorder, c backend.PackContainer) (backend.Resource, error)
	Start(ctx context.Context, o backend.PackOwner, rec backend.Recorder, r backend.Resource) error
	// PinnedImage is the engine's native ID of the image ref pinned to
	// digest; an error when no image there has that content.
	PinnedImage(ctx context.Context, ref, digest string) (string, error)
	// MountedAt is the device and inode of what the running container r
	// has mounted at target, as its own mount namespace sees it.
	MountedAt(ctx context.Context, o backend.PackOwner, rec backend.Recorder, r backend.Resource, target string) (dev, ino uint64, err error)
	Stop(ctx context.Context, o backend.PackOwner, rec backend.Recorder, r backend.Resource, signal string, grace time.Duration) error
	Inspect(ctx context.Context, o backend.PackOwner, rec backend.Recorder, r backend.Resource) (backend.PackObject, error)
	// Resolve finds what an intent-only record created, by its nonce.
	Resolve(ctx context.Context, o backend.PackOwner, rec backend.Recorder, r backend.Resource) (backend.Resource, bool, error)
	Teardown(ctx context.Context, o backend.PackOwner, rec backend.Recorder, recorded []backend.Resource, volumes bool) backend.CleanupReport
	Foreign(ctx context.Context, known func(kind, id string) bool) ([]backend.Resource, error)
	// RecoverProbe removes what an interrupted engine probe's records
	// own, each verified by native ID and labels, and records each
	// verified gone on rec; what it leaves is in the error.
	RecoverProbe(ctx context.Context, rec backend.Recorder, recorded []backend.Resource) error
	// Unjournalled are the containers created between since and until
	// that known does not hold (with their creation time and the IDs of
	// their networks), and those created then and already gone.
	Unjournalled(ctx context.Context, since, until time.Time, known func(kind, id string) bool) ([]backend.Resource, error)
	// RemoveChild removes such a container by native ID, if it is still
	// the one judged and judge admits it as inspected afresh (networks,
	// creation time), and confirms it gone.
	RemoveChild(ctx context.Context, r backend.Resource, judge func(now backend.Resource) error) error
}

// Config is what a Manager needs.
type Config struct {
	DB *store.DB
	// Journal must be journal.NewIn(DB, store.PackJournal); nil makes it.
	Journal *journal.Journal
	Engine  Engine
	// Policy returns the current policy and the digest of its file bytes;
	// an error refuses everything.
	Policy func() (*policy.Policy, string, error)
	Issuer *keys.Signer
	Runner *keys.Signer
	// Verifier, if set, verifies pack grants: custodyd passes the one its
	// phase grants use, so a rotation's overlap window and a revocation
	// hold for packs as for phases. Otherwise one is made from Trusted.
	Verifier *grant.Verifier
	Trusted  []*keys.Verifier
	// RunnerID is the runner key's keys.KeyID a grant must name.
	RunnerID string
	// Credentials maps an operator credential name to the 0600, root-owned
	// file custodyd reads it from.
	Credentials map[string]string
	// EngineSocket is the engine's socket path, so a bind of it is
	// recognised whatever the pack calls it.
	EngineSocket string
	SubnetPool   netip.Prefix
	// StateDir holds per-workspace credential files.
	StateDir string
	Log      *slog.Logger
	Now      func() time.Time
	// Fault, if set, is called at named stages of up and down (tests kill
	// the process there), one call at a time.
	Fault func(stage string)
}

// Manager brings workspaces up and down.
type Manager struct {
	cfg      Config
	journal  *journal.Journal
	verifier *grant.Verifier
	log      *slog.Logger

	mu         sync.Mutex
	inProgress map[string]bool
	probing    map[string]bool // engine probe attempts running in this process
	probeMu    sync.Mutex      // one recovery of interrupted probes at a time
	issuing    sync.Mutex
	faultMu    sync.Mutex // an up's stages are reached from several goroutines
}

// Peer is the local process that submitted a request (SO_PEERCRED);
// Known is false when the kernel said nothing.
type Peer struct {
	UID, GID uint32
	PID      int32
	Known    bool
}

// Workspace states.
const (
	StateClean          = "clean"
	StateRunning        = "running"
	StateCleanupPending = "cleanup-pending"
	StateResidual       = "residual"
)

// Report is one workspace as up, status, down or recover left it.
type Report struct {
	Workspace string `json:"workspace"`
	ID        string `json:"id"`
	Project   string `json:"project"`
	State     string `json:"state"`
	// Owner is the uid whose up made the workspace; OwnerKnown is false
	// when the kernel did not say, and then only operators may act on it.
	Owner      uint32 `json:"owner"`
	OwnerKnown bool   `json:"ownerKnown"`
	// Detail says what remains or went wrong; Retry how to retry.
	Detail    string           `json:"detail,omitempty"`
	Retry     string           `json:"retry,omitempty"`
	Resources []ResourceStatus `json:"resources"`
	// Covered is what a down covers: containers, networks, and volumes
	// only when asked.
	Covered []string `json:"covered,omitempty"`
	// Receipt is the signed receipt of the operation (up or down).
	Receipt []byte              `json:"receipt,omitempty"`
	Bundle  []byte              `json:"bundle,omitempty"`
	Plan    *admission.PackPlan `json:"plan,omitempty"`
	// Foreign are objects with custody's labels or names that no journal
	// record holds: reported, never touched.
	Foreign []ResourceStatus `json:"foreign,omitempty"`
	// Children are containers a daemon-socket holder of the workspace is
	// taken to have created (P3); down removes only those whose ownership
	// is proven, and reports the others residual.
	Children []ResourceStatus `json:"children,omitempty"`
}

// ResourceStatus is one native object of a workspace.
type ResourceStatus struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	ID     string `json:"id,omitempty"`
	State  string `json:"state"`
	Detail string `json:"detail,omitempty"`
}

// Typed errors callers branch on.
var (
	// ErrInvalidName: the workspace name is not [a-z0-9][a-z0-9-]{0,31}.
	ErrInvalidName = errors.New("invalid workspace name")
	// ErrNotFound: no workspace has that name.
	ErrNotFound = errors.New("workspace not found")
	// ErrExists: the name is held by a workspace that is not clean.
	ErrExists = errors.New("workspace exists")
	// ErrNameTaken: the name is held by a workspace of another owner,
	// which this caller is not told anything more about.
	ErrNameTaken = errors.New("the name is not available")
	// ErrCredential: an operator credential source is refused.
	ErrCredential = errors.New("credential source refused")
	// ErrBindChanged: a started container has something other than the
	// bind source up checked mounted (the path was swapped between the
	// check and the engine's start); the up fails and is torn down.
	ErrBindChanged = errors.New("bind source changed between check and start")
)

var nameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// ValidName checks a workspace name.
func ValidName(name string) error {
	if !nameRe.MatchString(name) {
		return fmt.Errorf("workspace %q: %w: want [a-z0-9][a-z0-9-]{0,31}", name, ErrInvalidName)
	}
	return nil
}

// New checks cfg and returns a Manager.
func New(cfg Config) (*Manager, error) {
	switch {
	case cfg.DB == nil:
		return nil, errors.New("workspace: a store is required")
	case cfg.Engine == nil:
		return nil, errors.New("workspace: an engine is required")
	case cfg.Policy == nil:
		return nil, errors.New("workspace: a policy source is required")
	case cfg.Runner == nil || cfg.RunnerID == "":
		return nil, errors.New("workspace: the runner key and id are required")
	case cfg.Verifier == nil && len(cfg.Trusted) == 0:
		return nil, errors.New("workspace: a grant verifier or trusted issuer keys are required")
	case cfg.StateDir == "" || !filepath.IsAbs(cfg.StateDir):
		return nil, errors.New("workspace: an absolute state dir is required")
	case !cfg.SubnetPool.IsValid():
		return nil, errors.New("workspace: a subnet pool is required")
	}
	if id, _ := cfg.Runner.KeyID(); id != cfg.RunnerID {
		return nil, fmt.Errorf("workspace: runner id %s is not the runner key's %s", cfg.RunnerID, id)
	}
	j := cfg.Journal
	if j == nil {
		j = journal.NewIn(cfg.DB, store.PackJournal)
	}
	if j.Bucket() != store.PackJournal {
		return nil, fmt.Errorf("workspace: the journal writes bucket %q; pack attempts belong in %q (the phase runner's recovery would take them for its own)", j.Bucket(), store.PackJournal)
	}
	v := cfg.Verifier
	if v == nil {
		var err error
		if v, err = grant.NewVerifier(cfg.Trusted); err != nil {
			return nil, fmt.Errorf("workspace: %w", err)
		}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Manager{cfg: cfg, journal: j, verifier: v, log: cfg.Log, inProgress: map[string]bool{}, probing: map[string]bool{}}, nil
}

func (m *Manager) now() time.Time { return m.cfg.Now().UTC() }

func (m *Manager) fault(stage string) {
	if m.cfg.Fault != nil {
		m.faultMu.Lock()
		defer m.faultMu.Unlock()
		m.cfg.Fault(stage)
	}
}

// Admit is the dry run: the plan with every choice made, or every refused
// requirement (*admission.RefusedError). Issue runs exactly this.
//
// opts, at most one, are the operator's load options (selected profiles,
// a project name for a file without one).
func (m *Manager) Admit(ctx context.Context, compose []byte, dir, actor string, opts ...pack.Options) (*admission.PackPlan, error) {
	plan, _, _, _, err := m.admitWith(ctx, compose, dir, actor, false, optionsOf(opts))
	return plan, err
}

// AdmitFor is a client's dry run (the submit socket) from peer: one
// refusal, the same whatever it sent, unless peer submits for the pack
// actor; then the pack is judged as Admit judges it except that bind
// sources and build contexts are judged by their path alone. The runner
// inspects them as root, and a client must not learn through it what
// lies in directories it may not read; the grant issue inspects them.
func (m *Manager) AdmitFor(ctx context.Context, compose []byte, dir, actor string, peer Peer, opts ...pack.Options) (*admission.PackPlan, error) {
	pol, _, err := m.cfg.Policy()
	if err != nil {
		return nil, fmt.Errorf("policy: %w: fix the policy file; nothing is admitted until it loads", err)
	}
	var pa *policy.PackActor
	if pol != nil {
		pa, _ = pol.PackActor(actor)
	}
	if pa == nil || !submits(pa, peer) {
		return nil, &admission.RefusedError{Checks: []admission.Check{{Requirement: "actor", Verdict: admission.NotGranted,
			Code: string(grant.CodeSubmitterNotAllowed),
			Detail: fmt.Sprintf("uid %d (gid %d) may not submit as pack actor %q, so a dry run on the submit socket answers nothing about this pack",
				peer.UID, peer.GID, actor),
			Fix: "run the dry run as one of the pack actor's submitters, or an operator may add this uid or gid to policy packs.actors[].submitters"}}}
	}
	// Before the pack is read: the answer is then the same whatever the
	// client sent.
	if _, err := m.proved(ctx); err != nil {
		return nil, err
	}
	plan, _, _, _, err := m.admitWith(ctx, compose, dir, actor, true, optionsOf(opts))
	return plan, err
}

// prover is an engine that can say whether it is proved without probing.
type prover interface {
	Proved(ctx context.Context) (*backend.PackEngine, error)
}

// proved is the engine's kept profile, for a client's dry run, which never
// probes: a probe creates objects on the engine, and runs only on the
// operator's word (the operator's dry run, grant issue, up). Before the
// engine is proved the answer is a refusal saying so.
func (m *Manager) proved(ctx context.Context) (*backend.PackEngine, error) {
	pr, ok := m.cfg.Engine.(prover)
	var err error
	if ok {
		var eng *backend.PackEngine
		if eng, err = pr.Proved(ctx); err == nil {
			return eng, nil
		}
	}
	if ok && !errors.Is(err, backend.ErrEngineNotProved) {
		return nil, fmt.Errorf("engine profile: %w", err)
	}
	why := "custodyd has not probed it yet, or the engine changed since"
	var np *backend.EngineNotProvedError
	if errors.As(err, &np) {
		why = "the last probe did not settle (" + np.Unsettled + ")"
	}
	return nil, &admission.RefusedError{Checks: []admission.Check{{Requirement: "engine", Verdict: admission.Unsupported,
		Code:   "engine-unproved",
		Detail: "engine not yet proved: " + why + "; custodyd probes the engine only on the operator's word (an operator's dry run, issuing a grant, or an up), never for a client's dry run",
		Fix:    "retry after the operator has run `custody pack admit --operator` or issued a grant on this custodyd"}}}
}

// submits reports whether peer may submit for the pack actor.
func submits(pa *policy.PackActor, peer Peer) bool {
	return peer.Known && (slices.Contains(pa.Submitters.UIDs, peer.UID) || slices.Contains(pa.Submitters.GIDs, peer.GID))
}

// optionsOf is the first of opts, or none.
func optionsOf(opts []pack.Options) pack.Options {
	if len(opts) == 0 {
		return pack.Options{}
	}
	return opts[0]
}

func (m *Manager) admitWith(ctx context.Context, compose []byte, dir, actor string, pathOnly bool, opts pack.Options) (*admission.PackPlan, *pack.Pack, *backend.PackEngine, string, error) {
	pol, polDigest, err := m.cfg.Policy()
	if err != nil {
		// A broken policy refuses everything and changes nothing.
		return nil, nil, nil, "", fmt.Errorf("policy: %w: fix the policy file; nothing is admitted until it loads", err)
	}
	p, err := pack.LoadWith(ctx, compose, dir, opts)
	if err != nil {
		return nil, nil, nil, "", admission.PackFileRefusal(err)
	}
	var eng *backend.PackEngine
	if pathOnly { // a client's dry run: never a probe
		eng, err = m.proved(ctx)
	} else {
		eng, err = m.profile(ctx)
		if err != nil {
			err = fmt.Errorf("engine profile: %w", err)
		}
	}
	if err != nil {
		return nil, nil, nil, "", err
	}
	subnets, err := m.cfg.Engine.Subnets(ctx)
	if err != nil {
		return nil, nil, nil, "", fmt.Errorf("engine subnets: %w", err)
	}
	held, err := m.reserved(m.now())
	if err != nil {
		return nil, nil, nil, "", fmt.Errorf("subnet reservations: %w", err)
	}
	subnets = append(subnets, held...)
	var pa *policy.PackActor
	if pol != nil {
		pa, _ = pol.PackActor(actor)
	}
	facts := admission.PackFacts{
		Engine: eng, EngineSocket: m.cfg.EngineSocket, SubnetPool: m.cfg.SubnetPool,
		SubnetsInUse: subnets, PortsInUse: portsInUse(p, pa), PathOnly: pathOnly,
	}
	if !pathOnly {
		facts.Binds = bindFacts(p, pol, actor, m.cfg.EngineSocket)
		facts.ConfigErrs = readConfigs(p, dir)
	}
	plan, err := admission.AdmitPack(p, pol, actor, facts)
	if err != nil {
		return nil, nil, nil, "", err
	}
	return plan, p, eng, polDigest, nil
}

// bindFacts inspects every bind source and build context of the pack
// beneath the actor's bind root that holds it.
func bindFacts(p *pack.Pack, pol *policy.Policy, actor, socket string) map[string]pack.BindFact {
	var pa *policy.PackActor
	if pol != nil {
		pa, _ = pol.PackActor(actor)
	}
	out := map[string]pack.BindFact{}
	add := func(src string) {
		root := ""
		if pa != nil {
			root, _ = pa.BindRoot(src)
		}
		out[src] = pack.InspectBind(src, root, socket)
	}
	for _, s := range p.Services {
		for _, mt := range s.Mounts {
			if mt.Type == pack.Bind {
				add(mt.Source)
			}
		}
		if s.Build != nil {
			add(s.Build.Context)
		}
	}
	return out
}

// Issue admits the pack exactly as Admit does and mints a single-use pack
// grant for actor, valid for ttl from now.
func (m *Manager) Issue(ctx context.Context, compose []byte, dir, actor string, ttl time.Duration, opts ...pack.Options) ([]byte, error) {
	if m.cfg.Issuer == nil {
		return nil, errors.New("issue: this runner holds no issuer key")
	}
	if ttl <= 0 {
		return nil, errors.New("issue: the ttl must be positive")
	}
	// One issue at a time: two must not choose the same subnets.
	m.issuing.Lock()
	defer m.issuing.Unlock()
	plan, p, eng, polDigest, err := m.admitWith(ctx, compose, dir, actor, false, optionsOf(opts))
	if err != nil {
		return nil, err
	}
	planJSON, err := canonicalPlan(plan)
	if err != nil {
		return nil, err
	}
	now := m.now()
	id := grant.NewID()
	if err := m.reserve(id, plan, p, now.Add(ttl)); err != nil {
		return nil, fmt.Errorf("reserve the chosen subnets: %w", err)
	}
	m.fault(FaultReserved)
	env, err := grant.MintPack(ctx, m.cfg.Issuer, grant.PackPredicate{
		ID: id, Actor: actor, NotBefore: now, Expires: now.Add(ttl),
		PolicyDigest: polDigest, Runner: grant.Runner{ID: m.cfg.RunnerID},
		Engine: grant.Engine{Name: eng.Name, Version: eng.Version, APIVersion: eng.APIVersion},
		Pack:   grant.Pack{Project: p.Project, Digest: "sha256:" + p.Digest},
		Plan:   planJSON,
	})
	if err != nil {
		// No grant holds the subnets: free them for the next issue.
		if uerr := m.cfg.DB.Update(store.PackReservations, func(b *bolt.Bucket) error { return b.Delete([]byte(id)) }); uerr != nil {
			err = errors.Join(err, fmt.Errorf("release the subnet reservation of %s: %w", id, uerr))
		}
		return nil, err
	}
	return env, nil
}

// canonicalPlan is the plan's JSON without its checks: the bytes whose
// digest is PackPlan.Digest, so the grant's subject is the plan digest.
func canonicalPlan(plan *admission.PackPlan) (json.RawMessage, error) {
	c := *plan
	c.Checks = nil
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	return b, nil
}

// record is a workspace as the store keeps it.
type record struct {
	Name    string `json:"name"`
	ID      string `json:"id"`
	Project string `json:"project"`
	// Attempt is the journal attempt of the latest up; Cleanup that of
	// the latest down or recovery.
	Attempt       string          `json:"attempt"`
	Cleanup       string          `json:"cleanup,omitempty"`
	GrantID       string          `json:"grantId"`
	GrantEnvelope json.RawMessage `json:"grantEnvelope"`
	IssuerID      string          `json:"issuerId"`
	PackDigest    string          `json:"packDigest"`
	PlanDigest    string          `json:"planDigest"`
	Plan          json.RawMessage `json:"plan"`
	Engine        grant.Engine    `json:"engine"`
	UpReceipt     []byte          `json:"upReceipt,omitempty"`
	DownReceipt   []byte          `json:"downReceipt,omitempty"`
	// Down: a teardown ran (down, a failed up, or recovery);
	// DownVolumes: it covered volumes; VolumesKept: volumes remain
	// because the last down did not cover them.
	Down        bool      `json:"down,omitempty"`
	DownVolumes bool      `json:"downVolumes,omitempty"`
	VolumesKept bool      `json:"volumesKept,omitempty"`
	Created     time.Time `json:"created"`
	Updated     time.Time `json:"updated"`
	// Owner is the uid whose up made the workspace, as the kernel
	// reported it (nil when it said nothing): only that uid and operators
	// may see or take it down.
	Owner *uint32 `json:"owner,omitempty"`
}

// report starts a Report of the workspace in state.
func (r *record) report(state string) *Report {
	rep := &Report{Workspace: r.Name, ID: r.ID, Project: r.Project, State: state, Resources: []ResourceStatus{}}
	if r.Owner != nil {
		rep.Owner, rep.OwnerKnown = *r.Owner, true
	}
	return rep
}

func (m *Manager) get(name string) (*record, error) {
	var r *record
	err := m.cfg.DB.View(store.Workspaces, func(b *bolt.Bucket) error {
		v := b.Get([]byte(name))
		if v == nil {
			return fmt.Errorf("workspace %s: %w", name, ErrNotFound)
		}
		r = &record{}
		return json.Unmarshal(v, r)
	})
	return r, err
}

func (m *Manager) put(r *record) error {
	r.Updated = m.now()
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return m.cfg.DB.Update(store.Workspaces, func(b *bolt.Bucket) error { return b.Put([]byte(r.Name), v) })
}

// claim stores a new record under its name unless a workspace that is
// not clean holds it, in one transaction.
func (m *Manager) claim(r *record, clean func(old *record) bool) error {
	r.Created, r.Updated = m.now(), m.now()
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return m.cfg.DB.Update(store.Workspaces, func(b *bolt.Bucket) error {
		if old := b.Get([]byte(r.Name)); old != nil {
			var o record
			if err := json.Unmarshal(old, &o); err != nil {
				return fmt.Errorf("workspace %s: stored record: %w", r.Name, err)
			}
			if !clean(&o) && !sameOwner(&o, r) {
				// Another uid's workspace: to a client that status calls
				// "not found", so nothing of it (id, state) is said.
				return fmt.Errorf("workspace name %s: %w; choose another --workspace name", r.Name, ErrNameTaken)
			}
			if !clean(&o) {
				return fmt.Errorf("workspace %s (%s): %w and is not clean or keeps volumes; bring it down first (custody pack down --workspace %s --volumes)", r.Name, o.ID, ErrExists, r.Name)
			}
		}
		return b.Put([]byte(r.Name), v)
	})
}

// sameOwner reports whether both records name the same owning uid.
func sameOwner(a, b *record) bool {
	return a.Owner != nil && b.Owner != nil && *a.Owner == *b.Owner
}

func (m *Manager) all() ([]record, error) {
	var out []record
	err := m.cfg.DB.View(store.Workspaces, func(b *bolt.Bucket) error {
		return b.ForEach(func(_, v []byte) error {
			var r record
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}

func (r *record) owner(attempt string) backend.PackOwner {
	return backend.PackOwner{Workspace: r.ID, Attempt: attempt, Grant: r.GrantID, Config: r.PlanDigest}
}

func (r *record) plan() (*admission.PackPlan, error) {
	var p admission.PackPlan
	if err := json.Unmarshal(r.Plan, &p); err != nil {
		return nil, fmt.Errorf("workspace %s: stored plan: %w", r.Name, err)
	}
	return &p, nil
}

// readConfigs reads each file config of p beneath the pack's directory
// without following links, into its Content, and says why for each it
// could not read. A client's dry run never reads them: the runner reads
// as root, and a client must not learn through it what a file holds.
func readConfigs(p *pack.Pack, dir string) map[string]string {
	errs := map[string]string{}
	for i := range p.Configs {
		c := &p.Configs[i]
		if c.File == "" {
			continue
		}
		b, err := pack.ReadConfig(dir, c.File)
		if err != nil {
			errs[c.File] = err.Error()
			continue
		}
		c.Content, c.Read = string(b), true
	}
	return errs
}

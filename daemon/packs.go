package daemon

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/pack"
	"github.com/custody-dev/custody/workspace"
)

// packs is what custodyd needs of the pack lifecycle (package workspace).
// It is owned here, by its consumer, so that handlers are tested against
// a fake and only newPacks names the concrete implementation.
//
// Errors: refusals before any mutation are *admission.RefusedError (every
// requirement), *grant.Error or an *api.Error with a refusal code; an
// unknown workspace wraps store.ErrNotFound. Up and Down return a report
// together with their error when they changed something before failing,
// so the client learns what was left.
type packs interface {
	Admit(ctx context.Context, compose []byte, dir, actor string, opts ...pack.Options) (*admission.PackPlan, error)
	// AdmitFor is a client's dry run: refused alike unless peer submits
	// for actor, and bind sources judged by their path alone.
	AdmitFor(ctx context.Context, compose []byte, dir, actor string, peer packPeer, opts ...pack.Options) (*admission.PackPlan, error)
	Issue(ctx context.Context, compose []byte, dir, actor string, ttl time.Duration, opts ...pack.Options) ([]byte, error)
	Up(ctx context.Context, grant []byte, workspace string, peer packPeer) (*packReport, error)
	Status(ctx context.Context, workspace string) (*packReport, error)
	List(ctx context.Context) ([]packReport, error)
	// Down's children removes the engine-socket holders' eligible
	// children (the operator's opt-in; control socket only).
	Down(ctx context.Context, workspace string, volumes, children bool) (*packReport, error)
	Recover(ctx context.Context) ([]packReport, error)
}

// packPeer is the kernel-reported submitter of an up.
type packPeer struct {
	UID, GID uint32
	PID      int32
	Known    bool
}

// packReport is one workspace as the pack lifecycle reports it.
type packReport struct {
	Workspace, ID, Project string
	// State is clean, running, cleanup-pending or residual.
	State string
	// Owner is the uid whose up created the workspace, recorded at up;
	// OwnerKnown is false for a workspace with no recorded owner, which
	// then only operators may see or take down.
	Owner      uint32
	OwnerKnown bool
	Resources  []packResource
	Covered    []string
	Foreign    []packResource
	// Children: a socket holder's children (containers, networks,
	// volumes), each with its owner evidence and what was done to it.
	Children []packResource
	// Detail says what remains or went wrong; Retry how to retry.
	Detail, Retry string
	// Receipt and Bundle: the signed receipt of this up or down.
	Receipt, Bundle []byte
	Plan            *admission.PackPlan
}

// packResource is one container, network or volume.
type packResource struct {
	Kind, Name, ID, State, Detail string
}

// newPacks builds the pack lifecycle on the engine cfg names, which open
// (custodyd's wiring) opens: the daemon names no concrete engine.
func newPacks(ctx context.Context, s *server, cfg *config.DockerConfig, open func(context.Context, *config.DockerConfig, *slog.Logger) (workspace.Engine, func() error, error)) (packs, error) {
	if open == nil {
		return nil, errors.New("this custodyd has no pack engine")
	}
	engine, closeEngine, err := open(ctx, cfg, s.log)
	if err != nil {
		return nil, err
	}
	m, err := workspace.New(s.packConfig(cfg, engine))
	if err != nil {
		closeEngine()
		return nil, err
	}
	return workspacePacks{m}, nil
}

// packConfig is the pack lifecycle's configuration on engine. Pack grants
// are verified by the phase grants' verifier: one key set, with the same
// rotation overlap and revocations.
func (s *server) packConfig(cfg *config.DockerConfig, engine workspace.Engine) workspace.Config {
	return workspace.Config{
		DB: s.db, Engine: engine,
		Policy: s.currentPolicy, Issuer: s.issuerKeys.Current, Runner: s.runnerKeys.Current, Verifier: s.verifier,
		RunnerID: s.runnerKeys.Current.ID(), Credentials: cfg.Credentials, EngineSocket: cfg.SocketPath(),
		SubnetPool: cfg.SubnetPrefix(), StateDir: filepath.Join(s.cfg.Runner.StateDir, "packs"),
		Log: s.log, Now: func() time.Time { return s.now() }, Fault: s.faults,
	}
}

// workspacePacks adapts workspace.Manager to packs: the manager's reports
// become custodyd's, and its typed errors the API's.
type workspacePacks struct{ m *workspace.Manager }

func (w workspacePacks) Admit(ctx context.Context, compose []byte, dir, actor string, opts ...pack.Options) (*admission.PackPlan, error) {
	plan, err := w.m.Admit(ctx, compose, dir, actor, opts...)
	return plan, packError(err)
}

func (w workspacePacks) AdmitFor(ctx context.Context, compose []byte, dir, actor string, p packPeer, opts ...pack.Options) (*admission.PackPlan, error) {
	plan, err := w.m.AdmitFor(ctx, compose, dir, actor, workspace.Peer{UID: p.UID, GID: p.GID, PID: p.PID, Known: p.Known}, opts...)
	return plan, packError(err)
}

func (w workspacePacks) Issue(ctx context.Context, compose []byte, dir, actor string, ttl time.Duration, opts ...pack.Options) ([]byte, error) {
	env, err := w.m.Issue(ctx, compose, dir, actor, ttl, opts...)
	return env, packError(err)
}

func (w workspacePacks) Up(ctx context.Context, g []byte, name string, p packPeer) (*packReport, error) {
	rep, err := w.m.Up(ctx, g, name, workspace.Peer{UID: p.UID, GID: p.GID, PID: p.PID, Known: p.Known})
	return fromWorkspace(rep), packError(err)
}

func (w workspacePacks) Status(ctx context.Context, name string) (*packReport, error) {
	rep, err := w.m.Status(ctx, name)
	return fromWorkspace(rep), packError(err)
}

func (w workspacePacks) List(ctx context.Context) ([]packReport, error) {
	reps, err := w.m.List(ctx)
	return fromWorkspaces(reps), packError(err)
}

func (w workspacePacks) Down(ctx context.Context, name string, volumes, children bool) (*packReport, error) {
	rep, err := w.m.DownWith(ctx, name, workspace.DownOptions{Volumes: volumes, Children: children})
	return fromWorkspace(rep), packError(err)
}

func (w workspacePacks) Recover(ctx context.Context) ([]packReport, error) {
	reps, err := w.m.Recover(ctx)
	return fromWorkspaces(reps), packError(err)
}

func fromWorkspaces(reps []workspace.Report) []packReport {
	out := make([]packReport, 0, len(reps))
	for i := range reps {
		out = append(out, *fromWorkspace(&reps[i]))
	}
	return out
}

func fromWorkspace(r *workspace.Report) *packReport {
	if r == nil {
		return nil
	}
	res := func(rs []workspace.ResourceStatus) []packResource {
		out := make([]packResource, 0, len(rs))
		for _, x := range rs {
			out = append(out, packResource{Kind: x.Kind, Name: x.Name, ID: x.ID, State: x.State, Detail: x.Detail})
		}
		return out
	}
	return &packReport{Workspace: r.Workspace, ID: r.ID, Project: r.Project, State: r.State,
		Owner: r.Owner, OwnerKnown: r.OwnerKnown, Resources: res(r.Resources), Covered: r.Covered,
		Foreign: res(r.Foreign), Children: res(r.Children), Detail: r.Detail, Retry: r.Retry,
		Receipt: r.Receipt, Bundle: r.Bundle, Plan: r.Plan}
}

// packError gives the manager's typed errors the API's codes; refusals
// of admission and grants keep their own types, which writeError maps.
func packError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, workspace.ErrInvalidName):
		return &api.Error{Code: api.CodeBadRequest, Message: err.Error()}
	case errors.Is(err, workspace.ErrNotFound):
		return &api.Error{Code: api.CodeNotFound, Message: err.Error()}
	case errors.Is(err, workspace.ErrExists), errors.Is(err, workspace.ErrNameTaken), errors.Is(err, workspace.ErrCredential):
		return &api.Error{Code: api.CodeRefused, Message: err.Error()}
	}
	return err
}

// wsLocks serializes operations on one workspace name within custodyd, so
// that the owner check of a client's down and the down itself see the same
// workspace. Entries live only while held: names from clients cannot grow
// the map.
type wsLocks struct {
	mu    sync.Mutex
	locks map[string]*wsLock
}

type wsLock struct {
	sync.Mutex
	refs int
}

func (l *wsLocks) lock(name string) (unlock func()) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*wsLock{}
	}
	k := l.locks[name]
	if k == nil {
		k = &wsLock{}
		l.locks[name] = k
	}
	k.refs++
	l.mu.Unlock()
	k.Lock()
	return func() {
		k.Unlock()
		l.mu.Lock()
		if k.refs--; k.refs == 0 {
			delete(l.locks, name)
		}
		l.mu.Unlock()
	}
}

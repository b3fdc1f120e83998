// Package host is what a phase runs on: its content stores (images,
// input snapshots, outputs, run logs), the store and journal, the
// backends by name, the evidenced platform profile and its re-probe, the
// journal records of a grant's spend (consume, abandon, residual),
// quarantine and recovery, and the warm pool it owns. launch drives each
// phase through its steps over these; the host imports no concrete
// backend and no wire type (custodyd wires the one and converts to the
// other).
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/image"
	"github.com/custody-dev/custody/internal/randid"
	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/platform"
	"github.com/custody-dev/custody/pool"
	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/store"
)

// ErrQuarantined means the runner takes no work until an operator recovers it.
var ErrQuarantined = errors.New("runner is quarantined")

// DefaultUserNS is the host range container ids map to when the operator
// names none: far above any ordinary account.
var DefaultUserNS = IDRange{HostID: 1_000_000_000, Size: 65536}

// Runner is this host, as the phases launched on it use it.
type Runner struct {
	cfg     Config
	log     *slog.Logger
	db      *store.DB
	journal *journal.Journal
	images  *image.Store
	inputs  *snapshot.Store
	outputs *snapshot.Store
	backend backend.Backend
	// backends are every configured backend by name, the default
	// (backend) among them; a plan names the one it runs on.
	backends map[string]backend.Backend

	// profile is the evidenced platform profile; a profile with a failed
	// host fact is probed again (see Profile), since the cause may have
	// passed (a full state disk at start).
	profile      atomic.Pointer[platform.Profile]
	probeOpts    platform.Options
	reprobe      sync.Mutex
	probedAt     time.Time // guarded by reprobe
	reprobeEvery time.Duration

	// pool is the warm pool: its members are this host's attempts, so
	// recovery holds it and quarantine drains it.
	pool *pool.Pool
}

// reprobeEvery is how often a profile with a failed host fact is probed
// again, at most.
const reprobeEvery = 5 * time.Second

// BackendFactory makes the runner's backend once the platform is probed
// (the profile says, for one, whether user namespaces work here). Only
// custodyd wires a concrete backend; the runner drives backend.Backend.
type BackendFactory func(profile func() *platform.Profile) (backend.Backend, error)

// New opens the runner's content stores, probes the platform and makes the
// default backend with newBackend and any further ones with more (each
// under its own Name). db is the runner's store (owned by the caller, who
// closes it).
func New(ctx context.Context, cfg Config, db *store.DB, newBackend BackendFactory, log *slog.Logger, more ...BackendFactory) (*Runner, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	if err := os.Chmod(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	if db == nil {
		return nil, errors.New("runner: a store is required")
	}
	r := &Runner{cfg: cfg, log: log, db: db, journal: journal.New(db)}
	var err error
	if r.images, err = image.New(filepath.Join(cfg.StateDir, "images")); err != nil {
		return nil, err
	}
	if r.inputs, err = snapshot.New(filepath.Join(cfg.StateDir, "snapshots")); err != nil {
		return nil, err
	}
	// The digests of input files already read, by identity and change
	// times, kept in the runner's own state dir (never in an input).
	if err := r.inputs.UseIndex(filepath.Join(cfg.StateDir, "input-index")); err != nil {
		return nil, err
	}
	if r.outputs, err = snapshot.New(r.OutputsDir()); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(r.logDir(), 0o700); err != nil {
		return nil, fmt.Errorf("logs dir: %w", err)
	}
	// The cgroup the runs are placed under is this process's at start:
	// custodyd may move itself into a leaf of it afterwards.
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("read own cgroup: %w", err)
	}
	r.probeOpts = platform.Options{RuntimePath: cfg.Runtime.Path, ScratchDir: cfg.StateDir, OwnCgroup: own, PidfdNetnsFault: cfg.PidfdNetnsFault}
	r.reprobeEvery = reprobeEvery
	prof, err := platform.Probe(ctx, r.probeOpts)
	if err != nil {
		return nil, fmt.Errorf("probe platform: %w", err)
	}
	r.profile.Store(prof)
	r.probedAt = time.Now()
	if r.backend, err = newBackend(r.Profile); err != nil {
		return nil, err
	}
	r.backends = map[string]backend.Backend{r.backend.Name(): r.backend}
	for _, f := range more {
		b, err := f(r.Profile)
		if err != nil {
			return nil, err
		}
		if _, dup := r.backends[b.Name()]; dup {
			return nil, fmt.Errorf("backend %s configured twice", b.Name())
		}
		r.backends[b.Name()] = b
	}
	r.pool = r.newPool(0)
	return r, nil
}

// newPool is an empty warm pool on this host; keepClean is how many clean
// member attempts it keeps (0: its default).
func (r *Runner) newPool(keepClean int) *pool.Pool {
	return pool.New(pool.Config{Host: r, Journal: r.journal, Images: r.images, ContainerID: ContainerID, Log: r.log, KeepClean: keepClean})
}

// Pool is the host's warm pool.
func (r *Runner) Pool() *pool.Pool { return r.pool }

// ErrBackendNotConfigured is returned for a plan that names a backend the
// runner does not have.
var ErrBackendNotConfigured = errors.New("backend not configured")

// BackendNamed is the configured backend of that name; "" is the default.
func (r *Runner) BackendNamed(name string) (backend.Backend, error) {
	if name == "" {
		return r.backend, nil
	}
	if b, ok := r.backends[name]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("%w: %q; fix: add it to custodyd's config (backends: [...] and its section)", ErrBackendNotConfigured, name)
}

// BackendNames are the configured backends' names, sorted.
func (r *Runner) BackendNames() []string { return slices.Sorted(maps.Keys(r.backends)) }

// backendOf is the backend whose resource kinds cover an attempt's
// recorded resources: recovery needs the backend that made them, and the
// journal keeps resources, not a backend name.
func (r *Runner) backendOf(recorded []journal.Resource) backend.Backend {
	if len(r.backends) == 1 || len(recorded) == 0 {
		return r.backend
	}
	for _, name := range r.BackendNames() {
		b := r.backends[name]
		es, err := b.Intents("custody-kinds")
		if err != nil {
			continue
		}
		kinds := map[string]bool{}
		for _, e := range es {
			kinds[e.Kind] = true
		}
		all := true
		for _, res := range recorded {
			all = all && kinds[res.Kind]
		}
		if all {
			return b
		}
	}
	return r.backend
}

// StorePath is where a runner's store lives under its state dir.
func StorePath(cfg Config) string { return filepath.Join(cfg.StateDir, "custody.db") }

// Config returns the runner's configuration.
func (r *Runner) Config() Config { return r.cfg }

// VerifyImage re-derives that an image still has the digest it is stored
// under, as the named backend will launch it, and refuses if not. A
// backend that mounts sealed images has the sealed file checked
// (image.Store.VerifySealed: its identity, in constant time); any other
// has the tree checked (image.Store.Verify: a re-hash, or a metadata walk
// while nothing in the tree changed). An unknown backend gets the walk;
// admission refuses it.
func (r *Runner) VerifyImage(ctx context.Context, digest, backendName string) error {
	if b, err := r.BackendNamed(backendName); err == nil && b.Capabilities().SealedImages {
		_, err := r.images.VerifySealed(ctx, digest)
		return err
	}
	_, err := r.images.Verify(ctx, digest)
	return err
}

// Backend is the backend the runner launches on.
func (r *Runner) Backend() backend.Backend { return r.backend }

// Profile is the evidenced platform profile the runner admits against. A
// profile in which a host fact the reviewed profile needs (seccomp, tmpfs,
// overlay) failed is probed again, at most every few seconds: the failure
// may have been transient, and a runner must not refuse everything until
// it restarts. A passing profile is never re-probed here.
func (r *Runner) Profile() *platform.Profile {
	p := r.profile.Load()
	if p.Seccomp.OK && p.Tmpfs.OK && p.Overlay.OK {
		return p
	}
	if !r.reprobe.TryLock() {
		return p // another caller is probing; admit against what is known
	}
	defer r.reprobe.Unlock()
	if time.Since(r.probedAt) < r.reprobeEvery {
		return p
	}
	r.probedAt = time.Now()
	np, err := platform.Probe(context.Background(), r.probeOpts)
	if err != nil {
		r.log.Warn("probe the platform again", "err", err)
		return p
	}
	r.log.Info("platform probed again after a failed host fact",
		"seccomp", np.Seccomp.OK, "tmpfs", np.Tmpfs.OK, "overlay", np.Overlay.OK)
	r.profile.Store(np)
	return np
}

// ProbedProfile is the profile as last probed, never probing again: what
// a receipt records of the host the run just ran on.
func (r *Runner) ProbedProfile() *platform.Profile { return r.profile.Load() }

// ReprobeCgroups probes the runs' cgroups again now, with notes on
// controllers that could not be enabled for the runs (kept for later
// probes), and admits against the result: custodyd calls it once it has
// left its service cgroup for its leaf and enabled the controllers there,
// which the probe at start could not see.
func (r *Runner) ReprobeCgroups(ctx context.Context, cgroupNotes map[string]string) (*platform.Profile, error) {
	r.reprobe.Lock()
	defer r.reprobe.Unlock()
	opts := r.probeOpts
	opts.CgroupNotes = cgroupNotes
	np, err := platform.ProbeCgroups(ctx, r.profile.Load(), opts)
	if err != nil {
		return nil, fmt.Errorf("probe cgroups again: %w", err)
	}
	r.probeOpts = opts
	r.profile.Store(np)
	return np, nil
}

// Log is the runner's logger.
func (r *Runner) Log() *slog.Logger { return r.log }

// Journal is the runner's journal of attempts.
func (r *Runner) Journal() *journal.Journal { return r.journal }

// Inputs is the runner's input snapshot store.
func (r *Runner) Inputs() *snapshot.Store { return r.inputs }

// Outputs is the runner's output store: what custody takes of each run.
func (r *Runner) Outputs() *snapshot.Store { return r.outputs }

// Images is the runner's image store.
func (r *Runner) Images() *image.Store { return r.images }

// Quarantine reports the current quarantine, if any.
func (r *Runner) Quarantine() (*store.Quarantine, error) { return r.db.Quarantine() }

// ReleaseQuarantine lifts the quarantine (operator action).
func (r *Runner) ReleaseQuarantine() error {
	err := r.db.ClearQuarantine()
	r.pool.Kick() // the pool refills at once, not at its next tick
	return err
}

// OutputsDir is where the output store keeps its trees: the root an
// input naming a retained output is read beneath.
func (r *Runner) OutputsDir() string { return filepath.Join(r.cfg.StateDir, "outputs") }

// CheckQuarantine refuses work while the runner is quarantined (and when
// the quarantine state cannot be read).
func (r *Runner) CheckQuarantine() error {
	q, err := r.db.Quarantine()
	if err != nil {
		return fmt.Errorf("read quarantine state (refusing): %w", err)
	}
	if q != nil {
		return fmt.Errorf("%w since %s: %s (run %s); fix: an operator must check the host, clean up, and release the quarantine",
			ErrQuarantined, q.Since.Format(time.RFC3339), q.Reason, q.RunID)
	}
	return nil
}

// quarantineTarget is what an unverified cleanup on the named backend
// quarantines: "" for the whole runner.
func (r *Runner) quarantineTarget(backendName string) string {
	b, err := r.BackendNamed(backendName)
	if err != nil {
		return ""
	}
	return b.Capabilities().QuarantineTarget
}

// CheckQuarantineFor refuses work on the named backend while the runner,
// or that backend's quarantine target, is quarantined.
func (r *Runner) CheckQuarantineFor(backendName string) error {
	if err := r.CheckQuarantine(); err != nil {
		return err
	}
	t := r.quarantineTarget(backendName)
	if t == "" {
		return nil
	}
	q, err := r.db.TargetQuarantine(t)
	if err != nil {
		return fmt.Errorf("read quarantine state of %s (refusing): %w", t, err)
	}
	if q != nil {
		return fmt.Errorf("%w: %s since %s: %s (run %s); fix: an operator must check it, clean up, and release the quarantine (the runner's other backends take work)",
			ErrQuarantined, t, q.Since.Format(time.RFC3339), q.Reason, q.RunID)
	}
	return nil
}

// ResidualOn is Residual for an attempt on the named backend: a backend
// with a quarantine target (a cluster) quarantines that target alone.
func (r *Runner) ResidualOn(backendName, runID, reason string, removed ...journal.Resource) error {
	t := r.quarantineTarget(backendName)
	if t == "" {
		return r.Residual(runID, reason, removed...)
	}
	retry := "custody recover (operator), then custody quarantine release"
	if err := r.journal.Finish(runID, journal.Residual, reason, retry, removed...); err != nil {
		r.log.Error("journal residual", "run", runID, "err", err)
	}
	r.log.Error("quarantining "+t, "run", runID, "reason", reason)
	if err := r.db.SetTargetQuarantine(t, store.Quarantine{Since: time.Now().UTC(), Reason: reason, RunID: runID}); err != nil {
		return fmt.Errorf("%s; and the quarantine of %s could not be recorded: %w", reason, t, err)
	}
	return fmt.Errorf("%w: %s: %s", ErrQuarantined, t, reason)
}

// Residual marks an attempt residual and quarantines the runner: it takes
// no work until an operator recovers it. The error it returns wraps
// ErrQuarantined.
func (r *Runner) Residual(runID, reason string, removed ...journal.Resource) error {
	retry := "custody recover (operator), then custody quarantine release"
	if err := r.journal.Finish(runID, journal.Residual, reason, retry, removed...); err != nil {
		r.log.Error("journal residual", "run", runID, "err", err)
	}
	r.log.Error("quarantining runner", "run", runID, "reason", reason)
	err := r.db.SetQuarantine(store.Quarantine{Since: time.Now().UTC(), Reason: reason, RunID: runID})
	r.pool.Kick() // the pool's upkeep drains it now, not at its next tick
	if err != nil {
		return fmt.Errorf("%s; and quarantine could not be recorded: %w", reason, err)
	}
	return fmt.Errorf("%w: %s", ErrQuarantined, reason)
}

// Consume uses grant grantID for run runID and opens the run's attempt
// with the intent of everything its launch may create, in one durable
// transaction: the grant is spent exactly when the attempt is on record.
// The launch then journals no intent twice; if it never comes, Abandon
// closes the attempt. store.ErrConsumed and store.ErrRevoked say
// the grant cannot be used.
func (r *Runner) Consume(runID, grantID string, use store.GrantUse) error {
	return r.ConsumeFor(runID, grantID, use, "")
}

// ConsumeFor is Consume for a launch on the named backend ("" is the
// default): the intents journalled are that backend's.
func (r *Runner) ConsumeFor(runID, grantID string, use store.GrantUse, backendName string) error {
	b, err := r.BackendNamed(backendName)
	if err != nil {
		return err
	}
	es, err := b.Intents(ContainerID(runID))
	if err != nil {
		return err
	}
	return r.journal.BeginConsuming(runID, grantID, use, journal.FromBackend(es)...)
}

// Abandon closes the attempt Consume opened for a launch that will not
// happen (a refusal after the grant was spent), once its intents are
// verified gone; if they are not, the runner quarantines as after any
// unverified cleanup.
func (r *Runner) Abandon(runID, reason string) error {
	a, err := r.journal.Get(runID)
	if err != nil {
		return err
	}
	if rep := r.backendOf(a.Resources).VerifyAbsent(ContainerID(runID), journal.ToBackend(a.Resources)); !rep.Verified {
		return r.Residual(runID, fmt.Sprintf("%s; and its intents are not verified gone: %v", reason, rep.Steps))
	}
	if err := r.journal.Finish(runID, journal.Clean, reason+"; nothing was created", "", a.Resources...); err != nil {
		return r.Residual(runID, err.Error())
	}
	return nil
}

// ConsumePooled is Consume for a run that takes the member l reserved:
// the run's attempt opens with no intents, since the member's attempt
// holds everything that exists, and names the member, whose cleanup state
// the run's then follows.
func (r *Runner) ConsumePooled(runID, grantID string, use store.GrantUse, l *pool.Lease) error {
	return r.journal.BeginServing(runID, grantID, l.Member().Sandbox, use)
}

// ContainerID is the runtime container id of a run.
func ContainerID(runID string) string { return "custody-" + runID }

// NewRunID returns a fresh random run id.
func NewRunID() string { return randid.New(8) }

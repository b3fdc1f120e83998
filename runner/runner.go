// Package runner is the single flow of one phase: admit, snapshot inputs,
// launch on a backend.Backend, take custody of the outputs, verify
// cleanup, and quarantine the runner when cleanup cannot be verified. It
// returns its own Result (the store's run record); it imports no concrete
// backend and no wire type (custodyd wires the one and converts to the
// other).
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/image"
	"github.com/custody-dev/custody/internal/randid"
	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/platform"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/request"
	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/store"
	"github.com/custody-dev/custody/treehash"
)

// ErrQuarantined means the runner takes no work until an operator recovers it.
var ErrQuarantined = errors.New("runner is quarantined")

// DefaultUserNS is the host range container ids map to when the operator
// names none: far above any ordinary account.
var DefaultUserNS = IDRange{HostID: 1_000_000_000, Size: 65536}

// Runner runs phases on this host.
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

	// pool is the warm pool (pool.go); poolKeep, when set, is how many
	// clean member attempts its journal keeps (a test's; else
	// poolKeepClean).
	pool     pool
	poolKeep int
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
	if r.outputs, err = snapshot.New(r.outputsDir()); err != nil {
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
	return r, nil
}

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

// Images is the runner's image store.
func (r *Runner) Images() *image.Store { return r.images }

// Quarantine reports the current quarantine, if any.
func (r *Runner) Quarantine() (*store.Quarantine, error) { return r.db.Quarantine() }

// ReleaseQuarantine lifts the quarantine (operator action).
func (r *Runner) ReleaseQuarantine() error {
	err := r.db.ClearQuarantine()
	r.pool.kick() // the pool refills at once, not at its next tick
	return err
}

// Prepared is an admitted phase whose inputs are snapshotted: a change to
// the host paths after this point cannot reach the run.
type Prepared struct {
	// RunID names the run; Launch picks a random one if it is empty.
	RunID string
	// GrantID is journalled with the attempt.
	GrantID string
	Plan    *admission.Plan
	Image   *image.Image
	// Inputs are the plan's inputs with their snapshot digests.
	Inputs []admission.Input
	// mounts are the snapshots as the sandbox binds them, one per input.
	mounts []backend.Mount
	// Record, if set, is called once cleanup is done with the final
	// result; what it returns is stored as the run's record in the same
	// durable transaction that closes the attempt's journal. Recorded
	// says whether that happened: a launch refused before it began, or
	// whose cleanup is residual, leaves the record to the caller.
	Record   func(res *Result) ([]byte, error)
	Recorded bool
	// Begun says Consume opened the run's attempt with its intents; the
	// launch then records them no second time.
	Begun bool
	// Egress is the run's restricted egress; nil is denied.
	Egress *Egress
	// Pooled is the warm-pool member reserved for the run (ConsumePooled
	// opened its attempt with no intents); nil launches cold.
	Pooled *PoolLease
}

// Egress is a run's restricted egress: what the sandbox gets, and what
// its receipt records once it has run.
type Egress struct {
	Spec *backend.Egress
	// Report returns what the proxy and broker decided so far.
	Report func() *evidence.Egress
}

// Admit checks quarantine and computes the plan without mutating anything.
func (r *Runner) Admit(req *request.Phase, pol *policy.Policy) (*admission.Plan, error) {
	return r.admit(req, pol, filepath.EvalSymlinks)
}

// AdmitByPath is Admit without looking at any host path a request names:
// verifier roots are matched on the policy's spelling alone. It is the
// dry run a client that may not see those paths gets; what it cannot
// check there, the grant issue does.
func (r *Runner) AdmitByPath(req *request.Phase, pol *policy.Policy) (*admission.Plan, error) {
	return r.admit(req, pol, nil)
}

func (r *Runner) admit(req *request.Phase, pol *policy.Policy, resolve func(string) (string, error)) (*admission.Plan, error) {
	if err := r.checkQuarantine(); err != nil {
		return nil, err
	}
	img, imgErr := r.images.Get(req.Image)
	if imgErr != nil && !errors.Is(imgErr, image.ErrNotFound) {
		return nil, imgErr
	}
	b, err := r.BackendNamed(req.BackendName())
	if err != nil {
		b = r.backend // admission refuses the name, with its fix
	}
	caps := b.Capabilities()
	facts := admission.Facts{Capabilities: &caps, ImagePresent: imgErr == nil, Backends: r.BackendNames(), Resolve: resolve}
	if img != nil {
		// What admission reads in the tree (users, the workdir) is read
		// from what the backend will mount.
		tree, done, err := r.images.Tree(img, caps.SealedImages)
		if err != nil {
			return nil, err
		}
		defer done()
		facts.Image = &admission.ImageFacts{Manifest: img.Manifest, ConfigDigest: img.ConfigDigest,
			Config: imageConfig(img.Config), Owned: len(img.IDs) > 0, Tree: tree}
	}
	return admission.Admit(req, pol, facts)
}

// imageConfig is an image's run defaults as admission takes them.
func imageConfig(c *image.Config) admission.ImageConfig {
	if c == nil {
		return admission.ImageConfig{}
	}
	return admission.ImageConfig{Env: c.Env, WorkingDir: c.WorkingDir, User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd, StopSignal: c.StopSignal}
}

// Prepare admits req under pol and snapshots its inputs.
func (r *Runner) Prepare(ctx context.Context, req *request.Phase, pol *policy.Policy) (*Prepared, error) {
	plan, err := r.Admit(req, pol)
	if err != nil {
		return nil, err
	}
	return r.Snapshot(ctx, plan)
}

// Snapshot copies an admitted plan's inputs into the snapshot store. After
// it, a change to the host paths cannot reach the run.
func (r *Runner) Snapshot(ctx context.Context, plan *admission.Plan) (*Prepared, error) {
	if err := r.checkQuarantine(); err != nil {
		return nil, err
	}
	img, err := r.images.Get(plan.Image)
	if err != nil {
		return nil, err
	}
	p := &Prepared{Plan: plan, Image: img}
	avoid, err := verifierIdentities(ctx, plan)
	if err != nil {
		return nil, err
	}
	budget := plan.InputBytes
	for i, in := range plan.Inputs {
		src, root, err := r.inputPath(i, in)
		if err != nil {
			return nil, err
		}
		snap, err := r.inputs.Take(ctx, src, treehash.Options{MaxBytes: budget, Beneath: root, Avoid: avoid})
		if err != nil {
			return nil, inputRefusal(i, err)
		}
		if err := sameOutput(i, in, snap.Digest); err != nil {
			return nil, err
		}
		budget -= snap.Tree.Bytes
		p.Inputs = append(p.Inputs, admission.Input{Source: in.Source, Target: in.Target, Root: in.Root, Digest: snap.Digest, Writable: in.Writable})
		p.mounts = append(p.mounts, backend.Mount{Source: snap.Path, Target: in.Target, Writable: in.Writable})
	}
	return p, nil
}

// HashInputs digests a plan's inputs where they are, without copying or
// writing anything: what a launch would snapshot, for checks that must
// happen before any mutation.
func (r *Runner) HashInputs(ctx context.Context, plan *admission.Plan) ([]admission.Input, error) {
	var out []admission.Input
	var need diskNeed
	avoid, err := verifierIdentities(ctx, plan)
	if err != nil {
		return nil, err
	}
	budget := plan.InputBytes
	for i, in := range plan.Inputs {
		src, root, err := r.inputPath(i, in)
		if err != nil {
			return nil, err
		}
		tree, err := snapshot.Digest(ctx, src, treehash.Options{MaxBytes: budget, Beneath: root, Avoid: avoid})
		if err != nil {
			return nil, inputRefusal(i, err)
		}
		if err := sameOutput(i, in, tree.Digest); err != nil {
			return nil, err
		}
		budget -= tree.Bytes
		out = append(out, admission.Input{Source: in.Source, Target: in.Target, Root: in.Root, Digest: tree.Digest})
		if _, err := r.inputs.Get(tree.Digest); err != nil { // a stored copy is reused, not written
			need.bytes += tree.Bytes
			need.inodes += int64(len(tree.Entries)) + 2
		}
	}
	if err := r.checkSpace(need); err != nil {
		return nil, err
	}
	return out, nil
}

// inputPath is where input i is read from, and the root it is reached
// beneath: its host source below its policy root, or, for a retained
// output named by digest, the runner's own stored copy below its output
// store. Nothing the caller names is a path here.
func (r *Runner) inputPath(i int, in admission.Input) (src, root string, err error) {
	d, ok := in.OutputDigest()
	if !ok {
		return in.Source, in.Root, nil
	}
	snap, err := r.outputs.Get(d)
	if err != nil {
		code, fix := "input-output-unreadable", "an operator must check the runner's output store"
		if errors.Is(err, snapshot.ErrNotFound) {
			code, fix = "input-output-unknown", "name the output digest of a run on this runner whose output is still retained (custody result RUN), or run that stage again"
		}
		return "", "", &admission.RefusedError{Checks: []admission.Check{{
			Requirement: fmt.Sprintf("inputs[%d].source", i), Verdict: admission.NotGranted, Code: code,
			Detail: fmt.Sprintf("%s: %v", in.Source, err), Fix: fix,
		}}}
	}
	return snap.Path, r.outputsDir(), nil
}

// OutputInput refuses input i if it names a retained output the store
// does not hold; it reads nothing of the output (a dry run's check, with
// no digest taken).
func (r *Runner) OutputInput(i int, in admission.Input) error {
	_, _, err := r.inputPath(i, in)
	return err
}

// outputsDir is the runner's output store.
func (r *Runner) outputsDir() string { return filepath.Join(r.cfg.StateDir, "outputs") }

// sameOutput refuses a retained output whose stored copy no longer hashes
// to the digest that names it.
func sameOutput(i int, in admission.Input, got string) error {
	if d, ok := in.OutputDigest(); ok && d != got {
		return &admission.RefusedError{Checks: []admission.Check{{
			Requirement: fmt.Sprintf("inputs[%d].source", i), Verdict: admission.NotGranted, Code: "input-output-corrupt",
			Detail: fmt.Sprintf("the stored copy of output %s hashes to %s", d, got),
			Fix:    "an operator must check the runner's output store; run the stage that produced it again",
		}}}
	}
	return nil
}

// diskNeed is what a launch will write into the state dir's filesystem.
type diskNeed struct{ bytes, inodes int64 }

// spaceReserve is kept free on the state dir's filesystem beyond a launch's
// snapshots: the store must still be able to record the run.
const spaceReserve = 32 << 20

// checkSpace refuses, before any grant is spent, a launch whose input
// snapshots cannot fit on the state dir's filesystem: ENOSPC halfway
// through a snapshot would otherwise be found only after consumption.
func (r *Runner) checkSpace(need diskNeed) error {
	var st unix.Statfs_t
	if err := unix.Statfs(r.cfg.StateDir, &st); err != nil {
		return fmt.Errorf("statfs the state dir: %w", err)
	}
	freeBytes := int64(st.Bavail) * st.Bsize
	freeInodes := int64(st.Ffree)
	if freeBytes >= need.bytes+spaceReserve && (st.Files == 0 || freeInodes >= need.inodes) {
		return nil
	}
	return &admission.RefusedError{Checks: []admission.Check{{
		Requirement: "inputs", Verdict: admission.Unsupported, Code: "state-disk-full",
		Detail: fmt.Sprintf("the input snapshots need %d bytes and %d inodes (plus a %d-byte reserve) on the runner's state filesystem, which has %d bytes and %d inodes free",
			need.bytes, need.inodes, spaceReserve, freeBytes, freeInodes),
		Fix: "an operator must free space on custodyd's stateDir filesystem (custody prunes old outputs per retention), then retry",
	}}}
}

// inputRefusal names why input i could not be read, with a fix that fits
// the reason.
func inputRefusal(i int, err error) error {
	code, fix := "input-snapshot-failed", "make the input readable by the runner"
	req := fmt.Sprintf("inputs[%d]", i)
	switch {
	case errors.Is(err, treehash.ErrAvoided):
		req, code, fix = req+".source", "input-verifier-only", "take this input in the pipeline's verifier stage (verifier: true) only, or name a path holding no verifier material: a bind mount or hard link of a verifier root, or of anything in one, is that material"
	case errors.Is(err, treehash.ErrSymlinkComponent):
		code, fix = "input-symlink-component", "name the input by its real path below the policy's input root: custody never follows a symlink from the root to an input"
	case errors.Is(err, treehash.ErrTooLarge):
		code, fix = "input-too-large", "shrink the inputs, or an operator may raise ceilings.inputBytes"
	case errors.Is(err, treehash.ErrUnsupported):
		code, fix = "input-unsupported-file", "inputs hold only regular files, directories and symlinks (copied as links, never followed); remove devices, fifos and sockets, and make the input itself a file or directory"
	}
	return &admission.RefusedError{Checks: []admission.Check{{
		Requirement: req, Verdict: admission.NotGranted, Code: code,
		Detail: err.Error(), Fix: fix,
	}}}
}

// verifierIdentities records, for a phase that is not a verifier phase,
// the identity of everything under the policy's verifier roots, so that
// its input walks refuse that material reached by another path (R8: it
// never reaches generate, a build or an ordinary test). A root that cannot
// be read whole refuses the inputs rather than leaving them unchecked.
func verifierIdentities(ctx context.Context, plan *admission.Plan) (treehash.Identities, error) {
	if len(plan.VerifierRoots) == 0 || len(plan.Inputs) == 0 {
		return nil, nil
	}
	if plan.VerifierIdentities != nil {
		return plan.VerifierIdentities, nil // collected before the spend
	}
	ids, err := treehash.IdentitiesOf(ctx, plan.VerifierRoots)
	if cerr := ctx.Err(); err != nil && cerr != nil {
		return nil, cerr // cancelled: not the roots' fault
	}
	if err != nil {
		return nil, &admission.RefusedError{Checks: []admission.Check{{
			Requirement: "policy.verifierRoots", Verdict: admission.NotGranted, Code: "verifier-roots-unreadable",
			Detail: err.Error(), Fix: "an operator must make every verifier root a readable directory the runner can walk, or remove it from policy verifierRoots"}}}
	}
	plan.VerifierIdentities = ids
	return ids, nil
}

func (r *Runner) checkQuarantine() error {
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

// Launch runs a prepared phase to the end and returns its result. Every
// launch yields a result, failed ones included; err is set only when the
// run could not be attempted or its cleanup could not be verified. stdout
// and stderr get what the run's spools keep, as it comes, and must not
// block: a writer that waits on a client holds the workload's pipe (the
// daemon's stream queues or drops instead).
func (r *Runner) Launch(ctx context.Context, p *Prepared, stdout, stderr io.Writer) (*Result, error) {
	defer p.Pooled.Release() // a member left unattached goes back
	res := r.newResult(p)
	b, err := r.BackendNamed(p.Plan.Backend)
	if err != nil {
		Refuse(res, err)
		if p.Begun {
			r.Abandon(res.RunID, "refused before launch: "+err.Error())
		}
		return res, err
	}
	if err := r.checkQuarantine(); err != nil {
		Refuse(res, err)
		if p.Begun {
			r.Abandon(res.RunID, "refused before launch: "+err.Error())
		}
		return res, err
	}
	// The snapshots need no second read here: Snapshot hashed exactly the
	// bytes it wrote, and re-hashed any stored copy it reused.
	// The attempt is journalled with the backend's first record, the intent
	// of everything it may create, before anything is created. The verified
	// removals are journalled with the attempt's final state.
	rec := &recorder{j: r.journal, runID: res.RunID, grantID: p.GrantID, begin: !p.Begun, deferRemovals: true, steps: newSteps()}
	id := ContainerID(res.RunID)
	if !p.Begun {
		// Not consumed with its intents (a launch without a grant): the
		// intents open the attempt here, before anything is created.
		es, err := b.Intents(id)
		if err == nil {
			err = rec.Intent(es...)
		}
		if err != nil {
			Refuse(res, err)
			r.afterCleanup(p, res, rec)
			return res, err
		}
	}
	c, err := r.prepareSandbox(ctx, b, id, p, rec, res)
	rec.steps.mark("prepare")
	if err != nil {
		Refuse(res, err)
		// A backend that made part of the sandbox and says at which stage
		// it failed: the grant was spent on a run that failed to start.
		var st interface{ StartStage() string }
		if c != nil && errors.As(err, &st) {
			res.Status, res.FailedStage = StatusFailedToStart, st.StartStage()
		}
		// A reserved member destroyed unverified: nothing of the run's is
		// left, but its grant was spent on the member.
		var pt *poolTakeError
		if c == nil && errors.As(err, &pt) {
			res.Status, res.FailedStage = StatusFailedToStart, pt.StartStage()
		}
		if c == nil {
			// Refused before the backend made anything; the intents on
			// record are checked gone like a recovery's.
			r.Abandon(res.RunID, "refused before launch: "+err.Error())
			return res, err
		}
		if c != nil {
			res.Cleanup = cleanup(c.Cleanup(ctx))
		}
		// An unverified cleanup's quarantine is the error the caller
		// must see, as after a run.
		if qerr := r.afterCleanup(p, res, rec); qerr != nil {
			return res, qerr
		}
		return res, err
	}
	ev := c.Evidence()
	res.Backend = identityRecord(b.Identity())
	res.Evidence = maps.Clone(ev)
	res.RuntimeSHA256, res.ConfigSHA256 = ev["runtime"], ev["config"]
	// The workload's output goes through spools that never block, never
	// straight to a caller that may stop reading: a full pipe would hold
	// the workload, and a killed one, until cleanup cannot be verified.
	// They keep the streams in the logs dir, opened only for a sandbox
	// that will run.
	sp := openSpools(stdout, stderr, r.logDir(), res.RunID, r.log)
	ex, runErr := c.Run(ctx, p.Plan.WallTime, backend.IO{Stdout: sp.stdout, Stderr: sp.stderr})
	rec.steps.mark("exec")
	// Digests a backend takes while the workload runs (the vm backend's
	// output stream, as the host received it) join those of the launch.
	maps.Copy(res.Evidence, c.Evidence())
	sp.record(res)
	rec.steps.mark("streams")
	// Custody and cleanup finish even when the caller has gone: a
	// cancelled run still gets its outputs recorded and its tree verified.
	cancelled := ctx.Err() != nil
	ctx = context.WithoutCancel(ctx)
	if runErr == nil {
		setExit(res, ex)
		var left leftOut
		limits := outputLimits(p.Plan)
		limits.Leave = left.leave
		out, err := r.takeOutput(ctx, c.Output(), limits)
		if err != nil {
			res.Status = StatusFailed
			res.Error = fmt.Sprintf("output custody: %v", err)
		} else {
			res.Output = newOutput(out)
			res.Output.LeftOut, res.Output.LeftOutTotal = left.list()
		}
		rec.steps.mark("output")
	} else {
		res.Status = StatusFailed
		res.Error = runErr.Error()
		res.Finished = time.Now().UTC()
		// A failure before the workload started is no workload's exit.
		var st interface{ StartStage() string }
		switch {
		case cancelled:
			// The caller cancelled or went away before the workload began:
			// that is a cancellation, not a sandbox that failed to start.
			res.Status, res.ExitCode = StatusCancelled, -1
		case errors.As(runErr, &st):
			res.Status, res.ExitCode, res.FailedStage = StatusFailedToStart, -1, st.StartStage()
		default:
			// Failed once under way: what was observed, and the rest
			// marked unobserved.
			failedAfterStart(res, ex, runErr)
		}
	}
	res.Cleanup = cleanup(c.Cleanup(ctx))
	sp.wait()
	rec.steps.mark("cleanup")
	err = r.afterCleanup(p, res, rec)
	rec.steps.log(r.log, res.RunID)
	if err != nil {
		return res, err
	}
	return res, runErr
}

// outputLimits bounds what custody takes from a run's output: its bytes,
// its entries and the length of their paths, so that the receipt naming
// every file stays within the envelope limit whatever the workload does.
func outputLimits(p *admission.Plan) treehash.Options {
	return treehash.Options{MaxBytes: p.OutputBytes, MaxEntries: int(p.OutputFiles), MaxPathBytes: admission.MaxOutputPathBytes}
}

// smallOutput is the size below which an output is first looked up in the
// store by its digest: hashing it twice when it is new costs less than
// staging a copy of one the store already holds (a phase's empty or tiny
// output, repeated run after run).
const smallOutput = 1 << 20

// takeOutput moves a run's output into the output store.
func (r *Runner) takeOutput(ctx context.Context, out backend.Output, limits treehash.Options) (*snapshot.Snapshot, error) {
	if used, err := out.Used(); err == nil && used <= smallOutput {
		snap, ok, err := r.outputs.Reuse(ctx, out.Dir(), limits)
		if err != nil || ok {
			return snap, err
		}
	}
	return r.outputs.Take(ctx, out.Dir(), limits)
}

// afterCleanup closes the attempt's journal, and quarantines the runner
// when cleanup was not verified.
func (r *Runner) afterCleanup(p *Prepared, res *Result, rec *recorder) error {
	removed := rec.removed
	if rec.begin {
		// The backend journalled nothing, so it created nothing; the
		// attempt is still recorded.
		if err := r.journal.Begin(res.RunID, rec.grantID); err != nil {
			r.log.Error("journal attempt", "run", res.RunID, "err", err)
		}
	}
	if res.Cleanup == nil || res.Cleanup.Verified {
		var runs []store.RunRecord
		if p.Record != nil {
			v, err := p.Record(res)
			rec.steps.mark("receipt")
			if err != nil {
				r.log.Error("run record", "run", res.RunID, "err", err)
			} else {
				runs = append(runs, store.RunRecord{ID: res.RunID, Value: v})
			}
		}
		err := r.journal.FinishRecording(res.RunID, runs, journal.Clean, "", "", removed...)
		rec.steps.mark("journal")
		if err != nil {
			return r.residual(res.RunID, fmt.Sprintf("cleanup looked verified but the journal disagrees: %v", err), removed...)
		}
		p.Recorded = len(runs) > 0
		return nil
	}
	var failed []string
	for _, s := range res.Cleanup.Steps {
		if !s.OK {
			failed = append(failed, s.Name+": "+s.Detail)
		}
	}
	return r.residual(res.RunID, fmt.Sprintf("cleanup of run %s not verified: %v", res.RunID, failed), removed...)
}

// residual marks an attempt residual and quarantines the runner: it takes
// no work until an operator recovers it.
func (r *Runner) residual(runID, reason string, removed ...journal.Resource) error {
	retry := "custody recover (operator), then custody quarantine release"
	if err := r.journal.Finish(runID, journal.Residual, reason, retry, removed...); err != nil {
		r.log.Error("journal residual", "run", runID, "err", err)
	}
	r.log.Error("quarantining runner", "run", runID, "reason", reason)
	err := r.db.SetQuarantine(store.Quarantine{Since: time.Now().UTC(), Reason: reason, RunID: runID})
	r.pool.kick() // the pool's upkeep drains it now, not at its next tick
	if err != nil {
		return fmt.Errorf("%s; and quarantine could not be recorded: %w", reason, err)
	}
	return fmt.Errorf("%w: %s", ErrQuarantined, reason)
}

// Consume uses grant grantID for run runID and opens the run's attempt
// with the intent of everything its launch may create, in one durable
// transaction: the grant is spent exactly when the attempt is on record.
// The run's Prepared must then carry Begun; if the launch never comes,
// Abandon closes the attempt. store.ErrConsumed and store.ErrRevoked say
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
	return r.journal.BeginConsuming(runID, grantID, use, resources(es)...)
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
	if rep := r.backendOf(a.Resources).VerifyAbsent(ContainerID(runID), backendResources(a.Resources)); !rep.Verified {
		return r.residual(runID, fmt.Sprintf("%s; and its intents are not verified gone: %v", reason, rep.Steps))
	}
	if err := r.journal.Finish(runID, journal.Clean, reason+"; nothing was created", "", a.Resources...); err != nil {
		return r.residual(runID, err.Error())
	}
	return nil
}

// ContainerID is the runtime container id of a run.
func ContainerID(runID string) string { return "custody-" + runID }

// recorder adapts the journal to the backend's Recorder for one run. With
// deferRemovals it keeps the removals for the caller to journal with the
// attempt's final state.
type recorder struct {
	j     *journal.Journal
	runID string
	// begin: the attempt is not journalled yet; the first Intent opens it.
	begin         bool
	grantID       string
	deferRemovals bool
	removed       []journal.Resource
	steps         *steps // the launch's stage timings (nil: not timed)
}

func (r *recorder) Intent(es ...backend.Resource) error {
	if r.begin {
		if err := r.j.Begin(r.runID, r.grantID, resources(es)...); err != nil {
			return err
		}
		r.begin = false
		return nil
	}
	return r.j.Intent(r.runID, resources(es)...)
}
func (r *recorder) Created(es ...backend.Resource) error {
	return r.j.Created(r.runID, resources(es)...)
}
func (r *recorder) Removed(es ...backend.Resource) error {
	if r.deferRemovals {
		r.removed = append(r.removed, resources(es)...)
		return nil
	}
	return r.j.Removed(r.runID, resources(es)...)
}

// resources are a backend's records as the journal keeps them.
func resources(es []backend.Resource) []journal.Resource {
	out := make([]journal.Resource, len(es))
	for i, e := range es {
		out[i] = journal.Resource{Kind: e.Kind, Name: e.Name, Identity: e.Identity}
	}
	return out
}

// backendResources are journalled resources as a backend gets them back.
func backendResources(rs []journal.Resource) []backend.Resource {
	out := make([]backend.Resource, len(rs))
	for i, x := range rs {
		out[i] = backend.Resource{Kind: x.Kind, Name: x.Name, State: x.State, Identity: x.Identity}
	}
	return out
}

// sealedSpec is an image's sealed file as the backend contract names it;
// nil for an image this process has not verified sealed.
func sealedSpec(s *image.Sealed) *backend.SealedImage {
	if s == nil {
		return nil
	}
	return &backend.SealedImage{File: s.File, Identity: s.Identity, Mount: s.Mount}
}

// spec is the neutral launch spec of a prepared phase.
func (r *Runner) spec(p *Prepared) backend.Spec {
	env := make([]string, 0, len(p.Plan.Env))
	for k, v := range p.Plan.Env {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	s := backend.Spec{
		Rootfs:      p.Image.Rootfs,
		Sealed:      sealedSpec(p.Image.Sealed),
		Args:        p.Plan.Command,
		Env:         env,
		Cwd:         p.Plan.Workdir,
		Hostname:    "custody",
		OutputPath:  p.Plan.OutputPath,
		OutputBytes: p.Plan.OutputBytes,
		OutputFiles: p.Plan.OutputFiles,
		TmpBytes:    p.Plan.TmpBytes,
		Memory:      p.Plan.Memory,
		Pids:        p.Plan.Pids,
		CPU:         p.Plan.CPU,
		FileSize:    max(p.Plan.OutputBytes, p.Plan.TmpBytes),
	}
	if u := p.Plan.User; u != nil {
		s.UID, s.GID = u.UID, u.GID
	}
	s.Nofile = p.Plan.Nofile
	if p.Plan.StopSignal != "" {
		s.StopSignal = unix.SignalNum(p.Plan.StopSignal)
	}
	s.Inputs = slices.Clone(p.mounts)
	if p.Egress != nil {
		s.Egress = p.Egress.Spec
	}
	return s
}

// NewRunID returns a fresh random run id.
func NewRunID() string { return randid.New(8) }

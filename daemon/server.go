package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/launch"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/pool"
	"github.com/custody-dev/custody/retention"
	"github.com/custody-dev/custody/runrecord"
	"github.com/custody-dev/custody/store"
	"github.com/custody-dev/custody/workspace"
)

// server is custodyd: it owns the state dir, keys, store and both sockets.
type server struct {
	cfg config.Config
	log *slog.Logger
	db  *store.DB
	r   *host.Runner
	// runnerKeys are the runner identity's keys: receipts a retired one
	// signed before its rotation are still this runner's own.
	runnerKeys *keys.Set
	// issuerKeys are the grant issuer's keys.
	issuerKeys *keys.Set
	verifier   *grant.Verifier
	// oplog records revocations and retention deletions.
	oplog *evidence.OpLog
	// now is the clock grants are checked against (tests move it).
	now       func() time.Time
	faults    func(stage string)
	retention retention.Policy
	// svc is the service manager's side: readiness (Type=notify) and
	// the leaf cgroup (service.go); the zero value does nothing.
	svc Service
	// metrics are the operator's Prometheus series (metrics.go).
	metrics *metrics
	// stall is how long a run's client may stop reading after the run
	// before its stream is dropped.
	stall time.Duration
	// dryRuns bound each uid's dry runs on the submit socket.
	dryRuns *dryRunLimiter
	// auths are the standing authorizations' revocations and use
	// (authorize.go).
	auths *authorizations

	// l is the launch pipeline.
	l *launch.Launcher
	// launching is held shared by every run and exclusively by recovery.
	launching sync.RWMutex

	// packs serves the pack endpoints (packhandlers.go).
	packs *packAPI

	mu     sync.RWMutex
	pol    *policy.Policy
	polDig string
	polErr error
	polAt  time.Time
	active map[string]*activeRun

	// poolWake wakes the pool's upkeep on a policy reload; poolRounds
	// counts its rounds (pool.go).
	poolWake   wake
	poolRounds atomic.Int64
}

type activeRun struct {
	owner  uint32
	cancel context.CancelFunc
}

// Backends are the concrete backends custodyd wires in: the daemon names
// none, it drives them as backend.Backend and workspace.Engine.
type Backends struct {
	// Phase makes the default phase backend (oci) and the others the
	// configuration lists, on the runner's configuration; egress says
	// sandboxes may be given custodyd's egress proxy and broker.
	Phase func(rc host.Config, egress bool, log *slog.Logger) (host.BackendFactory, []host.BackendFactory)
	// PackEngine opens the engine the docker: section names, and says how
	// to close it; nil means no engine can be opened.
	PackEngine func(ctx context.Context, cfg *config.DockerConfig, log *slog.Logger) (workspace.Engine, func() error, error)
}

// runnerConfig is the runner's configuration from custodyd's runner:
// section.
func runnerConfig(c config.Runner) host.Config {
	return host.Config{StateDir: c.StateDir, RuntimeDir: c.RuntimeDir, Runtime: host.Runtime(c.Runtime), Gate: c.Gate,
		UserNamespace: (*host.IDRange)(c.UserNamespace), PidfdNetnsFault: c.PidfdNetnsFault}
}

func newServer(ctx context.Context, cfg config.Config, log *slog.Logger, b Backends) (*server, error) {
	maxTTL, err := time.ParseDuration(cfg.MaxGrantTTL)
	if err != nil || maxTTL <= 0 {
		return nil, fmt.Errorf("maxGrantTTL %q: want a positive duration", cfg.MaxGrantTTL)
	}
	if err := os.MkdirAll(cfg.Runner.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	if err := os.Chmod(cfg.Runner.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	keyDir := filepath.Join(cfg.Runner.StateDir, "keys")
	if err := os.MkdirAll(keyDir, 0o700); err != nil {
		return nil, fmt.Errorf("key dir: %w", err)
	}
	ret, err := retention.Parse(cfg.Retention.Receipts, cfg.Retention.Outputs)
	if err != nil {
		return nil, err
	}
	s := &server{cfg: cfg, log: log, retention: ret, now: time.Now, stall: stallTimeout, active: map[string]*activeRun{}}
	if s.dryRuns, err = newDryRunLimiter(cfg.SubmitLimits.DryRuns, time.Now); err != nil {
		return nil, err
	}
	if s.stall, err = stallAfter(cfg.SubmitLimits); err != nil {
		return nil, err
	}
	for _, name := range []string{"runner", "issuer"} {
		if err := keys.Unfinished(ctx, keyDir, name); err != nil {
			return nil, err
		}
	}
	if err := s.loadKeys(ctx, keyDir, maxTTL); err != nil {
		return nil, err
	}
	if s.db, err = store.Open(host.StorePath(runnerConfig(cfg.Runner)), store.WithRunIndex(launch.OutputIndex())); err != nil {
		return nil, err
	}
	if err := anchorOpLog(s.oplog, s.db, opLogPath(cfg.Runner.StateDir)); err != nil {
		s.db.Close()
		return nil, err
	}
	// Before recovery records the runs a stop cut short: those count as
	// unobserved, not as the nothing recovery's record says they used.
	s.auths.settle(s.mintedRunCPU)
	s.faults = faultHook()
	rc := runnerConfig(cfg.Runner)
	rc.Faults = s.faults
	eg, err := launchEgress(cfg.Egress)
	if err != nil {
		s.db.Close()
		return nil, err
	}
	phase, more := b.Phase(rc, eg != nil, log)
	if s.r, err = host.New(ctx, rc, s.db, phase, log, more...); err != nil {
		s.db.Close()
		return nil, err
	}
	if s.l, err = launch.New(launch.Config{
		Runner: s.r, Store: s.db, Verifier: s.verifier, RunnerKey: s.runnerKeys.Current, IssuerKey: s.issuerKeys.Current,
		Policy: s.currentPolicy, Now: func() time.Time { return s.now() }, MaxTTL: maxTTL,
		Faults: s.faults, Log: log, Egress: eg,
	}); err != nil {
		s.db.Close()
		return nil, err
	}
	s.packs = &packAPI{docker: cfg.Docker, log: log, dryRun: s.dryRun}
	if cfg.Docker != nil {
		// A pack service that cannot start takes the packs down, not the
		// phase runner: every pack endpoint then refuses with why.
		if s.packs.packs, s.packs.err = newPacks(ctx, s, cfg.Docker, b.PackEngine); s.packs.err != nil {
			s.packs.packs = nil
			log.Error("packs unavailable: every pack request is refused", "engine", cfg.Docker.Host, "err", s.packs.err)
		}
	}
	// Before any work: finish what a previous runner left behind.
	if _, err := s.recover(ctx); err != nil {
		s.db.Close()
		return nil, fmt.Errorf("recovery: %w", err)
	}
	s.reloadPolicy()
	if runs, outs, err := s.prune(time.Now()); err != nil {
		s.log.Warn("retention", "err", err)
	} else if runs+outs > 0 {
		s.log.Info("retention applied", "runs", runs, "outputs", outs)
	}
	s.metrics = newMetrics(s)
	return s, nil
}

// loadKeys loads the runner and issuer key sets (making a key on a first
// start), opens the operations log with the runner key, applies the
// revocations it records, and builds the grant verifier on the issuer
// set: one key set each, shared by the verifier, receipt ownership checks
// and revocation.
func (s *server) loadKeys(ctx context.Context, keyDir string, maxTTL time.Duration) error {
	var current [2]*keys.Signer
	for i, k := range []struct{ name, what string }{{"runner", "runner identity"}, {"issuer", "grant issuer"}} {
		var created bool
		var err error
		if current[i], created, err = keys.LoadOrCreate(keyDir, k.name); err != nil {
			return fmt.Errorf("%s key: %w", k.what, err)
		} else if created {
			s.log.Info("generated "+k.what+" key", "dir", keyDir)
		}
	}
	var err error
	if s.issuerKeys, err = keys.LoadSet(ctx, keyDir, "issuer", current[1]); err != nil {
		return fmt.Errorf("retired issuer keys: %w", err)
	}
	if s.runnerKeys, err = keys.LoadSet(ctx, keyDir, "runner", current[0]); err != nil {
		return fmt.Errorf("retired runner keys: %w", err)
	}
	trusted := []*keys.Verifier{s.issuerKeys.Current.Verifier()}
	for _, p := range s.cfg.TrustedIssuers {
		v, err := keys.LoadPublic(p)
		if err != nil {
			return fmt.Errorf("trusted issuer %s: %w", p, err)
		}
		trusted = append(trusted, v)
	}
	if s.oplog, err = evidence.OpenOpLog(opLogPath(s.cfg.Runner.StateDir), s.runnerKeys.Current); err != nil {
		return err
	}
	entries, err := verifiedOpEntries(ctx, s.oplog, s.runnerKeys.Current.ID(), s.runnerKeys.Verifiers())
	if err != nil {
		return fmt.Errorf("operations log: %w; fix: restore it from a backup, or move it aside to start a new one (its lines are evidence: keep them)", err)
	}
	revoked := keyRevocations(entries)
	s.auths = newAuthorizations(func() time.Time { return s.now() })
	s.auths.load(entries)
	for id, k := range revoked {
		s.runnerKeys.Revoke(id, k.RevokedAt)
		s.issuerKeys.Revoke(id, k.RevokedAt)
	}
	// A grant the previous issuer key signed just before a rotation keeps
	// verifying for as long as such a grant can live (maxGrantTTL), unless
	// the operations log says that key was revoked.
	var overlap []grant.Option
	for _, r := range s.issuerKeys.Retired {
		if _, gone := revoked[r.Key.ID()]; !gone {
			overlap = append(overlap, grant.WithRetired(r.Key, r.At, maxTTL))
		}
	}
	if s.verifier, err = grant.NewVerifier(trusted, overlap...); err != nil {
		return err
	}
	for id := range revoked {
		s.verifier.Distrust(id) // also a revoked key listed in trustedIssuers
	}
	return nil
}

// recover runs recovery and records a failure result for each recovered
// attempt whose run never got one (its runner died mid-run).
func (s *server) recover(ctx context.Context) (*host.Recovery, error) {
	rec, err := s.r.Recover(ctx)
	if err != nil {
		return nil, err
	}
	for _, a := range rec.Attempts {
		var existing runrecord.Record
		if s.db.GetRun(a.RunID, &existing) == nil || pool.IsMember(a) {
			continue // a pool member ran no workload: it has no run
		}
		res := &runrecord.Result{RunID: a.RunID, GrantID: a.GrantID, Status: runrecord.StatusFailed, ExitCode: -1,
			Error:   fmt.Sprintf("the runner stopped during this run; recovery left it %s: %s", a.State, a.Detail),
			Started: a.Started, Finished: a.Updated, Inputs: []runrecord.Input{}}
		if use, err := s.db.GrantUsed(a.GrantID); err == nil {
			res.Actor = use.Actor // what else the run was is not on record: unknown
		}
		_ = s.db.PutRun(a.RunID, runrecord.Record{Owner: 0, Result: res})
	}
	return rec, nil
}

func (s *server) close() error { return s.db.Close() }

// reloadPolicy reads the policy file. On any failure the daemon holds no
// policy — never the previous one — and refuses every request with why.
func (s *server) reloadPolicy() api.PolicyStatus {
	pol, dig, err := readPolicy(s.cfg.Policy)
	if err == nil {
		// A pool profile this runner cannot serve refuses the policy.
		err = s.r.Pool().Check(pol)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pol, s.polDig, s.polErr, s.polAt = pol, dig, err, time.Now().UTC()
	s.poolWake.signal() // the pool's upkeep reads the new policy at once
	if err != nil {
		s.pol, s.polDig = nil, ""
		s.log.Error("operator policy invalid: refusing every request", "path", s.cfg.Policy, "err", err)
	} else {
		s.log.Info("operator policy loaded", "path", s.cfg.Policy, "digest", dig)
	}
	return s.policyStatusLocked()
}

func readPolicy(path string) (*policy.Policy, string, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, "", err
	}
	if !fi.Mode().IsRegular() {
		return nil, "", fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Size() > policy.MaxSize {
		return nil, "", fmt.Errorf("%s is larger than %d bytes", path, policy.MaxSize)
	}
	// Parse exactly the bytes that are digested: grants bind this digest.
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	pol, err := policy.Parse(data)
	if err != nil {
		return nil, "", err
	}
	return pol, policy.Digest(data), nil
}

func (s *server) policyStatusLocked() api.PolicyStatus {
	st := api.PolicyStatus{Path: s.cfg.Policy, Digest: s.polDig, LoadedAt: s.polAt}
	if s.polErr != nil {
		st.Error = s.polErr.Error()
	}
	return st
}

// currentPolicy returns the policy in force, or the refusal that stands in
// for it.
func (s *server) currentPolicy() (*policy.Policy, string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.pol == nil {
		return nil, "", fmt.Errorf("%w: the operator policy %s failed to load: %v; fix: correct it and reload (custody policy reload)", launch.ErrNoPolicy, s.cfg.Policy, s.polErr)
	}
	return s.pol, s.polDig, nil
}

// serve listens on both sockets until ctx ends.
func (s *server) serve(ctx context.Context) error {
	lim, err := raiseNoFile(s.log)
	if err != nil {
		return err
	}
	control, err := listen(s.cfg.ControlSocket, 0o600)
	if err != nil {
		return err
	}
	submit, err := listen(s.cfg.SubmitSocket, 0o666)
	if err != nil {
		control.Close()
		return err
	}
	// Separate listeners, servers and caps: no number of submit connections
	// takes the operator's socket's descriptors or goroutines.
	servers := []*http.Server{httpServer(s.controlMux()), httpServer(s.submitMux())}
	errc := make(chan error, 2)
	go func() {
		errc <- servers[0].Serve(newLimitListener(control, "control", lim.Control, lim.Control, s.log))
	}()
	go func() {
		errc <- servers[1].Serve(newLimitListener(submit, "submit", lim.Submit, lim.SubmitPerUID, s.log))
	}()
	s.log.Info("custodyd serving", "control", s.cfg.ControlSocket, "submit", s.cfg.SubmitSocket,
		"runner", s.runnerKeys.Current.ID(), "issuer", s.issuerKeys.Current.ID())
	stopPool := s.startPool(ctx)
	defer stopPool()
	s.ready()
	tick := time.NewTicker(time.Hour)
	defer tick.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err = <-errc:
			break loop
		case now := <-tick.C:
			if _, _, perr := s.prune(now); perr != nil {
				s.log.Warn("retention", "err", perr)
			}
		}
	}
	s.logStopping(err)
	s.cancelAll()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, srv := range servers {
		_ = srv.Shutdown(sctx)
	}
	s.log.Info("custodyd stopped serving")
	os.Remove(s.cfg.ControlSocket)
	os.Remove(s.cfg.SubmitSocket)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func (s *server) cancelAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.active {
		a.cancel()
	}
}

// listen creates a unix socket with mode perm, replacing only a stale
// socket (never another kind of file).
func listen(path string, perm os.FileMode) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return nil, fmt.Errorf("socket dir: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket; not replacing it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	// Create the socket with no access, then open it up: no window where
	// it is more open than perm.
	old := unix.Umask(0o777)
	l, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if err := os.Chmod(path, perm); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf("decode request: %v", err)}
	}
	return nil
}

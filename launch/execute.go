package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/pool"
	"github.com/custody-dev/custody/request"
	"github.com/custody-dev/custody/runrecord"
	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/store"
	"github.com/custody-dev/custody/treehash"
)

// attempt is one run's journal attempt as the pipeline drives it, from
// the spend (or, for a launch without a grant, the backend's first
// intent) to the close that records the run. Its state says what is on
// record, so a refusal, the end of the run and Execute each know what is
// left to do. It is the run's backend.Recorder: the verified removals it
// is told of are journalled with the attempt's final state.
type attempt struct {
	j       *journal.Journal
	runID   string
	grantID string
	state   attemptState
	removed []journal.Resource
}

// attemptState is how far a run's attempt is on record.
type attemptState int

const (
	// unopened: nothing is journalled (a launch without a grant); the
	// backend's first intent opens the attempt, before anything is made.
	unopened attemptState = iota
	// open: the spend opened the attempt with the backend's intents (or,
	// for a run a pool member serves, with none) in the transaction that
	// consumed the grant.
	open
	// recorded: closed clean, with the run's record in the same
	// transaction.
	recorded
	// closed: closed without the run's record (a refusal that abandoned
	// it, a residual cleanup, or a record that could not be made): the
	// record is stored on its own.
	closed
)

func (a *attempt) Intent(es ...backend.Resource) error {
	if a.state == unopened {
		if err := a.j.Begin(a.runID, a.grantID, journal.FromBackend(es)...); err != nil {
			return err
		}
		a.state = open
		return nil
	}
	return a.j.Intent(a.runID, journal.FromBackend(es)...)
}

func (a *attempt) Created(es ...backend.Resource) error {
	return a.j.Created(a.runID, journal.FromBackend(es)...)
}

func (a *attempt) Removed(es ...backend.Resource) error {
	a.removed = append(a.removed, journal.FromBackend(es)...)
	return nil
}

// abandon closes an opened attempt of a launch refused before its
// backend made anything (its intents are checked gone like a recovery's).
func (r *Run) abandon(reason string) {
	if r.a.state != open {
		return
	}
	r.a.state = closed
	if err := r.h.Abandon(r.a.runID, reason); err != nil {
		r.log.Error("close the refused attempt", "run", r.a.runID, "err", err)
	}
}

// execute runs the phase to the end and returns its result. Every launch
// yields a result, failed ones included; err is set only when the run
// could not be attempted or its cleanup could not be verified. stdout and
// stderr get what the run's spools keep, as it comes, and must not block:
// a writer that waits on a client holds the workload's pipe (the daemon's
// stream queues or drops instead).
func (r *Run) execute(ctx context.Context, stdout, stderr io.Writer) (*runrecord.Result, error) {
	defer r.lease.Release() // a member left unattached goes back
	defer func() {
		// The run no longer mounts its input snapshots: they may be
		// pruned once old.
		for _, in := range r.prep.Inputs {
			r.h.Inputs().Release(in.Digest)
		}
	}()
	h, p, a := r.h, r.prep, r.a
	res := r.newResult()
	b, err := h.BackendNamed(p.Plan.Backend)
	if err != nil {
		refuse(res, err)
		r.abandon("refused before launch: " + err.Error())
		return res, err
	}
	if err := h.CheckQuarantineFor(p.Plan.Backend); err != nil {
		refuse(res, err)
		r.abandon("refused before launch: " + err.Error())
		return res, err
	}
	// The snapshots need no second read here: Snapshot hashed exactly the
	// bytes it wrote, and re-hashed any stored copy it reused.
	// The attempt is journalled with the backend's first record, the intent
	// of everything it may create, before anything is created. The verified
	// removals are journalled with the attempt's final state.
	st := newSteps()
	id := host.ContainerID(a.runID)
	if a.state == unopened {
		// Not consumed with its intents (a launch without a grant): the
		// intents open the attempt here, before anything is created.
		es, err := b.Intents(id)
		if err == nil {
			err = a.Intent(es...)
		}
		if err != nil {
			refuse(res, err)
			r.close(ctx, res, st)
			return res, err
		}
	}
	c, err := r.prepareSandbox(ctx, b, id, res)
	st.mark("prepare")
	if err != nil {
		refuse(res, err)
		// A backend that made part of the sandbox and says at which stage
		// it failed: the grant was spent on a run that failed to start.
		var ss interface{ StartStage() string }
		if c != nil && errors.As(err, &ss) {
			res.Status, res.FailedStage = runrecord.StatusFailedToStart, ss.StartStage()
		}
		// A reserved member destroyed unverified: nothing of the run's is
		// left, but its grant was spent on the member.
		var pt *pool.TakeError
		if c == nil && errors.As(err, &pt) {
			res.Status, res.FailedStage = runrecord.StatusFailedToStart, pt.StartStage()
		}
		if c == nil {
			// Refused before the backend made anything; the intents on
			// record are checked gone like a recovery's.
			r.abandon("refused before launch: " + err.Error())
			return res, err
		}
		res.Cleanup = cleanup(c.Cleanup(ctx))
		// An unverified cleanup's quarantine is the error the caller
		// must see, as after a run.
		if qerr := r.close(ctx, res, st); qerr != nil {
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
	sp := openSpools(stdout, stderr, host.LogDir(h.Config()), res.RunID, r.log)
	ex, runErr := c.Run(ctx, p.Plan.WallTime, backend.IO{Stdout: sp.stdout, Stderr: sp.stderr})
	st.mark("exec")
	// Digests a backend takes while the workload runs (the vm backend's
	// output stream, as the host received it) join those of the launch.
	maps.Copy(res.Evidence, c.Evidence())
	sp.record(res)
	st.mark("streams")
	// Custody and cleanup finish even when the caller has gone: a
	// cancelled run still gets its outputs recorded and its tree verified.
	cancelled := ctx.Err() != nil
	ctx = context.WithoutCancel(ctx)
	if runErr == nil {
		setExit(res, ex)
		var left leftOut
		limits := outputLimits(p.Plan)
		limits.Leave = left.leave
		out, err := takeOutput(ctx, h.Outputs(), c.Output(), limits)
		if err != nil {
			res.Status = runrecord.StatusFailed
			res.Error = fmt.Sprintf("output custody: %v", err)
		} else {
			res.Output = newOutput(out)
			res.Output.LeftOut, res.Output.LeftOutTotal = left.list()
		}
		st.mark("output")
	} else {
		res.Status = runrecord.StatusFailed
		res.Error = runErr.Error()
		res.Finished = time.Now().UTC()
		// A failure before the workload started is no workload's exit.
		var ss interface{ StartStage() string }
		switch {
		case cancelled:
			// The caller cancelled or went away before the workload began:
			// that is a cancellation, not a sandbox that failed to start.
			res.Status, res.ExitCode = runrecord.StatusCancelled, -1
		case errors.As(runErr, &ss):
			res.Status, res.ExitCode, res.FailedStage = runrecord.StatusFailedToStart, -1, ss.StartStage()
		default:
			// Failed once under way: what was observed, and the rest
			// marked unobserved.
			failedAfterStart(res, ex, runErr)
		}
	}
	res.Cleanup = cleanup(c.Cleanup(ctx))
	sp.wait()
	st.mark("cleanup")
	err = r.close(ctx, res, st)
	st.log(r.log, res.RunID)
	if err != nil {
		return res, err
	}
	return res, runErr
}

// close closes the attempt once cleanup is done: clean, with the run's
// record, in one durable transaction when cleanup was verified; else
// residual, which quarantines the runner (the error says so).
func (r *Run) close(ctx context.Context, res *runrecord.Result, st *steps) error {
	h, a := r.h, r.a
	if a.state == unopened {
		// The backend journalled nothing, so it created nothing; the
		// attempt is still recorded.
		if err := a.j.Begin(res.RunID, a.grantID); err != nil {
			r.log.Error("journal attempt", "run", res.RunID, "err", err)
		}
	}
	a.state = closed
	if res.Cleanup != nil && !res.Cleanup.Verified {
		var failed []string
		for _, s := range res.Cleanup.Steps {
			if !s.OK {
				failed = append(failed, s.Name+": "+s.Detail)
			}
		}
		return h.ResidualOn(r.prep.Plan.Backend, res.RunID, fmt.Sprintf("cleanup of run %s not verified: %v", res.RunID, failed), a.removed...)
	}
	var runs []store.RunRecord
	v, err := r.record(ctx, res).Encode()
	st.mark("receipt")
	if err != nil {
		r.log.Error("run record", "run", res.RunID, "err", err)
	} else {
		runs = append(runs, store.RunRecord{ID: res.RunID, Value: v})
	}
	err = a.j.FinishRecording(res.RunID, runs, journal.Clean, "", "", a.removed...)
	st.mark("journal")
	if err != nil {
		return h.Residual(res.RunID, fmt.Sprintf("cleanup looked verified but the journal disagrees: %v", err), a.removed...)
	}
	if len(runs) > 0 {
		a.state = recorded
	}
	return nil
}

// prepareSandbox is the run's sandbox: its reserved pool member, taken
// and attached, or a cold Prepare (also when the member cannot be taken:
// the cold path is the same containment, made for this run alone).
func (r *Run) prepareSandbox(ctx context.Context, b backend.Backend, id string, res *runrecord.Result) (backend.Sandbox, error) {
	s := spec(r.prep, r.egress)
	if r.lease.Held() {
		m := r.lease.Member()
		sb, err := r.lease.Take(ctx, s, r.a.runID)
		if err == nil {
			res.Pooled = &runrecord.PoolMember{Profile: m.Profile, Sandbox: m.Sandbox, PreparedAt: m.PreparedAt}
			return sb, nil
		}
		var pt *pool.TakeError
		if errors.As(err, &pt) {
			return nil, err
		}
		r.log.Warn("launching cold", "run", r.a.runID, "err", err)
		// The run's attempt was opened without intents; a cold launch
		// records them before it creates anything.
		es, err := b.Intents(id)
		if err == nil {
			err = r.a.Intent(es...)
		}
		if err != nil {
			return nil, err
		}
	}
	return b.Prepare(ctx, id, s, r.a)
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
func takeOutput(ctx context.Context, outputs *snapshot.Store, out backend.Output, limits treehash.Options) (*snapshot.Snapshot, error) {
	if used, err := out.Used(); err == nil && used <= smallOutput {
		snap, ok, err := outputs.Reuse(ctx, out.Dir(), limits)
		if err != nil || ok {
			return snap, err
		}
	}
	return outputs.Take(ctx, out.Dir(), limits)
}

// spec is the neutral launch spec of a prepared phase.
func spec(p *Prepared, eg *Egress) backend.Spec {
	env := make([]string, 0, len(p.Plan.Env))
	for k, v := range p.Plan.Env {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	s := backend.Spec{
		Rootfs: p.Image.Rootfs,
		Image:  p.Image.Digest,
		// A backend that pulls images (kube) pulls them by digest.
		ImageManifest: p.Image.Manifest,
		Sealed:        p.Image.Sealed.Spec(),
		Args:          p.Plan.Command,
		Env:           env,
		Cwd:           p.Plan.Workdir,
		Hostname:      "custody",
		OutputPath:    p.Plan.OutputPath,
		OutputBytes:   p.Plan.OutputBytes,
		OutputFiles:   p.Plan.OutputFiles,
		TmpBytes:      p.Plan.TmpBytes,
		Memory:        p.Plan.Memory,
		Pids:          p.Plan.Pids,
		CPU:           p.Plan.CPU,
		FileSize:      max(p.Plan.OutputBytes, p.Plan.TmpBytes),
	}
	if u := p.Plan.User; u != nil {
		s.UID, s.GID = u.UID, u.GID
	}
	s.Nofile = p.Plan.Nofile
	if p.Plan.StopSignal != "" {
		s.StopSignal = unix.SignalNum(p.Plan.StopSignal)
	}
	s.Inputs = slices.Clone(p.Mounts)
	if eg != nil {
		s.Egress = eg.Spec
	}
	return s
}

// newResult is the run's result as it starts.
func (r *Run) newResult() *runrecord.Result {
	h, p := r.h, r.prep
	b, err := h.BackendNamed(p.Plan.Backend)
	if err != nil {
		b = h.Backend() // execute refuses the plan
	}
	rt := runrecord.Runtime(h.Config().Runtime)
	if b != h.Backend() {
		// Another backend's runtime is its own pinned binary (e.g. QEMU).
		id := b.Identity()
		rt = runrecord.Runtime{Path: id.Path, Version: id.Version, SHA256: id.SHA256}
	}
	res := &runrecord.Result{
		RunID:         r.a.runID,
		Name:          p.Plan.Name,
		Tier:          string(p.Plan.Tier),
		Unqualified:   p.Plan.Unqualified,
		Runtime:       rt,
		UserNamespace: b.Capabilities().UserNamespace,
		Image:         p.Image.Digest,
		Inputs:        []runrecord.Input{},
		Started:       time.Now().UTC(),
	}
	for _, in := range p.Inputs {
		res.Inputs = append(res.Inputs, runrecord.Input{Source: in.Source, Target: in.Target, Digest: in.Digest})
	}
	if res.Unqualified {
		res.Tier = request.DevelopmentLabel
	}
	return res
}

func identityRecord(id backend.Identity) *runrecord.BackendIdentity {
	return &runrecord.BackendIdentity{Kind: id.Kind, Version: id.Version, Path: id.Path, SHA256: id.SHA256}
}

func newOutput(s *snapshot.Snapshot) *runrecord.Output {
	o := &runrecord.Output{Digest: s.Digest, Path: s.Path, Bytes: s.Tree.Bytes, Files: []runrecord.OutputFile{}}
	for _, e := range s.Tree.Entries {
		if e.Kind == treehash.KindFile {
			o.Files = append(o.Files, runrecord.OutputFile{Path: e.Path, SHA256: e.SHA256, Size: e.Size})
		}
	}
	return o
}

func cleanup(r backend.CleanupReport) *runrecord.Cleanup {
	c := runrecord.Cleanup(r)
	return &c
}

// refuse records err as a refusal on res.
func refuse(res *runrecord.Result, err error) {
	res.Status = runrecord.StatusRefused
	res.ExitCode = -1
	res.Error = err.Error()
	var re *admission.RefusedError
	if errors.As(err, &re) {
		res.Refusal = recordChecks(re.Checks)
	}
	res.Finished = time.Now().UTC()
}

// recordChecks are admission's verdicts as the run record keeps them.
func recordChecks(cs []admission.Check) []runrecord.Check {
	out := make([]runrecord.Check, 0, len(cs))
	for _, c := range cs {
		out = append(out, runrecord.Check{Requirement: c.Requirement, Verdict: string(c.Verdict), Code: c.Code, Detail: c.Detail, Fix: c.Fix})
	}
	return out
}

// failedAfterStart records a run whose sandbox failed (runErr) once its
// launch was under way: what the backend observed in ex (nil: nothing),
// and every value it did not observe as such, never as a zero (R10). Its
// status is failed unless the observation says it was cancelled, timed
// out or OOM-killed.
func failedAfterStart(res *runrecord.Result, ex *backend.Exit, runErr error) {
	if ex == nil {
		ex = &backend.Exit{CodeUnobserved: true, Started: res.Started, Finished: res.Finished,
			Usage: backend.Usage{PeakMemoryBytes: -1, CPUTimeNanos: -1, OOMKills: -1}}
	}
	setExit(res, ex)
	if res.Status == runrecord.StatusOK || res.Status == runrecord.StatusPidsLimit {
		res.Status = runrecord.StatusFailed
	}
	if ex.CodeUnobserved {
		res.ExitCode, res.Signal, res.ExitUnobserved = -1, "", true
	}
	res.Error = runErr.Error()
}

func setExit(res *runrecord.Result, ex *backend.Exit) {
	res.ExitCode = ex.Code
	res.Signal = ex.Signal
	res.Started, res.Finished = ex.Started.UTC(), ex.Finished.UTC()
	res.Usage = runrecord.Usage{Usage: ex.Usage, Wall: ex.Finished.Sub(ex.Started)}
	res.Observed = ex.Observation
	switch {
	case ex.Cancelled:
		res.Status = runrecord.StatusCancelled
	case ex.TimedOut:
		res.Status = runrecord.StatusTimeout
	case ex.OOMKilled:
		res.Status = runrecord.StatusOOM
	case ex.Usage.PidsLimitHits > 0 && (ex.Code != 0 || ex.Signal != ""):
		// A workload that handled a refused fork and exited 0 succeeded;
		// one that failed after one failed at its pids budget.
		res.Status = runrecord.StatusPidsLimit
	case ex.Code != 0:
		res.Status = runrecord.StatusFailed
	default:
		res.Status = runrecord.StatusOK
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/request"
	"github.com/custody-dev/custody/runner"
	"github.com/custody-dev/custody/store"
)

// parsePhase parses a phase strictly and resolves relative input sources
// against the client's directory.
func parsePhase(src api.PhaseSource) (*request.Phase, error) {
	req, err := request.Parse(src.YAML)
	if err != nil {
		return nil, &api.Error{Code: "refused", Message: err.Error()}
	}
	for i, in := range req.Inputs {
		if filepath.IsAbs(in.Source) {
			req.Inputs[i].Source = filepath.Clean(in.Source)
			continue
		}
		if !filepath.IsAbs(src.BaseDir) {
			return nil, &api.Error{Code: "bad-request", Message: fmt.Sprintf(
				"inputs[%d].source %q is relative and no absolute base directory was sent", i, in.Source)}
		}
		req.Inputs[i].Source = filepath.Join(src.BaseDir, in.Source)
	}
	return req, nil
}

// authorize checks what policy says about who may ask for what, beyond
// admission's request ∩ platform ∩ ceilings.
func authorize(pol *policy.Policy, req *request.Phase, actor string) error {
	var checks []admission.Check
	if !pol.ActorMayRun(actor, string(req.Stage)) {
		checks = append(checks, admission.Check{Requirement: "actor", Verdict: admission.NotGranted,
			Code: string(grant.CodeActorNotAllowed), Detail: fmt.Sprintf("actor %q may not be granted stage %q", actor, req.Stage),
			Fix: "an operator may add the stage to the actor in policy actors"})
	} else if !pol.ActorHasSubmitters(actor) {
		checks = append(checks, admission.Check{Requirement: "actor.submitters", Verdict: admission.NotGranted,
			Code: string(grant.CodeSubmitterNotAllowed), Detail: fmt.Sprintf("actor %q has no submitters, so a grant for it could launch nothing", actor),
			Fix: "an operator may list the uids or gids that submit as this actor in policy actors[].submitters"})
	}
	for _, c := range req.Credentials {
		if !pol.AllowsCredential(c) {
			checks = append(checks, admission.Check{Requirement: "credentials." + c, Verdict: admission.NotGranted,
				Code: "credential-not-granted", Detail: fmt.Sprintf("credential %q is not in the policy", c),
				Fix: "an operator may add the name to policy credentials"})
			continue
		}
		checks = append(checks, admission.Check{Requirement: "credentials." + c, Verdict: admission.Unsupported,
			Code: "no-credential-broker", Detail: "this runner has no credential broker yet, so no credential can be brokered",
			Fix: "run the phase without credentials"})
	}
	if len(checks) > 0 {
		return &admission.RefusedError{Checks: checks}
	}
	return nil
}

func (s *server) handleAdmit(w http.ResponseWriter, r *http.Request) {
	var src api.PhaseSource
	if err := decode(r, &src); err != nil {
		writeError(w, err)
		return
	}
	pol, _, err := s.currentPolicy()
	if err != nil {
		writeError(w, err)
		return
	}
	req, err := parsePhase(src)
	if err != nil {
		writeError(w, err)
		return
	}
	plan, _, err := s.decide(r.Context(), pol, req)
	var re *admission.RefusedError
	if errors.As(err, &re) {
		writeJSON(w, api.AdmitResponse{Admitted: false, Checks: runner.Checks(re.Checks)})
		return
	} else if err != nil {
		writeError(w, err)
		return
	}
	raw, _ := json.Marshal(plan)
	writeJSON(w, api.AdmitResponse{Admitted: true, Plan: raw, Checks: runner.Checks(plan.Checks)})
}

// decide is admission as the dry run and the grant issue both run it: the
// plan, then the inputs read from their roots as a launch would read them
// (without copying), so a dry run can never admit what issue refuses.
func (s *server) decide(ctx context.Context, pol *policy.Policy, req *request.Phase) (*admission.Plan, []runner.Input, error) {
	plan, err := s.r.Admit(req, pol)
	if err != nil {
		return nil, nil, err
	}
	inputs, err := s.r.HashInputs(ctx, plan)
	if err != nil {
		return nil, nil, err
	}
	return plan, inputs, nil
}

// handleIssue mints a grant: the operator's decision, bound to everything
// the runner will re-derive at launch.
func (s *server) handleIssue(w http.ResponseWriter, r *http.Request) {
	var in api.IssueRequest
	if err := decode(r, &in); err != nil {
		writeError(w, err)
		return
	}
	env, err := s.issue(r.Context(), in)
	if err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("grant issued", "actor", in.Actor, "uid", peerOf(r).UID)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(env)
}

func (s *server) issue(ctx context.Context, in api.IssueRequest) ([]byte, error) {
	ttl, err := time.ParseDuration(in.TTL)
	if err != nil || ttl <= 0 || ttl > s.maxTTL {
		return nil, &api.Error{Code: "bad-request", Message: fmt.Sprintf("ttl %q: want a positive duration of at most %s", in.TTL, s.maxTTL)}
	}
	if in.Actor == "" {
		return nil, &api.Error{Code: "bad-request", Message: "actor is required"}
	}
	pol, polDig, err := s.currentPolicy()
	if err != nil {
		return nil, err
	}
	req, err := parsePhase(in.Phase)
	if err != nil {
		return nil, err
	}
	if err := authorize(pol, req, in.Actor); err != nil {
		return nil, err
	}
	plan, inputs, err := s.decide(ctx, pol, req)
	if err != nil {
		return nil, err
	}
	phase, err := req.Canonical()
	if err != nil {
		return nil, err
	}
	now := s.now().UTC().Truncate(time.Second)
	p := grant.Predicate{
		ID: newID(), Actor: in.Actor, Stage: string(req.Stage),
		NotBefore: now, Expires: now.Add(ttl),
		PolicyDigest: polDig,
		Runner:       grant.Runner{ID: s.runnerID.ID()},
		Runtime:      grant.Runtime{Version: s.cfg.Runner.Runtime.Version, SHA256: s.cfg.Runner.Runtime.SHA256},
		Image:        plan.Image,
		Target:       grant.Target{OS: s.r.Profile().OS, Arch: s.r.Profile().Arch},
		Toolchain:    req.Toolchain,
		Inputs:       grant.Inputs{Entries: grantInputs(inputs)},
		Output:       grant.Output{Path: plan.OutputPath, MaxBytes: plan.OutputBytes, MaxFiles: plan.OutputFiles},
		Resources:    resources(plan),
		Egress:       grant.Egress{Mode: string(plan.Network), Destinations: []string{}},
		Credentials:  append([]string{}, req.Credentials...),
		Phase:        phase,
	}
	p.Inputs.ClosureDigest = grant.ClosureDigest(p.Inputs.Entries)
	return grant.Mint(ctx, s.issuer, p)
}

func grantInputs(in []runner.Input) []grant.Input {
	out := make([]grant.Input, 0, len(in))
	for _, i := range in {
		out = append(out, grant.Input{Source: i.Source, Target: i.Target, Digest: i.Digest})
	}
	return out
}

func resources(p *admission.Plan) grant.Resources {
	return grant.Resources{Memory: p.Memory, Pids: p.Pids, CPU: p.CPU,
		WallTimeMillis: p.WallTime.Milliseconds(), TmpBytes: p.TmpBytes}
}

// handleRun is the only way to launch: verify the grant, re-derive every
// bound value, consume it once, then run and stream.
func (s *server) handleRun(w http.ResponseWriter, r *http.Request) {
	var in api.RunRequest
	if err := decode(r, &in); err != nil {
		writeError(w, err)
		return
	}
	ctx := r.Context()
	owner := peerOf(r).UID
	if !s.launch.TryRLock() {
		writeError(w, &api.Error{Code: "refused", Message: "the runner is recovering; retry shortly"})
		return
	}
	defer s.launch.RUnlock()
	prep, g, err := s.admitGrant(ctx, in.Grant, peerOf(r))
	if err != nil {
		s.log.Warn("run refused", "uid", owner, "err", err)
		writeError(w, err)
		return
	}
	runID := prep.RunID
	runCtx, cancel := context.WithCancel(ctx) // client disconnect cancels too
	defer cancel()
	s.mu.Lock()
	s.active[runID] = &activeRun{owner: owner, cancel: cancel}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.active, runID)
		s.mu.Unlock()
	}()

	st := newStream(w, s.stall)
	st.send(api.Event{Type: api.EventStarted, RunID: runID})
	// The receipt is signed once cleanup is done; the runner stores the
	// run record in the transaction that closes the journal's attempt.
	var rcpt *api.Receipt
	var rcptErr string // why a launched run has no receipt
	finalized := false
	finalize := func(res *api.Result) {
		if finalized {
			return
		}
		finalized = true
		res.GrantID, res.Actor, res.Stage = g.Predicate.ID, g.Predicate.Actor, g.Predicate.Stage
		// Every run that launched gets a signed receipt, failed ones too.
		if res.Status != runner.StatusRefused {
			var rerr error
			if rcpt, rerr = s.receipt(context.WithoutCancel(ctx), prep, res, g, in.Grant); rerr != nil {
				s.log.Error("sign receipt", "run", runID, "err", rerr)
				rcptErr = "signing failed: " + rerr.Error()
			}
		}
	}
	prep.Record = func(res *api.Result) ([]byte, error) {
		finalize(res)
		return json.Marshal(runRecord{Owner: owner, Result: res, Receipt: rcpt, ReceiptError: rcptErr})
	}
	res, err := s.r.Launch(runCtx, prep, st.writer(api.EventStdout), st.writer(api.EventStderr))
	if res != nil {
		finalize(res)
		if rcpt != nil {
			st.send(api.Event{Type: api.EventReceipt, RunID: runID, Receipt: rcpt.Envelope, Bundle: rcpt.Bundle,
				Data: []byte(rcpt.RunnerPublicKey)})
		}
		if !prep.Recorded {
			if perr := s.db.PutRun(runID, runRecord{Owner: owner, Result: res, Receipt: rcpt, ReceiptError: rcptErr}); perr != nil {
				s.log.Error("record run", "run", runID, "err", perr)
			}
		}
	}
	if err != nil && res != nil && res.Status == runner.StatusRefused {
		st.finish(api.Event{Type: api.EventError, RunID: runID, Result: res, Error: toAPIError(err)})
		return
	}
	final := api.Event{Type: api.EventResult, RunID: runID, Result: res}
	if err != nil {
		s.log.Error("run failed in the runner", "run", runID, "err", err)
		// The runner could not run it or finish it cleanly: the client must
		// not read the result as a clean run. A cancellation before the
		// workload started is the client's doing, and its result says so.
		if !errors.Is(err, context.Canceled) {
			final.Error = toAPIError(err)
		}
	}
	final.Quarantine = s.quarantinedBy(runID, res, err)
	st.finish(final)
}

// quarantinedBy returns the quarantine a run left the runner in, if any. A
// cleanup that was not verified counts even when the quarantine could not
// be recorded (a full disk): the client hears of it either way.
func (s *server) quarantinedBy(runID string, res *api.Result, err error) *api.Quarantine {
	unverified := res != nil && res.Cleanup != nil && !res.Cleanup.Verified
	if !unverified && !errors.Is(err, runner.ErrQuarantined) {
		return nil
	}
	if q, qerr := s.quarantine(); qerr == nil && q.Quarantined {
		return q
	}
	reason := "cleanup was not verified"
	if err != nil {
		reason = err.Error()
	}
	return &api.Quarantine{Quarantined: true, Since: time.Now().UTC(), Reason: reason, RunID: runID}
}

// admitGrant verifies a grant and re-derives each value it binds. Every
// refusal happens before the grant is consumed or anything is created,
// except the final snapshot comparison, which follows consumption because
// taking a snapshot writes.
func (s *server) admitGrant(ctx context.Context, env []byte, from peer) (*runner.Prepared, *grant.Grant, error) {
	pol, polDig, err := s.currentPolicy()
	if err != nil {
		return nil, nil, err
	}
	if q, err := s.r.Quarantine(); err != nil || q != nil {
		if err == nil {
			err = fmt.Errorf("%w since %s: %s", runner.ErrQuarantined, q.Since.Format(time.RFC3339), q.Reason)
		}
		return nil, nil, err
	}
	g, err := s.verifier.Verify(ctx, env, s.now())
	if err != nil {
		return nil, nil, err
	}
	p := g.Predicate
	// A grant is not a bearer token: only a peer the policy lets submit as
	// the grant's actor may launch it, so a leaked grant file launches
	// nothing.
	if !from.ok || !pol.ActorSubmitter(p.Actor, from.UID, from.GID) {
		return nil, nil, grant.Refuse(grant.CodeSubmitterNotAllowed,
			"field actor: grant %s is for actor %q, which uid %d (gid %d) may not submit as; fix: submit as one of the actor's submitters, or an operator may add this uid or gid to policy actors[].submitters",
			p.ID, p.Actor, from.UID, from.GID)
	}
	if revoked, err := s.db.Revoked(p.ID); err != nil {
		return nil, nil, err
	} else if revoked {
		return nil, nil, grant.Refuse(grant.CodeRevoked, "grant %s was revoked by an operator", p.ID)
	}
	if _, err := s.db.GrantUsed(p.ID); err == nil {
		return nil, nil, grant.Refuse(grant.CodeReplayed, "grant %s was already used; a grant admits one launch", p.ID)
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, nil, err
	}
	rt := s.cfg.Runner.Runtime
	prof := s.r.Profile()
	switch {
	case p.Runner.ID != s.runnerID.ID():
		return nil, nil, grant.Refuse(grant.CodeWrongRunner, "field runner.id: grant is for runner %s, this is %s", p.Runner.ID, s.runnerID.ID())
	case p.PolicyDigest != polDig:
		return nil, nil, grant.Refuse(grant.CodePolicyChanged, "field policyDigest: grant was issued under policy %s, the policy in force is %s; fix: issue a new grant", p.PolicyDigest, polDig)
	case p.Runtime.Version != rt.Version || p.Runtime.SHA256 != rt.SHA256:
		return nil, nil, grant.Refuse(grant.CodeRuntimeChanged, "field runtime: grant binds runc %s sha256:%s, this runner pins %s sha256:%s", p.Runtime.Version, p.Runtime.SHA256, rt.Version, rt.SHA256)
	case p.Target.OS != prof.OS || p.Target.Arch != prof.Arch:
		return nil, nil, grant.Refuse(grant.CodeTargetMismatch, "field target: grant is for %s/%s, this runner is %s/%s", p.Target.OS, p.Target.Arch, prof.OS, prof.Arch)
	}
	var req request.Phase
	dec := json.NewDecoder(bytes.NewReader(p.Phase))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, nil, grant.Refuse(grant.CodeMalformed, "field phase: %v", err)
	}
	if err := req.Validate(); err != nil {
		return nil, nil, grant.Refuse(grant.CodeMalformed, "field phase: %v", err)
	}
	if string(req.Stage) != p.Stage || req.Toolchain != p.Toolchain {
		return nil, nil, grant.Refuse(grant.CodeMalformed, "field stage/toolchain: do not match the phase the grant carries")
	}
	if err := authorize(pol, &req, p.Actor); err != nil {
		return nil, nil, grant.Refuse(grant.CodeNotAdmitted, "%v", err)
	}
	plan, err := s.r.Admit(&req, pol)
	if err != nil {
		return nil, nil, grant.Refuse(grant.CodeNotAdmitted, "%v", err)
	}
	if err := samePlan(p, plan); err != nil {
		return nil, nil, err
	}
	if err := s.r.VerifyImage(ctx, p.Image); err != nil {
		return nil, nil, grant.Refuse(grant.CodeImageChanged, "field image: %v", err)
	}
	hashed, err := s.r.HashInputs(ctx, plan)
	if err != nil {
		return nil, nil, grant.Refuse(grant.CodeInputsChanged, "field inputs: %v", err)
	}
	if err := sameInputs(p.Inputs, grantInputs(hashed)); err != nil {
		return nil, nil, err
	}

	runID := runner.NewRunID()
	// Single use: one durable transaction, before any mutation, that also
	// opens the run's journal attempt with everything it may create.
	if err := s.r.Consume(runID, p.ID, store.GrantUse{At: s.now().UTC(), RunID: runID, Actor: p.Actor}); err != nil {
		switch {
		case errors.Is(err, store.ErrConsumed):
			return nil, nil, grant.Refuse(grant.CodeReplayed, "grant %s was already used; a grant admits one launch", p.ID)
		case errors.Is(err, store.ErrRevoked):
			return nil, nil, grant.Refuse(grant.CodeRevoked, "grant %s was revoked by an operator", p.ID)
		}
		return nil, nil, err
	}
	s.fault("after-consume")
	// A refusal from here on closes the attempt Consume opened.
	abandon := func(err error) (*runner.Prepared, *grant.Grant, error) {
		if aerr := s.r.Abandon(runID, "refused after the grant was consumed: "+err.Error()); aerr != nil {
			s.log.Error("close the refused attempt", "run", runID, "err", aerr)
		}
		return nil, nil, err
	}
	prep, err := s.r.Snapshot(ctx, plan)
	if err != nil {
		return abandon(err)
	}
	s.fault("after-snapshot")
	var snapped []runner.Input = prep.Inputs
	if err := sameInputs(p.Inputs, grantInputs(snapped)); err != nil {
		return abandon(err)
	}
	prep.RunID, prep.GrantID, prep.Begun = runID, p.ID, true
	return prep, g, nil
}

// samePlan compares what admission decides now with what the grant bound.
func samePlan(p grant.Predicate, plan *admission.Plan) error {
	want := resources(plan)
	for _, f := range []struct {
		field      string
		got, bound any
	}{
		{"image", plan.Image, p.Image},
		{"output.path", plan.OutputPath, p.Output.Path},
		{"output.maxBytes", plan.OutputBytes, p.Output.MaxBytes},
		{"output.maxFiles", plan.OutputFiles, p.Output.MaxFiles},
		{"resources.memory", want.Memory, p.Resources.Memory},
		{"resources.pids", want.Pids, p.Resources.Pids},
		{"resources.cpu", want.CPU, p.Resources.CPU},
		{"resources.wallTime", want.WallTimeMillis, p.Resources.WallTimeMillis},
		{"resources.tmpBytes", want.TmpBytes, p.Resources.TmpBytes},
		{"egress", string(plan.Network), p.Egress.Mode},
	} {
		if f.got != f.bound {
			return grant.Refuse(grant.CodeNotAdmitted, "field %s: grant binds %v, admission now gives %v", f.field, f.bound, f.got)
		}
	}
	return nil
}

func sameInputs(bound grant.Inputs, now []grant.Input) error {
	if len(bound.Entries) != len(now) {
		return grant.Refuse(grant.CodeInputsChanged, "field inputs: grant binds %d inputs, found %d", len(bound.Entries), len(now))
	}
	for i, b := range bound.Entries {
		if b != now[i] {
			return grant.Refuse(grant.CodeInputsChanged, "field inputs[%d]: %s bound as %s, now %s; fix: issue a new grant for the new content",
				i, b.Source, b.Digest, now[i].Digest)
		}
	}
	if got := grant.ClosureDigest(now); got != bound.ClosureDigest {
		return grant.Refuse(grant.CodeInputsChanged, "field inputs.closureDigest: bound %s, now %s", bound.ClosureDigest, got)
	}
	return nil
}

// stream sends a run's NDJSON events to its client from a bounded queue,
// on its own goroutine: a client that reads slowly, or not at all, never
// holds the run. Output past maxQueued is dropped from the stream (the
// stream says so) while the run's spools keep and digest all of it. Losing
// the connection is different: the request context ends and cancels the run.
type stream struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration

	mu      sync.Mutex
	queue   []api.Event
	queued  int // output bytes queued or being written
	dropped api.Dropped
	noted   api.Dropped // drops the client has been told of
	closed  bool
	wake    chan struct{}
	done    chan struct{}
}

const (
	// maxQueued bounds the output a stream holds for a client that lags.
	maxQueued = 4 << 20
	// stallTimeout is how long a client may stop reading once the run has
	// ended before its stream is dropped; the result stays retrievable.
	// (server.stall; tests shorten it.)
	stallTimeout = 30 * time.Second
)

func newStream(w http.ResponseWriter, stall time.Duration) *stream {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	s := &stream{w: w, rc: http.NewResponseController(w), stall: stall, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.pump()
	return s
}

// send queues a control event; it is never dropped.
func (s *stream) send(ev api.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.queue = append(s.queue, ev)
	s.signal()
}

func (s *stream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// output queues workload output unless the client is too far behind.
func (s *stream) output(t api.EventType, p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.queued+len(p) > maxQueued {
		if t == api.EventStderr {
			s.dropped.Stderr += int64(len(p))
		} else {
			s.dropped.Stdout += int64(len(p))
		}
		return
	}
	if s.dropped != s.noted {
		d := s.dropped
		s.queue = append(s.queue, api.Event{Type: api.EventDropped, Dropped: &d})
		s.noted = d
	}
	s.queue = append(s.queue, api.Event{Type: t, Data: append([]byte(nil), p...)})
	s.queued += len(p)
	s.signal()
}

func (s *stream) writer(t api.EventType) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		s.output(t, p)
		return len(p), nil
	})
}

// finish queues the final event with the totals dropped, and waits until
// the client has it or has stalled for the stream's stall timeout.
func (s *stream) finish(ev api.Event) {
	s.mu.Lock()
	if s.dropped != (api.Dropped{}) {
		d := s.dropped
		ev.Dropped = &d
	}
	s.queue = append(s.queue, ev)
	s.closed = true
	s.signal()
	s.mu.Unlock()
	// A write blocked on a client that stopped reading gets a deadline too.
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.stall))
	<-s.done
}

// pump writes queued events. Until the run ends a write may block as long
// as the client likes (its output is dropped meanwhile); after, each write
// gets the stall timeout. A failed write ends the stream, not the run.
func (s *stream) pump() {
	defer close(s.done)
	broken := false
	for {
		<-s.wake
		s.mu.Lock()
		batch, closed := s.queue, s.closed
		s.queue = nil
		s.mu.Unlock()
		for _, ev := range batch {
			if !broken {
				broken = s.write(ev, closed) != nil
			}
			// Output in flight counts against maxQueued until written.
			if ev.Type == api.EventStdout || ev.Type == api.EventStderr {
				s.mu.Lock()
				s.queued -= len(ev.Data)
				s.mu.Unlock()
			}
		}
		if closed {
			return
		}
	}
}

func (s *stream) write(ev api.Event, closed bool) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return nil // never happens for an Event; skip it rather than end the stream
	}
	if closed {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.stall))
	}
	if _, err := s.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return s.rc.Flush()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// receipt signs the run's receipt with the runner identity key.
func (s *server) receipt(ctx context.Context, prep *runner.Prepared, res *api.Result, g *grant.Grant, env []byte) (*api.Receipt, error) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, env); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(compact.Bytes())
	rc := s.r.ReceiptFor(prep, res)
	rc.Runner = evidence.Identity{ID: s.runnerID.ID()}
	rc.Grant = evidence.GrantRef{ID: g.Predicate.ID, EnvelopeSHA256: hex.EncodeToString(sum[:]),
		IssuerID: g.IssuerKeyID, Envelope: compact.Bytes()}
	rc.Phase = evidence.PhaseRef{Name: strings.TrimPrefix(g.SubjectName, "phase/"), Stage: g.Predicate.Stage, Digest: g.SubjectDigest}
	signed, err := evidence.SignReceipt(ctx, s.runnerID, rc)
	if err != nil {
		return nil, err
	}
	bundle, err := evidence.Bundle(signed, s.runnerID.ID())
	if err != nil {
		return nil, err
	}
	return &api.Receipt{Envelope: signed, Bundle: bundle, RunnerPublicKey: string(s.runnerID.PublicPEM())}, nil
}

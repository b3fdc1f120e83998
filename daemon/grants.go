package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/launch"
	"github.com/custody-dev/custody/runrecord"
)

// handleAdmit is the dry run. On the control socket it is the grant
// issue's decision, inputs read and digested; on the submit socket
// (handleSubmitAdmit) it answers a submitter for its own actor only.
func (s *server) handleAdmit(w http.ResponseWriter, r *http.Request) {
	var in api.AdmitRequest
	if err := decode(r, &in); err != nil {
		writeError(w, err)
		return
	}
	req, err := launch.ParsePhase(in.YAML, in.BaseDir)
	if err != nil {
		writeError(w, err)
		return
	}
	plan, _, err := s.l.DecideFor(r.Context(), req, in.Actor, in.ResolvedAtRun...)
	writeAdmit(w, plan, err)
}

// handleSubmitAdmit is a client's dry run, bounded per uid: refused the
// same way whatever it asks unless the peer submits as the actor, and
// judged without reading any host path the request names (see
// launch.Preview), so it is neither an oracle on the host's files nor a
// way to make custodyd hash them.
func (s *server) handleSubmitAdmit(w http.ResponseWriter, r *http.Request) {
	p := peerOf(r)
	release, ok := s.dryRun(w, p.UID)
	if !ok {
		return
	}
	defer release()
	var in api.AdmitRequest
	if err := decode(r, &in); err != nil {
		writeError(w, err)
		return
	}
	who, err := s.l.PreviewAsker(in.Actor, launch.Peer{UID: p.UID, GID: p.GID, PID: p.PID, Known: p.ok})
	if err != nil {
		writeAdmit(w, nil, err)
		return
	}
	req, err := launch.ParsePhase(in.YAML, in.BaseDir)
	if err != nil {
		writeError(w, err)
		return
	}
	plan, err := s.l.Preview(r.Context(), req, who, in.ResolvedAtRun...)
	writeAdmit(w, plan, err)
}

// dryRun takes one of uid's dry runs on the submit socket, or answers the
// refusal, saying when to retry, and returns false.
func (s *server) dryRun(w http.ResponseWriter, uid uint32) (release func(), ok bool) {
	release, err := s.dryRuns.acquire(uid)
	if err != nil {
		var rl *rateLimitedError
		if errors.As(err, &rl) {
			w.Header().Set("Retry-After", rl.retryAfter())
		}
		writeError(w, err)
		return nil, false
	}
	return release, true
}

// writeAdmit answers a dry run: the plan, or every refused requirement.
func writeAdmit(w http.ResponseWriter, plan *admission.Plan, err error) {
	var re *admission.RefusedError
	if errors.As(err, &re) {
		writeJSON(w, api.AdmitResponse{Admitted: false, Checks: wireChecks(re.Checks)})
		return
	} else if err != nil {
		writeError(w, err)
		return
	}
	raw, _ := json.Marshal(plan)
	writeJSON(w, api.AdmitResponse{Admitted: true, Plan: raw, Checks: wireChecks(plan.Checks)})
}

// handleIssue mints a grant: the operator's decision, bound to everything
// the runner will re-derive at launch.
func (s *server) handleIssue(w http.ResponseWriter, r *http.Request) {
	var in api.IssueRequest
	if err := decode(r, &in); err != nil {
		writeError(w, err)
		return
	}
	ttl, err := time.ParseDuration(in.TTL)
	if err != nil {
		writeError(w, &api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf("ttl %q: %v", in.TTL, err)})
		return
	}
	if len(in.Phase.ResolvedAtRun) > 0 {
		writeError(w, &api.Error{Code: api.CodeBadRequest, Message: "resolvedAtRun is for a dry run only: a grant binds every input by its digest; name each earlier output as output:sha256:<hex>"})
		return
	}
	req, err := launch.ParsePhase(in.Phase.YAML, in.Phase.BaseDir)
	if err != nil {
		writeError(w, err)
		return
	}
	env, err := s.l.Issue(r.Context(), req, in.Actor, ttl)
	if err != nil {
		s.metrics.refused(err)
		writeError(w, err)
		return
	}
	s.log.Info("grant issued", logActor, in.Actor, logStage, req.Stage, logUID, peerOf(r).UID, logVerdict, "issued")
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(env)
}

// handleRun is the only way to launch: verify the grant, re-derive every
// bound value, consume it once, then run and stream.
func (s *server) handleRun(w http.ResponseWriter, r *http.Request) {
	var in api.RunRequest
	if err := decode(r, &in); err != nil {
		writeError(w, err)
		return
	}
	if in.Authorization != "" || in.Phase != nil {
		s.handleMintedRun(w, r, in)
		return
	}
	ctx := r.Context()
	owner := peerOf(r).UID
	if !s.launching.TryRLock() {
		writeError(w, &api.Error{Code: api.CodeRefused, Message: "the runner is recovering; retry shortly"})
		return
	}
	defer s.launching.RUnlock()
	pr := peerOf(r)
	run, err := s.l.Redeem(ctx, in.Grant, launch.Peer{UID: pr.UID, GID: pr.GID, PID: pr.PID, Known: pr.ok})
	if err != nil {
		s.log.Warn("run refused", logUID, owner, logVerdict, "refused", "err", err)
		s.metrics.refused(err)
		writeError(w, err)
		return
	}
	s.stream(w, r, run, owner)
}

// stream launches a spent grant's run for owner and streams it to the
// client, returning its result (nil if it has none).
func (s *server) stream(w http.ResponseWriter, r *http.Request, run *launch.Run, owner uint32) *runrecord.Result {
	runID := run.ID()
	runCtx, cancel := context.WithCancel(r.Context()) // client disconnect cancels too
	defer cancel()
	s.mu.Lock()
	s.active[runID] = &activeRun{owner: owner, cancel: cancel}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.active, runID)
		s.mu.Unlock()
	}()

	s.logAdmitted(run, owner)
	st := newStream(w, s.stall)
	st.send(api.Event{Type: api.EventStarted, RunID: runID})
	began := time.Now()
	out := run.Execute(runCtx, owner, st.writer(api.EventStdout), st.writer(api.EventStderr))
	res, err := out.Result, out.Err
	s.logFinished(res, owner, began, err)
	wire := wireResult(res)
	if rcpt := out.Receipt; rcpt != nil {
		st.send(api.Event{Type: api.EventReceipt, RunID: runID, Receipt: rcpt.Envelope, Bundle: rcpt.Bundle,
			Data: []byte(rcpt.RunnerPublicKey)})
	}
	if err != nil && res != nil && res.Status == runrecord.StatusRefused {
		st.finish(api.Event{Type: api.EventError, RunID: runID, Result: wire, Error: toAPIError(err)})
		return res
	}
	final := api.Event{Type: api.EventResult, RunID: runID, Result: wire}
	if err != nil {
		// The runner could not run it or finish it cleanly: the client must
		// not read the result as a clean run. A cancellation before the
		// workload started is the client's doing, and its result says so.
		if !errors.Is(err, context.Canceled) {
			final.Error = toAPIError(err)
		}
	}
	final.Quarantine = s.quarantinedBy(runID, res, err)
	st.finish(final)
	return res
}

// quarantinedBy returns the quarantine a run left the runner in, if any. A
// cleanup that was not verified counts even when the quarantine could not
// be recorded (a full disk): the client hears of it either way.
func (s *server) quarantinedBy(runID string, res *runrecord.Result, err error) *api.Quarantine {
	unverified := res != nil && res.Cleanup != nil && !res.Cleanup.Verified
	if !unverified && !errors.Is(err, host.ErrQuarantined) {
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
	b, err := encodeEvent(ev)
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

// encodeEvent is json.Marshal(ev), byte for byte (TestEncodeEventIsMarshal),
// with a receipt event's envelope and bundle spliced in as they are:
// encoding/json re-scans and re-compacts every json.RawMessage, and those
// two are most of the event. They are runrecord.Receipt's bytes, which are
// compact and hold nothing json.Marshal escapes (see launch's
// Record.encode). They are the last fields an Event writes but for the
// quarantine and the drop counts, which a receipt event never carries.
func encodeEvent(ev api.Event) ([]byte, error) {
	if ev.Type != api.EventReceipt || ev.Quarantine != nil || ev.Dropped != nil {
		return json.Marshal(ev)
	}
	receipt, bundle := ev.Receipt, ev.Bundle
	ev.Receipt, ev.Bundle = nil, nil
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	b = b[:len(b)-1] // the closing brace
	if len(receipt) > 0 {
		b = append(append(b, `,"receipt":`...), receipt...)
	}
	if len(bundle) > 0 {
		b = append(append(b, `,"bundle":`...), bundle...)
	}
	return append(b, '}'), nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

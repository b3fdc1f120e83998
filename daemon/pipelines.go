package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/launch"
	"github.com/custody-dev/custody/request"
	"github.com/custody-dev/custody/runrecord"
)

// handlePipelineSummary signs the summary of a pipeline run (control
// socket). The client only names the runs; every digest comes from this
// runner's own records, each receipt is checked to be signed by this
// runner's key, and the summary is signed only when every stage ran to
// success and every link holds.
func (s *server) handlePipelineSummary(w http.ResponseWriter, r *http.Request) {
	var in api.PipelineSummaryRequest
	if err := decode(r, &in); err != nil {
		writeError(w, err)
		return
	}
	s.signPipelineSummary(w, r, in)
}

// handleSubmitPipelineSummary signs a pipeline's summary for a client
// (submit socket): only under a standing authorization in force, not
// revoked, that allows pipelines and that the caller may use, and only
// when every stage's run is the caller's and was minted under it.
func (s *server) handleSubmitPipelineSummary(w http.ResponseWriter, r *http.Request) {
	var in api.PipelineSummaryRequest
	if err := decode(r, &in); err != nil {
		writeError(w, err)
		return
	}
	if in.Authorization == "" {
		writeError(w, &api.Error{Code: api.CodeForbidden, Message: "a pipeline summary is signed on the submit socket only for a pipeline run under a standing authorization (authorization); an operator signs others on the control socket"})
		return
	}
	pr := peerOf(r)
	pol, _, err := s.currentPolicy()
	if err != nil {
		writeError(w, err)
		return
	}
	a, err := launch.AuthorizationFor(pol, in.Authorization, launch.Peer{UID: pr.UID, GID: pr.GID, PID: pr.PID, Known: pr.ok})
	if err == nil && s.auths.isRevoked(a) {
		err = &launch.ErrAuthorizationUnknown{Name: a.Name}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	if !a.Pipelines {
		writeError(w, &api.Error{Code: api.CodeRefused, Message: fmt.Sprintf("pipeline summary not signed: authorization %q does not allow pipelines (authorization.pipelines); fix: ask the operator to allow them, or for grants", a.Name),
			Checks: []api.Check{{Requirement: "authorization.pipelines", Verdict: string(admission.NotGranted), Code: "authorization-pipelines", Detail: "a pipeline summary", Fix: "ask the operator to allow pipelines under the authorization"}}})
		return
	}
	for _, ref := range in.Stages {
		var rec runrecord.Record
		if err := s.db.GetRun(ref.RunID, &rec); err != nil || rec.Owner != pr.UID {
			writeError(w, &api.Error{Code: api.CodeRefused, Message: fmt.Sprintf("pipeline summary not signed: stage %q (run %s) is not a run of uid %d on this runner", ref.Name, ref.RunID, pr.UID)})
			return
		}
		if m := rec.Result; m == nil || m.Authorization == nil || m.Authorization.Name != a.Name {
			writeError(w, &api.Error{Code: api.CodeRefused, Message: fmt.Sprintf("pipeline summary not signed: stage %q (run %s) was not minted under authorization %q; every stage of a pipeline run from the submit socket is", ref.Name, ref.RunID, a.Name)})
			return
		}
	}
	s.signPipelineSummary(w, r, in)
}

// signPipelineSummary checks every stage and signs the summary.
func (s *server) signPipelineSummary(w http.ResponseWriter, r *http.Request, in api.PipelineSummaryRequest) {
	sum := evidence.PipelineSummary{Pipeline: in.Pipeline, Runner: evidence.Identity{ID: s.runnerKeys.Current.ID()}, Signed: s.now().UTC()}
	for _, ref := range in.Stages {
		st, err := s.summaryStage(r, ref)
		if err != nil {
			writeError(w, err)
			return
		}
		sum.Stages = append(sum.Stages, st)
	}
	env, err := evidence.SignPipelineSummary(r.Context(), s.runnerKeys.Current, sum)
	if err != nil {
		code := api.CodeBadRequest
		if errors.Is(err, evidence.ErrBrokenLink) {
			code = api.CodeRefused
		}
		writeError(w, &api.Error{Code: code, Message: "pipeline summary not signed: " + err.Error()})
		return
	}
	s.log.Info("pipeline summary signed", "pipeline", in.Pipeline, "stages", len(sum.Stages), "uid", peerOf(r).UID)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(env)
}

// ownReceipt verifies a receipt this runner signed: with its current key,
// or with a key a rotation retired, for a receipt finished before that
// rotation (the overlap: a pipeline started before a rotation can still
// be summed up after it).
func (s *server) ownReceipt(ctx context.Context, env []byte) (*evidence.Receipt, error) {
	rc, err := evidence.OwnReceipt(ctx, s.runnerKeys.Current.Verifier(), env)
	if err == nil {
		return rc, nil
	}
	for _, k := range s.runnerKeys.Retired {
		if old, oerr := evidence.OwnReceipt(ctx, k.Key, env); oerr == nil {
			if !old.Finished.Before(k.At) {
				return nil, fmt.Errorf("the receipt is signed by runner key %s, retired at %s, but finished at %s, after its retirement", k.Key.ID(), k.At.Format(time.RFC3339), old.Finished.Format(time.RFC3339))
			}
			if revokedAt, ok := s.runnerKeys.RevokedAt(k.Key.ID()); ok && !revokedAt.IsZero() && !old.Finished.Before(revokedAt) {
				return nil, fmt.Errorf("the receipt is signed by runner key %s, revoked from %s, and finished at %s", k.Key.ID(), revokedAt.Format(time.RFC3339), old.Finished.Format(time.RFC3339))
			}
			return old, nil
		}
	}
	return nil, err
}

// summaryStage is one stage as the summary records it, from the run's
// record and its verified receipt.
func (s *server) summaryStage(r *http.Request, ref api.PipelineStageRef) (evidence.PipelineStage, error) {
	refuse := func(format string, args ...any) (evidence.PipelineStage, error) {
		return evidence.PipelineStage{}, &api.Error{Code: api.CodeRefused,
			Message: fmt.Sprintf("pipeline summary not signed: stage %q (run %s): ", ref.Name, ref.RunID) + fmt.Sprintf(format, args...)}
	}
	var rec runrecord.Record
	if err := s.db.GetRun(ref.RunID, &rec); err != nil {
		return refuse("no such run on this runner: %v", err)
	}
	if rec.Receipt == nil {
		return refuse("the run has no receipt: %s", noReceipt(&rec))
	}
	rc, err := s.ownReceipt(r.Context(), rec.Receipt.Envelope)
	if err != nil {
		return refuse("%v", err)
	}
	switch {
	case rc.RunID != ref.RunID:
		return refuse("the recorded receipt is of run %s", rc.RunID)
	case rc.Exit.Status != evidence.StatusOK:
		return refuse("the stage did not succeed (%s); a summary links only stages that did", rc.Exit.Status)
	case len(ref.From) != len(rc.Inputs):
		return refuse("%d from entries for %d inputs", len(ref.From), len(rc.Inputs))
	}
	granted, err := evidence.GrantedVerifier(rc)
	if err != nil {
		return refuse("%v", err)
	}
	if granted != ref.Verifier {
		return refuse("verifier is %t here, but the run's grant is for a phase with verifier: %t; fix: mark as the verifier stage exactly the stage whose phase has verifier: true", ref.Verifier, granted)
	}
	dig, err := evidence.ReceiptDigest(rec.Receipt.Envelope)
	if err != nil {
		return refuse("%v", err)
	}
	st := evidence.PipelineStage{Name: ref.Name, Stage: rc.Phase.Stage, Verifier: ref.Verifier, RunID: rc.RunID,
		ReceiptDigest: dig, OutputDigest: rc.Output.TreeDigest, Inputs: []evidence.PipelineInput{}}
	for i, in := range rc.Inputs {
		// An input named as an earlier output must be one: its source in
		// the receipt is the output store's, by that digest.
		if ref.From[i] != "" && in.Source != request.OutputSource(in.Digest) {
			return refuse("inputs[%d] at %s is named as stage %q's output, but was read from %q", i, in.Target, ref.From[i], in.Source)
		}
		// And an input read from the output store is named for the stage
		// it came from: unnamed, it would pass for an operator's host
		// source and escape the links' checks (a verifier's output among
		// them).
		if ref.From[i] == "" && strings.HasPrefix(in.Source, request.OutputSourcePrefix) {
			return refuse("inputs[%d] at %s was read from the output store (%s) but names no earlier stage; fix: name the stage it came from", i, in.Target, in.Source)
		}
		st.Inputs = append(st.Inputs, evidence.PipelineInput{Target: in.Target, Digest: in.Digest, From: ref.From[i]})
	}
	return st, nil
}

package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/image"
	"github.com/custody-dev/custody/runrecord"
	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/store"
)

// controlMux serves the operator's control socket. Every request must come
// from a configured operator uid.
func (s *server) controlMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", s.handleStatus(true))
	mux.HandleFunc("POST /v1/admit", s.handleAdmit)
	mux.HandleFunc("POST /v1/grants", s.handleIssue)
	mux.HandleFunc("POST /v1/grants/revoke", s.handleRevoke)
	mux.HandleFunc("POST /v1/keys/revoke", s.handleRevokeKey)
	mux.HandleFunc("GET /v1/oplog", s.handleOpLog)
	mux.HandleFunc("POST /v1/policy/reload", s.handleReload)
	mux.HandleFunc("GET /v1/quarantine", s.handleQuarantine)
	mux.HandleFunc("POST /v1/quarantine/release", s.handleRelease)
	mux.HandleFunc("POST /v1/images/import", s.handleImport)
	mux.HandleFunc("GET /v1/images", s.handleImages)
	mux.HandleFunc("GET /v1/images/{digest}", s.handleInspectImage)
	mux.HandleFunc("POST /v1/images/remove", s.handleRemoveImage)
	mux.HandleFunc("POST /v1/images/prune", s.handlePruneImages)
	mux.HandleFunc("POST /v1/recover", s.handleRecover)
	mux.HandleFunc("GET /v1/attempts", s.handleAttempts)
	mux.HandleFunc("POST /v1/runs/{id}/cancel", s.handleCancel(true))
	mux.HandleFunc("GET /v1/runs/{id}", s.handleGetRun(true))
	mux.HandleFunc("GET /v1/runs/{id}/receipt", s.handleGetReceipt(true))
	mux.HandleFunc("GET /v1/runs/{id}/outputs", s.handleGetOutputs(true))
	mux.HandleFunc("POST /v1/attest/qualification", s.handleAttestQualification)
	mux.HandleFunc("POST /v1/qualify", s.handleQualify)
	mux.HandleFunc("POST /v1/pipelines/summary", s.handlePipelineSummary)
	mux.HandleFunc("POST /v1/authorizations/revoke", s.handleRevokeAuthorization)
	s.packs.packRoutes(mux, true)
	s.opsRoutes(mux, true)
	return s.operatorsOnly("control socket", mux)
}

// operatorsOnly serves h only to a peer whose kernel-reported uid is in
// operators; socket names the socket in the refusal and the log.
func (s *server) operatorsOnly(socket string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := peerOf(r)
		if !p.ok || !slices.Contains(s.cfg.Operators, p.UID) {
			s.log.Warn(socket+": refused a non-operator", "uid", p.UID, "pid", p.PID, "path", r.URL.Path)
			writeError(w, &api.Error{Code: api.CodeForbidden,
				Message: "the " + socket + " is for operators only; this uid is not in custodyd's operators list"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// controlOnly are the control operations; on the submit socket they are
// refused by name rather than 404, so the refusal is explicit.
func controlOnly() []string {
	return append([]string{"/v1/grants", "/v1/grants/revoke", "/v1/policy/reload", "/v1/quarantine/release",
		"/v1/images/import", "/v1/images", "/v1/images/remove", "/v1/images/prune", "/v1/recover", "/v1/attempts", "/v1/attest/qualification", "/v1/qualify", "/v1/pipelines/summary", "/v1/authorizations/revoke"}, packControlOnly()...)
}

// submitMux serves clients: submit a run carrying a grant, stream it,
// cancel their own runs, fetch their own results, dry-run admission.
func (s *server) submitMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", s.handleStatus(false))
	mux.HandleFunc("POST /v1/admit", s.handleSubmitAdmit)
	mux.HandleFunc("GET /v1/quarantine", s.handleQuarantine)
	mux.HandleFunc("POST /v1/runs", s.handleRun)
	mux.HandleFunc("GET /v1/authorizations", s.handleAuthorizations)
	mux.HandleFunc("POST /v1/runs/{id}/cancel", s.handleCancel(false))
	mux.HandleFunc("GET /v1/runs/{id}", s.handleGetRun(false))
	mux.HandleFunc("GET /v1/runs/{id}/receipt", s.handleGetReceipt(false))
	mux.HandleFunc("GET /v1/runs/{id}/outputs", s.handleGetOutputs(false))
	s.packs.packRoutes(mux, false)
	s.opsRoutes(mux, false)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !peerOf(r).ok {
			writeError(w, &api.Error{Code: api.CodeForbidden, Message: "peer credentials unavailable"})
			return
		}
		if slices.Contains(controlOnly(), strings.TrimSuffix(r.URL.Path, "/")) {
			writeError(w, &api.Error{Code: api.CodeForbidden,
				Message: "operation " + r.URL.Path + " is only available to operators on the control socket"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// handleStatus lists every run in flight to operators, and a client only
// its own: run ids are not for other uids to see.
func (s *server) handleStatus(operator bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		prof, _ := json.Marshal(s.r.Profile())
		uid := peerOf(r).UID
		s.mu.RLock()
		st := api.Status{
			RunnerID: s.runnerKeys.Current.ID(), IssuerID: s.issuerKeys.Current.ID(),
			RunnerPublicKey: string(s.runnerKeys.Current.PublicPEM()), IssuerPublicKey: string(s.issuerKeys.Current.PublicPEM()),
			Policy: s.policyStatusLocked(), Profile: prof, Running: []string{}, Pool: wirePool(s.r.Pool().Profiles()),
		}
		for id, a := range s.active {
			if operator || a.owner == uid {
				st.Running = append(st.Running, id)
			}
		}
		s.mu.RUnlock()
		slices.Sort(st.Running)
		if seq, last := s.oplog.Head(); operator && seq > 0 {
			st.OpLog = &api.OpLogHead{Seq: seq, Last: last}
		}
		q, err := s.quarantine()
		if err != nil {
			writeError(w, err)
			return
		}
		st.Quarantine = *q
		writeJSON(w, st)
	}
}

func (s *server) quarantine() (*api.Quarantine, error) {
	q, err := s.r.Quarantine()
	if err != nil {
		return nil, err
	}
	if q == nil {
		return &api.Quarantine{}, nil
	}
	return &api.Quarantine{Quarantined: true, Since: q.Since, Reason: q.Reason, RunID: q.RunID}, nil
}

func (s *server) handleQuarantine(w http.ResponseWriter, r *http.Request) {
	q, err := s.quarantine()
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, q)
}

// handleRelease lifts the quarantine only after a successful
// re-verification: recovery runs again and every attempt must be clean.
func (s *server) handleRelease(w http.ResponseWriter, r *http.Request) {
	if !s.idle(r.Context()) {
		writeError(w, &api.Error{Code: api.CodeRefused, Message: "runs are in flight; release only an idle runner"})
		return
	}
	defer s.launching.Unlock()
	// Recovery re-quarantines on any residual attempt; clear only after it.
	rec, err := s.recover(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	attempts, err := s.r.Attempts()
	if err != nil {
		writeError(w, err)
		return
	}
	for _, a := range attempts {
		if a.State != "clean" {
			writeError(w, &api.Error{Code: api.CodeRefused, Message: fmt.Sprintf(
				"attempt %s is still %s: %s; fix: remove what remains by hand if it is safe, then custody recover and release again",
				a.RunID, a.State, a.Detail)})
			return
		}
	}
	if err := s.r.ReleaseQuarantine(); err != nil {
		writeError(w, err)
		return
	}
	s.log.Warn("quarantine released by operator after re-verification", "uid", peerOf(r).UID, "recovered", len(rec.Attempts))
	writeJSON(w, api.Quarantine{})
}

func (s *server) handleReload(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, s.reloadPolicy())
}

func (s *server) handleImport(w http.ResponseWriter, r *http.Request) {
	var req api.ImportRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	// The file is read in a helper, a re-exec of this very binary, whose
	// memory is bounded and all given back when it exits, refused or not.
	img, err := s.r.Images().ImportIsolated(r.Context(), req.Source, image.Isolation{Path: "/proc/self/exe"})
	if err != nil {
		s.log.Warn("image import refused", "source", req.Source, logUID, peerOf(r).UID, logVerdict, "refused", "err", err)
		writeError(w, &api.Error{Code: api.CodeBadRequest, Message: err.Error()})
		return
	}
	s.log.Info("image imported", "source", req.Source, logImage, img.Digest, "files", img.Files, "bytes", img.Bytes,
		logUID, peerOf(r).UID, logVerdict, "imported", "sealed", img.Sealed != nil)
	if img.Unsealed != "" {
		// Loud: such an image launches, but each launch walks every entry.
		s.log.Warn("image not sealed: each launch re-derives it by walking every entry, so its cost grows with the file count",
			logImage, img.Digest, "reason", img.Unsealed)
	}
	writeJSON(w, img)
}

// handleImages lists the stored images, with their config and owners as
// recorded (operator).
func (s *server) handleImages(w http.ResponseWriter, r *http.Request) {
	imgs, err := s.r.Images().List()
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, imgs)
}

// handleInspectImage answers one stored image's record, by tree digest or
// by the manifest (or config) digest it was imported by.
func (s *server) handleInspectImage(w http.ResponseWriter, r *http.Request) {
	digest := r.PathValue("digest")
	img, err := s.r.Images().Get(digest)
	if errors.Is(err, image.ErrNotFound) {
		img, err = s.r.Images().Binding(digest)
	}
	switch {
	case errors.Is(err, image.ErrNotFound):
		writeError(w, &api.Error{Code: api.CodeNotFound, Message: err.Error()})
		return
	case err != nil:
		writeError(w, &api.Error{Code: api.CodeBadRequest, Message: err.Error()})
		return
	}
	writeJSON(w, img)
}

// handleRemoveImage removes a stored image unless a live grant binds it.
func (s *server) handleRemoveImage(w http.ResponseWriter, r *http.Request) {
	var req api.RemoveImageRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	live, err := s.l.LiveGrants(req.Digest)
	if err != nil {
		writeError(w, err)
		return
	}
	if len(live) > 0 {
		writeError(w, &api.Error{Code: api.CodeRefused, Message: fmt.Sprintf(
			"image %s is bound by live grant(s) %s; fix: revoke an unspent grant or wait until it expires, wait until a run ends (custody cancel RUN-ID --operator ends it, custody recover cleans up a residual one), then remove it", req.Digest, strings.Join(live, ", "))})
		return
	}
	if s.r.Pool().UsesImage(req.Digest) {
		writeError(w, &api.Error{Code: api.CodeRefused, Message: fmt.Sprintf(
			"image %s is the rootfs of a warm pool profile; fix: remove the profile from policy pool and reload (its sandboxes are drained), then remove it", req.Digest)})
		return
	}
	err = s.r.Images().Remove(r.Context(), req.Digest)
	switch {
	case errors.Is(err, image.ErrNotFound):
		writeError(w, &api.Error{Code: api.CodeNotFound, Message: err.Error()})
		return
	case err != nil:
		writeError(w, err)
		return
	}
	s.log.Info("image removed", "image", req.Digest, "uid", peerOf(r).UID)
	writeJSON(w, map[string]string{"removed": req.Digest})
}

// handlePruneImages removes every image no live grant binds, then the
// layers and config blobs nothing references.
func (s *server) handlePruneImages(w http.ResponseWriter, r *http.Request) {
	out, err := s.r.Images().Prune(r.Context(), func(digest string) (bool, error) {
		live, err := s.l.LiveGrants(digest)
		return len(live) > 0 || s.r.Pool().UsesImage(digest), err
	})
	if err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("images pruned", "images", out.Images, "layers", out.Layers, "configs", out.Configs, "uid", peerOf(r).UID)
	writeJSON(w, out)
}

func (s *server) handleRevoke(w http.ResponseWriter, r *http.Request) {
	var req api.RevokeRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.ID == "" {
		writeError(w, &api.Error{Code: api.CodeBadRequest, Message: "grant id is required"})
		return
	}
	already, err := s.revocable(r.Context(), req.ID, req.Grant)
	if err != nil {
		writeError(w, err)
		return
	}
	if already {
		writeJSON(w, map[string]string{"revoked": req.ID})
		return
	}
	// Recorded first, as a key revocation is: a revocation in effect is
	// always in the log. A crash between the two leaves a recorded
	// revocation not yet applied; revoking again applies it (idempotent).
	if err := s.recordGrantRevocation(r.Context(), req.ID, req.Reason, peerOf(r).UID); err != nil {
		writeError(w, &api.Error{Code: api.CodeInternal, Message: "grant " + req.ID + " not revoked: the revocation could not be recorded in the operations log: " + err.Error()})
		return
	}
	if err := s.db.Revoke(req.ID, store.Revocation{At: time.Now().UTC(), Reason: req.Reason}); err != nil {
		writeError(w, fmt.Errorf("grant %s: the revocation is recorded in the operations log but not applied (fix: revoke it again): %w", req.ID, err))
		return
	}
	s.log.Info("grant revoked", logGrant, req.ID, logUID, peerOf(r).UID, logVerdict, "revoked")
	writeJSON(w, map[string]string{"revoked": req.ID})
}

func (s *server) handleCancel(operator bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		s.mu.RLock()
		a := s.active[id]
		s.mu.RUnlock()
		if a == nil {
			writeError(w, &api.Error{Code: api.CodeNotFound, Message: "no running run " + id})
			return
		}
		if !operator && a.owner != peerOf(r).UID {
			writeError(w, &api.Error{Code: api.CodeForbidden, Message: "run " + id + " belongs to another client"})
			return
		}
		a.cancel()
		writeJSON(w, map[string]string{"cancelled": id})
	}
}

// runFor reads a run record the caller may see: any for operators, their
// own for clients (others' runs answer as absent).
func (s *server) runFor(r *http.Request, operator bool) (*runrecord.Record, error) {
	var rec runrecord.Record
	if err := s.db.GetRun(r.PathValue("id"), &rec); err != nil {
		return nil, err
	}
	if !operator && rec.Owner != peerOf(r).UID {
		return nil, &api.Error{Code: api.CodeNotFound, Message: "run " + r.PathValue("id") + " not found"}
	}
	return &rec, nil
}

func (s *server) handleGetRun(operator bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec, err := s.runFor(r, operator)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, wireResult(rec.Result))
	}
}

func (s *server) handleGetReceipt(operator bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec, err := s.runFor(r, operator)
		if err == nil && rec.Receipt == nil {
			err = &api.Error{Code: api.CodeNotFound, Message: "run " + r.PathValue("id") + " has no receipt: " + noReceipt(rec)}
		}
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, wireReceipt(rec.Receipt))
	}
}

// handleGetOutputs streams the run's retained output tree as a tar. The
// bytes come from the runner's content-addressed store; the client checks
// them against the signed receipt, not against this answer.
// noReceipt says why a recorded run has no receipt, from its record.
func noReceipt(rec *runrecord.Record) string {
	switch {
	case rec.Result == nil:
		return "its record holds no result"
	case rec.Result.Status == runrecord.StatusRefused:
		return "it was refused before it launched: " + rec.Result.Error
	case rec.ReceiptError != "":
		return fmt.Sprintf("it launched (%s) but its receipt was not signed: %s", rec.Result.Status, rec.ReceiptError)
	default:
		return fmt.Sprintf("it launched (%s) and the runner recorded it without a receipt: %s", rec.Result.Status, rec.Result.Error)
	}
}

// outputsKept refuses to hand out a run's outputs when files its record
// lists are gone from the store (deleted by hand, or lost): a partial tree
// must never pass for the run's outputs.
func outputsKept(run string, o *runrecord.Output) error {
	paths := make([]string, len(o.Files))
	for i, f := range o.Files {
		paths[i] = f.Path
	}
	if err := evidence.MissingOutputs(o.Path, paths); err != nil {
		return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("run %s: its retained outputs are not all on this runner (%s): %v; the receipt still binds their digests", run, o.Path, err)}
	}
	return nil
}

func (s *server) handleGetOutputs(operator bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec, err := s.runFor(r, operator)
		if err == nil && (rec.Result == nil || rec.Result.Output == nil) {
			err = &api.Error{Code: api.CodeNotFound, Message: "run " + r.PathValue("id") + " kept no outputs"}
		}
		if err == nil {
			err = outputsKept(r.PathValue("id"), rec.Result.Output)
		}
		if err != nil {
			writeError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/x-tar")
		if err := snapshot.WriteTar(w, rec.Result.Output.Path); err != nil {
			s.log.Warn("stream outputs", "run", r.PathValue("id"), "err", err)
		}
	}
}

func (s *server) handleRecover(w http.ResponseWriter, r *http.Request) {
	// Recovery must never touch a live attempt: it runs only when no
	// launch is in flight, and holds new ones off while it works.
	if !s.idle(r.Context()) {
		writeError(w, &api.Error{Code: api.CodeRefused, Message: "runs are in flight; recover only an idle runner"})
		return
	}
	defer s.launching.Unlock()
	rec, err := s.recover(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, wireRecovery(rec))
}

func (s *server) handleAttempts(w http.ResponseWriter, r *http.Request) {
	as, err := s.r.Attempts()
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, wireAttempts(as))
}

// idle takes the launch lock exclusively once no run is in flight, waiting
// a few seconds for runs that are finishing; the caller must Unlock.
func (s *server) idle(ctx context.Context) bool {
	deadline := time.Now().Add(5 * time.Second)
	for !s.launching.TryLock() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

package daemon

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/qualification"
	"github.com/custody-dev/custody/runrecord"
	"github.com/custody-dev/custody/store"
)

// handleQualify measures and signs a qualification row (control socket,
// operators only): the runner runs the conformance suite itself, through
// its own sockets, judges every check from its own observations and signs
// only that (see qualification.Attester.Measure). The request names what
// to run, never a verdict.
func (s *server) handleQualify(w http.ResponseWriter, r *http.Request) {
	var req qualification.MeasureRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	a, err := s.attester(req.Backend)
	if err != nil {
		writeError(w, qualificationError(err))
		return
	}
	uid := peerOf(r).UID
	s.log.Info("qualification started", "uid", uid, "tier", req.Tier, "backend", a.Backend, "image", req.Image, "pooled", req.Pooled, "only", req.Only)
	socks := qualification.Sockets{Control: api.NewClient(s.cfg.ControlSocket), Submit: api.NewClient(s.cfg.SubmitSocket), RuntimeDir: s.cfg.Runner.RuntimeDir}
	m, q, err := a.Measure(r.Context(), req, socks, func(format string, args ...any) {
		s.log.Info("qualification check", "result", fmt.Sprintf(format, args...))
	})
	if err != nil {
		writeError(w, qualificationError(err))
		return
	}
	s.log.Info("qualification row signed", "uid", uid, "tier", q.Tier, "result", q.Result,
		"platform", q.PlatformDigest(), "backend", q.Platform.Backend, "checks", len(q.Checks), "failed", len(q.Failed))
	writeJSON(w, m)
}

// handleAttestQualification refuses what this endpoint used to do: sign
// verdicts an operator handed in. A row is the runner's own measurement.
func (s *server) handleAttestQualification(w http.ResponseWriter, r *http.Request) {
	s.log.Warn("refused to sign qualification verdicts handed in", "uid", peerOf(r).UID)
	writeError(w, &api.Error{Code: api.CodeRefused, Message: "qualification row refused: the runner signs no verdicts it is handed; " +
		"a row is measured by the runner from the conformance runs it executes itself: ask it to qualify (custody qualify)"})
}

// attester signs for the named backend ("" is the default one). The oci
// backend's runtime is the pinned runc; another backend's is its own
// pinned identity (for vm: QEMU, with the guest's digests in its version).
func (s *server) attester(name string) (*qualification.Attester, error) {
	b, err := s.r.BackendNamed(name)
	if err != nil {
		return nil, &api.Error{Code: api.CodeRefused, Message: "qualification row: " + err.Error()}
	}
	pinned := qualification.Pinned{Path: s.cfg.Runner.Runtime.Path, Version: s.cfg.Runner.Runtime.Version, SHA256: s.cfg.Runner.Runtime.SHA256}
	if b.Name() != string(backend.KindOCI) {
		id := b.Identity()
		pinned = qualification.Pinned{Path: id.Path, Version: id.Version, SHA256: id.SHA256}
	}
	return &qualification.Attester{
		Key:     s.runnerKeys.Current,
		Runtime: pinned,
		Backend: b.Name(),
		Profile: s.r.Profile,
		Records: qualificationRecords{s},
		Now:     s.now,
	}, nil
}

// qualificationError gives an attester's refusal its wire code.
func qualificationError(err error) error {
	for _, c := range []struct {
		class error
		code  api.Code
	}{
		{qualification.ErrQuarantined, api.CodeQuarantined},
		{qualification.ErrRefused, api.CodeRefused},
		{qualification.ErrBadRequest, api.CodeBadRequest},
	} {
		if errors.Is(err, c.class) {
			return &api.Error{Code: c.code, Message: err.Error()}
		}
	}
	return err
}

// qualificationRecords are the daemon's records as an attester reads them.
type qualificationRecords struct{ s *server }

func (q qualificationRecords) Quarantined() (*qualification.Quarantine, error) {
	st, err := q.s.quarantine()
	if err != nil || !st.Quarantined {
		return nil, err
	}
	return &qualification.Quarantine{Since: st.Since, Reason: st.Reason}, nil
}

func (q qualificationRecords) Run(id string) (qualification.RecordedRun, error) {
	var rec runrecord.Record
	if err := q.s.db.GetRun(id, &rec); errors.Is(err, store.ErrNotFound) {
		return qualification.RecordedRun{}, qualification.ErrUnknownRun
	} else if err != nil {
		return qualification.RecordedRun{}, err
	}
	out := qualification.RecordedRun{HasResult: rec.Result != nil}
	if rec.Result != nil {
		out.Status, out.Tier = string(rec.Result.Status), rec.Result.Tier
		// A record from before runs named their backend ran on oci, the
		// only backend there was.
		out.Backend = string(backend.KindOCI)
		if rec.Result.Backend != nil {
			out.Backend = rec.Result.Backend.Kind
		}
	}
	if rec.Receipt != nil {
		out.Receipt = append([]byte{}, rec.Receipt.Envelope...)
	}
	return out, nil
}

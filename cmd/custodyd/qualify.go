package main

import (
	"errors"
	"net/http"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/launch"
	"github.com/custody-dev/custody/matrix"
	"github.com/custody-dev/custody/qualification"
	"github.com/custody-dev/custody/store"
)

// handleAttestQualification signs a qualification row (control socket,
// operators only): the operator supplies the suite's verdicts, and the
// runner's attester builds, checks and signs the row (see
// qualification.Attester).
func (s *server) handleAttestQualification(w http.ResponseWriter, r *http.Request) {
	var req matrix.SignRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	row, q, err := s.attester().Attest(r.Context(), req)
	if err != nil {
		writeError(w, qualificationError(err))
		return
	}
	s.log.Info("qualification row signed", "uid", peerOf(r).UID, "tier", q.Tier, "result", q.Result,
		"platform", q.PlatformDigest(), "backend", q.Platform.Backend, "checks", len(q.Checks), "failed", len(q.Failed))
	writeJSON(w, row)
}

func (s *server) attester() *qualification.Attester {
	pinned := s.cfg.Runner.Runtime
	return &qualification.Attester{
		Key:     s.runnerID,
		Runtime: qualification.Pinned{Path: pinned.Path, Version: pinned.Version, SHA256: pinned.SHA256},
		Backend: s.r.Backend().Name(),
		Profile: s.r.Profile,
		Records: qualificationRecords{s},
		Now:     s.now,
	}
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
	var rec launch.Record
	if err := q.s.db.GetRun(id, &rec); errors.Is(err, store.ErrNotFound) {
		return qualification.RecordedRun{}, qualification.ErrUnknownRun
	} else if err != nil {
		return qualification.RecordedRun{}, err
	}
	out := qualification.RecordedRun{HasResult: rec.Result != nil}
	if rec.Result != nil {
		out.Status, out.Tier = string(rec.Result.Status), rec.Result.Tier
	}
	if rec.Receipt != nil {
		out.Receipt = append([]byte{}, rec.Receipt.Envelope...)
	}
	return out, nil
}

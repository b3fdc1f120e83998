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
	a, err := s.attester(req.Backend)
	if err != nil {
		writeError(w, qualificationError(err))
		return
	}
	row, q, err := a.Attest(r.Context(), req)
	if err != nil {
		writeError(w, qualificationError(err))
		return
	}
	s.log.Info("qualification row signed", "uid", peerOf(r).UID, "tier", q.Tier, "result", q.Result,
		"platform", q.PlatformDigest(), "backend", q.Platform.Backend, "checks", len(q.Checks), "failed", len(q.Failed))
	writeJSON(w, row)
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
	if b.Name() != matrix.BackendOCI {
		id := b.Identity()
		pinned = qualification.Pinned{Path: id.Path, Version: id.Version, SHA256: id.SHA256}
	}
	return &qualification.Attester{
		Key:     s.runnerID,
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
	var rec launch.Record
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
		out.Backend = matrix.BackendOCI
		if rec.Result.Backend != nil {
			out.Backend = rec.Result.Backend.Kind
		}
	}
	if rec.Receipt != nil {
		out.Receipt = append([]byte{}, rec.Receipt.Envelope...)
	}
	return out, nil
}

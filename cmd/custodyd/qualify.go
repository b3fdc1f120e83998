package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/matrix"
	"github.com/custody-dev/custody/platform"
	"github.com/custody-dev/custody/request"
	"github.com/custody-dev/custody/store"
)

// handleAttestQualification signs a qualification row (control socket,
// operators only). The operator supplies only the suite's verdicts; the
// daemon builds the statement itself — its own platform profile, the
// pinned runtime re-hashed now, its version, its runner key id, the time,
// each referenced run as it recorded it — with a fixed predicate type, and
// signs it with the runner identity key. It is not a signing oracle:
// anything that is not a well-formed row request is refused, and so is a
// quarantined runner, a check claimed passed that names no run of this
// runner, and a run at another tier than the row's.
func (s *server) handleAttestQualification(w http.ResponseWriter, r *http.Request) {
	var req matrix.SignRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	row, err := s.attestQualification(r, req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, row)
}

func (s *server) attestQualification(r *http.Request, req matrix.SignRequest) (*matrix.Row, error) {
	refuse := func(format string, args ...any) error {
		return &api.Error{Code: "refused", Message: "qualification row: " + fmt.Sprintf(format, args...)}
	}
	if q, err := s.quarantine(); err != nil {
		return nil, err
	} else if q.Quarantined {
		return nil, &api.Error{Code: "quarantined", Message: fmt.Sprintf(
			"a quarantined runner signs no qualification (since %s: %s)", q.Since.Format(time.RFC3339), q.Reason)}
	}
	pinned := s.cfg.Runner.Runtime
	sum, err := platform.FileSHA256(pinned.Path)
	if err != nil {
		return nil, refuse("cannot hash the pinned runtime: %v", err)
	}
	if sum != pinned.SHA256 {
		return nil, refuse("the runtime at %s now hashes to %s, not the pinned %s; nothing it ran qualifies", pinned.Path, sum, pinned.SHA256)
	}
	plat, err := matrix.PlatformOf(s.r.Profile())
	if err != nil {
		return nil, refuse("%v", err)
	}
	if plat.Runtime.SHA256 != pinned.SHA256 || plat.Runtime.Version != pinned.Version {
		return nil, refuse("the probed runtime (%s sha256:%s) is not the pinned one (%s sha256:%s)",
			plat.Runtime.Version, plat.Runtime.SHA256, pinned.Version, pinned.SHA256)
	}
	if len(req.Checks) > matrix.MaxChecks {
		return nil, refuse("%d checks; at most %d", len(req.Checks), matrix.MaxChecks)
	}
	wantTier := req.Tier
	if req.Tier == matrix.TierDevelopment {
		wantTier = request.DevelopmentLabel
	}
	checks := make([]matrix.Check, 0, len(req.Checks))
	for i, c := range req.Checks {
		if len(c.Runs) > matrix.MaxRunsPerCheck {
			return nil, refuse("checks[%d]: %d runs; at most %d", i, len(c.Runs), matrix.MaxRunsPerCheck)
		}
		// A pass must rest on work this runner did at this tier; a failure
		// may have nothing behind it (a refused grant launches nothing).
		if c.Passed && len(c.Runs) == 0 {
			return nil, refuse("checks[%d] (%s/%s) claims to have passed but names no run of this runner", i, c.Family, c.Name)
		}
		mc := matrix.Check{Family: c.Family, Name: c.Name, Case: c.Case, Passed: c.Passed, Detail: c.Detail, Runs: []matrix.RunRef{}}
		for _, id := range c.Runs {
			var rec runRecord
			if err := s.db.GetRun(id, &rec); err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return nil, refuse("checks[%d] (%s/%s): run %q is not a run of this runner", i, c.Family, c.Name, id)
				}
				return nil, err
			}
			if rec.Result == nil {
				return nil, refuse("checks[%d]: run %s has no recorded result", i, id)
			}
			if rec.Result.Tier != wantTier {
				return nil, refuse("checks[%d] (%s/%s): run %s ran at tier %q; the row is for %q", i, c.Family, c.Name, id, rec.Result.Tier, wantTier)
			}
			ref := matrix.RunRef{ID: id, Status: string(rec.Result.Status), Tier: rec.Result.Tier}
			if rec.Receipt != nil {
				sum := sha256.Sum256(rec.Receipt.Envelope)
				ref.ReceiptSHA256 = hex.EncodeToString(sum[:])
			}
			mc.Runs = append(mc.Runs, ref)
		}
		checks = append(checks, mc)
	}
	q, err := matrix.NewQualification(plat, matrix.Info{
		Tier: req.Tier, CustodyVersion: matrix.Version, SuiteVersion: req.SuiteVersion,
		RunnerID: s.runnerID.ID(), QualifiedAt: s.now().UTC().Truncate(time.Second), Checks: checks,
	})
	if err != nil {
		return nil, &api.Error{Code: "bad-request", Message: err.Error()}
	}
	row, err := matrix.Sign(r.Context(), s.runnerID, q)
	if err != nil {
		return nil, err
	}
	s.log.Info("qualification row signed", "uid", peerOf(r).UID, "tier", q.Tier, "result", q.Result,
		"platform", plat.Digest(), "checks", len(q.Checks), "failed", len(q.Failed))
	return row, nil
}

// Package qualification turns a conformance run into a signed
// qualification row (R6, R13): on the runner, the suite run in the
// runner's own process against its own sockets, judged there, and the row
// built from those verdicts, the runner's own records of each run and its
// platform, and signed (Attester.Measure); on the operator's side, a
// private custodyd on fresh state, set up and asked to qualify itself
// (Qualify). No verdict crosses from the operator to the runner. The row
// format and the gate are package matrix.
//
// The package reaches a daemon only through api and gets the runner's
// state as values, never its store, so the CLI may import it.
package qualification

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/matrix"
	"github.com/custody-dev/custody/platform"
	"github.com/custody-dev/custody/request"
)

var (
	// ErrRefused classes a sign request the runner will not attest: a pass
	// with no run behind it, a run that is not the runner's or ran at
	// another tier, too many checks, or a runtime that is not the pinned one.
	ErrRefused = errors.New("qualification row refused")
	// ErrQuarantined classes a request to a quarantined runner.
	ErrQuarantined = errors.New("runner quarantined")
	// ErrBadRequest classes a request that does not make a well-formed row
	// (an unknown tier or family, no checks, a detail that is not text).
	ErrBadRequest = errors.New("qualification request malformed")
	// ErrUnknownRun is what Records.Run returns for an id that is not a run
	// of this runner.
	ErrUnknownRun = errors.New("not a run of this runner")
)

// classed puts err in a class (errors.Is) without prefixing its message:
// callers show it as it was worded.
type classed struct {
	class, err error
}

func (e *classed) Error() string   { return e.err.Error() }
func (e *classed) Unwrap() []error { return []error{e.class, e.err} }

func refuse(format string, args ...any) error {
	return &classed{class: ErrRefused, err: fmt.Errorf("qualification row: "+format, args...)}
}

// Pinned is the runtime binary the runner is pinned to.
type Pinned struct {
	Path, Version, SHA256 string
}

// Quarantine is a runner's quarantine, as the attester needs it.
type Quarantine struct {
	Since  time.Time
	Reason string
}

// RecordedRun is one run as the runner recorded it.
type RecordedRun struct {
	// HasResult is false for a run that has no recorded result yet.
	HasResult    bool
	Status, Tier string
	// Backend is the name of the backend the run launched on.
	Backend string
	// Receipt is the run's signed receipt envelope; nil when it has none.
	Receipt []byte
}

// Records is the runner's state as an attester reads it.
type Records interface {
	// Quarantined returns the runner's quarantine, or nil when it is not
	// quarantined.
	Quarantined() (*Quarantine, error)
	// Run returns a run of this runner; ErrUnknownRun when there is none.
	Run(id string) (RecordedRun, error)
}

// Attester measures and signs qualification rows for one runner. It is not
// a signing oracle: it runs the suite itself (Measure) and signs only the
// verdicts it computed, and it builds the statement itself — the runner's own platform
// profile and backend, the pinned runtime re-hashed now, custody's
// version, the runner key id, the time, each referenced run as the runner
// recorded it — and refuses anything it cannot stand behind.
type Attester struct {
	// Key is the runner identity key; rows name and are signed by it.
	Key *keys.Signer
	// Runtime is the pinned runtime of Backend, re-hashed for every row:
	// runc for oci; for another backend, its identity (for vm the pinned
	// QEMU, with a version naming the machine, accel, kernel, modules and
	// init digests), which then stands for the runtime in the platform.
	Runtime Pinned
	// Backend is the name of the backend the suite ran on
	// (backend.Backend.Name); the row qualifies that backend only, and
	// every run it names must have run on it.
	Backend string
	// Profile is the runner's evidenced platform profile.
	Profile func() *platform.Profile
	Records Records
	// Now is the clock rows are dated by; default time.Now.
	Now func() time.Time
}

// notQuarantined refuses while the runner is quarantined.
func (a *Attester) notQuarantined() error {
	if q, err := a.Records.Quarantined(); err != nil {
		return err
	} else if q != nil {
		return &classed{class: ErrQuarantined, err: fmt.Errorf(
			"a quarantined runner signs no qualification (since %s: %s)", q.Since.Format(time.RFC3339), q.Reason)}
	}
	return nil
}

// attest signs the row the verdicts of a suite this runner ran itself
// (Measure) make, and returns it with its content. It is unexported on
// purpose: the runner signs only verdicts it computed. It fails with
// ErrQuarantined, ErrRefused or ErrBadRequest; any other error is the
// runner's own.
func (a *Attester) attest(ctx context.Context, req matrix.SignRequest, measured *matrix.Measured) (*matrix.Row, *matrix.Qualification, error) {
	if err := a.notQuarantined(); err != nil {
		return nil, nil, err
	}
	plat, err := a.platform()
	if err != nil {
		return nil, nil, err
	}
	checks, err := a.checks(req)
	if err != nil {
		return nil, nil, err
	}
	if req.Backend != "" && req.Backend != a.Backend {
		return nil, nil, refuse("the request is for backend %q but this attester signs for %q", req.Backend, a.Backend)
	}
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	q, err := matrix.NewQualification(plat, matrix.Info{
		Tier: req.Tier, CustodyVersion: matrix.Version, SuiteVersion: req.SuiteVersion,
		RunnerID: a.Key.ID(), QualifiedAt: now().UTC().Truncate(time.Second), Checks: checks,
		NotApplicable: req.NotApplicable, Measured: measured,
	})
	if err != nil {
		// The platform was validated above: what is malformed is the request.
		return nil, nil, &classed{class: ErrBadRequest, err: err}
	}
	row, err := matrix.Sign(ctx, a.Key, q)
	if err != nil {
		return nil, nil, err
	}
	return row, q, nil
}

// platform describes what this runner qualifies: its profile, as its
// backend runs on it, with the pinned runtime proved unchanged.
func (a *Attester) platform() (matrix.Platform, error) {
	pinned := a.Runtime
	sum, err := platform.FileSHA256(pinned.Path)
	if err != nil {
		return matrix.Platform{}, refuse("cannot hash the pinned runtime: %v", err)
	}
	if sum != pinned.SHA256 {
		return matrix.Platform{}, refuse("the runtime at %s now hashes to %s, not the pinned %s; nothing it ran qualifies", pinned.Path, sum, pinned.SHA256)
	}
	plat, err := BackendPlatform(a.Profile(), a.Backend, pinned)
	if err != nil {
		return matrix.Platform{}, refuse("%v", err)
	}
	if a.Backend != string(backend.KindOCI) {
		return plat, nil
	}
	if plat.Runtime.SHA256 != pinned.SHA256 || plat.Runtime.Version != pinned.Version {
		return matrix.Platform{}, refuse("the probed runtime (%s sha256:%s) is not the pinned one (%s sha256:%s)",
			plat.Runtime.Version, plat.Runtime.SHA256, pinned.Version, pinned.SHA256)
	}
	return plat, nil
}

// BackendPlatform describes the platform of a probed profile as the
// backend kind runs on it, with rt its pinned runtime: for oci the profile's runc as
// probed; for another backend rt, its own identity (the profile probed
// runc, which runs none of that backend's work). The attester and
// custody gate --platform this both describe a platform with it, so that
// the same host and pins give the same digest.
func BackendPlatform(prof *platform.Profile, kind string, rt Pinned) (matrix.Platform, error) {
	plat, err := matrix.PlatformOf(prof, kind)
	if err != nil || kind == string(backend.KindOCI) {
		return plat, err
	}
	plat.Runtime = matrix.PlatformRuntime{Version: rt.Version, SHA256: rt.SHA256}
	return plat, plat.Validate()
}

// checks are the request's verdicts with each run as the runner recorded
// it. A pass must rest on work this runner did at the row's tier; a
// failure may have nothing behind it (a refused grant launches nothing).
func (a *Attester) checks(req matrix.SignRequest) ([]matrix.Check, error) {
	if len(req.Checks) > matrix.MaxChecks {
		return nil, refuse("%d checks; at most %d", len(req.Checks), matrix.MaxChecks)
	}
	wantTier := runTier(req.Tier)
	checks := make([]matrix.Check, 0, len(req.Checks))
	for i, c := range req.Checks {
		if len(c.Runs) > matrix.MaxRunsPerCheck {
			return nil, refuse("checks[%d]: %d runs; at most %d", i, len(c.Runs), matrix.MaxRunsPerCheck)
		}
		if c.Passed && len(c.Runs) == 0 {
			return nil, refuse("checks[%d] (%s/%s) claims to have passed but names no run of this runner", i, c.Family, c.Name)
		}
		mc := matrix.Check{Family: c.Family, Name: c.Name, Case: c.Case, Passed: c.Passed, Detail: c.Detail, Runs: []matrix.RunRef{}}
		for _, id := range c.Runs {
			rec, err := a.Records.Run(id)
			if errors.Is(err, ErrUnknownRun) {
				return nil, refuse("checks[%d] (%s/%s): run %q is not a run of this runner", i, c.Family, c.Name, id)
			}
			if err != nil {
				return nil, err
			}
			if !rec.HasResult {
				return nil, refuse("checks[%d]: run %s has no recorded result", i, id)
			}
			if rec.Backend != a.Backend {
				return nil, refuse("checks[%d] (%s/%s): run %s ran on backend %q; the row is for %q", i, c.Family, c.Name, id, rec.Backend, a.Backend)
			}
			if rec.Tier != wantTier {
				return nil, refuse("checks[%d] (%s/%s): run %s ran at tier %q; the row is for %q", i, c.Family, c.Name, id, rec.Tier, wantTier)
			}
			ref := matrix.RunRef{ID: id, Status: rec.Status, Tier: rec.Tier}
			if rec.Receipt != nil {
				sum := sha256.Sum256(rec.Receipt)
				ref.ReceiptSHA256 = hex.EncodeToString(sum[:])
			}
			mc.Runs = append(mc.Runs, ref)
		}
		checks = append(checks, mc)
	}
	return checks, nil
}

// runTier is the tier a run records when it runs for a row at tier: a
// development run is recorded as unqualified.
func runTier(tier string) string {
	if tier == matrix.TierDevelopment {
		return request.DevelopmentLabel
	}
	return tier
}

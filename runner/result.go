package runner

import (
	"errors"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/request"
	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/treehash"
)

// Run statuses, re-exported for callers of the runner.
const (
	StatusOK        = api.StatusOK
	StatusFailed    = api.StatusFailed
	StatusTimeout   = api.StatusTimeout
	StatusOOM       = api.StatusOOM
	StatusRefused   = api.StatusRefused
	StatusCancelled = api.StatusCancelled
)

// Checks converts admission checks to their wire form.
func Checks(cs []admission.Check) []api.Check {
	out := make([]api.Check, 0, len(cs))
	for _, c := range cs {
		out = append(out, api.Check{Requirement: c.Requirement, Verdict: string(c.Verdict),
			Code: c.Code, Detail: c.Detail, Fix: c.Fix})
	}
	return out
}

func newOutput(s *snapshot.Snapshot) *api.Output {
	o := &api.Output{Digest: s.Digest, Path: s.Path, Bytes: s.Tree.Bytes, Files: []api.OutputFile{}}
	for _, e := range s.Tree.Entries {
		if e.Kind == treehash.KindFile {
			o.Files = append(o.Files, api.OutputFile{Path: e.Path, SHA256: e.SHA256, Size: e.Size})
		}
	}
	return o
}

func cleanup(r backend.CleanupReport) *api.Cleanup {
	c := &api.Cleanup{Verified: r.Verified, Steps: []api.CleanupStep{}}
	for _, s := range r.Steps {
		c.Steps = append(c.Steps, api.CleanupStep{Name: s.Name, OK: s.OK, Detail: s.Detail})
	}
	return c
}

func (r *Runner) newResult(p *Prepared) *api.Result {
	res := &api.Result{
		RunID:       p.RunID,
		Name:        p.Plan.Name,
		Tier:        string(p.Plan.Tier),
		Unqualified: p.Plan.Unqualified,
		Runtime: api.Runtime{Path: r.cfg.Runtime.Path, Version: r.cfg.Runtime.Version,
			SHA256: r.cfg.Runtime.SHA256},
		UserNamespace: r.backend.Capabilities().UserNamespace,
		Image:         p.Image.Digest,
		Inputs:        []api.Input{},
		Started:       time.Now().UTC(),
	}
	if res.RunID == "" {
		res.RunID = NewRunID()
	}
	for _, in := range p.Inputs {
		res.Inputs = append(res.Inputs, api.Input{Source: in.Source, Target: in.Target, Digest: in.Digest})
	}
	if res.Unqualified {
		res.Tier = request.DevelopmentLabel
	}
	return res
}

// Refuse records err as a refusal on res.
func Refuse(res *api.Result, err error) {
	res.Status = StatusRefused
	res.ExitCode = -1
	res.Error = err.Error()
	var re *admission.RefusedError
	if errors.As(err, &re) {
		res.Refusal = Checks(re.Checks)
	}
	res.Finished = time.Now().UTC()
}

func setExit(res *api.Result, ex *backend.Exit) {
	res.ExitCode = ex.Code
	res.Signal = ex.Signal
	res.Started, res.Finished = ex.Started.UTC(), ex.Finished.UTC()
	res.Usage = api.Usage{
		PeakMemoryBytes:  ex.Usage.PeakMemoryBytes,
		CPUTimeMillis:    ex.Usage.CPUTimeNanos / 1e6,
		WallMillis:       ex.Finished.Sub(ex.Started).Milliseconds(),
		OOMKills:         ex.Usage.OOMKills,
		MemoryLimitBytes: ex.Usage.MemoryLimitBytes,
		PidsLimit:        ex.Usage.PidsLimit,
	}
	switch {
	case ex.Cancelled:
		res.Status = StatusCancelled
	case ex.TimedOut:
		res.Status = StatusTimeout
	case ex.OOMKilled:
		res.Status = StatusOOM
	case ex.Code != 0:
		res.Status = StatusFailed
	default:
		res.Status = StatusOK
	}
}

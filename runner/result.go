package runner

import (
	"errors"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/request"
	"github.com/custody-dev/custody/runrecord"
	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/treehash"
)

// The run record's types are runrecord's; these are the names the
// runner's code uses for them.
type (
	Result          = runrecord.Result
	Status          = runrecord.Status
	BackendIdentity = runrecord.BackendIdentity
	Output          = runrecord.Output
	LeftOut         = runrecord.LeftOut
	OutputFile      = runrecord.OutputFile
	Streams         = runrecord.Streams
	Stream          = runrecord.Stream
	Usage           = runrecord.Usage
	Cleanup         = runrecord.Cleanup
	PoolMember      = runrecord.PoolMember
)

// Run statuses (runrecord's).
const (
	StatusOK            = runrecord.StatusOK
	StatusFailed        = runrecord.StatusFailed
	StatusTimeout       = runrecord.StatusTimeout
	StatusOOM           = runrecord.StatusOOM
	StatusPidsLimit     = runrecord.StatusPidsLimit
	StatusRefused       = runrecord.StatusRefused
	StatusCancelled     = runrecord.StatusCancelled
	StatusFailedToStart = runrecord.StatusFailedToStart
)

func identityRecord(id backend.Identity) *BackendIdentity {
	return &BackendIdentity{Kind: id.Kind, Version: id.Version, Path: id.Path, SHA256: id.SHA256}
}

func newOutput(s *snapshot.Snapshot) *Output {
	o := &Output{Digest: s.Digest, Path: s.Path, Bytes: s.Tree.Bytes, Files: []OutputFile{}}
	for _, e := range s.Tree.Entries {
		if e.Kind == treehash.KindFile {
			o.Files = append(o.Files, OutputFile{Path: e.Path, SHA256: e.SHA256, Size: e.Size})
		}
	}
	return o
}

func cleanup(r backend.CleanupReport) *Cleanup {
	c := Cleanup(r)
	return &c
}

func (r *Runner) newResult(p *Prepared) *Result {
	b, err := r.BackendNamed(p.Plan.Backend)
	if err != nil {
		b = r.backend // Launch refuses the plan
	}
	rt := runrecord.Runtime(r.cfg.Runtime)
	if b != r.backend {
		// Another backend's runtime is its own pinned binary (e.g. QEMU).
		id := b.Identity()
		rt = runrecord.Runtime{Path: id.Path, Version: id.Version, SHA256: id.SHA256}
	}
	res := &Result{
		RunID:         p.RunID,
		Name:          p.Plan.Name,
		Tier:          string(p.Plan.Tier),
		Unqualified:   p.Plan.Unqualified,
		Runtime:       rt,
		UserNamespace: b.Capabilities().UserNamespace,
		Image:         p.Image.Digest,
		Inputs:        []runrecord.Input{},
		Started:       time.Now().UTC(),
	}
	if res.RunID == "" {
		res.RunID = NewRunID()
	}
	for _, in := range p.Inputs {
		res.Inputs = append(res.Inputs, runrecord.Input{Source: in.Source, Target: in.Target, Digest: in.Digest})
	}
	if res.Unqualified {
		res.Tier = request.DevelopmentLabel
	}
	return res
}

// Refuse records err as a refusal on res.
func Refuse(res *Result, err error) {
	res.Status = StatusRefused
	res.ExitCode = -1
	res.Error = err.Error()
	var re *admission.RefusedError
	if errors.As(err, &re) {
		res.Refusal = recordChecks(re.Checks)
	}
	res.Finished = time.Now().UTC()
}

// recordChecks are admission's verdicts as the run record keeps them.
func recordChecks(cs []admission.Check) []runrecord.Check {
	out := make([]runrecord.Check, 0, len(cs))
	for _, c := range cs {
		out = append(out, runrecord.Check{Requirement: c.Requirement, Verdict: string(c.Verdict), Code: c.Code, Detail: c.Detail, Fix: c.Fix})
	}
	return out
}

// failedAfterStart records a run whose sandbox failed (runErr) once its
// launch was under way: what the backend observed in ex (nil: nothing),
// and every value it did not observe as such, never as a zero (R10). Its
// status is failed unless the observation says it was cancelled, timed
// out or OOM-killed.
func failedAfterStart(res *Result, ex *backend.Exit, runErr error) {
	if ex == nil {
		ex = &backend.Exit{CodeUnobserved: true, Started: res.Started, Finished: res.Finished,
			Usage: backend.Usage{PeakMemoryBytes: -1, CPUTimeNanos: -1, OOMKills: -1}}
	}
	setExit(res, ex)
	if res.Status == StatusOK || res.Status == StatusPidsLimit {
		res.Status = StatusFailed
	}
	if ex.CodeUnobserved {
		res.ExitCode, res.Signal, res.ExitUnobserved = -1, "", true
	}
	res.Error = runErr.Error()
}

func setExit(res *Result, ex *backend.Exit) {
	res.ExitCode = ex.Code
	res.Signal = ex.Signal
	res.Started, res.Finished = ex.Started.UTC(), ex.Finished.UTC()
	res.Usage = Usage{Usage: ex.Usage, Wall: ex.Finished.Sub(ex.Started)}
	res.Observed = ex.Observation
	switch {
	case ex.Cancelled:
		res.Status = StatusCancelled
	case ex.TimedOut:
		res.Status = StatusTimeout
	case ex.OOMKilled:
		res.Status = StatusOOM
	case ex.Usage.PidsLimitHits > 0 && (ex.Code != 0 || ex.Signal != ""):
		// A workload that handled a refused fork and exited 0 succeeded;
		// one that failed after one failed at its pids budget.
		res.Status = StatusPidsLimit
	case ex.Code != 0:
		res.Status = StatusFailed
	default:
		res.Status = StatusOK
	}
}

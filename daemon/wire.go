package daemon

import (
	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/runrecord"
)

// The domain (the run record, runner, admission) has its own types; these
// turn them into api's wire types, here at the edge and nowhere else.

// wireResult is a run's result as it crosses the wire.
func wireResult(r *runrecord.Result) *api.Result {
	if r == nil {
		return nil
	}
	w := &api.Result{
		RunID: r.RunID, GrantID: r.GrantID, Actor: r.Actor, Name: r.Name, Stage: r.Stage,
		Status: api.RunStatus(r.Status), ExitCode: r.ExitCode, Signal: r.Signal,
		Tier: r.Tier, Unqualified: r.Unqualified,
		Runtime:       api.Runtime{Path: r.Runtime.Path, Version: r.Runtime.Version, SHA256: r.Runtime.SHA256},
		RuntimeSHA256: r.RuntimeSHA256, ConfigSHA256: r.ConfigSHA256,
		GateSHA256: r.Gate(), SeccompSHA256: r.Seccomp(),
		UserNamespace: r.UserNamespace, Image: r.Image,
		Usage: api.Usage{
			PeakMemoryBytes: r.Usage.PeakMemoryBytes, CPUTimeMillis: r.Usage.CPUTimeMillis(),
			WallMillis: r.Usage.Wall.Milliseconds(), OOMKills: r.Usage.OOMKills,
			MemoryLimitBytes: r.Usage.MemoryLimitBytes, PidsLimit: r.Usage.PidsLimit,
			PidsLimitHits: r.Usage.PidsLimitHits,
		},
		Refusal: wireRefusal(r.Refusal), Error: r.Error,
		Started: r.Started, Finished: r.Finished,
	}
	if a := r.Authorization; a != nil {
		w.Authorization = &api.AuthorizationRef{Name: a.Name, PolicyDigest: a.PolicyDigest}
	}
	if r.Inputs != nil {
		w.Inputs = make([]api.Input, 0, len(r.Inputs))
		for _, in := range r.Inputs {
			w.Inputs = append(w.Inputs, api.Input{Source: in.Source, Target: in.Target, Digest: in.Digest})
		}
	}
	if o := r.Output; o != nil {
		w.Output = &api.Output{Digest: o.Digest, Path: o.Path, Bytes: o.Bytes, Files: make([]api.OutputFile, 0, len(o.Files))}
		for _, f := range o.Files {
			w.Output.Files = append(w.Output.Files, api.OutputFile(f))
		}
		for _, l := range o.LeftOut {
			w.Output.LeftOut = append(w.Output.LeftOut, api.LeftOut(l))
		}
		w.Output.LeftOutTotal = o.LeftOutTotal
	}
	if s := r.Streams; s != nil {
		w.Streams = &api.Streams{Stdout: api.StreamDigest(s.Stdout), Stderr: api.StreamDigest(s.Stderr)}
	}
	if c := r.Cleanup; c != nil {
		w.Cleanup = &api.Cleanup{Verified: c.Verified, Steps: make([]api.CleanupStep, 0, len(c.Steps))}
		for _, s := range c.Steps {
			w.Cleanup.Steps = append(w.Cleanup.Steps, api.CleanupStep(s))
		}
	}
	return w
}

// wireReceipt is a run's signed receipt as it crosses the wire.
func wireReceipt(r *runrecord.Receipt) *api.Receipt {
	if r == nil {
		return nil
	}
	return &api.Receipt{Envelope: r.Envelope, Bundle: r.Bundle, RunnerPublicKey: r.RunnerPublicKey}
}

// wireChecks are admission's verdicts as they cross the wire: a list,
// never null.
func wireChecks(cs []admission.Check) []api.Check {
	out := make([]api.Check, 0, len(cs))
	for _, c := range cs {
		out = append(out, api.Check{Requirement: c.Requirement, Verdict: string(c.Verdict),
			Code: c.Code, Detail: c.Detail, Fix: c.Fix})
	}
	return out
}

// wireRefusal is a refused run's recorded verdicts as they cross the
// wire, as wireChecks.
func wireRefusal(cs []runrecord.Check) []api.Check {
	out := make([]api.Check, 0, len(cs))
	for _, c := range cs {
		out = append(out, api.Check(c))
	}
	return out
}

// wireRecovery is what a recovery pass did, as it crosses the wire.
func wireRecovery(r *host.Recovery) *api.Recovery {
	if r == nil {
		return nil
	}
	return &api.Recovery{Attempts: wireAttempts(r.Attempts), Foreign: r.Foreign}
}

// wireAttempts are journalled attempts as they cross the wire (nil stays
// null, as the journal's own JSON had it).
func wireAttempts(as []journal.Attempt) []api.Attempt {
	if as == nil {
		return nil
	}
	out := make([]api.Attempt, 0, len(as))
	for _, a := range as {
		w := api.Attempt{RunID: a.RunID, GrantID: a.GrantID, State: string(a.State), Detail: a.Detail,
			Retry: a.Retry, Member: a.Member, Started: a.Started, Updated: a.Updated}
		if a.Resources != nil {
			w.Resources = make([]api.AttemptResource, 0, len(a.Resources))
			for _, x := range a.Resources {
				w.Resources = append(w.Resources, api.AttemptResource(x))
			}
		}
		out = append(out, w)
	}
	return out
}

package launch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/runrecord"
)

// predicate assembles the receipt predicate of a launched run: every
// observation the runner made, the egress it served (eg, nil when denied)
// among them. receipt adds the grant and the runner identity and signs
// it. Nothing in it is read back as authority.
func predicate(h *host.Runner, p *Prepared, eg *Egress, res *runrecord.Result) evidence.Receipt {
	prof := h.ProbedProfile()
	tier := evidence.TierProduction
	if p.Plan.Unqualified {
		tier = evidence.TierDevelopment
	}
	cfg := h.Config()
	backendName, rt := h.Backend().Name(), evidence.Runtime{Version: cfg.Runtime.Version, SHA256: res.RuntimeSHA256, Path: cfg.Runtime.Path}
	if res.Backend != nil && res.Backend.Kind != backendName {
		// Another backend: its runtime is the binary its identity pins.
		backendName, rt = res.Backend.Kind, evidence.Runtime{Version: res.Backend.Version, SHA256: res.Backend.SHA256, Path: res.Backend.Path}
	}
	rc := evidence.Receipt{
		RunID: res.RunID,
		Profile: evidence.RuntimeProfile{
			Backend:       backendName,
			Runtime:       rt,
			Kernel:        prof.Kernel,
			Arch:          prof.Arch,
			OS:            prof.OS,
			CgroupMode:    string(prof.Cgroup.Mode),
			Tier:          tier,
			Unqualified:   p.Plan.Unqualified,
			UserNamespace: res.UserNamespace,
		},
		Image:  res.Image,
		Inputs: []evidence.Input{},
		Exit: evidence.Exit{
			Status: receiptStatus(res.Status), Code: res.ExitCode, Signal: res.Signal,
			TimedOut: res.Status == runrecord.StatusTimeout, OOMKilled: res.Status == runrecord.StatusOOM,
			Cancelled: res.Status == runrecord.StatusCancelled,
		},
		Usage: evidence.Usage{PeakMemoryBytes: res.Usage.PeakMemoryBytes, CPUTimeMillis: res.Usage.CPUTimeMillis(),
			WallMillis: res.Usage.Wall.Milliseconds(), OOMKills: res.Usage.OOMKills},
		Output:   evidence.OutputRef{Files: []evidence.OutputFile{}},
		Started:  res.Started,
		Finished: res.Finished,
	}
	rc.Profile.Identity, rc.Profile.Evidence = receiptIdentity(h, res), maps.Clone(res.Evidence)
	rc.Streams = receiptStreams(res.Streams)
	for _, in := range res.Inputs {
		rc.Inputs = append(rc.Inputs, evidence.Input{Source: in.Source, Target: in.Target, Digest: in.Digest})
	}
	if pm := res.Pooled; pm != nil {
		rc.Pooled = &evidence.Pooled{Profile: pm.Profile, Sandbox: pm.Sandbox, PreparedAt: pm.PreparedAt.UTC()}
	}
	if eg != nil && eg.Report != nil {
		rc.Egress = eg.Report()
	}
	if res.Cleanup != nil {
		rc.Cleanup.Verified = res.Cleanup.Verified
		for _, s := range res.Cleanup.Steps {
			rc.Cleanup.Steps = append(rc.Cleanup.Steps, evidence.CleanupStep{Name: s.Name, OK: s.OK, Detail: s.Detail})
		}
	}
	if res.Output != nil {
		rc.Output.TreeDigest = res.Output.Digest
		for _, f := range res.Output.Files {
			rc.Output.Files = append(rc.Output.Files, evidence.OutputFile{Path: f.Path, SHA256: f.SHA256, Size: f.Size})
		}
	}
	if o := res.Observed; o != nil {
		rc.Observed = evidence.Observed{
			At: o.At, Namespaces: o.Namespaces, Capabilities: o.Capabilities, NoNewPrivs: o.NoNewPrivs,
			Seccomp: o.Seccomp, Interfaces: o.Interfaces, Notes: o.Notes,
			Cgroup: evidence.ObservedCgroup{MemoryLimitBytes: o.Cgroup.MemoryLimitBytes, PidsLimit: o.Cgroup.PidsLimit,
				CPUQuotaMicros: o.Cgroup.CPUQuotaMicros, CPUPeriodMicros: o.Cgroup.CPUPeriodMicros},
		}
		for _, m := range o.Mounts {
			rc.Observed.Mounts = append(rc.Observed.Mounts, evidence.ObservedMount{Target: m.Target, FSType: m.FSType, ReadOnly: m.ReadOnly})
		}
	} else {
		why := "the container never started, so nothing was observed"
		if res.ExitUnobserved {
			why = "the sandbox failed after the launch began and reported nothing, so nothing was observed (the run's error says why)"
		}
		rc.Observed = evidence.Observed{Seccomp: "unobserved", Capabilities: map[string]string{}, Notes: []string{why}}
	}
	if note := leftOutNote(res.Output); note != "" {
		rc.Observed.Notes = append(slices.Clone(rc.Observed.Notes), note)
	}
	rc.Unobserved = unobserved(res, &rc)
	kubeRecord(&rc, res)
	return rc
}

// unobserved names the receipt's exit and usage members the run did not
// observe, each set to -1: never a zero nobody saw (R10).
func unobserved(res *runrecord.Result, rc *evidence.Receipt) []string {
	var names []string
	if res.ExitUnobserved {
		rc.Exit.Code, rc.Exit.Signal = -1, ""
		names = append(names, "exit.code")
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"usage.cpuTimeMillis", &rc.Usage.CPUTimeMillis}, {"usage.oomKills", &rc.Usage.OOMKills},
		{"usage.peakMemoryBytes", &rc.Usage.PeakMemoryBytes}, {"usage.wallMillis", &rc.Usage.WallMillis}} {
		if *f.v < 0 {
			*f.v = -1
			names = append(names, f.name)
		}
	}
	return names
}

// receiptIdentity is the backend identity res recorded as the launch ran,
// or the backend's own for a result that recorded none (it never got to
// the backend's evidence).
func receiptIdentity(h *host.Runner, res *runrecord.Result) *evidence.BackendIdentity {
	b := res.Backend
	if b == nil {
		b = identityRecord(h.Backend().Identity())
	}
	return &evidence.BackendIdentity{Kind: b.Kind, Version: b.Version, Path: b.Path, SHA256: b.SHA256}
}

// emptySHA256 is the SHA-256 of no bytes: the digest of a stream the
// workload never got to write to.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// receiptStreams records the spooled streams' digests; a run that never
// started wrote nothing to either.
func receiptStreams(s *runrecord.Streams) *evidence.Streams {
	if s == nil {
		empty := evidence.Stream{SHA256: emptySHA256}
		return &evidence.Streams{Stdout: empty, Stderr: empty}
	}
	return &evidence.Streams{
		Stdout: evidence.Stream{SHA256: s.Stdout.SHA256, Bytes: s.Stdout.Bytes, Truncated: s.Stdout.Truncated},
		Stderr: evidence.Stream{SHA256: s.Stderr.SHA256, Bytes: s.Stderr.Bytes, Truncated: s.Stderr.Truncated},
	}
}

// receiptStatus is a result's status as the receipt predicate has it: its
// published statuses have no failed-to-start, which it records as failed
// with exit code -1 (a receipt's "failed" goes with any exit), so the
// predicate's meaning does not change.
func receiptStatus(s runrecord.Status) string {
	// The receipt format keeps its five statuses: these are failures (the
	// receipt's exit and the result say which kind).
	if s == runrecord.StatusFailedToStart || s == runrecord.StatusPidsLimit {
		return string(runrecord.StatusFailed)
	}
	return string(s)
}

// receipt signs the run's receipt with the runner identity key: the
// predicate of what the run observed, with the grant it spent and the
// runner that signs. The one place a receipt is made.
func (r *Run) receipt(ctx context.Context, res *runrecord.Result) (*runrecord.Receipt, error) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, r.env); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(compact.Bytes())
	g, key := r.grant, r.key
	rc := predicate(r.h, r.prep, r.egress, res)
	rc.Runner = evidence.Identity{ID: key.ID()}
	rc.Grant = evidence.GrantRef{ID: g.Predicate.ID, EnvelopeSHA256: hex.EncodeToString(sum[:]),
		IssuerID: g.IssuerKeyID, Envelope: compact.Bytes()}
	if m := r.minted; m != nil {
		rc.Authorization = &evidence.AuthorizationRef{Name: m.Name, PolicyDigest: m.PolicyDigest}
	}
	rc.Phase = evidence.PhaseRef{Name: strings.TrimPrefix(g.SubjectName, "phase/"), Stage: g.Predicate.Stage, Digest: g.SubjectDigest}
	signed, err := evidence.SignReceipt(ctx, key, rc)
	if err != nil {
		return nil, err
	}
	bundle, err := evidence.BundleCompact(signed, key.ID())
	if err != nil {
		return nil, err
	}
	return &runrecord.Receipt{Envelope: signed, Bundle: bundle, RunnerPublicKey: string(key.PublicPEM())}, nil
}

package runner

import (
	"errors"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/backend/oci"
	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/treehash"
)

// Status is how a run ended.
type Status string

const (
	StatusOK        Status = "ok"
	StatusFailed    Status = "failed"
	StatusTimeout   Status = "timeout"
	StatusOOM       Status = "oom"
	StatusRefused   Status = "refused"
	StatusCancelled Status = "cancelled"
)

// Result is what a run produced, for people (Summary) and machines (JSON).
type Result struct {
	RunID       string      `json:"runId"`
	Name        string      `json:"name"`
	Status      Status      `json:"status"`
	ExitCode    int         `json:"exitCode"`
	Signal      string      `json:"signal,omitempty"`
	Tier        string      `json:"tier"`
	Unqualified bool        `json:"unqualified"`
	Runtime     RuntimeInfo `json:"runtime"`
	// RuntimeSHA256 is the digest of the runtime bytes that actually ran.
	RuntimeSHA256 string             `json:"runtimeSha256,omitempty"`
	ConfigSHA256  string             `json:"configSha256,omitempty"`
	UserNamespace bool               `json:"userNamespace"`
	Image         string             `json:"image"`
	Inputs        []Input            `json:"inputs"`
	Output        *Output            `json:"output,omitempty"`
	Usage         Usage              `json:"usage"`
	Cleanup       *oci.CleanupReport `json:"cleanup,omitempty"`
	Refusal       []admission.Check  `json:"refusal,omitempty"`
	Error         string             `json:"error,omitempty"`
	Started       time.Time          `json:"started"`
	Finished      time.Time          `json:"finished"`
}

// RuntimeInfo is the pinned runtime the runner was configured with.
type RuntimeInfo struct {
	Path    string `json:"path"`
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
}

// Usage is what the kernel accounted to the run.
type Usage struct {
	PeakMemoryBytes int64 `json:"peakMemoryBytes"`
	CPUTimeMillis   int64 `json:"cpuTimeMillis"`
	WallMillis      int64 `json:"wallMillis"`
	OOMKills        int64 `json:"oomKills"`
	// Enforced limits read back from the live cgroup.
	MemoryLimitBytes int64 `json:"memoryLimitBytes"`
	PidsLimit        int64 `json:"pidsLimit"`
}

// Output is the custody record of the run's outputs.
type Output struct {
	Digest string       `json:"digest"`
	Path   string       `json:"path"`
	Files  []OutputFile `json:"files"`
	Bytes  int64        `json:"bytes"`
}

// OutputFile is one kept file.
type OutputFile struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
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

func (r *Runner) newResult(p *Prepared) *Result {
	res := &Result{
		RunID:       newRunID(),
		Name:        p.Plan.Name,
		Tier:        string(p.Plan.Tier),
		Unqualified: p.Plan.Unqualified,
		Runtime: RuntimeInfo{Path: r.cfg.Runtime.Path, Version: r.cfg.Runtime.Version,
			SHA256: r.cfg.Runtime.SHA256},
		UserNamespace: r.userNS != nil,
		Image:         p.Image.Digest,
		Inputs:        p.Inputs,
		Started:       time.Now().UTC(),
	}
	if res.Unqualified {
		res.Tier = "development (unqualified)"
	}
	return res
}

func (res *Result) refuse(err error) {
	res.Status = StatusRefused
	res.ExitCode = -1
	res.Error = err.Error()
	var re *admission.RefusedError
	if errors.As(err, &re) {
		res.Refusal = re.Checks
	}
	res.Finished = time.Now().UTC()
}

func (res *Result) setExit(ex *oci.Exit) {
	res.ExitCode = ex.Code
	res.Signal = ex.Signal
	res.Started, res.Finished = ex.Started.UTC(), ex.Finished.UTC()
	res.Usage = Usage{
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

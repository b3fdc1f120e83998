package runrecord

import (
	"encoding/json"
	"time"

	"github.com/custody-dev/custody/backend"
)

// Status is how a run ended.
type Status string

// Run statuses.
const (
	StatusOK      Status = "ok"
	StatusFailed  Status = "failed"
	StatusTimeout Status = "timeout"
	StatusOOM     Status = "oom"
	// StatusPidsLimit is a run that failed after the pids limit refused
	// it a fork (the receipt records it as failed, with the count).
	StatusPidsLimit Status = "pids-limit"
	StatusRefused   Status = "refused"
	StatusCancelled Status = "cancelled"
	// StatusFailedToStart is a run whose workload never started: the
	// sandbox failed before it (FailedStage names where). Its exit code
	// is -1, never a workload's.
	StatusFailedToStart Status = "failed-to-start"
)

// Result is what a run produced, as the runner records it. Every field is
// an observation recorded after the fact; none of it authorizes anything.
// Its JSON is the run record's result: field names and shapes stay as
// they are, so records written before keep reading. The wire form
// (api.Result) and the receipt are made from it.
type Result struct {
	RunID   string `json:"runId"`
	GrantID string `json:"grantId,omitempty"`
	Actor   string `json:"actor,omitempty"`
	// Authorization names the standing authorization the run's grant was
	// minted under; nil for a hand-issued grant.
	Authorization *Authorization `json:"authorization,omitempty"`
	Name          string         `json:"name"`
	Stage         string         `json:"stage,omitempty"`
	Status        Status         `json:"status"`
	ExitCode      int            `json:"exitCode"`
	Signal        string         `json:"signal,omitempty"`
	// ExitUnobserved says the run failed after its workload may have
	// started and nobody saw how the workload ended: ExitCode is -1 and
	// means nothing (the receipt marks it unobserved).
	ExitUnobserved bool   `json:"exitUnobserved,omitempty"`
	Tier           string `json:"tier"`
	Unqualified    bool   `json:"unqualified"`
	// Runtime is the runtime the operator pinned.
	Runtime Runtime `json:"runtime"`
	// RuntimeSHA256 is the digest of the runtime bytes that actually ran.
	RuntimeSHA256 string `json:"runtimeSha256,omitempty"`
	ConfigSHA256  string `json:"configSha256,omitempty"`
	// LegacyGateSHA256 and LegacySeccompSHA256 are the flat gate and
	// seccomp digests of records written before the backend's evidence was
	// kept whole (Evidence). They are only read, never written for a new
	// run: Gate and Seccomp read either.
	LegacyGateSHA256    string `json:"gateSha256,omitempty"`
	LegacySeccompSHA256 string `json:"seccompSha256,omitempty"`
	UserNamespace       bool   `json:"userNamespace"`
	// Backend is the identity of the backend that ran the launch, and
	// Evidence its sandbox's evidence exactly. Records written before
	// these fields have neither.
	Backend  *BackendIdentity  `json:"backend,omitempty"`
	Evidence map[string]string `json:"evidence,omitempty"`
	Image    string            `json:"image"`
	// Inputs are the snapshotted inputs, by digest.
	Inputs  []Input   `json:"inputs"`
	Output  *Output   `json:"output,omitempty"`
	Usage   Usage     `json:"usage"`
	Streams *Streams  `json:"streams,omitempty"` // whatever each stream delivered, digested
	Cleanup *Cleanup  `json:"cleanup,omitempty"`
	Refusal []Check   `json:"refusal,omitempty"`
	Error   string    `json:"error,omitempty"`
	Started time.Time `json:"started"`
	// Finished is when the run (or its refusal) ended.
	Finished time.Time `json:"finished"`
	// Observed is what the backend read back from the live sandbox, for
	// the receipt; nil when the workload never started. The run record
	// does not keep it (the receipt does).
	Observed *backend.Observation `json:"-"`
	// FailedStage is, for StatusFailedToStart, the sandbox's stage that
	// failed (Error names it too).
	FailedStage string `json:"failedStage,omitempty"`
	// Pooled is the warm-pool member the run took; nil for a cold launch.
	Pooled *PoolMember `json:"pooled,omitempty"`
}

// Gate is the digest of the custody gate the container started with,
// before it exec'd the workload: the backend's "gate" evidence, or a
// record's flat gateSha256 from before that was kept ("" when neither).
func (r *Result) Gate() string { return r.evidence("gate", r.LegacyGateSHA256) }

// Seccomp is the digest of the compiled seccomp filter the gate
// installed, read as Gate is.
func (r *Result) Seccomp() string { return r.evidence("seccomp", r.LegacySeccompSHA256) }

func (r *Result) evidence(name, legacy string) string {
	if v, ok := r.Evidence[name]; ok {
		return v
	}
	return legacy
}

// Runtime is a pinned runtime: where it is, its version and its digest.
type Runtime struct {
	Path    string `json:"path"`
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
}

// BackendIdentity is backend.Identity in the run record (backend's types
// carry no JSON names).
type BackendIdentity struct {
	Kind    string `json:"kind"`
	Version string `json:"version"`
	Path    string `json:"path,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
}

// Input is one snapshotted input of a run: where it came from, where the
// workload saw it, and its tree digest.
type Input struct {
	Source string `json:"source"`
	Target string `json:"target"`
	Digest string `json:"digest,omitempty"`
}

// Check is admission's verdict on one requirement of a refused run, as
// the record keeps it.
type Check struct {
	Requirement string `json:"requirement"`
	Verdict     string `json:"verdict"`
	Code        string `json:"code"`
	Detail      string `json:"detail"`
	Fix         string `json:"fix,omitempty"`
}

// PoolMember is the warm-pool member a run took.
type PoolMember struct {
	Profile    string    `json:"profile"`
	Sandbox    string    `json:"sandbox"` // the member's attempt (journal run id)
	PreparedAt time.Time `json:"preparedAt"`
}

// Output is the custody record of a run's outputs: the retained tree's
// digest and where the store keeps it, and its regular files.
type Output struct {
	Digest string       `json:"digest"`
	Path   string       `json:"path"`
	Files  []OutputFile `json:"files"`
	Bytes  int64        `json:"bytes"`
	// LeftOut are output entries custody did not retain (the first of
	// LeftOutTotal, as many as launch lists), each with why: a name that is not
	// valid UTF-8, which no receipt can name as it is. The rest of the
	// output is retained; the receipt says how many were left out.
	LeftOut      []LeftOut `json:"leftOut,omitempty"`
	LeftOutTotal int       `json:"leftOutTotal,omitempty"`
}

// LeftOut is an output entry custody did not retain, and why. Name is its
// path relative to the output, Go-quoted (strconv.Quote): ASCII, and
// strconv.Unquote gives back its bytes.
type LeftOut struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// OutputFile is one kept regular file.
type OutputFile struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// Streams are the digests of a run's two output streams.
type Streams struct {
	Stdout Stream `json:"stdout"`
	Stderr Stream `json:"stderr"`
}

// Stream is one output stream as the runner kept it: the sha256 and length
// of the bytes it kept, and whether the workload wrote more than the
// runner keeps (the rest was read and discarded, never blocking the
// workload).
type Stream struct {
	SHA256    string `json:"sha256"`
	Bytes     int64  `json:"bytes"`
	Truncated bool   `json:"truncated"`
}

// Usage is what the kernel accounted to a run (the backend's Usage) and how
// long the run took.
type Usage struct {
	backend.Usage
	Wall time.Duration
}

// usageRecord is Usage in the run record, which keeps milliseconds.
type usageRecord struct {
	PeakMemoryBytes  int64 `json:"peakMemoryBytes"`
	CPUTimeMillis    int64 `json:"cpuTimeMillis"`
	WallMillis       int64 `json:"wallMillis"`
	OOMKills         int64 `json:"oomKills"`
	MemoryLimitBytes int64 `json:"memoryLimitBytes"`
	PidsLimit        int64 `json:"pidsLimit"`
	PidsLimitHits    int64 `json:"pidsLimitHits,omitempty"`
}

// CPUTimeMillis is the CPU time in whole milliseconds, as records keep it.
func (u Usage) CPUTimeMillis() int64 {
	if u.CPUTimeNanos < 0 {
		return -1 // not observed
	}
	return u.CPUTimeNanos / 1e6
}

// MarshalJSON writes the run record's shape.
func (u Usage) MarshalJSON() ([]byte, error) {
	return json.Marshal(usageRecord{PeakMemoryBytes: u.PeakMemoryBytes, CPUTimeMillis: u.CPUTimeMillis(),
		WallMillis: u.Wall.Milliseconds(), OOMKills: u.OOMKills, MemoryLimitBytes: u.MemoryLimitBytes, PidsLimit: u.PidsLimit,
		PidsLimitHits: u.PidsLimitHits})
}

// UnmarshalJSON reads the run record's shape.
func (u *Usage) UnmarshalJSON(b []byte) error {
	var r usageRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	*u = Usage{Usage: backend.Usage{PeakMemoryBytes: r.PeakMemoryBytes, CPUTimeNanos: r.CPUTimeMillis * 1e6,
		OOMKills: r.OOMKills, MemoryLimitBytes: r.MemoryLimitBytes, PidsLimit: r.PidsLimit,
		PidsLimitHits: r.PidsLimitHits},
		Wall: time.Duration(r.WallMillis) * time.Millisecond}
	return nil
}

// Cleanup is the backend's cleanup report of a run. backend's types are
// not a format and carry no JSON names; this one keeps the run record's.
type Cleanup backend.CleanupReport

// cleanupRecord and cleanupStepRecord are Cleanup in the run record; a
// backend.CleanupStep converts to a cleanupStepRecord as is.
type cleanupRecord struct {
	Verified bool                `json:"verified"`
	Steps    []cleanupStepRecord `json:"steps"`
}

type cleanupStepRecord struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// MarshalJSON writes the run record's shape.
func (c Cleanup) MarshalJSON() ([]byte, error) {
	r := cleanupRecord{Verified: c.Verified, Steps: make([]cleanupStepRecord, 0, len(c.Steps))}
	for _, s := range c.Steps {
		r.Steps = append(r.Steps, cleanupStepRecord(s))
	}
	return json.Marshal(r)
}

// UnmarshalJSON reads the run record's shape.
func (c *Cleanup) UnmarshalJSON(b []byte) error {
	var r cleanupRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	*c = Cleanup{Verified: r.Verified, Steps: make([]backend.CleanupStep, 0, len(r.Steps))}
	for _, s := range r.Steps {
		c.Steps = append(c.Steps, backend.CleanupStep(s))
	}
	return nil
}

// Authorization names a standing authorization and the digest of the
// policy that held it when a grant was minted under it.
type Authorization struct {
	Name         string `json:"name"`
	PolicyDigest string `json:"policyDigest"`
}

// Package api holds custody's wire types and the client of custodyd's two
// unix sockets: the operator's control socket and the clients' submit
// socket. It carries no logic; errors change form only here, at the edge.
package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// Default socket paths.
const (
	DefaultControlSocket = "/run/custody/control.sock"
	DefaultSubmitSocket  = "/run/custody/submit.sock"
)

// Error is an error as it crosses the wire.
type Error struct {
	// Code classifies the error: one of the Code constants, or a grant
	// reason code ("expired", "replayed", "inputs-changed", ...).
	Code    Code    `json:"code"`
	Message string  `json:"message"`
	Checks  []Check `json:"checks,omitempty"`
	// RetryAfterSeconds says when to retry a rate-limited request (as
	// the Retry-After header does).
	RetryAfterSeconds int64 `json:"retryAfterSeconds,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Is makes an *Error match a bare code sentinel (ErrQuarantined and the
// rest), so callers branch with errors.Is, never on message text.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Checks == nil && t.RetryAfterSeconds == 0 && t.Code == e.Code
}

// Code is the class of an Error on the wire.
type Code string

// The error classes custodyd answers with, besides the grant reason codes
// (grant.Code values, carried as Code).
const (
	CodeForbidden     Code = "forbidden"      // not this socket's or this peer's to ask
	CodeRefused       Code = "refused"        // refused before anything ran
	CodeQuarantined   Code = "quarantined"    // the runner takes no work, or a run's cleanup was not verified
	CodeNotFound      Code = "not-found"      // no such run, or not the caller's
	CodeBadRequest    Code = "bad-request"    // a malformed request
	CodeMalformed     Code = "malformed"      // a malformed grant
	CodePolicyInvalid Code = "policy-invalid" // no valid operator policy: nothing is granted
	CodeInternal      Code = "internal"       // the runner failed
	CodeRateLimited   Code = "rate-limited"   // this uid asked too often; the message says when to retry
)

// Sentinels to match with errors.Is.
var (
	ErrForbidden     = &Error{Code: CodeForbidden}
	ErrRefused       = &Error{Code: CodeRefused}
	ErrQuarantined   = &Error{Code: CodeQuarantined}
	ErrNotFound      = &Error{Code: CodeNotFound}
	ErrBadRequest    = &Error{Code: CodeBadRequest}
	ErrPolicyInvalid = &Error{Code: CodePolicyInvalid}
	ErrInternal      = &Error{Code: CodeInternal}
)

// Check is one requirement's verdict from admission.
type Check struct {
	Requirement string `json:"requirement"`
	Verdict     string `json:"verdict"`
	Code        string `json:"code"`
	Detail      string `json:"detail"`
	Fix         string `json:"fix,omitempty"`
}

// PhaseSource is a phase request as the client read it: the exact YAML and
// the directory relative input sources are resolved against.
type PhaseSource struct {
	YAML    []byte `json:"yaml"`
	BaseDir string `json:"baseDir"`
	// ResolvedAtRun, for a dry run only, lists the inputs (by index) that
	// name an earlier pipeline stage's output not produced yet: each must
	// be an output source ("output:sha256:<hex>", any digest), is admitted
	// as such and is read only when the stage's grant is issued. A grant
	// issue with any is refused.
	ResolvedAtRun []int `json:"resolvedAtRun,omitempty"`
}

// AdmitRequest asks for a dry run of a phase. On the submit socket it
// answers only a submitter of Actor (empty: the one actor the peer
// submits as), judges host inputs by their path alone and reads none; on
// the control socket it reads and digests them as a grant issue does.
type AdmitRequest struct {
	PhaseSource
	// Actor is the actor a grant for the phase would be issued to.
	Actor string `json:"actor,omitempty"`
}

// AdmitResponse is the dry-run verdict.
type AdmitResponse struct {
	Admitted bool            `json:"admitted"`
	Plan     json.RawMessage `json:"plan,omitempty"`
	Checks   []Check         `json:"checks"`
}

// IssueRequest asks the operator's runner to mint a grant.
type IssueRequest struct {
	Phase PhaseSource `json:"phase"`
	Actor string      `json:"actor"`
	// TTL is how long the grant is valid, e.g. "15m".
	TTL string `json:"ttl"`
}

// RevokeRequest revokes a grant by id.
type RevokeRequest struct {
	ID     string `json:"id"`
	Reason string `json:"reason,omitempty"`
	// Grant is the grant's envelope, for a grant this runner did not
	// issue (one of another issuer it trusts): its signature shows the
	// grant exists, where no issue record here does.
	Grant json.RawMessage `json:"grant,omitempty"`
}

// RemoveImageRequest removes a stored image by its tree digest.
type RemoveImageRequest struct {
	Digest string `json:"digest"`
}

// ImportRequest imports an image from a host path the daemon can read.
type ImportRequest struct {
	// Source is an absolute path to a rootfs directory or tar, or one
	// with its transport prefix: docker-archive:PATH, oci:PATH[:TAG] or
	// oci-archive:PATH.
	Source string `json:"source"`
}

// PolicyStatus says which policy is in force, or why none is.
type PolicyStatus struct {
	Path   string `json:"path"`
	Digest string `json:"digest,omitempty"`
	// Error is set when the policy failed to load; then every request is
	// refused with it.
	Error    string    `json:"error,omitempty"`
	LoadedAt time.Time `json:"loadedAt,omitzero"`
}

// Quarantine says whether the runner is quarantined.
type Quarantine struct {
	Quarantined bool      `json:"quarantined"`
	Since       time.Time `json:"since,omitzero"` // absent when not quarantined
	Reason      string    `json:"reason,omitempty"`
	RunID       string    `json:"runId,omitempty"`
}

// Status is the daemon's view of itself.
type Status struct {
	RunnerID string `json:"runnerId"`
	IssuerID string `json:"issuerId"`
	// RunnerPublicKey and IssuerPublicKey are PEM public keys, for a
	// verifier's trust file (distribute them out of band).
	RunnerPublicKey string          `json:"runnerPublicKey"`
	IssuerPublicKey string          `json:"issuerPublicKey"`
	Policy          PolicyStatus    `json:"policy"`
	Quarantine      Quarantine      `json:"quarantine"`
	Profile         json.RawMessage `json:"profile"`
	Running         []string        `json:"running"` // the caller's own on the submit socket; all on control
	// Pool is each warm-pool profile in force ([] when none).
	Pool []PoolProfile `json:"pool"`
	// OpLog is the operations log's head, on the control socket once the
	// log has a line: a reader who keeps it can tell a log cut short
	// even by someone able to sign a new head.
	OpLog *OpLogHead `json:"opLog,omitempty"`
}

// PoolProfile is one warm-pool profile's state: ready (every member
// prepared), filling, or backoff (its last preparation failed; none is
// tried before NextTry).
type PoolProfile struct {
	Name  string `json:"name"`
	Size  int    `json:"size"`
	Idle  int    `json:"idle"`
	State string `json:"state"`
	// Failures counts failed preparations in a row; LastError,
	// LastFailure and NextTry are absent while it is zero.
	Failures    int       `json:"failures"`
	LastError   string    `json:"lastError,omitempty"`
	LastFailure time.Time `json:"lastFailure,omitzero"`
	NextTry     time.Time `json:"nextTry,omitzero"`
	// Hits counts the launches the profile served, and Misses the
	// launches that went cold since the policy was loaded; LastMiss says
	// why the last of them did not take this profile.
	Hits     int64     `json:"hits"`
	Misses   int64     `json:"misses"`
	LastMiss *PoolMiss `json:"lastMiss,omitempty"`
}

// PoolMiss is the first field in which a launch's plan differed from a
// pool profile ("idle": it matched, and no sandbox was idle), with the
// profile's value and the request's.
type PoolMiss struct {
	Field   string `json:"field"`
	Profile string `json:"profile"`
	Request string `json:"request"`
}

// OpLogHead is the seq and hex SHA-256 of the operations log's last line.
type OpLogHead struct {
	Seq  int64  `json:"seq"`
	Last string `json:"last"`
}

// RunRequest submits a grant for launch, or a phase to run under a
// standing authorization (Authorization and Phase, without Grant).
type RunRequest struct {
	Grant         json.RawMessage `json:"grant,omitempty"`
	Authorization string          `json:"authorization,omitempty"`
	Phase         *PhaseSource    `json:"phase,omitempty"`
}

// Event is one line of a run's stream (NDJSON).
type Event struct {
	Type   EventType `json:"type"`
	RunID  string    `json:"runId,omitempty"`
	Data   []byte    `json:"data,omitempty"`
	Result *Result   `json:"result,omitempty"`
	Error  *Error    `json:"error,omitempty"`
	// Receipt and Bundle are set on EventReceipt.
	Receipt json.RawMessage `json:"receipt,omitempty"`
	Bundle  json.RawMessage `json:"bundle,omitempty"`
	// Quarantine is set on the final event when the run left the runner
	// quarantined (its cleanup could not be verified); Error then says why.
	Quarantine *Quarantine `json:"quarantine,omitempty"`
	// Dropped counts the output bytes this stream left out because the
	// client did not keep up: on EventDropped (so far) and on the final
	// event (in total). The run's result records each whole stream's
	// digest either way.
	Dropped *Dropped `json:"dropped,omitempty"`
}

// Dropped is how much of each output stream a client's stream left out.
type Dropped struct {
	Stdout int64 `json:"stdout"`
	Stderr int64 `json:"stderr"`
}

// Receipt is a run's signed receipt in both forms.
type Receipt struct {
	// Envelope is the DSSE envelope over the in-toto receipt statement.
	Envelope json.RawMessage `json:"envelope"`
	// Bundle is the same envelope as a Sigstore bundle v0.3 with a
	// public-key hint (for cosign verify-blob-attestation --key).
	Bundle json.RawMessage `json:"bundle"`
	// RunnerPublicKey is the runner identity key (PEM) that signed it.
	RunnerPublicKey string `json:"runnerPublicKey"`
}

// EventType names an Event.
type EventType string

const (
	EventStarted EventType = "started"
	EventStdout  EventType = "stdout"
	EventStderr  EventType = "stderr"
	EventResult  EventType = "result"
	EventError   EventType = "error"
	// EventReceipt carries the signed receipt (DSSE envelope) and its
	// Sigstore bundle form, before the result.
	EventReceipt EventType = "receipt"
	// EventDropped says output events were left out of this stream
	// because the client fell behind; the run itself was not slowed.
	EventDropped EventType = "dropped"
)

// Status of a run.
type RunStatus string

const (
	StatusOK      RunStatus = "ok"
	StatusFailed  RunStatus = "failed"
	StatusTimeout RunStatus = "timeout"
	StatusOOM     RunStatus = "oom"
	// StatusPidsLimit: the workload failed after the pids limit refused
	// it a fork (usage.pidsLimitHits counts them).
	StatusPidsLimit RunStatus = "pids-limit"
	StatusRefused   RunStatus = "refused"
	StatusCancelled RunStatus = "cancelled"
	// StatusFailedToStart: the sandbox failed before the workload started
	// (the error names the stage); the exit code is -1.
	StatusFailedToStart RunStatus = "failed-to-start"
)

// Result is what a run produced. Every field is an observation recorded
// after the fact; none of it authorizes anything.
type Result struct {
	RunID   string `json:"runId"`
	GrantID string `json:"grantId,omitempty"`
	Actor   string `json:"actor,omitempty"`
	// Authorization names the standing authorization the run's grant was
	// minted under; absent for a hand-issued grant.
	Authorization *AuthorizationRef `json:"authorization,omitempty"`
	Name          string            `json:"name"`
	Stage         string            `json:"stage,omitempty"`
	Status        RunStatus         `json:"status"`
	ExitCode      int               `json:"exitCode"`
	Signal        string            `json:"signal,omitempty"`
	Tier          string            `json:"tier"`
	Unqualified   bool              `json:"unqualified"`
	Runtime       Runtime           `json:"runtime"`
	// RuntimeSHA256 is the digest of the runtime bytes that actually ran.
	RuntimeSHA256 string `json:"runtimeSha256,omitempty"`
	ConfigSHA256  string `json:"configSha256,omitempty"`
	// GateSHA256 is the digest of the custody gate the container started
	// with, before it exec'd the workload.
	GateSHA256 string `json:"gateSha256,omitempty"`
	// SeccompSHA256 is the digest of the compiled seccomp filter the gate
	// installed; the config (ConfigSHA256) then holds no seccomp profile.
	SeccompSHA256 string    `json:"seccompSha256,omitempty"`
	UserNamespace bool      `json:"userNamespace"`
	Image         string    `json:"image"`
	Inputs        []Input   `json:"inputs"`
	Output        *Output   `json:"output,omitempty"`
	Usage         Usage     `json:"usage"`
	Streams       *Streams  `json:"streams,omitempty"` // as spooled, whatever a stream delivered
	Cleanup       *Cleanup  `json:"cleanup,omitempty"`
	Refusal       []Check   `json:"refusal,omitempty"`
	Error         string    `json:"error,omitempty"`
	Started       time.Time `json:"started"`
	Finished      time.Time `json:"finished"`
}

// Runtime is the pinned runtime.
type Runtime struct {
	Path    string `json:"path"`
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
}

// Input is one snapshotted input.
type Input struct {
	Source string `json:"source"`
	Target string `json:"target"`
	Digest string `json:"digest"`
}

// Output is the custody record of a run's outputs.
type Output struct {
	Digest string       `json:"digest"`
	Path   string       `json:"path"`
	Files  []OutputFile `json:"files"`
	Bytes  int64        `json:"bytes"`
	// LeftOut are the output entries the runner did not retain (the first
	// 64 of LeftOutTotal), each with why (a name that is not valid UTF-8);
	// the rest of the output is retained.
	LeftOut      []LeftOut `json:"leftOut,omitempty"`
	LeftOutTotal int       `json:"leftOutTotal,omitempty"`
}

// LeftOut is an output entry the runner did not retain. Name is its path
// in the output, Go-quoted (ASCII; strconv.Unquote gives its bytes back).
type LeftOut struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// OutputFile is one kept file.
type OutputFile struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// Streams are the digests of a run's two output streams.
type Streams struct {
	Stdout StreamDigest `json:"stdout"`
	Stderr StreamDigest `json:"stderr"`
}

// StreamDigest is one output stream as the runner kept it: the sha256 and
// length of the bytes it kept, and whether the workload wrote more than the
// runner's cap (the rest was read and discarded, never blocking the
// workload).
type StreamDigest struct {
	SHA256    string `json:"sha256"`
	Bytes     int64  `json:"bytes"`
	Truncated bool   `json:"truncated"`
}

// Usage is what the kernel accounted to the run.
type Usage struct {
	PeakMemoryBytes  int64 `json:"peakMemoryBytes"`
	CPUTimeMillis    int64 `json:"cpuTimeMillis"`
	WallMillis       int64 `json:"wallMillis"`
	OOMKills         int64 `json:"oomKills"`
	MemoryLimitBytes int64 `json:"memoryLimitBytes"`
	PidsLimit        int64 `json:"pidsLimit"`
	// PidsLimitHits counts forks the pids limit refused (-1: not watched;
	// absent: none, which keeps records from before it byte for byte).
	PidsLimitHits int64 `json:"pidsLimitHits,omitempty"`
}

// Cleanup says what cleanup did and whether every part was verified.
type Cleanup struct {
	Verified bool          `json:"verified"`
	Steps    []CleanupStep `json:"steps"`
}

// CleanupStep is one verified part of cleanup.
type CleanupStep struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Attempt is one launch attempt's journal: its cleanup state is running,
// clean, cleanup-pending or residual.
type Attempt struct {
	RunID     string            `json:"runId"`
	GrantID   string            `json:"grantId,omitempty"`
	State     string            `json:"state"`
	Resources []AttemptResource `json:"resources"`
	Detail    string            `json:"detail,omitempty"`
	Retry     string            `json:"retry,omitempty"`
	// Member is the warm-pool member's attempt whose sandbox the run
	// took: the run's cleanup state is never cleaner than the member's.
	Member  string    `json:"member,omitempty"`
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
}

// AttemptResource is one native resource of an attempt.
type AttemptResource struct {
	Kind     string            `json:"kind"`
	Name     string            `json:"name"`
	State    string            `json:"state"`
	Identity map[string]string `json:"identity,omitempty"`
	At       time.Time         `json:"at"`
}

// Recovery is what a recovery pass did.
type Recovery struct {
	Attempts []Attempt `json:"attempts"`
	// Foreign lists things that look like ours but are not journalled;
	// nothing was done to them.
	Foreign []string `json:"foreign,omitempty"`
}

// PipelineSummaryRequest asks custodyd (control socket) to sign the
// summary of a pipeline run. It names each stage's run; custodyd reads
// the receipts from its own records, checks each is its own and that
// every link holds, and signs only then.
type PipelineSummaryRequest struct {
	Pipeline string             `json:"pipeline"`
	Stages   []PipelineStageRef `json:"stages"`
}

// PipelineStageRef is one stage of a pipeline run as the client ran it.
type PipelineStageRef struct {
	Name     string `json:"name"`
	RunID    string `json:"runId"`
	Verifier bool   `json:"verifier"`
	// From has one entry per input of the stage's phase: the earlier
	// stage whose output the input is, or "" for a host source.
	From []string `json:"from"`
}

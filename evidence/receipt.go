package evidence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/custody-dev/custody/backend"
	cdsse "github.com/custody-dev/custody/internal/dsse"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/predicate"
)

// Subject names of the statement of a receipt.
const (
	// FileSubjectPrefix starts the subject name of each retained output
	// file: "out/<path>".
	FileSubjectPrefix = "out/"
	// TreeSubject names the subject of the whole retained output tree.
	TreeSubject = "custody:output-tree"
	// NoOutputSubject names the only subject of a receipt of a run with no
	// output tree; its sha256 is that of the empty string.
	NoOutputSubject = "custody:no-output"
)

// emptySHA256 is the lowercase hex SHA-256 of the empty string.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// Exit statuses of a run.
const (
	StatusOK        = "ok"
	StatusFailed    = "failed"
	StatusTimeout   = "timeout"
	StatusOOM       = "oom"
	StatusCancelled = "cancelled"
)

// Tiers a receipt may record.
const (
	TierProduction  = "production"
	TierDevelopment = "development"
)

// Seccomp states a receipt may record.
const (
	SeccompFilter     = "filter"
	SeccompStrict     = "strict"
	SeccompDisabled   = "disabled"
	SeccompUnobserved = "unobserved"
)

// UnobservedMembers are the receipt members a v6 receipt may name in
// unobserved, with -1 as their value.
var UnobservedMembers = []string{"exit.code", "usage.cpuTimeMillis", "usage.oomKills", "usage.peakMemoryBytes", "usage.wallMillis"}

var (
	statuses        = []string{StatusOK, StatusFailed, StatusTimeout, StatusOOM, StatusCancelled}
	tiers           = []string{TierProduction, TierDevelopment}
	seccompStates   = []string{SeccompFilter, SeccompStrict, SeccompDisabled, SeccompUnobserved}
	cgroupModes     = []string{"v2", "hybrid", "v1", "none"}
	namespaceTypes  = []string{"cgroup", "ipc", "mnt", "net", "pid", "time", "user", "uts"}
	capabilitySets  = []string{"CapAmb", "CapBnd", "CapEff", "CapInh", "CapPrm"}
	maxTextField    = 4096
	maxOutputFiles  = 1 << 16
	maxListElements = 4096
)

// Receipt is the predicate of a run receipt: the runner's account of one
// finished phase. Every field is recorded by the runner after the fact.
type Receipt struct {
	// RunID names the run.
	RunID string `json:"runId"`
	// Runner is the runner identity key that signs the receipt.
	Runner Identity `json:"runner"`
	// Grant is the grant that authorized the run, embedded whole.
	Grant GrantRef `json:"grant"`
	// Phase is the phase that ran.
	Phase PhaseRef `json:"phase"`
	// Profile is the runtime and host the phase ran on.
	Profile RuntimeProfile `json:"profile"`
	// Image is the image content digest, "sha256:<hex>".
	Image string `json:"image"`
	// Inputs are the input snapshots mounted into the container.
	Inputs []Input `json:"inputs"`
	// Observed is what was read back from the live container.
	Observed Observed `json:"observed"`
	// Egress is the restricted egress the run had and every decision its
	// proxy and broker made, as an observed control; absent for a run
	// whose egress was denied. It never holds a credential's value.
	Egress *Egress `json:"egress,omitempty"`
	// Pooled says the run took a sandbox of the warm pool, prepared up to
	// its gate before the grant existed (receipt v5 alone); absent for a
	// cold launch.
	Pooled *Pooled `json:"pooled,omitempty"`
	// Exit is how the phase ended.
	Exit Exit `json:"exit"`
	// Unobserved names the members of Exit and Usage that were not
	// observed, sorted (receipt v6 alone): each holds -1, never a value
	// the run did not show. UnobservedMembers are the names it may hold.
	Unobserved []string `json:"unobserved,omitempty"`
	// Authorization names the standing authorization the run's grant was
	// minted under (v8 only, and required there).
	Authorization *AuthorizationRef `json:"authorization,omitempty"`
	// Kube is what the cluster's API server reported of a run on the
	// kube backend (v9 only, and required there).
	Kube *Kube `json:"kube,omitempty"`
	// Usage is what the kernel accounted to the run.
	Usage Usage `json:"usage"`
	// Cleanup is what cleanup did and whether it was verified.
	Cleanup Cleanup `json:"cleanup"`
	// Output is the retained output.
	Output OutputRef `json:"output"`
	// Streams are the digests of the workload's standard streams as the
	// runner spooled them. Receipt v2 requires them; a v1 receipt has none.
	Streams *Streams `json:"streams,omitempty"`
	// Started and Finished bound the run. Finished is also when the
	// receipt is taken to be signed (key validity and revocation are
	// judged at Finished).
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
}

// Pooled is the warm-pool sandbox a run took.
type Pooled struct {
	// Profile is the operator's pool profile.
	Profile string `json:"profile"`
	// Sandbox names the pooled sandbox (its own journalled attempt).
	Sandbox string `json:"sandbox"`
	// PreparedAt is when the sandbox reached its gate; the observed
	// controls are still read after the grant's inputs were attached.
	PreparedAt time.Time `json:"preparedAt"`
}

// Streams are what the workload wrote to its standard output and error,
// as the runner kept them in its bounded spool.
type Streams struct {
	Stdout Stream `json:"stdout"`
	Stderr Stream `json:"stderr"`
}

// Stream is one spooled stream.
type Stream struct {
	// SHA256 is the lowercase hex SHA-256 of the bytes kept.
	SHA256 string `json:"sha256"`
	// Bytes is how many bytes were kept.
	Bytes int64 `json:"bytes"`
	// Truncated says the workload wrote more than the spool keeps; the
	// rest was drained and dropped, never allowed to block the workload.
	Truncated bool `json:"truncated"`
}

// Identity is a key identity.
type Identity struct {
	// ID is the keys.KeyID of the key.
	ID string `json:"id"`
}

// GrantRef is the grant a run used.
type GrantRef struct {
	// ID is the grant's ID (grant.Predicate.ID).
	ID string `json:"id"`
	// EnvelopeSHA256 is the lowercase hex SHA-256 of Envelope.
	EnvelopeSHA256 string `json:"envelopeSha256"`
	// IssuerID is the keys.KeyID of the key that signed the grant.
	IssuerID string `json:"issuerId"`
	// Envelope is the grant's DSSE envelope, verbatim, as compact JSON.
	Envelope json.RawMessage `json:"envelope"`
}

// PhaseRef identifies the phase that ran.
type PhaseRef struct {
	// Name is the phase request's name.
	Name string `json:"name"`
	// Stage is the pipeline stage.
	Stage string `json:"stage"`
	// Digest is the grant's subject digest: "sha256:<hex>" of the
	// canonical phase request JSON.
	Digest string `json:"digest"`
}

// RuntimeProfile is the runtime and host a phase ran on.
type RuntimeProfile struct {
	// Backend names the backend that ran the phase, e.g. "oci". Receipt
	// v2 and v3 require it; a v1 receipt has none (its backend was oci).
	Backend string `json:"backend,omitempty"`
	// Identity is the backend's identity (backend.Identity) as it ran.
	// Receipt v3 requires it; v1 and v2 receipts have none.
	Identity *BackendIdentity `json:"identity,omitempty"`
	// Evidence is the backend's sandbox evidence exactly: 1 to
	// maxEvidence names ([a-z][a-z0-9-]{0,31}) to lowercase hex SHA-256
	// digests, e.g. "config", "gate", "seccomp" and "runtime" for oci (an
	// oci v3 receipt must carry config, gate and seccomp), "hostconfig"
	// and "image" for docker. Receipt v3 requires it; v1 and v2 receipts
	// have none (they record the oci digests in the flat fields below).
	Evidence map[string]string `json:"evidence,omitempty"`
	Runtime  Runtime           `json:"runtime"`
	// Kernel is the uname release.
	Kernel string `json:"kernel"`
	// Arch and OS are GOARCH and GOOS.
	Arch string `json:"arch"`
	OS   string `json:"os"`
	// CgroupMode is v2, hybrid, v1 or none.
	CgroupMode string `json:"cgroupMode"`
	// Tier is TierProduction or TierDevelopment.
	Tier string `json:"tier"`
	// Unqualified is true exactly for the development tier.
	Unqualified bool `json:"unqualified"`
	// ConfigSHA256 is the lowercase hex SHA-256 of the OCI config.json the
	// container ran with. v1 and v2 receipts always write the member
	// (hence a pointer: it is absent from v3 and present, if empty, in
	// v2); its value is required of the oci backend (and of every v1
	// receipt) and empty for a backend that has no OCI config. A v3
	// receipt has none: the digest is Evidence["config"].
	ConfigSHA256 *string `json:"configSha256,omitempty"`
	// GateSHA256 (v1 and v2 only; Evidence["gate"] in v3) is the
	// lowercase hex SHA-256 of the custody gate: the
	// container's first process, which exec'd the workload once the runner
	// had observed it.
	GateSHA256 string `json:"gateSha256,omitempty"`
	// SeccompSHA256 (v1 and v2 only; Evidence["seccomp"] in v3) is the
	// lowercase hex SHA-256 of the seccomp filter the
	// gate installed: the classic BPF program (struct sock_filter entries,
	// host byte order) compiled from the reviewed profile. A gated
	// container's config.json holds no seccomp profile; this names the
	// filter instead.
	SeccompSHA256 string `json:"seccompSha256,omitempty"`
	// UserNamespace says whether the container ran in a user namespace.
	UserNamespace bool `json:"userNamespace"`
}

// BackendIdentity is a backend's identity as a receipt v3 records it
// (backend.Identity, in a signed format of its own).
type BackendIdentity struct {
	// Kind is the backend's name: profile.backend.
	Kind string `json:"kind"`
	// Version is the runtime's or engine's version.
	Version string `json:"version"`
	// Path is the absolute path of the runtime binary, if there is one.
	Path string `json:"path,omitempty"`
	// SHA256 is the lowercase hex SHA-256 of the runtime binary, if the
	// backend could prove it (the oci backend always does).
	SHA256 string `json:"sha256,omitempty"`
}

// Runtime is the pinned container runtime that ran.
type Runtime struct {
	Version string `json:"version"`
	// SHA256 is the lowercase hex SHA-256 of the runtime binary that ran.
	SHA256 string `json:"sha256"`
	// Path is the absolute path of the runtime binary.
	Path string `json:"path"`
}

// Input is one input snapshot as a receipt records it. Like the rest of the
// receipt's types it is a signed format of its own, apart from the domain's
// admission.Input and backend's types, so a domain change cannot change
// what published receipts mean.
type Input struct {
	Source string `json:"source"`
	Target string `json:"target"`
	// Digest is the snapshot's tree digest, "sha256:<hex>".
	Digest string `json:"digest"`
}

// Observed is what the runner read back from the live container, never
// from the configuration it asked for.
type Observed struct {
	// At is when it was read. It is zero only if nothing was observed
	// (the container never started); then Seccomp is "unobserved", every
	// list is empty and Notes say why.
	At time.Time `json:"at"`
	// Namespaces are the namespace types that differ from the host's,
	// sorted, e.g. ["cgroup","ipc","mnt","net","pid","user","uts"].
	Namespaces []string `json:"namespaces"`
	// Capabilities are the capability sets of the container's init as
	// /proc/<pid>/status shows them: "CapEff": "0000000000000000", ...
	Capabilities map[string]string `json:"capabilities"`
	// NoNewPrivs is the no_new_privs flag of the container's init.
	NoNewPrivs bool `json:"noNewPrivs"`
	// Seccomp is "filter", "strict", "disabled" or "unobserved".
	Seccomp string `json:"seccomp"`
	// Mounts are the container's mounts.
	Mounts []ObservedMount `json:"mounts"`
	// Cgroup is the container's cgroup limits; 0 means no limit or not
	// observed (see Notes).
	Cgroup ObservedCgroup `json:"cgroup"`
	// Interfaces are the network interfaces seen in the container's
	// network namespace.
	Interfaces []string `json:"interfaces,omitempty"`
	// Notes say, for instance, why something is unobserved.
	Notes []string `json:"notes,omitempty"`
}

// ObservedMount is one mount seen in the container.
type ObservedMount struct {
	Target   string `json:"target"`
	FSType   string `json:"fsType"`
	ReadOnly bool   `json:"readOnly"`
}

// ObservedCgroup is the container's cgroup limits as read back.
type ObservedCgroup struct {
	MemoryLimitBytes int64 `json:"memoryLimitBytes"`
	PidsLimit        int64 `json:"pidsLimit"`
	CPUQuotaMicros   int64 `json:"cpuQuotaMicros"`
	CPUPeriodMicros  int64 `json:"cpuPeriodMicros"`
}

// Exit is how a run ended.
type Exit struct {
	// Status is one of ok, failed, timeout, oom or cancelled. "ok" needs
	// code 0, no signal and no flag; timeout, oom and cancelled need their
	// flag; "failed" also covers runs whose outputs custody could not keep.
	Status    string `json:"status"`
	Code      int    `json:"code"`
	Signal    string `json:"signal"`
	TimedOut  bool   `json:"timedOut"`
	OOMKilled bool   `json:"oomKilled"`
	Cancelled bool   `json:"cancelled"`
}

// Usage is what the kernel accounted to a run.
type Usage struct {
	PeakMemoryBytes int64 `json:"peakMemoryBytes"`
	CPUTimeMillis   int64 `json:"cpuTimeMillis"`
	WallMillis      int64 `json:"wallMillis"`
	OOMKills        int64 `json:"oomKills"`
}

// Cleanup says what cleanup did and whether every part was verified.
type Cleanup struct {
	Verified bool          `json:"verified"`
	Steps    []CleanupStep `json:"steps"`
}

// CleanupStep is one part of cleanup.
type CleanupStep struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// OutputRef is the retained output of a run.
type OutputRef struct {
	// TreeDigest is the treehash digest, "sha256:<hex>", of the retained
	// (read-only) output tree, or "" if the run left no output tree.
	TreeDigest string `json:"treeDigest"`
	// Files are the regular files of the tree, sorted by Path.
	Files []OutputFile `json:"files"`
}

// OutputFile is one retained regular file.
type OutputFile struct {
	// Path is slash-separated and relative to the output root.
	Path string `json:"path"`
	// SHA256 is the lowercase hex SHA-256 of the content.
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// backendPattern is the shape of a backend name and of an evidence name.
var backendPattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// maxEvidence bounds profile.evidence.
const maxEvidence = 32

// ociEvidence are the evidence names an oci v3 receipt must carry: what a
// v2 receipt recorded as configSha256, gateSha256 and seccompSha256.
var ociEvidence = []string{"config", "gate", "seccomp"}

// PredicateType is the receipt version r has the shape of: v4 when it
// records restricted egress, v3 when its
// profile records the backend's identity or evidence, v2 when it records
// its streams and backend, v1 otherwise.
func (r *Receipt) PredicateType() string {
	if r.Kube != nil {
		return predicate.ReceiptV9
	}
	if r.Authorization != nil {
		return predicate.ReceiptV8
	}
	if len(r.Unobserved) > 0 {
		return predicate.ReceiptV7
	}
	if r.Pooled != nil {
		return predicate.ReceiptV5
	}
	if r.Egress != nil && r.Egress.Refused != nil {
		return predicate.ReceiptV6
	}
	if r.Egress != nil {
		return predicate.ReceiptV4
	}
	if r.Profile.Identity != nil || r.Profile.Evidence != nil {
		return predicate.ReceiptV3
	}
	if r.Streams != nil || r.Profile.Backend != "" {
		return predicate.ReceiptV2
	}
	return predicate.ReceiptV1
}

// EffectiveTier is the tier the receipt's run was held to:
// TierDevelopment if the run was unqualified, else its recorded tier.
func (r *Receipt) EffectiveTier() string {
	if r.Profile.Unqualified {
		return TierDevelopment
	}
	return r.Profile.Tier
}

// Subjects returns the in-toto subjects of r's statement: one
// "out/<path>" per retained file, in path order, then "custody:output-tree";
// or only "custody:no-output" when r records no output tree. It fails if
// r.Output is not well formed.
func (r *Receipt) Subjects() ([]Subject, error) {
	var ps problems
	checkOutput(&ps, &r.Output)
	if err := ps.err(); err != nil {
		return nil, err
	}
	return subjectsOf(&r.Output), nil
}

// subjectsOf derives the subjects of a well-formed output record.
func subjectsOf(o *OutputRef) []Subject {
	if o.TreeDigest == "" {
		return []Subject{{Name: NoOutputSubject, Digest: map[string]string{"sha256": emptySHA256}}}
	}
	subs := make([]Subject, 0, len(o.Files)+1)
	for _, f := range o.Files {
		subs = append(subs, Subject{Name: FileSubjectPrefix + f.Path, Digest: map[string]string{"sha256": f.SHA256}})
	}
	return append(subs, Subject{Name: TreeSubject, Digest: map[string]string{"sha256": strings.TrimPrefix(o.TreeDigest, "sha256:")}})
}

// SignReceipt validates r, builds its statement (subjects from r.Output)
// and DSSE-signs it with the runner key, returning the envelope JSON.
//
// r.Runner.ID must be the runner key's keys.KeyID. Times are converted to
// UTC; nil lists are written as empty lists. Nothing else is filled in: a
// missing or inconsistent field is an error naming it. The statement is
// checked with in-toto's own parser, and the envelope with the decoder
// Verify uses, before it is returned.
func SignReceipt(ctx context.Context, runner *keys.Signer, r Receipt) (env []byte, err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("evidence: sign receipt: %w", err)
	}
	if runner == nil {
		return nil, errors.New("evidence: sign receipt: nil runner key")
	}
	normalize(&r)
	// Custody signs the current version only; v1 receipts are verified,
	// never made.
	// A run with restricted egress is receipt v6 (v4 is verified, never
	// made); every other run keeps the v3 shape it always had.
	ptype := predicate.Receipt
	if r.Egress != nil {
		ptype = predicate.ReceiptV6
	}
	if r.Pooled != nil {
		ptype = predicate.ReceiptV5
	}
	if len(r.Unobserved) > 0 {
		// A member the run did not observe: only v7 can say so.
		ptype = predicate.ReceiptV7
	}
	if r.Authorization != nil {
		// A grant minted under a standing authorization: only v8 names it.
		ptype = predicate.ReceiptV8
	}
	if r.Kube != nil {
		// A run on a cluster: only v9 records what the cluster reported.
		ptype = predicate.ReceiptV9
	}
	if err := validateReceipt(&r, ptype); err != nil {
		return nil, fmt.Errorf("evidence: sign receipt: invalid receipt: %w", err)
	}
	if r.Runner.ID != runner.ID() {
		return nil, fmt.Errorf("evidence: sign receipt: runner.id %s is not the signing key %s", r.Runner.ID, runner.ID())
	}
	// A validated receipt encodes to the canonical form the verifier
	// decodes; TestSignVerifyRoundTrip and the receipt tests hold that for
	// every shape a receipt takes, so it is not decoded again here.
	payload, err := encodeStatement(ptype, subjectsOf(&r.Output), &r)
	if err != nil {
		return nil, fmt.Errorf("evidence: sign receipt: %w", err)
	}
	// in-toto's parser checks the statement's frame (type, subjects,
	// predicateType); the predicate is any JSON object to it, and
	// encoding/json always writes one it parses, so the frame is checked
	// around an empty predicate: parsing the whole receipt into a protobuf
	// Struct cost a quarter of the signing time.
	frame, err := encodeStatement(ptype, subjectsOf(&r.Output), struct{}{})
	if err != nil {
		return nil, fmt.Errorf("evidence: sign receipt: %w", err)
	}
	if err := checkInToto(frame); err != nil {
		return nil, fmt.Errorf("evidence: sign receipt: %w", err)
	}
	out, err := signStatement(ctx, runner, payload)
	if err != nil {
		return nil, fmt.Errorf("evidence: sign receipt: %w", err)
	}
	return out, nil
}

// checkInToto parses payload with in-toto's own parser and validates it.
func checkInToto(payload []byte) error {
	var st intoto.Statement
	if err := protojson.Unmarshal(payload, &st); err != nil {
		return fmt.Errorf("in-toto parser refuses the statement: %w", err)
	}
	if err := st.Validate(); err != nil {
		return fmt.Errorf("in-toto refuses the statement: %w", err)
	}
	return nil
}

// normalize converts times to UTC and nil lists to empty ones, so that the
// signed JSON has the same shape whatever the caller passed.
func normalize(r *Receipt) {
	r.Started, r.Finished, r.Observed.At = r.Started.UTC(), r.Finished.UTC(), r.Observed.At.UTC()
	if r.Pooled != nil {
		pooled := *r.Pooled
		pooled.PreparedAt = pooled.PreparedAt.UTC()
		r.Pooled = &pooled
	}
	if r.Inputs == nil {
		r.Inputs = []Input{}
	}
	if r.Observed.Namespaces == nil {
		r.Observed.Namespaces = []string{}
	}
	if r.Observed.Capabilities == nil {
		r.Observed.Capabilities = map[string]string{}
	}
	if r.Observed.Mounts == nil {
		r.Observed.Mounts = []ObservedMount{}
	}
	if r.Cleanup.Steps == nil {
		r.Cleanup.Steps = []CleanupStep{}
	}
	if r.Output.Files == nil {
		r.Output.Files = []OutputFile{}
	}
}

// decodeReceiptStatement decodes a receipt statement strictly, requires
// the canonical form SignReceipt produces byte for byte, validates the
// predicate and checks that the subjects are exactly those derived from
// predicate.output.
func decodeReceiptStatement(payload []byte) (*Receipt, []Subject, error) {
	// Fast path for a well-formed receipt: one strict decode with the
	// predicate typed and one canonical encode, where the explained path
	// below decodes and re-encodes the predicate separately. Both accept
	// exactly the same payloads; anything the fast path does not accept
	// goes the explained way, which says what is wrong.
	var typed cdsse.Statement[Receipt]
	if cdsse.DecodeCanonicalRaw(payload, &typed, grantEnvelope) && typed.Type == cdsse.StatementType && knownReceiptType(typed.PredicateType) {
		if err := validateReceipt(&typed.Predicate, typed.PredicateType); err != nil {
			return nil, nil, fmt.Errorf("predicate: %v", err)
		}
		want := subjectsOf(&typed.Predicate.Output)
		if err := subjectsMatch(typed.Subject, want, "predicate.output"); err != nil {
			return nil, nil, err
		}
		return &typed.Predicate, want, nil
	}
	return decodeReceiptStatementExplained(payload)
}

// grantEnvelope is the raw JSON a receipt statement embeds: the grant's
// envelope, a third of the statement.
func grantEnvelope(st *cdsse.Statement[Receipt]) *json.RawMessage {
	return &st.Predicate.Grant.Envelope
}

func decodeReceiptStatementExplained(payload []byte) (*Receipt, []Subject, error) {
	var st statement
	if err := cdsse.StrictUnmarshal(payload, &st); err != nil {
		return nil, nil, fmt.Errorf("statement: %v", err)
	}
	if st.Type != cdsse.StatementType {
		return nil, nil, fmt.Errorf("_type %q is not %q", cdsse.Clip(st.Type), cdsse.StatementType)
	}
	if !knownReceiptType(st.PredicateType) {
		return nil, nil, fmt.Errorf("predicateType %q is not %q, %q, %q, %q, %q, %q, %q, %q or %q", cdsse.Clip(st.PredicateType), predicate.ReceiptV9, predicate.ReceiptV8, predicate.ReceiptV7, predicate.ReceiptV6, predicate.ReceiptV5, predicate.ReceiptV4, predicate.ReceiptV3, predicate.ReceiptV2, predicate.ReceiptV1)
	}
	var r Receipt
	if err := cdsse.StrictUnmarshal(st.Predicate, &r); err != nil {
		return nil, nil, fmt.Errorf("predicate: %v", err)
	}
	// Byte-for-byte canonical form: this refuses duplicate or differently
	// cased members, nulls, escapes and number or time spellings that
	// decode to the same value, and trailing data.
	pred, err := cdsse.CanonicalJSON(&r)
	if err != nil {
		return nil, nil, fmt.Errorf("predicate: %v", err)
	}
	canon := st
	canon.Predicate = pred
	again, err := cdsse.CanonicalJSON(&canon)
	if err != nil || !bytes.Equal(again, payload) {
		return nil, nil, errors.New("statement is not in canonical form")
	}
	if err := validateReceipt(&r, st.PredicateType); err != nil {
		return nil, nil, fmt.Errorf("predicate: %v", err)
	}
	want := subjectsOf(&r.Output)
	if err := subjectsMatch(st.Subject, want, "predicate.output"); err != nil {
		return nil, nil, err
	}
	// want equals the decoded subjects.
	return &r, want, nil
}

// knownReceiptType reports whether t is a receipt predicate type custody
// verifies.
func knownReceiptType(t string) bool {
	return t == predicate.ReceiptV9 || t == predicate.ReceiptV8 || t == predicate.ReceiptV7 || t == predicate.ReceiptV6 || t == predicate.ReceiptV5 || t == predicate.ReceiptV4 || t == predicate.ReceiptV3 || t == predicate.ReceiptV2 || t == predicate.ReceiptV1
}

// subjectsMatch says, when got is not exactly want (the subjects derived
// from the predicate part named from), which subject differs and how, so
// that a tampered digest is named rather than counted.
func subjectsMatch(got []cdsse.Subject, want []Subject, from string) error {
	if slices.EqualFunc(got, want, equalSubject) {
		return nil
	}
	for i := range min(len(got), len(want)) {
		g, w := got[i], want[i]
		switch {
		case equalSubject(g, w):
		case g.Name != w.Name:
			return fmt.Errorf("subject %d is named %q, where %s derives %q", i, cdsse.Clip(g.Name), from, cdsse.Clip(w.Name))
		default:
			return fmt.Errorf("subject %q has digest %s, where %s derives %s", cdsse.Clip(g.Name), digestText(g.Digest), from, digestText(w.Digest))
		}
	}
	if len(got) > len(want) {
		return fmt.Errorf("subject %q is not derived from %s (%d subjects, want %d)", cdsse.Clip(got[len(want)].Name), from, len(got), len(want))
	}
	return fmt.Errorf("subject %q, derived from %s, is missing (%d subjects, want %d)", cdsse.Clip(want[len(got)].Name), from, len(got), len(want))
}

// digestText prints a subject's digest set in a stable order.
func digestText(d map[string]string) string {
	parts := make([]string, 0, len(d))
	for _, k := range slices.Sorted(maps.Keys(d)) {
		parts = append(parts, cdsse.Clip(k)+":"+cdsse.Clip(d[k]))
	}
	return strings.Join(parts, ",")
}

func equalSubject(a cdsse.Subject, b Subject) bool {
	if a.Name != b.Name || len(a.Digest) != len(b.Digest) {
		return false
	}
	for k, v := range a.Digest {
		if w, ok := b.Digest[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// problems collects validation problems, each naming its field.
type problems []string

func (ps *problems) add(field, format string, args ...any) {
	if len(*ps) <= 64 {
		ps.push(field + ": " + fmt.Sprintf(format, args...))
	}
}

func (ps *problems) push(p string) {
	if len(*ps) < 64 {
		*ps = append(*ps, p)
	} else if len(*ps) == 64 {
		*ps = append(*ps, "(more problems not listed)")
	}
}

// element records the problems of element i of list, which were found
// under field names relative to it (".target", or "" for the element
// itself). The element's name is formatted only if it has a problem: most
// elements of most receipts have none, and formatting every name was a
// measurable part of a verification.
func (ps *problems) element(list string, i int, one problems) {
	for _, p := range one {
		ps.push(list + "[" + strconv.Itoa(i) + "]" + p)
	}
}

func (ps problems) err() error {
	if len(ps) == 0 {
		return nil
	}
	return errors.New(strings.Join(ps, "; "))
}

func (ps *problems) text(field, s string) {
	if err := cdsse.CheckText(s, maxTextField, true); err != nil {
		ps.add(field, "%v", err)
	}
}

// optText is text that may be empty.
func (ps *problems) optText(field, s string) {
	if s != "" {
		ps.text(field, s)
	}
}

func (ps *problems) digest(field, s string) {
	if !cdsse.IsDigest(s) {
		ps.add(field, "%q is not a sha256:<64 lowercase hex> digest", cdsse.Clip(s))
	}
}

func (ps *problems) hex64(field, s string) {
	if !cdsse.IsHex64(s) {
		ps.add(field, "%q is not 64 lowercase hex digits", cdsse.Clip(s))
	}
}

func (ps *problems) keyID(field, s string) {
	if !cdsse.IsDigest(s) {
		ps.add(field, "%q is not a key ID (sha256:<64 lowercase hex>)", cdsse.Clip(s))
	}
}

func (ps *problems) absPath(field, s string) {
	if !strings.HasPrefix(s, "/") {
		ps.add(field, "%q is not an absolute path", cdsse.Clip(s))
		return
	}
	ps.text(field, s)
}

func (ps *problems) nonNegative(field string, n int64) {
	if n < 0 {
		ps.add(field, "%d is negative", n)
	}
}

func (ps *problems) oneOf(field, s string, allowed []string) {
	if !slices.Contains(allowed, s) {
		ps.add(field, "%q is not one of %s", cdsse.Clip(s), strings.Join(allowed, ", "))
	}
}

func (ps *problems) time(field string, t time.Time) {
	switch {
	case t.IsZero():
		ps.add(field, "missing")
	case t.Location() != time.UTC:
		ps.add(field, "%s is not in UTC", t.Format(time.RFC3339Nano))
	case t.Year() < 2000 || t.Year() > 9999:
		ps.add(field, "year %d is out of range", t.Year())
	}
}

// validateReceipt checks every field of r as a receipt of predicateType.
// It fills nothing in.
func validateReceipt(r *Receipt, predicateType string) error {
	var ps problems
	checkVersion(&ps, r, predicateType)
	ps.text("runId", r.RunID)
	ps.keyID("runner.id", r.Runner.ID)

	checkGrantRef(&ps, &r.Grant)

	ps.text("phase.name", r.Phase.Name)
	ps.text("phase.stage", r.Phase.Stage)
	ps.digest("phase.digest", r.Phase.Digest)

	p := &r.Profile
	ps.text("profile.runtime.version", p.Runtime.Version)
	ps.hex64("profile.runtime.sha256", p.Runtime.SHA256)
	if r.Kube == nil {
		// A cluster's runtime is its API server (the kube record checks it).
		ps.absPath("profile.runtime.path", p.Runtime.Path)
	}
	ps.text("profile.kernel", p.Kernel)
	ps.text("profile.arch", p.Arch)
	ps.text("profile.os", p.OS)
	ps.oneOf("profile.cgroupMode", p.CgroupMode, cgroupModes)
	ps.oneOf("profile.tier", p.Tier, tiers)
	// A kube run whose cluster did not report everything is unqualified in
	// any tier (checkKube requires it).
	kubeIncomplete := r.Kube != nil && !KubeQualified(r.Kube, &r.Cleanup)
	if p.Unqualified != (p.Tier == TierDevelopment) && !(kubeIncomplete && p.Unqualified) {
		ps.add("profile.unqualified", "%v contradicts tier %q (the development tier and only it is unqualified)", p.Unqualified, cdsse.Clip(p.Tier))
	}
	if !v3Profile(predicateType) {
		checkFlatDigests(&ps, p, predicateType)
	}

	ps.digest("image", r.Image)
	if len(r.Inputs) > maxListElements {
		ps.add("inputs", "%d entries, more than %d", len(r.Inputs), maxListElements)
	}
	targets := make(map[string]bool, len(r.Inputs))
	for i, in := range r.Inputs {
		var one problems
		one.text(".source", in.Source)
		one.absPath(".target", in.Target)
		if targets[in.Target] {
			one.add(".target", "%q appears twice", cdsse.Clip(in.Target))
		}
		targets[in.Target] = true
		one.digest(".digest", in.Digest)
		ps.element("inputs", i, one)
	}

	checkObserved(&ps, &r.Observed)
	checkExit(&ps, &r.Exit)
	checkUnobserved(&ps, r, predicateType)

	if len(r.Cleanup.Steps) > maxListElements {
		ps.add("cleanup.steps", "%d entries, more than %d", len(r.Cleanup.Steps), maxListElements)
	}
	for i, s := range r.Cleanup.Steps {
		var one problems
		one.text(".name", s.Name)
		one.optText(".detail", s.Detail)
		ps.element("cleanup.steps", i, one)
	}
	if r.Cleanup.Verified && slices.ContainsFunc(r.Cleanup.Steps, func(s CleanupStep) bool { return !s.OK }) {
		ps.add("cleanup.verified", "true, but a step failed")
	}

	checkOutput(&ps, &r.Output)

	ps.time("started", r.Started)
	ps.time("finished", r.Finished)
	if !r.Started.IsZero() && !r.Finished.IsZero() && r.Finished.Before(r.Started) {
		ps.add("finished", "%s is before started %s", r.Finished.Format(time.RFC3339Nano), r.Started.Format(time.RFC3339Nano))
	}
	if at := r.Observed.At; !at.IsZero() && !r.Finished.IsZero() && at.After(r.Finished) {
		ps.add("observed.at", "%s is after finished %s: observations are read from the live container", at.Format(time.RFC3339Nano), r.Finished.Format(time.RFC3339Nano))
	}
	return ps.err()
}

// checkFlatDigests checks the digests v1 and v2 receipts record flat in
// the profile.
func checkFlatDigests(ps *problems, p *RuntimeProfile, predicateType string) {
	if p.ConfigSHA256 == nil {
		ps.add("profile.configSha256", "missing (%s writes it, empty for a backend without an OCI config)", predicateType)
	} else if predicateType == predicate.ReceiptV1 || p.Backend == string(backend.KindOCI) || *p.ConfigSHA256 != "" {
		ps.hex64("profile.configSha256", *p.ConfigSHA256)
	}
	if p.GateSHA256 != "" {
		ps.hex64("profile.gateSha256", p.GateSHA256)
	}
	if p.SeccompSHA256 != "" {
		ps.hex64("profile.seccompSha256", p.SeccompSHA256)
	}
}

// checkVersion checks the fields that tell the versions apart: a v2
// receipt names its backend and records its streams; a v3 receipt also
// records the backend's identity and evidence map instead of the flat
// digests; a v1 receipt has neither backend nor streams. So no receipt can
// carry another version's content unchecked.
// v3Profile says the receipt version records the backend's identity and
// evidence map in its profile (v3, and v4 which extends it).
func v3Profile(predicateType string) bool {
	return predicateType == predicate.ReceiptV3 || predicateType == predicate.ReceiptV4 || predicateType == predicate.ReceiptV5 ||
		predicateType == predicate.ReceiptV6 || fromV7(predicateType)
}

// fromV7 says the receipt version has v7's shape (v7, and v8 which
// extends it).
func fromV7(predicateType string) bool {
	return predicateType == predicate.ReceiptV7 || predicateType == predicate.ReceiptV8 || predicateType == predicate.ReceiptV9
}

// checkUnobserved checks the usage and what unobserved says of it and of
// the exit code: in a v7 receipt, a sorted, non-empty list of
// UnobservedMembers, each holding -1 (an unobserved exit code with no
// signal), every other usage member non-negative; before v7, no list and
// no negative usage.
func checkUnobserved(ps *problems, r *Receipt, predicateType string) {
	members := map[string]int64{"exit.code": int64(r.Exit.Code), "usage.peakMemoryBytes": r.Usage.PeakMemoryBytes,
		"usage.cpuTimeMillis": r.Usage.CPUTimeMillis, "usage.wallMillis": r.Usage.WallMillis, "usage.oomKills": r.Usage.OOMKills}
	v7 := fromV7(predicateType)
	switch {
	case !v7 && len(r.Unobserved) > 0:
		ps.add("predicateType", "%s has no unobserved (it is %s's); this receipt has it", cdsse.Clip(predicateType), predicate.ReceiptV7)
	case predicateType == predicate.ReceiptV7 && len(r.Unobserved) == 0:
		ps.add("unobserved", "empty: a %s receipt names the members it did not observe", predicate.ReceiptV7)
	}
	listed := map[string]bool{}
	for i, name := range r.Unobserved {
		var one problems
		switch {
		case !slices.Contains(UnobservedMembers, name):
			one.add("", "%q is not one of %s", cdsse.Clip(name), strings.Join(UnobservedMembers, ", "))
		case i > 0 && r.Unobserved[i-1] >= name:
			one.add("", "%q is not after %q: the list is sorted, each member once", name, cdsse.Clip(r.Unobserved[i-1]))
		case members[name] != -1:
			one.add("", "%s is %d: an unobserved member holds -1", name, members[name])
		}
		listed[name] = true
		ps.element("unobserved", i, one)
	}
	if listed["exit.code"] && r.Exit.Signal != "" {
		ps.add("exit.signal", "%q with an unobserved exit code", cdsse.Clip(r.Exit.Signal))
	}
	for _, name := range UnobservedMembers {
		if !listed[name] && name != "exit.code" {
			ps.nonNegative(name, members[name])
		}
	}
}

// checkPooled checks a v5 receipt's pooled record: present, named, and
// prepared before the run started.
func checkPooled(ps *problems, r *Receipt) {
	if r.Pooled == nil {
		ps.add("pooled", "missing (a %s receipt records the pooled sandbox the run took)", predicate.ReceiptV5)
		return
	}
	ps.text("pooled.profile", r.Pooled.Profile)
	ps.text("pooled.sandbox", r.Pooled.Sandbox)
	ps.time("pooled.preparedAt", r.Pooled.PreparedAt)
	if !r.Started.IsZero() && r.Pooled.PreparedAt.After(r.Started) {
		ps.add("pooled.preparedAt", "%s is after the run started (%s)", r.Pooled.PreparedAt.Format(time.RFC3339Nano), r.Started.Format(time.RFC3339Nano))
	}
}

func checkVersion(ps *problems, r *Receipt, predicateType string) {
	p := &r.Profile
	v7 := fromV7(predicateType)
	checkAuthorization(ps, r, predicateType)
	checkKube(ps, r, predicateType)
	if predicateType != predicate.ReceiptV5 && !v7 && r.Pooled != nil {
		ps.add("predicateType", "%s has no pooled (it is %s's); this receipt has it", cdsse.Clip(predicateType), predicate.ReceiptV5)
	}
	if predicateType == predicate.ReceiptV5 || (v7 && r.Pooled != nil) {
		checkPooled(ps, r)
	}
	if predicateType != predicate.ReceiptV4 && predicateType != predicate.ReceiptV5 && predicateType != predicate.ReceiptV6 && !v7 && r.Egress != nil {
		ps.add("predicateType", "%s has no egress (it is %s's); this receipt has it", cdsse.Clip(predicateType), predicate.ReceiptV6)
	}
	if r.Egress != nil {
		checkEgressShape(ps, r.Egress, predicateType)
	}
	if !v3Profile(predicateType) && (p.Identity != nil || p.Evidence != nil) {
		ps.add("predicateType", "%s has no profile.identity or profile.evidence (they are %s's); this receipt has them", cdsse.Clip(predicateType), predicate.ReceiptV3)
	}
	switch predicateType {
	case predicate.ReceiptV1:
		if r.Profile.Backend != "" || r.Streams != nil {
			ps.add("predicateType", "%s has no profile.backend or streams; this receipt has them", predicate.ReceiptV1)
		}
	case predicate.ReceiptV2, predicate.ReceiptV3, predicate.ReceiptV4, predicate.ReceiptV5, predicate.ReceiptV6, predicate.ReceiptV7, predicate.ReceiptV8, predicate.ReceiptV9:
		if !backendPattern.MatchString(r.Profile.Backend) {
			ps.add("profile.backend", "%q is not a backend name", cdsse.Clip(r.Profile.Backend))
		}
		if v3Profile(predicateType) {
			checkV3Profile(ps, p)
		}
		if (predicateType == predicate.ReceiptV4 || predicateType == predicate.ReceiptV6) && r.Egress == nil {
			ps.add("egress", "missing (a %s receipt records the run's restricted egress)", cdsse.Clip(predicateType))
		}
		if r.Streams == nil {
			ps.add("streams", "missing")
			return
		}
		for _, s := range []struct {
			name string
			s    Stream
		}{{"stdout", r.Streams.Stdout}, {"stderr", r.Streams.Stderr}} {
			ps.hex64("streams."+s.name+".sha256", s.s.SHA256)
			ps.nonNegative("streams."+s.name+".bytes", s.s.Bytes)
		}
	default:
		ps.add("predicateType", "%q is not a receipt predicate type", cdsse.Clip(predicateType))
	}
}

// checkV3Profile checks what a v3 profile records instead of v2's flat
// digests: the backend's identity and its evidence map.
func checkV3Profile(ps *problems, p *RuntimeProfile) {
	if p.ConfigSHA256 != nil || p.GateSHA256 != "" || p.SeccompSHA256 != "" {
		ps.add("profile", "%s has no configSha256, gateSha256 or seccompSha256 (they are profile.evidence's config, gate and seccomp); this receipt has them", predicate.ReceiptV3)
	}
	if id := p.Identity; id == nil {
		ps.add("profile.identity", "missing")
	} else {
		if id.Kind != p.Backend {
			ps.add("profile.identity.kind", "%q is not profile.backend %q", cdsse.Clip(id.Kind), cdsse.Clip(p.Backend))
		}
		ps.text("profile.identity.version", id.Version)
		if id.Path != "" && p.Backend != "kube" {
			// A cluster's path is its API server URL, which the kube
			// record checks.
			ps.absPath("profile.identity.path", id.Path)
		}
		if id.SHA256 != "" || p.Backend == string(backend.KindOCI) {
			ps.hex64("profile.identity.sha256", id.SHA256)
		}
	}
	switch n := len(p.Evidence); {
	case n == 0:
		ps.add("profile.evidence", "empty: a v3 receipt records the backend's evidence")
	case n > maxEvidence:
		ps.add("profile.evidence", "%d entries, more than %d", n, maxEvidence)
		return
	}
	for _, k := range slices.Sorted(maps.Keys(p.Evidence)) {
		if !backendPattern.MatchString(k) {
			ps.add("profile.evidence", "%q is not an evidence name ([a-z][a-z0-9-]{0,31})", cdsse.Clip(k))
			continue
		}
		ps.hex64("profile.evidence."+k, p.Evidence[k])
	}
	if p.Backend == string(backend.KindOCI) {
		for _, k := range ociEvidence {
			if _, ok := p.Evidence[k]; !ok {
				ps.add("profile.evidence."+k, "missing: an oci receipt records the config, gate and seccomp digests")
			}
		}
	}
}

func checkObserved(ps *problems, o *Observed) {
	if o.At.IsZero() {
		// Nothing was observed (the container never started): say so.
		if o.Seccomp != SeccompUnobserved || len(o.Notes) == 0 || len(o.Namespaces) != 0 ||
			len(o.Capabilities) != 0 || len(o.Mounts) != 0 || len(o.Interfaces) != 0 {
			ps.add("observed.at", "missing: a receipt without an observation time must record seccomp %q, no observations and a note saying why", SeccompUnobserved)
		}
	} else {
		ps.time("observed.at", o.At)
	}
	if !slices.IsSorted(o.Namespaces) || len(slices.Compact(slices.Clone(o.Namespaces))) != len(o.Namespaces) {
		ps.add("observed.namespaces", "not sorted without duplicates")
	}
	for i, ns := range o.Namespaces {
		var one problems
		one.oneOf("", ns, namespaceTypes)
		ps.element("observed.namespaces", i, one)
	}
	for _, k := range slices.Sorted(maps.Keys(o.Capabilities)) {
		v := o.Capabilities[k]
		if !slices.Contains(capabilitySets, k) {
			ps.add("observed.capabilities", "%q is not one of %s", cdsse.Clip(k), strings.Join(capabilitySets, ", "))
			continue
		}
		if len(v) != 16 || !cdsse.IsLowerHex(v) {
			ps.add("observed.capabilities."+cdsse.Clip(k), "%q is not 16 lowercase hex digits", cdsse.Clip(v))
		}
	}
	ps.oneOf("observed.seccomp", o.Seccomp, seccompStates)
	if len(o.Mounts) > maxListElements {
		ps.add("observed.mounts", "%d entries, more than %d", len(o.Mounts), maxListElements)
	}
	for i, m := range o.Mounts {
		var one problems
		one.absPath(".target", m.Target)
		one.text(".fsType", m.FSType)
		ps.element("observed.mounts", i, one)
	}
	ps.nonNegative("observed.cgroup.memoryLimitBytes", o.Cgroup.MemoryLimitBytes)
	ps.nonNegative("observed.cgroup.pidsLimit", o.Cgroup.PidsLimit)
	ps.nonNegative("observed.cgroup.cpuQuotaMicros", o.Cgroup.CPUQuotaMicros)
	ps.nonNegative("observed.cgroup.cpuPeriodMicros", o.Cgroup.CPUPeriodMicros)
	if len(o.Interfaces) > maxListElements || len(o.Notes) > maxListElements {
		ps.add("observed", "more than %d interfaces or notes", maxListElements)
	}
	for i, s := range o.Interfaces {
		var one problems
		one.text("", s)
		ps.element("observed.interfaces", i, one)
	}
	for i, s := range o.Notes {
		var one problems
		one.text("", s)
		ps.element("observed.notes", i, one)
	}
}

// exitStatus is the status a runner derives from how the run ended (the
// same precedence as the runner's result).
func exitStatus(e *Exit) string {
	switch {
	case e.Cancelled:
		return StatusCancelled
	case e.TimedOut:
		return StatusTimeout
	case e.OOMKilled:
		return StatusOOM
	case e.Code != 0 || e.Signal != "":
		return StatusFailed
	}
	return StatusOK
}

// checkExit checks that the status agrees with how the run ended: "ok"
// only for a zero exit code, no signal and no timeout, OOM kill or
// cancellation; "timeout", "oom" and "cancelled" only with their flag.
// "failed" may go with any exit, since a run also fails when custody of its
// outputs does.
func checkExit(ps *problems, e *Exit) {
	ps.oneOf("exit.status", e.Status, statuses)
	ps.optText("exit.signal", e.Signal)
	bad := false
	switch e.Status {
	case StatusOK:
		bad = exitStatus(e) != StatusOK
	case StatusTimeout:
		bad = !e.TimedOut
	case StatusOOM:
		bad = !e.OOMKilled
	case StatusCancelled:
		bad = !e.Cancelled
	}
	if bad {
		ps.add("exit.status", "%q contradicts code %d, signal %q, timedOut %v, oomKilled %v, cancelled %v",
			e.Status, e.Code, e.Signal, e.TimedOut, e.OOMKilled, e.Cancelled)
	}
}

func checkOutput(ps *problems, o *OutputRef) {
	if o.TreeDigest == "" {
		if len(o.Files) != 0 {
			ps.add("output.files", "%d files but no output.treeDigest", len(o.Files))
		}
		return
	}
	ps.digest("output.treeDigest", o.TreeDigest)
	if len(o.Files) > maxOutputFiles {
		ps.add("output.files", "%d files, more than %d", len(o.Files), maxOutputFiles)
		return
	}
	for i, f := range o.Files {
		var one problems
		if err := checkRelPath(f.Path); err != nil {
			one.add(".path", "%q %v", cdsse.Clip(f.Path), err)
		}
		if i > 0 && o.Files[i-1].Path >= f.Path {
			one.add(".path", "%q is not after %q: files must be sorted by path, each once", cdsse.Clip(f.Path), cdsse.Clip(o.Files[i-1].Path))
		}
		one.hex64(".sha256", f.SHA256)
		one.nonNegative(".size", f.Size)
		ps.element("output.files", i, one)
	}
}

// checkRelPath checks that p is a clean, relative, slash-separated path as
// treehash writes them, and valid UTF-8 (a JSON string cannot carry other
// bytes unchanged).
func checkRelPath(p string) error {
	switch {
	case p == "":
		return errors.New("is empty")
	case len(p) > maxTextField:
		return fmt.Errorf("is longer than %d bytes", maxTextField)
	case !utf8.ValidString(p):
		return errors.New("is not valid UTF-8")
	case strings.ContainsRune(p, 0):
		return errors.New("contains NUL")
	case strings.HasPrefix(p, "/"):
		return errors.New("is absolute")
	case path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../"):
		return errors.New("is not a clean path inside the output")
	}
	return nil
}

// Egress is a run's restricted egress as its receipt records it.
type Egress struct {
	// Allow are the granted host:port destinations.
	Allow []string `json:"allow"`
	// Inspected (v6) are the destinations of Allow whose TLS the proxy
	// terminated to check each request's Host; every other allowed
	// tunnel was blind (its SNI checked, the Host inside not).
	Inspected []string `json:"inspected,omitempty"`
	// Brokered are the credentials the broker used, by name and bound
	// destination.
	Brokered []BrokeredCredential `json:"brokered,omitempty"`
	// Decisions are what the proxy and the gateways decided, in order: in
	// v4, the first ones (Dropped counts the rest); in v6, every allowed
	// decision and the first and last refusals (Refused counts them all).
	Decisions []EgressDecision `json:"decisions"`
	// Dropped (v4 only) counts decisions past the proxy's bound, not
	// listed.
	Dropped int `json:"dropped,omitempty"`
	// Refused (v6, required there) counts every refusal.
	Refused *EgressRefusals `json:"refused,omitempty"`
	// Bytes is what was relayed in both directions.
	Bytes int64 `json:"bytes"`
	// Unsettled says connections were still open when the receipt was
	// taken, so their decisions are missing from Decisions.
	Unsettled bool `json:"unsettled,omitempty"`
}

// BrokeredCredential is one credential's name, bound destination and
// form ("gateway" or "intercept"), and (v6) the requests it was sent
// with, as "METHOD /path-prefix".
type BrokeredCredential struct {
	Name        string   `json:"name"`
	Destination string   `json:"destination"`
	Form        string   `json:"form,omitempty"`
	Requests    []string `json:"requests,omitempty"`
}

// EgressRefusals counts a run's refused connections and requests (v6).
type EgressRefusals struct {
	// Total is every refusal, listed in Decisions or not.
	Total int `json:"total"`
	// Omitted is how many of them Decisions does not list.
	Omitted int `json:"omitted"`
	// By counts refusals per destination and code.
	By []EgressRefusalCount `json:"by"`
	// Other counts refusals of pairs past those By holds.
	Other int `json:"other,omitempty"`
}

// EgressRefusalCount is how often one destination was refused with one
// code.
type EgressRefusalCount struct {
	Destination string `json:"destination"`
	Code        string `json:"code"`
	Count       int    `json:"count"`
}

// checkEgressShape checks that egress has its version's shape: v6's
// fields only in v6, and there required and consistent (the counts add
// up, and the refusals listed are the ones not omitted).
func checkEgressShape(ps *problems, e *Egress, predicateType string) {
	// v7 keeps v6's egress record.
	v6 := predicateType == predicate.ReceiptV6 || fromV7(predicateType)
	withV6 := e.Refused != nil || e.Inspected != nil || slices.ContainsFunc(e.Brokered, func(b BrokeredCredential) bool { return b.Requests != nil })
	switch {
	case !v6 && withV6:
		ps.add("egress", "%s has no refused, inspected or brokered requests (they are %s's); this receipt has them", cdsse.Clip(predicateType), predicate.ReceiptV6)
		return
	case !v6:
		return
	case e.Dropped != 0:
		ps.add("egress.dropped", "%d: a %s receipt lists every allowed decision and counts refusals in egress.refused", e.Dropped, predicate.ReceiptV6)
	}
	r := e.Refused
	if r == nil {
		ps.add("egress.refused", "missing (a %s receipt counts every refusal)", predicate.ReceiptV6)
		return
	}
	listed := 0
	for _, d := range e.Decisions {
		if !d.Allowed {
			listed++
		}
	}
	sum := r.Other
	for _, c := range r.By {
		sum += c.Count
	}
	if r.Total < 0 || r.Omitted < 0 || r.Other < 0 || sum != r.Total || r.Total-r.Omitted != listed {
		ps.add("egress.refused", "total %d, omitted %d, counted %d and %d refusals listed do not agree", r.Total, r.Omitted, sum, listed)
	}
}

// EgressDecision is one allowed or refused connection or request.
type EgressDecision struct {
	At          time.Time `json:"at"`
	Via         string    `json:"via"`
	Destination string    `json:"destination"`
	Address     string    `json:"address,omitempty"`
	Allowed     bool      `json:"allowed"`
	Code        string    `json:"code"`
	Reason      string    `json:"reason,omitempty"`
	Credential  string    `json:"credential,omitempty"`
	Form        string    `json:"form,omitempty"`
	BytesOut    int64     `json:"bytesOut"`
	BytesIn     int64     `json:"bytesIn"`
}

// AuthorizationRef names the standing authorization a run's grant was
// minted under and the digest of the policy that held it.
type AuthorizationRef struct {
	Name         string `json:"name"`
	PolicyDigest string `json:"policyDigest"`
}

// authorizationName is the shape of an authorization's name (the policy's).
var authorizationName = regexp.MustCompile(`^[a-z0-9][a-z0-9._@-]{0,63}$`)

// checkAuthorization checks that authorization is present exactly in v8,
// well formed there.
func checkAuthorization(ps *problems, r *Receipt, predicateType string) {
	a := r.Authorization
	switch {
	case predicateType != predicate.ReceiptV8 && predicateType != predicate.ReceiptV9 && a != nil:
		ps.add("predicateType", "%s has no authorization (it is %s's); this receipt has it", cdsse.Clip(predicateType), predicate.ReceiptV8)
	case predicateType == predicate.ReceiptV8 && a == nil:
		ps.add("authorization", "missing (a %s receipt names the authorization its grant was minted under)", predicate.ReceiptV8)
	case a != nil:
		if !authorizationName.MatchString(a.Name) {
			ps.add("authorization.name", "%q is not an authorization name", cdsse.Clip(a.Name))
		}
		ps.digest("authorization.policyDigest", a.PolicyDigest)
	}
}

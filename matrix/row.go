package matrix

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	cdsse "github.com/custody-dev/custody/internal/dsse"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/predicate"
)

const (
	// PredicateType is the in-toto test-result predicate a row carries.
	PredicateType = "https://in-toto.io/attestation/test-result/v0.1"
	// StatementType is the in-toto Statement v1 type.
	StatementType = cdsse.StatementType
	// APIVersion and RowKind identify a row file.
	APIVersion = "custody.dev/v1alpha1"
	RowKind    = "QualificationRow"

	// Results of a row (the test-result predicate's result).
	ResultPassed = "PASSED"
	ResultFailed = "FAILED"

	// Cases of a check: legitimate work that must succeed, or an attempt
	// that must be refused or stopped.
	CaseLegitimate = "legitimate"
	CaseRefusal    = "refusal"

	// Tiers a row may qualify.
	TierProduction  = "production"
	TierDevelopment = "development"

	// Names of the subject and configuration entries.
	PlatformSubject   = "custody:platform"
	RuntimeEntry      = "custody:runtime"
	QualificationName = "custody:qualification"
	// IncompleteTest is listed in failedTests when a required family lacks
	// a legitimate or a refusal case.
	IncompleteTest = "suite/complete"

	// Limits on what a row may hold.
	MaxRowSize      = 4 << 20
	MaxChecks       = 256
	MaxRunsPerCheck = 8
	MaxDetail       = 2048
)

// RequiredFamilies are the control families a passing row covers, each with
// at least one legitimate and one refusal case (R13).
var RequiredFamilies = []string{"input", "output", "environment", "egress", "budgets", "cleanup", "evidence", "isolation"}

var (
	// ErrMalformed reports a row that does not decode as a canonical row.
	ErrMalformed = errors.New("malformed qualification row")
	// ErrUntrusted reports a row signed by no trusted runner key.
	ErrUntrusted = errors.New("qualification row not signed by a trusted runner key")
	// ErrBadSignature reports a signature that does not verify.
	ErrBadSignature = errors.New("qualification row signature does not verify")
)

var (
	namePattern    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	runIDPattern   = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)
	versionPattern = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$`)
)

// Check is one conformance check's outcome as a row records it.
type Check struct {
	Family string `json:"family"`
	Name   string `json:"name"`
	Case   string `json:"case"`
	Passed bool   `json:"passed"`
	Detail string `json:"detail"`
	// Runs are the runs the check launched, as the signing runner recorded
	// them.
	Runs []RunRef `json:"runs"`
}

// TestName is the check's name in passedTests/failedTests: "family/name".
func (c Check) TestName() string { return c.Family + "/" + c.Name }

// RunRef is one run a check launched: its id, status and tier as recorded
// by the runner, and the sha256 of its signed receipt.
type RunRef struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	Tier          string `json:"tier"`
	ReceiptSHA256 string `json:"receiptSha256"`
}

// Info is the "custody:qualification" configuration entry.
type Info struct {
	Tier           string    `json:"tier"`
	CustodyVersion string    `json:"custodyVersion"`
	SuiteVersion   string    `json:"suiteVersion"`
	RunnerID       string    `json:"runnerId"`
	QualifiedAt    time.Time `json:"qualifiedAt"`
	// Missing lists "family/case" pairs the suite did not cover.
	Missing []string `json:"missing"`
	Checks  []Check  `json:"checks"`
	// NotApplicable lists the suite's checks that do not apply to the
	// qualified backend (an oci-specific control on a VM), each with the
	// reason: they were not run and are not counted as passed. Absent in
	// rows that have none, so older rows encode exactly as they were signed.
	NotApplicable []NotApplicable `json:"notApplicable,omitempty"`
	// Measured is set on rows the runner measured itself: it ran the
	// conformance suite, judged every check from its own observations and
	// signed only that. Absent on older rows, whose verdicts an operator
	// handed the runner to sign: they still verify and encode exactly as
	// signed, but no gate admits a release on them.
	Measured *Measured `json:"measured,omitempty"`
}

// MeasuredByRunner is Measured.By of a row the runner measured.
const MeasuredByRunner = "runner"

// Measured says how a row's verdicts were measured.
type Measured struct {
	// By is who ran the suite and judged its checks: MeasuredByRunner.
	By string `json:"by"`
	// Image is the digest (sha256:<hex>) of the conformance image every
	// run of the suite used.
	Image string `json:"image"`
	// Started and Finished bound the suite's run on the runner's clock.
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
}

// NotApplicable is a check the suite did not run on a backend, and why.
type NotApplicable struct {
	Family string `json:"family"`
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Qualification is the content of a row.
type Qualification struct {
	Platform Platform
	Info
	// Derived from Info: the test-result predicate's fields.
	Result string
	Passed []string
	Warned []string
	Failed []string
}

// PlatformDigest is the digest of the qualified platform.
func (q *Qualification) PlatformDigest() string { return q.Platform.Digest() }

// AllPassed says whether the row passed: result PASSED, no failed test, and
// every check passed.
func (q *Qualification) AllPassed() bool {
	if q.Result != ResultPassed || len(q.Failed) > 0 || len(q.Checks) == 0 {
		return false
	}
	for _, c := range q.Checks {
		if !c.Passed {
			return false
		}
	}
	return true
}

// NewQualification validates p and info and derives the result: PASSED only
// when every check passed and every required family has a legitimate and
// a refusal case.
func NewQualification(p Platform, info Info) (*Qualification, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	info.QualifiedAt = info.QualifiedAt.UTC()
	info.Checks = slices.Clone(info.Checks)
	if info.Measured != nil {
		m := *info.Measured
		info.Measured = &m
	}
	if err := validateInfo(&info); err != nil {
		return nil, err
	}
	q := &Qualification{Platform: p, Info: info, Passed: []string{}, Warned: []string{}, Failed: []string{}}
	covered := map[string]bool{}
	for _, c := range info.Checks {
		covered[c.Family+"/"+c.Case] = true
		if c.Passed {
			q.Passed = append(q.Passed, c.TestName())
		} else {
			q.Failed = append(q.Failed, c.TestName())
		}
	}
	q.Missing = []string{}
	for _, f := range RequiredFamilies {
		for _, k := range []string{CaseLegitimate, CaseRefusal} {
			if !covered[f+"/"+k] {
				q.Missing = append(q.Missing, f+"/"+k)
			}
		}
	}
	if len(q.Missing) > 0 {
		q.Failed = append(q.Failed, IncompleteTest)
	}
	q.Result = ResultPassed
	if len(q.Failed) > 0 {
		q.Result = ResultFailed
	}
	return q, nil
}

func validateInfo(info *Info) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if info.Tier != TierProduction && info.Tier != TierDevelopment {
		bad("tier %q is not production or development", info.Tier)
	}
	if !versionPattern.MatchString(info.CustodyVersion) {
		bad("custodyVersion %q is not a version", info.CustodyVersion)
	}
	if !versionPattern.MatchString(info.SuiteVersion) {
		bad("suiteVersion %q is not a version", info.SuiteVersion)
	}
	if !strings.HasPrefix(info.RunnerID, keys.KeyIDPrefix) || !hex64.MatchString(strings.TrimPrefix(info.RunnerID, keys.KeyIDPrefix)) {
		bad("runnerId %q is not a key id", info.RunnerID)
	}
	if info.QualifiedAt.IsZero() {
		bad("qualifiedAt is missing")
	}
	if n := len(info.Checks); n == 0 || n > MaxChecks {
		bad("%d checks; want 1 to %d", n, MaxChecks)
	}
	seen := map[string]bool{}
	for i, c := range info.Checks {
		at := fmt.Sprintf("checks[%d]", i)
		if !slices.Contains(RequiredFamilies, c.Family) {
			bad("%s.family %q is not a known family (%s)", at, cdsse.Clip(c.Family), strings.Join(RequiredFamilies, ", "))
		}
		if !namePattern.MatchString(c.Name) {
			bad("%s.name %q is not a check name", at, cdsse.Clip(c.Name))
		}
		if c.Case != CaseLegitimate && c.Case != CaseRefusal {
			bad("%s.case %q is not legitimate or refusal", at, cdsse.Clip(c.Case))
		}
		if seen[c.TestName()] {
			bad("%s: %s appears twice", at, c.TestName())
		}
		seen[c.TestName()] = true
		if err := CheckDetail(c.Detail); err != nil {
			bad("%s.detail: %v", at, err)
		}
		if c.Runs == nil {
			info.Checks[i].Runs = []RunRef{}
		}
		if len(c.Runs) > MaxRunsPerCheck {
			bad("%s: %d runs; at most %d", at, len(c.Runs), MaxRunsPerCheck)
		}
		for j, r := range c.Runs {
			if !runIDPattern.MatchString(r.ID) {
				bad("%s.runs[%d].id %q is not a run id", at, j, cdsse.Clip(r.ID))
			}
			if r.ReceiptSHA256 != "" && !hex64.MatchString(r.ReceiptSHA256) {
				bad("%s.runs[%d].receiptSha256 is not 64 lowercase hex digits", at, j)
			}
			if CheckDetail(r.Status) != nil || CheckDetail(r.Tier) != nil || len(r.Status) > 64 || len(r.Tier) > 64 {
				bad("%s.runs[%d]: status or tier is not plain text", at, j)
			}
		}
	}
	for i, n := range info.NotApplicable {
		at := fmt.Sprintf("notApplicable[%d]", i)
		if !slices.Contains(RequiredFamilies, n.Family) || !namePattern.MatchString(n.Name) {
			bad("%s %q/%q is not a known family and a check name", at, cdsse.Clip(n.Family), cdsse.Clip(n.Name))
		}
		if seen[n.Family+"/"+n.Name] {
			bad("%s: %s/%s is both run and not applicable, or listed twice", at, n.Family, n.Name)
		}
		seen[n.Family+"/"+n.Name] = true
		if n.Reason == "" {
			bad("%s: a check not applicable says why", at)
		} else if err := CheckDetail(n.Reason); err != nil {
			bad("%s.reason: %v", at, err)
		}
	}
	if m := info.Measured; m != nil {
		m.Started, m.Finished = m.Started.UTC(), m.Finished.UTC()
		if m.By != MeasuredByRunner {
			bad("measured.by %q: want %s", cdsse.Clip(m.By), MeasuredByRunner)
		}
		if h, ok := strings.CutPrefix(m.Image, "sha256:"); !ok || !hex64.MatchString(h) {
			bad("measured.image %q is not sha256:<64 hex>", cdsse.Clip(m.Image))
		}
		if m.Started.IsZero() || m.Finished.Before(m.Started) {
			bad("measured: started %s and finished %s do not bound a run", m.Started.Format(time.RFC3339), m.Finished.Format(time.RFC3339))
		}
	}
	if len(info.NotApplicable) > MaxChecks {
		bad("%d checks not applicable; at most %d", len(info.NotApplicable), MaxChecks)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrMalformed, errors.Join(errs...))
	}
	return nil
}

// CheckDetail says why s cannot be a check's detail: too long, not UTF-8
// text, or holding control characters.
func CheckDetail(s string) error {
	if len(s) > MaxDetail {
		return fmt.Errorf("%d bytes; at most %d", len(s), MaxDetail)
	}
	for _, r := range s {
		if r == unicode.ReplacementChar || unicode.IsControl(r) {
			return fmt.Errorf("holds a control character or invalid UTF-8 (%q)", r)
		}
	}
	return nil
}

// SanitizeDetail makes s acceptable as a detail: control characters become
// spaces, and it is cut to MaxDetail bytes.
func SanitizeDetail(s string) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return ' '
		}
		return r
	}, s)
	if len(s) > MaxDetail {
		cut := MaxDetail - len("...")
		for cut > 0 && !utf8Start(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// Wire form of the statement.
type statement = cdsse.Statement[testResult]

type subject = cdsse.Subject

type testResult struct {
	Result        string       `json:"result"`
	Configuration []descriptor `json:"configuration"`
	PassedTests   []string     `json:"passedTests"`
	WarnedTests   []string     `json:"warnedTests"`
	FailedTests   []string     `json:"failedTests"`
}

// descriptor is an in-toto ResourceDescriptor with the fields rows use.
type descriptor struct {
	Name        string            `json:"name"`
	Digest      map[string]string `json:"digest,omitempty"`
	Annotations json.RawMessage   `json:"annotations"`
}

type runtimeAnnotations struct {
	Version string `json:"version"`
}

// Statement returns the canonical in-toto statement of q.
func (q *Qualification) Statement() ([]byte, error) {
	plat, err := cdsse.CanonicalJSON(q.Platform)
	if err != nil {
		return nil, err
	}
	rt, err := cdsse.CanonicalJSON(runtimeAnnotations{Version: q.Platform.Runtime.Version})
	if err != nil {
		return nil, err
	}
	info, err := cdsse.CanonicalJSON(q.Info)
	if err != nil {
		return nil, err
	}
	pd := q.Platform.Digest()
	return cdsse.CanonicalJSON(statement{
		Type:          StatementType,
		Subject:       []subject{{Name: PlatformSubject, Digest: map[string]string{"sha256": pd}}},
		PredicateType: PredicateType,
		Predicate: testResult{
			Result: q.Result,
			Configuration: []descriptor{
				{Name: PlatformSubject, Digest: map[string]string{"sha256": pd}, Annotations: plat},
				{Name: RuntimeEntry, Digest: map[string]string{"sha256": q.Platform.Runtime.SHA256}, Annotations: rt},
				{Name: QualificationName, Annotations: info},
			},
			PassedTests: q.Passed, WarnedTests: q.Warned, FailedTests: q.Failed,
		},
	})
}

// Row is a row file: the signed envelope and the signer's public key (a
// hint for humans; gates verify under keys they were given).
type Row struct {
	APIVersion      string          `json:"apiVersion"`
	Kind            string          `json:"kind"`
	Envelope        json.RawMessage `json:"envelope"`
	RunnerPublicKey string          `json:"runnerPublicKey"`
}

// Sign signs q with the runner identity key and returns the row.
func Sign(ctx context.Context, runner *keys.Signer, q *Qualification) (*Row, error) {
	if q.RunnerID != runner.ID() {
		return nil, fmt.Errorf("matrix: the row names runner %s but is signed by %s", q.RunnerID, runner.ID())
	}
	payload, err := q.Statement()
	if err != nil {
		return nil, fmt.Errorf("matrix: encode statement: %w", err)
	}
	raw, err := cdsse.Sign(ctx, runner, predicate.PayloadType, payload)
	if err != nil {
		return nil, fmt.Errorf("matrix: %w", err)
	}
	row := &Row{APIVersion: APIVersion, Kind: RowKind, Envelope: raw, RunnerPublicKey: string(runner.PublicPEM())}
	// What we hand out must verify exactly as a gate will check it.
	if _, err := row.Verify(ctx, []*keys.Verifier{runner.Verifier()}); err != nil {
		return nil, fmt.Errorf("matrix: the signed row does not verify: %w", err)
	}
	return row, nil
}

// ParseRow decodes a row file strictly.
func ParseRow(data []byte) (*Row, error) {
	if len(data) > MaxRowSize {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrMalformed, len(data), MaxRowSize)
	}
	var r Row
	if err := cdsse.StrictUnmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if r.APIVersion != APIVersion || r.Kind != RowKind {
		return nil, fmt.Errorf("%w: apiVersion %q kind %q, want %s %s", ErrMalformed, cdsse.Clip(r.APIVersion), cdsse.Clip(r.Kind), APIVersion, RowKind)
	}
	if len(r.Envelope) == 0 {
		return nil, fmt.Errorf("%w: no envelope", ErrMalformed)
	}
	return &r, nil
}

// Verified is a row whose signature verified under a trusted key.
type Verified struct {
	*Qualification
	// SignerID is the keys.KeyID of the trusted key that signed it.
	SignerID string
	// EnvelopeSHA256 is the hex sha256 of the envelope bytes.
	EnvelopeSHA256 string
}

// Verify checks the row's signature under the trusted runner keys and
// decodes its statement. It fails with ErrMalformed, ErrUntrusted or
// ErrBadSignature.
func (r *Row) Verify(ctx context.Context, trusted []*keys.Verifier) (*Verified, error) {
	env, err := decodeEnvelope(r.Envelope)
	if err != nil {
		return nil, err
	}
	signed, _, err := cdsse.VerifySignatures(ctx, env, func(id string) (cdsse.Key, bool) {
		for _, k := range trusted {
			if k != nil && k.ID() == id {
				return k, true
			}
		}
		return nil, false
	})
	switch {
	case errors.Is(err, cdsse.ErrUntrusted):
		return nil, fmt.Errorf("%w: %v", ErrUntrusted, err)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	signer := signed[0]
	q, err := decodeStatement(env.Payload)
	if err != nil {
		return nil, err
	}
	if q.RunnerID != signer.ID() {
		return nil, fmt.Errorf("%w: the row names runner %s but %s signed it", ErrMalformed, q.RunnerID, signer.ID())
	}
	sum := sha256.Sum256(r.Envelope)
	return &Verified{Qualification: q, SignerID: signer.ID(), EnvelopeSHA256: hex.EncodeToString(sum[:])}, nil
}

// DecodeUnverified decodes the row's statement without checking any
// signature: for display only, never for a decision.
func (r *Row) DecodeUnverified() (*Qualification, error) {
	env, err := decodeEnvelope(r.Envelope)
	if err != nil {
		return nil, err
	}
	return decodeStatement(env.Payload)
}

// rowEnvelopeLimits are what a row's envelope must meet: custody's one
// DSSE reader, with the limits of every custody envelope.
var rowEnvelopeLimits = cdsse.Limits{PayloadType: predicate.PayloadType, MaxSignatures: 4, MaxSignatureSize: 256}

func decodeEnvelope(raw []byte) (*cdsse.Envelope, error) {
	env, err := cdsse.DecodeEnvelope(raw, rowEnvelopeLimits)
	if err != nil {
		return nil, fmt.Errorf("%w: envelope: %v", ErrMalformed, err)
	}
	return env, nil
}

// decodeStatement decodes a row statement and requires that it is exactly
// the canonical statement of what it says: a result, test lists or digest
// that do not follow from the checks and the platform are refused.
func decodeStatement(payload []byte) (*Qualification, error) {
	var st statement
	if err := cdsse.StrictUnmarshal(payload, &st); err != nil {
		return nil, fmt.Errorf("%w: statement: %v", ErrMalformed, err)
	}
	if st.Type != StatementType || st.PredicateType != PredicateType {
		return nil, fmt.Errorf("%w: statement type %q predicate type %q, want %s %s",
			ErrMalformed, cdsse.Clip(st.Type), cdsse.Clip(st.PredicateType), StatementType, PredicateType)
	}
	cfg := st.Predicate.Configuration
	if len(cfg) != 3 || cfg[0].Name != PlatformSubject || cfg[1].Name != RuntimeEntry || cfg[2].Name != QualificationName {
		return nil, fmt.Errorf("%w: configuration must be %s, %s, %s", ErrMalformed, PlatformSubject, RuntimeEntry, QualificationName)
	}
	var p Platform
	if err := cdsse.StrictUnmarshal(cfg[0].Annotations, &p); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, PlatformSubject, err)
	}
	var info Info
	if err := cdsse.StrictUnmarshal(cfg[2].Annotations, &info); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, QualificationName, err)
	}
	q, err := NewQualification(p, info)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	// Missing is derived, not taken from the statement; re-encoding checks
	// that the statement carried exactly the derived value.
	want, err := q.Statement()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if !bytes.Equal(want, payload) {
		return nil, fmt.Errorf("%w: the statement is not the canonical statement of its own content (result, test lists, digests or encoding differ)", ErrMalformed)
	}
	return q, nil
}

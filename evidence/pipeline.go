package evidence

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/custody-dev/custody/grant"
	cdsse "github.com/custody-dev/custody/internal/dsse"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/predicate"
)

// PipelineSummary is the predicate of a pipeline summary: the runner's
// statement that the listed stage receipts are its own and that each
// stage's inputs named as earlier outputs are exactly those outputs, by
// digest. Its subjects are the stage receipts ("stage/<name>", the SHA-256
// of each receipt envelope's compact JSON, ReceiptDigest).
type PipelineSummary struct {
	// Pipeline is the pipeline's name; it carries no authority.
	Pipeline string `json:"pipeline"`
	// Runner is the runner identity key that signed the summary and every
	// stage receipt.
	Runner Identity `json:"runner"`
	// Stages are the stages that ran, in order.
	Stages []PipelineStage `json:"stages"`
	// Signed is when the runner signed the summary.
	Signed time.Time `json:"signed"`
}

// PipelineStage is one stage as the summary records it, from the stage's
// receipt.
type PipelineStage struct {
	// Name is the stage's name in the pipeline.
	Name string `json:"name"`
	// Stage is the phase's stage kind (acquire, generate, build, test, run).
	Stage string `json:"stage"`
	// Verifier says the stage held private acceptance material: no other
	// stage took its output.
	Verifier bool `json:"verifier"`
	// RunID is the run the receipt records.
	RunID string `json:"runId"`
	// ReceiptDigest is "sha256:<hex>" of the receipt envelope's compact
	// JSON (ReceiptDigest).
	ReceiptDigest string `json:"receiptDigest"`
	// Inputs are the receipt's inputs by target and digest; From names the
	// earlier stage whose output an input is.
	Inputs []PipelineInput `json:"inputs"`
	// OutputDigest is the receipt's output tree digest.
	OutputDigest string `json:"outputDigest"`
}

// PipelineInput is one input of a stage.
type PipelineInput struct {
	Target string `json:"target"`
	Digest string `json:"digest"`
	// From is the earlier stage whose output this is, or "" for an
	// operator-approved host source.
	From string `json:"from,omitempty"`
}

// PipelineSubjectPrefix starts the subject naming a stage receipt.
const PipelineSubjectPrefix = "stage/"

// maxPipelineStages bounds a summary's stages (the pipeline format's own
// bound).
const maxPipelineStages = 32

var stageNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

//go:embed pipeline-summary.schema.json
var pipelineSchemaJSON []byte

// PipelineSummarySchema returns the JSON Schema of the pipeline summary
// statement. The caller owns the returned slice.
func PipelineSummarySchema() []byte { return bytes.Clone(pipelineSchemaJSON) }

// ErrBrokenLink is wrapped by every *LinkError.
var ErrBrokenLink = errors.New("pipeline link broken")

// LinkError names the stage whose input does not link to the output of
// the stage it names.
type LinkError struct {
	Stage  string
	Input  int
	Reason string
}

func (e *LinkError) Error() string {
	return fmt.Sprintf("stage %q inputs[%d]: %s", e.Stage, e.Input, e.Reason)
}

func (e *LinkError) Unwrap() error { return ErrBrokenLink }

// ReceiptDigest is "sha256:<hex>" of env's compact JSON: how a summary
// names a stage receipt, whatever whitespace a file around it holds.
func ReceiptDigest(env []byte) (string, error) {
	var c bytes.Buffer
	if err := json.Compact(&c, env); err != nil {
		return "", fmt.Errorf("evidence: receipt digest: %w", err)
	}
	sum := sha256.Sum256(c.Bytes())
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// CheckLinks checks that every input a stage takes from an earlier stage
// has that stage's output digest, that From names an earlier stage only,
// and that no stage takes a verifier's output. It returns a *LinkError for
// the first that does not.
func CheckLinks(stages []PipelineStage) error {
	at := make(map[string]int, len(stages))
	for i, s := range stages {
		for j, in := range s.Inputs {
			if in.From == "" {
				continue
			}
			k, ok := at[in.From]
			switch {
			case !ok:
				return &LinkError{Stage: s.Name, Input: j, Reason: fmt.Sprintf("names stage %q, which is not an earlier stage", in.From)}
			case stages[k].Verifier:
				return &LinkError{Stage: s.Name, Input: j, Reason: fmt.Sprintf("takes the output of verifier stage %q, which no other stage may see", in.From)}
			case stages[k].OutputDigest == "":
				return &LinkError{Stage: s.Name, Input: j, Reason: fmt.Sprintf("stage %q kept no output", in.From)}
			case in.Digest != stages[k].OutputDigest:
				return &LinkError{Stage: s.Name, Input: j, Reason: fmt.Sprintf("digest %s is not stage %q's output %s", in.Digest, in.From, stages[k].OutputDigest)}
			}
		}
		at[s.Name] = i
	}
	return nil
}

// validatePipeline checks a summary's shape and links.
func validatePipeline(s *PipelineSummary) error {
	var ps problems
	ps.text("pipeline", s.Pipeline)
	ps.keyID("runner.id", s.Runner.ID)
	ps.time("signed", s.Signed)
	if n := len(s.Stages); n == 0 || n > maxPipelineStages {
		ps.add("stages", "%d stages, want 1 to %d", n, maxPipelineStages)
	}
	seen, runs := map[string]bool{}, map[string]bool{}
	for i, st := range s.Stages {
		var one problems
		if runs[st.RunID] {
			// One run is one stage: a run named twice would let one
			// receipt stand for two stages.
			one.add(".runId", "%q is another stage's run too", cdsse.Clip(st.RunID))
		}
		runs[st.RunID] = true
		if !stageNamePattern.MatchString(st.Name) {
			one.add(".name", "%q is not a stage name", cdsse.Clip(st.Name))
		}
		if seen[st.Name] {
			one.add(".name", "%q appears twice", cdsse.Clip(st.Name))
		}
		seen[st.Name] = true
		one.text(".stage", st.Stage)
		one.text(".runId", st.RunID)
		one.digest(".receiptDigest", st.ReceiptDigest)
		if st.OutputDigest != "" {
			one.digest(".outputDigest", st.OutputDigest)
		}
		if len(st.Inputs) > maxListElements {
			one.add(".inputs", "%d entries, more than %d", len(st.Inputs), maxListElements)
		}
		for j, in := range st.Inputs {
			var ip problems
			ip.absPath(".target", in.Target)
			ip.digest(".digest", in.Digest)
			ps.element(fmt.Sprintf("stages[%d].inputs", i), j, ip)
		}
		ps.element("stages", i, one)
	}
	if err := ps.err(); err != nil {
		return err
	}
	return CheckLinks(s.Stages)
}

func pipelineSubjects(s *PipelineSummary) []Subject {
	out := make([]Subject, len(s.Stages))
	for i, st := range s.Stages {
		out[i] = Subject{Name: PipelineSubjectPrefix + st.Name, Digest: map[string]string{"sha256": st.ReceiptDigest[len("sha256:"):]}}
	}
	return out
}

// SignPipelineSummary validates s (shape and links), builds its statement
// and signs it with the runner key. The caller must have checked that
// every stage receipt is this runner's own and that the summary repeats
// them (custodyd builds it from its own records).
func SignPipelineSummary(ctx context.Context, runner *keys.Signer, s PipelineSummary) ([]byte, error) {
	if runner == nil {
		return nil, errors.New("evidence: sign pipeline summary: nil runner key")
	}
	if s.Runner.ID != runner.ID() {
		return nil, fmt.Errorf("evidence: sign pipeline summary: runner.id %s is not the signing key %s", s.Runner.ID, runner.ID())
	}
	payload, err := EncodePipelineStatement(s)
	if err != nil {
		return nil, fmt.Errorf("evidence: sign pipeline summary: %w", err)
	}
	return signStatement(ctx, runner, payload)
}

// EncodePipelineStatement validates s (shape and links) and returns the
// canonical in-toto statement SignPipelineSummary signs.
func EncodePipelineStatement(s PipelineSummary) ([]byte, error) {
	s.Signed = s.Signed.UTC()
	s.Stages = append([]PipelineStage(nil), s.Stages...)
	for i := range s.Stages {
		if s.Stages[i].Inputs == nil {
			s.Stages[i].Inputs = []PipelineInput{}
		}
	}
	if err := validatePipeline(&s); err != nil {
		return nil, err
	}
	payload, err := encodeStatement(predicate.PipelineSummary, pipelineSubjects(&s), &s)
	if err != nil {
		return nil, err
	}
	frame, err := encodeStatement(predicate.PipelineSummary, pipelineSubjects(&s), struct{}{})
	if err != nil {
		return nil, err
	}
	if err := checkInToto(frame); err != nil {
		return nil, err
	}
	return payload, nil
}

// OwnReceipt verifies that env is a receipt signed by the runner key k and
// returns its predicate: what custodyd checks of each stage receipt before
// it signs a summary naming it.
func OwnReceipt(ctx context.Context, k *keys.Verifier, env []byte) (*Receipt, error) {
	e, err := decodeEnvelope(env)
	if err != nil {
		return nil, fmt.Errorf("evidence: receipt: %w", err)
	}
	if _, _, err := cdsse.VerifySignatures(ctx, e, func(id string) (cdsse.Key, bool) {
		return k, id == k.ID()
	}); err != nil {
		return nil, fmt.Errorf("evidence: receipt is not signed by runner key %s: %w", k.ID(), err)
	}
	r, _, err := decodeReceiptStatement(e.Payload)
	if err != nil {
		return nil, fmt.Errorf("evidence: receipt: %w", err)
	}
	if r.Runner.ID != k.ID() {
		return nil, fmt.Errorf("evidence: receipt names runner %s, not %s", r.Runner.ID, k.ID())
	}
	return r, nil
}

// IsPipelineSummary reports whether env claims to be a pipeline summary
// (read without any check; VerifyPipeline checks the claim).
func IsPipelineSummary(env []byte) bool { return claimsType(env, predicate.PipelineSummary) }

// Checks of a pipeline summary beyond the envelope, signature and
// statement; each stage adds CheckStagePrefix+name, and CheckLinks the
// chain.
const (
	CheckStagePrefix = "stage/"
	CheckLinksName   = "links"
)

// StageEvidence is what the verifier is given of one stage: its receipt
// envelope and, when set, the directory of its retained outputs to check
// byte for byte.
type StageEvidence struct {
	Receipt []byte
	Outputs string
}

// PipelineResult is the outcome of verifying a pipeline summary.
type PipelineResult struct {
	Checks []Check `json:"checks"`
	// Summary is the verified predicate, set only when OK.
	Summary *PipelineSummary `json:"summary,omitempty"`
	// Stages are each stage receipt's own verification, by stage name.
	Stages     map[string]*Result `json:"stages,omitempty"`
	SignerID   string             `json:"signerId,omitempty"`
	SignerName string             `json:"signerName,omitempty"`
	// OK says the summary is authentic, every stage receipt it names is
	// authentic and is the one given, and every link holds.
	OK bool `json:"ok"`
	// Promotable is OK and every stage receipt promotable.
	Promotable bool `json:"promotable"`
}

// VerifyPipeline verifies the summary env: its signature by a trusted
// runner key, its statement, then each stage it names against the
// evidence stage returns for that name (the receipt must be the one the
// summary's digest names, must verify as authentic under this trust, and
// must repeat the summary's run, inputs and output), then every link. A
// tampered receipt or a broken link fails the check named after its stage.
// The error is for a cancelled ctx only.
func (v *Verifier) VerifyPipeline(ctx context.Context, env []byte, stage func(name string) (StageEvidence, error), opts ...PolicyOption) (*PipelineResult, error) {
	res := &PipelineResult{Stages: map[string]*Result{}}
	add := func(name, reason string) { res.Checks = append(res.Checks, verdict(name, reason)) }
	e, err := decodeEnvelope(env)
	if err != nil {
		add(CheckEnvelope, err.Error())
		return res, nil
	}
	add(CheckEnvelope, "")
	signer, reason := v.verifySignature(ctx, e, nil)
	add(CheckSignature, reason)
	if signer != nil {
		res.SignerID, res.SignerName = signer.ID(), signer.Name
	}
	s, err := decodePipelineStatement(e.Payload)
	switch {
	case err != nil:
		add(CheckStatement, err.Error())
		return res, nil
	case signer != nil && s.Runner.ID != signer.ID():
		add(CheckStatement, fmt.Sprintf("runner.id %s is not the key that signed the summary (%s)", s.Runner.ID, signer.ID()))
	default:
		add(CheckStatement, "")
	}
	if signer != nil {
		// The summary's signer is judged as a receipt's is: at the time it
		// says it signed, under the key's window and revocation.
		add(CheckIssuerTrust, signer.validAt(s.Signed))
		add(CheckKeyRevocation, signer.revokedAt(s.Signed, v.trust.AcceptBeforeRevocation))
	}
	promotable := true
	for _, st := range s.Stages {
		r, reason, err := v.verifyStage(ctx, st, stage, opts)
		if err != nil {
			return nil, err
		}
		if r != nil {
			res.Stages[st.Name] = r
			promotable = promotable && r.Promotable
			if reason == "" {
				reason = v.stageSigner(signer, s.Signed, r)
			}
		}
		add(CheckStagePrefix+st.Name, reason)
	}
	if err := CheckLinks(s.Stages); err != nil {
		add(CheckLinksName, err.Error())
	} else {
		add(CheckLinksName, "")
	}
	res.OK = true
	for _, c := range res.Checks {
		res.OK = res.OK && c.OK
	}
	res.Promotable = res.OK && promotable
	if res.OK {
		res.Summary = s
	}
	return res, nil
}

// stageSigner says why the authentic stage receipt r cannot be part of a
// summary signed by signer at signed, or "". A summary is its runner's
// statement about its own receipts: each must be signed by the summary's
// key, or by a key the trust file retired when the summary's key took
// over (a rotation: notAfter of the one no later than notBefore of the
// other, as custody trust export writes them), and have finished before
// the summary was signed. Another runner's receipts, even under a key the
// trust file trusts, are refused.
func (v *Verifier) stageSigner(signer *TrustedKey, signed time.Time, r *Result) string {
	if signer == nil || r.Receipt == nil {
		return ""
	}
	if signed.Before(r.Receipt.Finished) {
		return fmt.Sprintf("the summary says it was signed at %s, before this stage's run finished (%s)", signed.Format(time.RFC3339Nano), r.Receipt.Finished.Format(time.RFC3339Nano))
	}
	if r.SignerID == signer.ID() {
		return ""
	}
	k := v.runners[r.SignerID]
	if k != nil && !k.NotAfter.IsZero() && !signer.NotBefore.IsZero() && !k.NotAfter.After(signer.NotBefore) {
		return "" // the summary's key is this key's successor
	}
	return fmt.Sprintf("the stage receipt is signed by runner key %s, not the summary's %s, nor by a key the trust file retired when the summary's took over: a summary vouches only for its own runner's receipts", r.SignerID, signer.ID())
}

// verifyStage checks one stage's receipt against the summary's record of
// it, returning the receipt's verification and why the stage fails, or "".
func (v *Verifier) verifyStage(ctx context.Context, st PipelineStage, stage func(string) (StageEvidence, error), opts []PolicyOption) (*Result, string, error) {
	ev, err := stage(st.Name)
	if err != nil {
		return nil, "no receipt for the stage: " + err.Error(), nil
	}
	got, err := ReceiptDigest(ev.Receipt)
	if err != nil {
		return nil, err.Error(), nil
	}
	if got != st.ReceiptDigest {
		return nil, fmt.Sprintf("the receipt given hashes to %s, not the summary's %s: it is not the stage's receipt (tampered or swapped)", got, st.ReceiptDigest), nil
	}
	out := WithoutOutputsUnsafe()
	if ev.Outputs != "" {
		out = WithOutputs(ev.Outputs)
	}
	pol, err := NewPolicy(out, opts...)
	if err != nil {
		return nil, "", err
	}
	r, err := v.Verify(ctx, ev.Receipt, pol)
	if err != nil {
		return nil, "", err
	}
	if !r.OK {
		var why []string
		for _, c := range r.Failed() {
			why = append(why, c.Name+": "+c.Reason)
		}
		return r, fmt.Sprintf("the stage receipt is not authentic: %v", why), nil
	}
	rc := r.Receipt
	if reason := verifierBound(r.Grant, st); reason != "" {
		return r, reason, nil
	}
	switch {
	case rc.RunID != st.RunID:
		return r, fmt.Sprintf("the receipt is of run %s, the summary names %s", rc.RunID, st.RunID), nil
	case rc.Output.TreeDigest != st.OutputDigest:
		return r, fmt.Sprintf("the receipt's output %s is not the summary's %s", rc.Output.TreeDigest, st.OutputDigest), nil
	case len(rc.Inputs) != len(st.Inputs):
		return r, fmt.Sprintf("the receipt has %d inputs, the summary %d", len(rc.Inputs), len(st.Inputs)), nil
	}
	for i, in := range rc.Inputs {
		if in.Target != st.Inputs[i].Target || in.Digest != st.Inputs[i].Digest {
			return r, fmt.Sprintf("inputs[%d]: the receipt has %s at %s, the summary %s at %s", i, in.Digest, in.Target, st.Inputs[i].Digest, st.Inputs[i].Target), nil
		}
		if st.Inputs[i].From != "" && in.Source != "output:"+in.Digest {
			return r, fmt.Sprintf("inputs[%d]: the summary says it is stage %q's output, but the receipt's source is %q", i, st.Inputs[i].From, cdsse.Clip(in.Source)), nil
		}
		if st.Inputs[i].From == "" && strings.HasPrefix(in.Source, "output:") {
			return r, fmt.Sprintf("inputs[%d]: the receipt read it from the output store (%q), but the summary names no stage it came from", i, cdsse.Clip(in.Source)), nil
		}
	}
	return r, "", nil
}

// verifierBound checks the summary's verifier flag for st against the
// phase its receipt's grant authorized. The receipt embeds that grant
// verbatim and Verify has checked it under the trusted issuer keys, so the
// flag the issuer signed (request.Phase's "verifier") is the run's: a
// summary cannot call an ordinary test run the verifier stage, nor hide a
// verifier run as an ordinary stage. A receipt of any version carries its
// grant, so no new receipt shape is needed.
func verifierBound(g *grant.Predicate, st PipelineStage) string {
	if g == nil {
		return "the stage receipt's grant was not verified, so its verifier flag is unknown"
	}
	granted, err := phaseVerifier(g.Phase)
	if err != nil {
		return fmt.Sprintf("the stage receipt's granted phase does not decode: %v", err)
	}
	switch {
	case st.Verifier && !granted:
		return "the summary names it the verifier stage, but its receipt's grant is for a phase without verifier: true (not a verifier run)"
	case !st.Verifier && granted:
		return "its receipt's grant is for a verifier phase (verifier: true), but the summary does not name it a verifier stage"
	}
	return ""
}

// phaseVerifier is the verifier flag of a canonical phase request.
func phaseVerifier(phase json.RawMessage) (bool, error) {
	var p struct {
		Verifier bool `json:"verifier"`
	}
	err := json.Unmarshal(phase, &p)
	return p.Verifier, err
}

// GrantedVerifier reports the verifier flag of the phase that the grant
// embedded in r authorized. It reads the grant without checking its
// signature, so it is for a receipt its caller has verified as its own
// (custodyd summing up its own runs): that signature covers the embedded
// grant verbatim, and custodyd verified the grant before the run.
func GrantedVerifier(r *Receipt) (bool, error) {
	e, err := decodeEnvelope(r.Grant.Envelope)
	if err != nil {
		return false, fmt.Errorf("the receipt's grant: %w", err)
	}
	var st struct {
		Predicate struct {
			Phase json.RawMessage `json:"phase"`
		} `json:"predicate"`
	}
	if err := json.Unmarshal(e.Payload, &st); err != nil {
		return false, fmt.Errorf("the receipt's grant statement: %w", err)
	}
	v, err := phaseVerifier(st.Predicate.Phase)
	if err != nil {
		return false, fmt.Errorf("the receipt's granted phase: %w", err)
	}
	return v, nil
}

// decodePipelineStatement decodes a summary statement strictly and checks
// its predicate and that its subjects are its stage receipts.
func decodePipelineStatement(payload []byte) (*PipelineSummary, error) {
	var st cdsse.Statement[PipelineSummary]
	if err := cdsse.StrictUnmarshal(payload, &st); err != nil {
		return nil, fmt.Errorf("statement: %v", err)
	}
	if st.Type != cdsse.StatementType || st.PredicateType != predicate.PipelineSummary {
		return nil, fmt.Errorf("statement: type %q, predicateType %q: not a pipeline summary", cdsse.Clip(st.Type), cdsse.Clip(st.PredicateType))
	}
	if err := validatePipeline(&st.Predicate); err != nil {
		var le *LinkError
		if !errors.As(err, &le) { // links are their own check
			return nil, fmt.Errorf("predicate: %v", err)
		}
	}
	want := pipelineSubjects(&st.Predicate)
	if len(st.Subject) != len(want) {
		return nil, fmt.Errorf("statement: %d subjects, want one per stage (%d)", len(st.Subject), len(want))
	}
	for i := range want {
		if !equalSubject(st.Subject[i], want[i]) {
			return nil, fmt.Errorf("statement: subject %d is not stage %q's receipt", i, st.Predicate.Stages[i].Name)
		}
	}
	return &st.Predicate, nil
}

package evidence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/custody-dev/custody/grant"
	cdsse "github.com/custody-dev/custody/internal/dsse"
)

// CheckCompose is the check of a pack receipt against the compose file at
// hand; the other checks of a pack receipt have the names of a phase
// receipt's.
const CheckCompose = "compose"

// CheckOutcome is the check that the operation a pack receipt records
// succeeded: an up-failed receipt is authentic but never acceptable.
const CheckOutcome = "outcome"

var (
	packAuthenticityChecks = []string{CheckEnvelope, CheckSignature, CheckIssuerTrust, CheckKeyRevocation, CheckStatement, CheckGrant}
	packAcceptanceChecks   = []string{CheckFreshness, CheckCleanup, CheckOutcome}
)

// IsPackReceipt reports whether env is a custody envelope that claims to
// be a pack receipt, so that a caller can hand it to [Verifier.VerifyPack]
// rather than [Verifier.Verify]. The claim is read without any check of
// the signature or of the statement's form and must not be trusted for
// anything else: the verifier it picks checks both.
func IsPackReceipt(env []byte) bool {
	return slices.ContainsFunc(packPredicateTypes, func(t string) bool { return claimsType(env, t) })
}

// claimsType reports whether env is an envelope whose statement claims
// predicate type t, read without any check.
func claimsType(env []byte, t string) bool {
	e, err := decodeEnvelope(env)
	if err != nil {
		return false
	}
	var st struct {
		PredicateType string `json:"predicateType"`
	}
	return json.Unmarshal(e.Payload, &st) == nil && st.PredicateType == t
}

// PackResult is the outcome of verifying one pack receipt.
type PackResult struct {
	// Checks holds every check: envelope, signature, issuer-trust,
	// key-revocation, statement, grant, compose, freshness, cleanup,
	// outcome.
	Checks []Check `json:"checks"`
	// Receipt and Subjects are the verified predicate and statement
	// subjects; they are set only when OK.
	Receipt  *PackReceipt `json:"receipt,omitempty"`
	Subjects []Subject    `json:"subjects,omitempty"`
	// SignerID and SignerName name the trusted runner key that signed it.
	SignerID   string `json:"signerId,omitempty"`
	SignerName string `json:"signerName,omitempty"`
	// EnvelopeSHA256 is the lowercase hex SHA-256 of the envelope bytes.
	EnvelopeSHA256 string `json:"envelopeSha256"`
	// TrustDigest and TrustPath are the trust file's, as in Result.
	TrustDigest string `json:"trustDigest"`
	TrustPath   string `json:"trustPath,omitempty"`
	// ComposeChecked says whether a compose file was compared with the
	// receipt's pack digest.
	ComposeChecked bool `json:"composeChecked"`
	// OK says the receipt is authentic: envelope, signature, issuer-trust,
	// key-revocation, statement, grant and, when a compose file was given,
	// compose pass.
	OK bool `json:"ok"`
	// Acceptable is OK and freshness, cleanup and outcome pass.
	Acceptable bool `json:"acceptable"`
}

// Check returns the check with the given name.
func (r *PackResult) Check(name string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

func (r *PackResult) allPass(names ...string) bool {
	for _, n := range names {
		if c, ok := r.Check(n); !ok || !c.OK {
			return false
		}
	}
	return true
}

// ComposeOption says whether VerifyPack compares a compose file with the
// receipt. Make one with WithCompose or WithoutCompose.
type ComposeOption struct {
	file []byte
	skip bool
}

// WithCompose compares file, the compose file at hand, byte for byte with
// the receipt's pack digest (an empty file is compared too).
func WithCompose(file []byte) ComposeOption {
	if file == nil {
		file = []byte{}
	}
	return ComposeOption{file: file}
}

// WithoutCompose compares no compose file: the compose check is recorded
// as failed with a "not evaluated" reason and left out of PackResult.OK,
// and PackResult.ComposeChecked is false.
func WithoutCompose() ComposeOption { return ComposeOption{skip: true} }

// PackPolicy is how one pack receipt verification is run. Make one with
// NewPackPolicy.
type PackPolicy struct {
	compose ComposeOption
	now     time.Time
	skew    time.Duration
	valid   bool
}

// NewPackPolicy returns a pack receipt verification policy. compose is
// required: pass WithCompose(file) to check the compose file the receipt
// vouches for, or WithoutCompose() to say that none is checked. Of the
// PolicyOptions, WithNow and WithClockSkew apply, as for Verify.
func NewPackPolicy(compose ComposeOption, opts ...PolicyOption) (PackPolicy, error) {
	if !compose.skip && compose.file == nil {
		return PackPolicy{}, errors.New("evidence: pack policy: no compose option; use WithCompose(file) or WithoutCompose()")
	}
	p := Policy{skew: DefaultClockSkew}
	for _, o := range opts {
		o(&p)
	}
	if p.skew < 0 {
		return PackPolicy{}, fmt.Errorf("evidence: pack policy: negative clock skew %v", p.skew)
	}
	return PackPolicy{compose: compose, now: p.now, skew: p.skew, valid: true}, nil
}

// VerifyPack verifies the pack receipt envelope env under p: against the
// verifier's trust file, as of p's time and with its clock skew, and
// against the compose file p names, if any.
//
// As [Verifier.Verify], it runs every check and records each in the
// result, each check one method of the verification, in the order
// envelope, signature, issuer-trust, key-revocation, statement, grant,
// compose, freshness, cleanup, outcome; the error is for a cancelled ctx
// or a PackPolicy not made by NewPackPolicy. The grant check verifies the
// embedded pack grant under the trust's issuer keys and requires the
// receipt to repeat its bindings: grant id, issuer, envelope digest,
// runner, project, compose digest and plan digest, and for an up receipt
// the engine identity and the grant's validity at the operation's start.
// A down receipt's grant is checked whenever it was valid, since teardown
// is never refused for an expired grant.
func (v *Verifier) VerifyPack(ctx context.Context, env []byte, p PackPolicy) (*PackResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("evidence: verify pack: %w", err)
	}
	if !p.valid {
		return nil, errors.New("evidence: verify pack: policy not made by NewPackPolicy")
	}
	sum := sha256.Sum256(env)
	res := &PackResult{EnvelopeSHA256: hex.EncodeToString(sum[:]), TrustDigest: v.trust.Digest, TrustPath: v.trust.Path,
		Checks: make([]Check, 0, len(packAuthenticityChecks)+len(packAcceptanceChecks)+1)}
	x := packVerification{checking: checking{v: v, now: p.now}, p: p}
	if x.now.IsZero() {
		x.now = time.Now()
	}
	res.Checks = append(res.Checks, x.envelope(env))
	x.decodeStatement()
	res.Checks = append(res.Checks, x.signature(ctx))
	if x.signer != nil {
		res.SignerID, res.SignerName = x.signer.ID(), x.signer.Name
	}
	sk := x.signingKey()
	res.Checks = append(res.Checks, sk.issuerTrust(), sk.keyRevocation(), x.statement())
	c, err := x.grant(ctx)
	if err != nil {
		return nil, err
	}
	res.Checks = append(res.Checks, c)
	c, res.ComposeChecked = x.compose()
	res.Checks = append(res.Checks, c, x.freshness(), x.cleanup(), x.outcome())
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("evidence: verify pack: %w", err)
	}
	res.OK = res.allPass(packAuthenticityChecks...) && (p.compose.skip || res.allPass(CheckCompose))
	res.Acceptable = res.OK && res.allPass(packAcceptanceChecks...)
	if res.OK {
		res.Receipt, res.Subjects = x.receipt, x.subjects
	}
	return res, nil
}

// packVerification is what one VerifyPack has found so far, for the
// checks that follow to read.
type packVerification struct {
	checking
	p PackPolicy
	// receipt is the decoded statement, nil when it does not decode
	// (stErr says why); nothing of it is returned unless the receipt is
	// authentic.
	receipt *PackReceipt
}

// decodeStatement decodes the statement whether or not the signature
// verifies, so that every check can say what it finds.
func (x *packVerification) decodeStatement() {
	if x.e == nil {
		x.stErr = errors.New(notEvaluated + "the envelope does not decode")
		return
	}
	x.receipt, x.subjects, x.stErr = decodePackStatement(x.e.Payload)
	if x.receipt != nil {
		x.finished = &x.receipt.Finished
	}
}

func (x *packVerification) signature(ctx context.Context) Check {
	if x.e == nil {
		return verdict(CheckSignature, notEvaluated+"the envelope does not decode")
	}
	// verifySignature prefers, among several trusted signers, the runner
	// a receipt names; only Runner.ID of the receipt is read.
	var named *Receipt
	if x.receipt != nil {
		named = &Receipt{Runner: x.receipt.Runner}
	}
	var reason string
	x.signer, reason = x.v.verifySignature(ctx, x.e, named)
	return verdict(CheckSignature, reason)
}

func (x *packVerification) statement() Check {
	switch r := x.receipt; {
	case x.stErr != nil:
		return verdict(CheckStatement, x.stErr.Error())
	case x.signer != nil && r.Runner.ID != x.signer.ID():
		return verdict(CheckStatement, fmt.Sprintf("runner.id %s is not the key that signed the receipt (%s)", r.Runner.ID, x.signer.ID()))
	}
	return passed(CheckStatement, "")
}

// grant checks the embedded pack grant (checkPackGrant); the error is for
// a cancelled ctx only.
func (x *packVerification) grant(ctx context.Context) (Check, error) {
	if x.receipt == nil {
		return notDecoded(CheckGrant), nil
	}
	reason, err := x.v.checkPackGrant(ctx, x.receipt)
	if err != nil {
		return Check{}, err
	}
	return verdict(CheckGrant, reason), nil
}

// compose compares the policy's compose file with the receipt's pack
// digest, and says whether it did.
func (x *packVerification) compose() (Check, bool) {
	switch {
	case x.receipt == nil:
		return notDecoded(CheckCompose), false
	case x.p.compose.skip:
		return verdict(CheckCompose, notEvaluated+"no compose file was given to compare with the receipt"), false
	}
	c := sha256.Sum256(x.p.compose.file)
	if got := "sha256:" + hex.EncodeToString(c[:]); got != x.receipt.Pack.Digest {
		return verdict(CheckCompose, fmt.Sprintf("the compose file's digest %s is not the receipt's pack.digest %s", got, x.receipt.Pack.Digest)), true
	}
	return passed(CheckCompose, ""), true
}

func (x *packVerification) freshness() Check {
	if x.receipt == nil {
		return notDecoded(CheckFreshness)
	}
	return x.v.freshness("operation", x.receipt.Finished, x.now, x.p.skew)
}

// cleanup requires a verified teardown of a down receipt when the trust
// file requires clean teardowns.
func (x *packVerification) cleanup() Check {
	r := x.receipt
	switch {
	case r == nil:
		return notDecoded(CheckCleanup)
	case r.Operation == PackUp || !x.v.trust.RequireCleanVerified || r.Cleanup.Verified:
		return passed(CheckCleanup, "")
	}
	var residual []string
	for _, res := range r.Cleanup.Resources {
		if res.Result == CleanupResidual {
			residual = append(residual, fmt.Sprintf("%s %s %q (%s)", res.Kind, cdsse.Clip(res.ID), cdsse.Clip(res.Name), cdsse.Clip(res.Reason)))
		}
	}
	return verdict(CheckCleanup, "teardown was not verified; residual: "+strings.Join(residual, ", "))
}

// outcome fails an up-failed receipt: authentic, never acceptable.
func (x *packVerification) outcome() Check {
	switch r := x.receipt; {
	case r == nil:
		return notDecoded(CheckOutcome)
	case r.Operation == PackUpFailed:
		return verdict(CheckOutcome, "the up failed and its attempt was torn down: "+cdsse.Clip(r.Failure))
	}
	return passed(CheckOutcome, "")
}

// checkPackGrant verifies the embedded pack grant under the trusted issuer
// keys and compares the receipt's bindings with it. It returns why the
// check fails, or ""; the error is for a cancelled ctx only.
func (v *Verifier) checkPackGrant(ctx context.Context, r *PackReceipt) (string, error) {
	var g *grant.PackGrant
	var err error
	if r.Operation != PackDown {
		g, err = v.grants.VerifyPack(ctx, r.Grant.Envelope, r.Started)
	} else {
		g, err = v.grants.VerifyPackIssued(ctx, r.Grant.Envelope)
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return "", fmt.Errorf("evidence: verify pack: %w", cerr)
		}
		var ge *grant.Error
		if errors.As(err, &ge) && ge.Code == grant.CodeWrongIssuer {
			return "the embedded pack grant is not signed by a trusted issuer key: " + ge.Detail, nil
		}
		return "the embedded pack grant does not verify: " + err.Error(), nil
	}
	// The issuer key is judged when the grant was used: at an up's start,
	// and for a down at the grant's own notBefore, since the down may come
	// long after.
	at := r.Started
	if r.Operation == PackDown {
		at = g.Predicate.NotBefore
	}
	var bad []string
	if issuer := v.issuers[g.IssuerKeyID]; issuer == nil {
		bad = append(bad, fmt.Sprintf("issuer key %s is not trusted", g.IssuerKeyID))
	} else {
		if why := issuer.validAt(at); why != "" {
			bad = append(bad, "issuer "+why)
		}
		if why := issuer.revokedAt(at, v.trust.AcceptBeforeRevocation); why != "" {
			bad = append(bad, "issuer "+why)
		}
	}
	differ := func(field, got, want string) {
		if got != want {
			bad = append(bad, fmt.Sprintf("%s: the receipt has %q but the grant binds %q", field, cdsse.Clip(got), cdsse.Clip(want)))
		}
	}
	gp := &g.Predicate
	differ("grant.id", r.Grant.ID, gp.ID)
	differ("grant.issuerId", r.Grant.IssuerID, g.IssuerKeyID)
	differ("grant.envelopeSha256", r.Grant.EnvelopeSHA256, strings.TrimPrefix(g.EnvelopeDigest, "sha256:"))
	differ("runner.id", r.Runner.ID, gp.Runner.ID)
	differ("pack.project", r.Pack.Project, gp.Pack.Project)
	differ("pack.digest", r.Pack.Digest, gp.Pack.Digest)
	differ("planDigest", r.PlanDigest, g.SubjectDigest)
	if r.Operation != PackDown {
		// A down may meet an engine upgraded since admission; an up ran
		// against the engine the grant admitted it for.
		differ("engine.name", r.Engine.Name, gp.Engine.Name)
		differ("engine.version", r.Engine.Version, gp.Engine.Version)
		differ("engine.apiVersion", r.Engine.APIVersion, gp.Engine.APIVersion)
	}
	return strings.Join(bad, "; "), nil
}

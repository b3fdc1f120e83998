package evidence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/custody-dev/custody/grant"
	cdsse "github.com/custody-dev/custody/internal/dsse"
	"github.com/custody-dev/custody/predicate"
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
	return claimsType(env, predicate.PackReceipt) || claimsType(env, predicate.PackReceiptV2)
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
	// key-revocation, statement, grant, compose, freshness, cleanup.
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
	// Acceptable is OK and freshness and cleanup pass.
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

// VerifyPack verifies the pack receipt envelope env against the verifier's
// trust file, as of now (WithNow) and with the clock skew of WithClockSkew;
// the two are the only options that apply. compose, when not nil, is the
// compose file at hand, checked byte for byte against the receipt's pack
// digest; nil leaves that check "not evaluated" and out of OK.
//
// As [Verifier.Verify], it runs every check and records each in the
// result; the error is for a cancelled ctx only. The grant check verifies
// the embedded pack grant under the trust's issuer keys and requires the
// receipt to repeat its bindings: grant id, issuer, envelope digest,
// runner, project, compose digest and plan digest, and for an up receipt
// the engine identity and the grant's validity at the operation's start.
// A down receipt's grant is checked whenever it was valid, since teardown
// is never refused for an expired grant.
func (v *Verifier) VerifyPack(ctx context.Context, env, compose []byte, opts ...PolicyOption) (*PackResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("evidence: verify pack: %w", err)
	}
	p := Policy{skew: DefaultClockSkew}
	for _, o := range opts {
		o(&p)
	}
	if p.skew < 0 {
		return nil, fmt.Errorf("evidence: verify pack: negative clock skew %v", p.skew)
	}
	if p.now.IsZero() {
		p.now = time.Now()
	}
	sum := sha256.Sum256(env)
	res := &PackResult{EnvelopeSHA256: hex.EncodeToString(sum[:]), TrustDigest: v.trust.Digest, TrustPath: v.trust.Path}
	add := func(name, reason string) { res.Checks = append(res.Checks, verdict(name, reason)) }

	e, err := decodeEnvelope(env)
	if err != nil {
		add(CheckEnvelope, err.Error())
	} else {
		add(CheckEnvelope, "")
	}
	var r *PackReceipt
	var subjects []Subject
	stErr := errors.New(notEvaluated + "the envelope does not decode")
	if e != nil {
		r, subjects, stErr = decodePackStatement(e.Payload)
	}

	var signer *TrustedKey
	switch {
	case e == nil:
		add(CheckSignature, notEvaluated+"the envelope does not decode")
	default:
		// verifySignature prefers, among several trusted signers, the
		// runner a receipt names; only Runner.ID of the receipt is read.
		var named *Receipt
		if r != nil {
			named = &Receipt{Runner: r.Runner}
		}
		var reason string
		signer, reason = v.verifySignature(ctx, e, named)
		add(CheckSignature, reason)
	}
	if signer != nil {
		res.SignerID, res.SignerName = signer.ID(), signer.Name
	}
	switch {
	case signer == nil:
		add(CheckIssuerTrust, notEvaluated+"no trusted runner key signed the receipt")
		add(CheckKeyRevocation, notEvaluated+"no trusted runner key signed the receipt")
	case r == nil:
		add(CheckIssuerTrust, notEvaluated+"the statement failed its check, so the signing time is unknown")
		add(CheckKeyRevocation, notEvaluated+"the statement failed its check, so the signing time is unknown")
	default:
		add(CheckIssuerTrust, signer.validAt(r.Finished))
		add(CheckKeyRevocation, signer.revokedAt(r.Finished, v.trust.AcceptBeforeRevocation))
	}
	switch {
	case stErr != nil:
		add(CheckStatement, stErr.Error())
	case signer != nil && r.Runner.ID != signer.ID():
		add(CheckStatement, fmt.Sprintf("runner.id %s is not the key that signed the receipt (%s)", r.Runner.ID, signer.ID()))
	default:
		add(CheckStatement, "")
	}

	if r == nil {
		for _, name := range []string{CheckGrant, CheckCompose, CheckFreshness, CheckCleanup, CheckOutcome} {
			add(name, notEvaluated+"the statement failed its check")
		}
	} else {
		reason, err := v.checkPackGrant(ctx, r)
		if err != nil {
			return nil, err
		}
		add(CheckGrant, reason)
		if compose == nil {
			add(CheckCompose, notEvaluated+"no compose file was given to compare with the receipt")
		} else {
			res.ComposeChecked = true
			c := sha256.Sum256(compose)
			if got := "sha256:" + hex.EncodeToString(c[:]); got != r.Pack.Digest {
				add(CheckCompose, fmt.Sprintf("the compose file's digest %s is not the receipt's pack.digest %s", got, r.Pack.Digest))
			} else {
				add(CheckCompose, "")
			}
		}
		add(CheckFreshness, v.packFreshness(r, p))
		add(CheckCleanup, v.packCleanup(r))
		outcome := ""
		if r.Operation == PackUpFailed {
			outcome = "the up failed and its attempt was torn down: " + cdsse.Clip(r.Failure)
		}
		add(CheckOutcome, outcome)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("evidence: verify pack: %w", err)
	}
	res.OK = res.allPass(packAuthenticityChecks...) && (compose == nil || res.allPass(CheckCompose))
	res.Acceptable = res.OK && res.allPass(packAcceptanceChecks...)
	if res.OK {
		res.Receipt, res.Subjects = r, subjects
	}
	return res, nil
}

func (v *Verifier) packFreshness(r *PackReceipt, p Policy) string {
	switch {
	case r.Finished.After(p.now.Add(p.skew)):
		return fmt.Sprintf("the operation finished at %s, after now (%s) by more than the clock skew of %v",
			r.Finished.Format(time.RFC3339), p.now.UTC().Format(time.RFC3339), p.skew)
	case p.now.Sub(r.Finished) > v.trust.MaxAge:
		return fmt.Sprintf("the operation finished at %s, %v before now (%s), more than maxAge %v",
			r.Finished.Format(time.RFC3339), p.now.Sub(r.Finished).Round(time.Second), p.now.UTC().Format(time.RFC3339), v.trust.MaxAge)
	}
	return ""
}

func (v *Verifier) packCleanup(r *PackReceipt) string {
	switch {
	case r.Operation == PackUp || !v.trust.RequireCleanVerified:
		return ""
	case !r.Cleanup.Verified:
		var residual []string
		for _, res := range r.Cleanup.Resources {
			if res.Result == CleanupResidual {
				residual = append(residual, fmt.Sprintf("%s %s %q (%s)", res.Kind, cdsse.Clip(res.ID), cdsse.Clip(res.Name), cdsse.Clip(res.Reason)))
			}
		}
		return "teardown was not verified; residual: " + strings.Join(residual, ", ")
	}
	return ""
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

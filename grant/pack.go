package grant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	cdsse "github.com/custody-dev/custody/internal/dsse"
	"github.com/custody-dev/custody/predicate"
)

// PackPredicate is the body of a pack grant. It binds what the runner
// re-derives before it realizes the pack.
type PackPredicate struct {
	// ID identifies the grant (see [NewID]); the key for revocation and
	// single use.
	ID string `json:"id"`
	// Actor is who the grant was issued to.
	Actor string `json:"actor"`
	// NotBefore and Expires bound when the grant may be used:
	// NotBefore <= now < Expires.
	NotBefore time.Time `json:"notBefore"`
	Expires   time.Time `json:"expires"`
	// PolicyDigest is "sha256:<hex>" of the exact policy file bytes.
	PolicyDigest string `json:"policyDigest"`
	// Runner is the runner the grant is for.
	Runner Runner `json:"runner"`
	// Engine is the container engine the pack was admitted against.
	Engine Engine `json:"engine"`
	// Pack is the compose file the plan was admitted from.
	Pack Pack `json:"pack"`
	// Plan is the admitted plan's canonical JSON: a compact JSON object
	// (no insignificant whitespace, no top-level member twice). Its SHA-256
	// is the statement's subject digest. It is opaque here: admission
	// makes it and the backend reads it.
	Plan json.RawMessage `json:"plan"`
}

// Engine is a container engine's identity as the engine reports it.
type Engine struct {
	// Name is the engine, e.g. "docker".
	Name string `json:"name"`
	// Version is the engine's version, e.g. "26.1.5".
	Version string `json:"version"`
	// APIVersion is the API version spoken with it, e.g. "1.45".
	APIVersion string `json:"apiVersion"`
}

// Pack is a scenario pack: a compose project and its file.
type Pack struct {
	// Project is the compose project name: lowercase letters, digits,
	// "-" and "_", starting with a letter or digit (compose's rule), at
	// most 255 bytes.
	Project string `json:"project"`
	// Digest is "sha256:<hex>" of the exact compose file bytes.
	Digest string `json:"digest"`
}

// PackGrant is a verified pack grant.
type PackGrant struct {
	// Predicate is the verified predicate.
	Predicate PackPredicate
	// SubjectName is the statement subject's name, "pack/<project>".
	SubjectName string
	// SubjectDigest is "sha256:<hex>" of Predicate.Plan: the plan digest.
	SubjectDigest string
	// IssuerKeyID is the keys.KeyID of the trusted key that signed it.
	IssuerKeyID string
	// EnvelopeDigest is "sha256:<hex>" of the raw envelope bytes verified.
	// It identifies these bytes, not the grant: use Predicate.ID for replay
	// and revocation.
	EnvelopeDigest string
}

// PackSubjectPrefix starts the subject name of a pack grant.
const PackSubjectPrefix = "pack/"

var projectPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,254}$`)

// IsProjectName reports whether s is a valid compose project name as pack
// grants and receipts carry it.
func IsProjectName(s string) bool { return projectPattern.MatchString(s) }

// MintPack validates p, wraps it in a pack grant statement whose subject is
// p.Plan, signs it with issuer and returns the DSSE envelope as JSON. As
// [Mint], it fills nothing in and checks what it emits before returning it.
func MintPack(ctx context.Context, issuer cdsse.Signer, p PackPredicate) ([]byte, error) {
	if err := checkIssuer(ctx, issuer); err != nil {
		return nil, err
	}
	if err := validatePack(&p); err != nil {
		return nil, fmt.Errorf("grant: mint: invalid pack predicate: %w", err)
	}
	payload, frame, err := encodeStatementOf(&p, predicate.PackGrant, PackSubjectPrefix+p.Pack.Project, p.Plan)
	if err != nil {
		return nil, fmt.Errorf("grant: mint: %w", err)
	}
	return signStatement(ctx, issuer, payload, frame, func(b []byte) error {
		_, _, err := decodePackStatement(b)
		return err
	})
}

// VerifyPack verifies envelope as a pack grant valid at now and returns it.
// A refused grant is an [*Error]; any other error (a cancelled ctx, a zero
// now) is not about the grant. It checks what [Verifier.Verify] checks of
// a phase grant, with the plan in place of the phase.
func (v *Verifier) VerifyPack(ctx context.Context, envelope []byte, now time.Time) (*PackGrant, error) {
	if now.IsZero() {
		return nil, errors.New("grant: verify: zero time")
	}
	g, err := v.verifyPack(ctx, envelope)
	if err != nil {
		return nil, err
	}
	if err := v.checkWindow(g.Predicate.ID, g.Predicate.NotBefore, g.Predicate.Expires, now); err != nil {
		return nil, err
	}
	if err := v.checkRetired(g.Predicate.ID, g.IssuerKeyID, g.Predicate.NotBefore, g.Predicate.Expires, now); err != nil {
		return nil, err
	}
	return g, nil
}

// VerifyPackIssued verifies envelope as a pack grant the trusted issuers
// signed, whenever it was valid: everything [Verifier.VerifyPack] checks
// but the validity window. It is for records made under a grant (a
// teardown receipt, say) whose time the window does not bound; never use
// it to authorize.
func (v *Verifier) VerifyPackIssued(ctx context.Context, envelope []byte) (*PackGrant, error) {
	return v.verifyPack(ctx, envelope)
}

func (v *Verifier) verifyPack(ctx context.Context, envelope []byte) (*PackGrant, error) {
	env, issuer, err := v.open(ctx, envelope)
	if err != nil {
		return nil, err
	}
	p, sub, err := decodePackStatement(env.Payload)
	if err != nil {
		return nil, err
	}
	if err := validatePack(p); err != nil {
		return nil, Refuse(CodeMalformed, "predicate: %v", err)
	}
	if want := PackSubjectPrefix + p.Pack.Project; sub.Name != want {
		return nil, Refuse(CodeMalformed, "subject name %q is not %q", sub.Name, want)
	}
	if err := v.checkRetired(p.ID, issuer, p.NotBefore, p.Expires, time.Time{}); err != nil {
		return nil, err
	}
	return &PackGrant{
		Predicate:      *p,
		SubjectName:    sub.Name,
		SubjectDigest:  digestPrefix + sub.Digest["sha256"],
		IssuerKeyID:    issuer,
		EnvelopeDigest: envelopeDigest(envelope),
	}, nil
}

// decodePackStatement decodes a pack grant statement strictly and checks
// that its subject is the plan it carries. It does not validate the
// predicate.
func decodePackStatement(payload []byte) (*PackPredicate, *subject, error) {
	return withSubject(decodeStatementOf[PackPredicate], payload, predicate.PackGrant, "plan", planOf)
}

func decodePackStatementExplained(payload []byte) (*PackPredicate, *subject, error) {
	return withSubject(decodeStatementExplainedOf[PackPredicate], payload, predicate.PackGrant, "plan", planOf)
}

func planOf(p *PackPredicate) []byte { return p.Plan }

// validatePack checks every field of p. It fills nothing in.
func validatePack(p *PackPredicate) error {
	var problems []string
	add, text, digest := fieldChecks(&problems)
	checkBinding(&problems, p.ID, p.Actor, p.NotBefore, p.Expires, p.PolicyDigest, p.Runner.ID)
	text("engine.name", p.Engine.Name)
	text("engine.version", p.Engine.Version)
	text("engine.apiVersion", p.Engine.APIVersion)
	if !IsProjectName(p.Pack.Project) {
		add("pack.project", "%q is not a compose project name (^[a-z0-9][a-z0-9_-]{0,254}$)", cdsse.Clip(p.Pack.Project))
	}
	digest("pack.digest", p.Pack.Digest)
	if err := compactObject(p.Plan, nil); err != nil {
		add("plan", "%v", err)
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

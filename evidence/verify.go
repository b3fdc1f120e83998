package evidence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/custody-dev/custody/grant"
	cdsse "github.com/custody-dev/custody/internal/dsse"
	"github.com/custody-dev/custody/keys"
)

// Names of the checks Verify records, in the order it records them.
const (
	CheckEnvelope      = "envelope"
	CheckSignature     = "signature"
	CheckIssuerTrust   = "issuer-trust"
	CheckKeyRevocation = "key-revocation"
	CheckStatement     = "statement"
	CheckGrant         = "grant"
	CheckFreshness     = "freshness"
	CheckTier          = "tier"
	CheckOutputs       = "outputs"
	CheckExitStatus    = "exit-status"
	CheckCleanup       = "cleanup"
)

// notEvaluated starts the reason of a check that could not be evaluated.
const notEvaluated = "not evaluated: "

// authenticityChecks must all pass for Result.OK (outputs only when
// requested); promotionChecks must also pass for Result.Promotable.
var (
	authenticityChecks = []string{CheckEnvelope, CheckSignature, CheckIssuerTrust, CheckKeyRevocation, CheckStatement, CheckGrant}
	promotionChecks    = []string{CheckFreshness, CheckTier, CheckExitStatus, CheckCleanup}
)

// Verifier verifies receipts against a trust file. A Verifier is safe for
// concurrent use.
type Verifier struct {
	trust   *Trust
	runners map[string]*TrustedKey // by key ID
	issuers map[string]*TrustedKey // by key ID
	grants  *grant.Verifier
}

// VerifierOption configures a Verifier.
type VerifierOption func(*verifierConfig)

type verifierConfig struct {
	grantSkew time.Duration
}

// WithGrantClockSkew tolerates a difference of up to d between the grant
// issuer's clock and the runner's: the embedded grant is accepted if the
// run started between its notBefore-d and its expiry+d. The default is no
// skew (the issuer and the runner are the same daemon).
func WithGrantClockSkew(d time.Duration) VerifierOption {
	return func(c *verifierConfig) { c.grantSkew = d }
}

// NewVerifier returns a verifier of receipts signed by t's runner keys and
// embedding grants signed by t's issuer keys. It fails if t lists no runner
// or no issuer key.
func NewVerifier(t *Trust, opts ...VerifierOption) (*Verifier, error) {
	if t == nil {
		return nil, errors.New("evidence: nil trust")
	}
	if len(t.Runners) == 0 {
		return nil, errors.New("evidence: the trust lists no runner keys")
	}
	if len(t.Issuers) == 0 {
		return nil, errors.New("evidence: the trust lists no issuer keys")
	}
	var cfg verifierConfig
	for _, o := range opts {
		o(&cfg)
	}
	// The verifier keeps its own copy: later changes to *t do not affect it.
	tc := *t
	tc.Runners, tc.Issuers = slices.Clone(t.Runners), slices.Clone(t.Issuers)
	tc.Tiers, tc.Statuses = slices.Clone(t.Tiers), slices.Clone(t.Statuses)
	t = &tc
	v := &Verifier{trust: t, runners: map[string]*TrustedKey{}, issuers: map[string]*TrustedKey{}}
	var issuerKeys []*keys.Verifier
	for _, list := range []struct {
		keys []TrustedKey
		into map[string]*TrustedKey
	}{{t.Runners, v.runners}, {t.Issuers, v.issuers}} {
		for i := range list.keys {
			k := &list.keys[i]
			if k.Key == nil {
				return nil, fmt.Errorf("evidence: trusted key %q has no public key", k.Name)
			}
			if _, dup := v.runners[k.ID()]; dup {
				return nil, fmt.Errorf("evidence: key %s is listed twice", k.ID())
			}
			if _, dup := v.issuers[k.ID()]; dup {
				return nil, fmt.Errorf("evidence: key %s is listed twice", k.ID())
			}
			list.into[k.ID()] = k
		}
	}
	for i := range t.Issuers {
		issuerKeys = append(issuerKeys, t.Issuers[i].Key)
	}
	gv, err := grant.NewVerifier(issuerKeys, grant.WithClockSkew(cfg.grantSkew))
	if err != nil {
		return nil, fmt.Errorf("evidence: %w", err)
	}
	v.grants = gv
	return v, nil
}

// OutputsOption says whether and where Verify checks the retained output
// bytes. Make one with WithOutputs or WithoutOutputsUnsafe.
type OutputsOption struct {
	dir  string
	skip bool
}

// WithOutputs verifies the retained output bytes in dir (the stored
// read-only copy, e.g. the data directory of the output snapshot) against
// the receipt.
func WithOutputs(dir string) OutputsOption { return OutputsOption{dir: dir} }

// WithoutOutputsUnsafe skips the check of the output bytes: the receipt is
// checked, but nothing says the files at hand are the ones it vouches for.
// The outputs check is then recorded as failed with a "not evaluated"
// reason and left out of Result.OK, and Result.OutputsChecked is false.
func WithoutOutputsUnsafe() OutputsOption { return OutputsOption{skip: true} }

// Policy is how one verification is run. Make one with NewPolicy.
type Policy struct {
	outputs OutputsOption
	now     time.Time
	skew    time.Duration
	valid   bool
}

// PolicyOption configures a Policy.
type PolicyOption func(*Policy)

// DefaultClockSkew is how far in the future a receipt's finish time may be
// (the runner's clock ahead of the verifier's) before freshness fails.
const DefaultClockSkew = time.Minute

// WithNow verifies as of t instead of the current time.
func WithNow(t time.Time) PolicyOption { return func(p *Policy) { p.now = t } }

// WithClockSkew sets how far in the future a receipt's finish time may be
// before freshness fails; the default is DefaultClockSkew.
func WithClockSkew(d time.Duration) PolicyOption { return func(p *Policy) { p.skew = d } }

// NewPolicy returns a verification policy. outputs is required: pass
// WithOutputs(dir) to verify the retained bytes, or WithoutOutputsUnsafe()
// to say out loud that they are not checked.
func NewPolicy(outputs OutputsOption, opts ...PolicyOption) (Policy, error) {
	if !outputs.skip && outputs.dir == "" {
		return Policy{}, errors.New("evidence: policy: no outputs option; use WithOutputs(dir) or WithoutOutputsUnsafe()")
	}
	p := Policy{outputs: outputs, skew: DefaultClockSkew}
	for _, o := range opts {
		o(&p)
	}
	if p.skew < 0 {
		return Policy{}, fmt.Errorf("evidence: policy: negative clock skew %v", p.skew)
	}
	p.valid = true
	return p, nil
}

// Check is one check's verdict.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
}

// Result is the outcome of verifying one receipt.
type Result struct {
	// Checks holds every check, in the order of the Check* constants.
	Checks []Check `json:"checks"`
	// Receipt and Subjects are the verified predicate and statement
	// subjects; they are set only when OK.
	Receipt  *Receipt  `json:"receipt,omitempty"`
	Subjects []Subject `json:"subjects,omitempty"`
	// Grant is the embedded grant's predicate as its issuer signed it
	// (what the phase was authorized to run: command, env, resources);
	// set only when OK.
	Grant *grant.Predicate `json:"grant,omitempty"`
	// SignerID is the keys.KeyID of the trusted runner key that signed the
	// receipt, and SignerName its name in the trust file.
	SignerID   string `json:"signerId,omitempty"`
	SignerName string `json:"signerName,omitempty"`
	// EnvelopeSHA256 is the lowercase hex SHA-256 of the envelope bytes.
	EnvelopeSHA256 string `json:"envelopeSha256"`
	// TrustDigest is the trust file's "sha256:<hex>", TrustPath its path
	// if it was loaded from a file.
	TrustDigest string `json:"trustDigest"`
	TrustPath   string `json:"trustPath,omitempty"`
	// OutputsChecked says whether the output bytes were compared with the
	// receipt: false under WithoutOutputsUnsafe, and when the statement
	// does not decode.
	OutputsChecked bool `json:"outputsChecked"`
	// OK says the receipt is authentic: envelope, signature, issuer-trust,
	// key-revocation, statement, grant and, when requested, outputs pass.
	OK bool `json:"ok"`
	// Promotable is OK and freshness, tier, exit-status and cleanup pass.
	Promotable bool `json:"promotable"`

	// seal is set by Verify only, so that Promote cannot be handed a
	// Result that Verify did not produce.
	seal *seal
}

type seal struct {
	envelopeSHA256 string
	promotable     bool
}

// Check returns the check with the given name.
func (r *Result) Check(name string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// Failed returns the checks that did not pass.
func (r *Result) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

// Verify verifies the receipt envelope env under p. It runs every check and
// records each in the Result; a receipt that fails any check is reported in
// the Result, not as an error. The error is for a cancelled ctx or a Policy
// not made by NewPolicy. Each check is one method of verification, called
// in the order of the Check* constants.
func (v *Verifier) Verify(ctx context.Context, env []byte, p Policy) (*Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("evidence: verify: %w", err)
	}
	if !p.valid {
		return nil, errors.New("evidence: verify: policy not made by NewPolicy")
	}
	sum := sha256.Sum256(env)
	res := &Result{
		EnvelopeSHA256: hex.EncodeToString(sum[:]),
		TrustDigest:    v.trust.Digest,
		TrustPath:      v.trust.Path,
		Checks:         make([]Check, 0, len(authenticityChecks)+len(promotionChecks)+1),
	}
	x := verification{checking: checking{v: v, now: p.now}, p: p}
	if x.now.IsZero() {
		x.now = time.Now()
	}
	res.Checks = append(res.Checks, x.envelope(env))
	sigDone := x.startSignature(ctx)
	x.decodeStatement()
	grantDone, outputsDone := x.startIndependent(ctx)
	res.Checks = append(res.Checks, x.signature(sigDone))
	if x.signer != nil {
		res.SignerID, res.SignerName = x.signer.ID(), x.signer.Name
	}
	res.Checks = append(res.Checks, x.issuerTrust(), x.keyRevocation(), x.statement())
	c, err := x.grant(grantDone)
	if err != nil {
		return nil, err
	}
	res.Checks = append(res.Checks, c, x.freshness(), x.tier())
	c, res.OutputsChecked, err = x.outputs(outputsDone)
	if err != nil {
		return nil, err
	}
	res.Checks = append(res.Checks, c, x.exitStatus(), x.cleanup())
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("evidence: verify: %w", err)
	}
	res.OK = allPass(res, authenticityChecks...) && (p.outputs.skip || allPass(res, CheckOutputs))
	res.Promotable = res.OK && allPass(res, promotionChecks...)
	if res.OK {
		res.Receipt, res.Subjects, res.Grant = x.receipt, x.subjects, x.grantPredicate
	}
	res.seal = &seal{envelopeSHA256: res.EnvelopeSHA256, promotable: res.Promotable}
	return res, nil
}

// verification is what one Verify has found so far, for the checks that
// follow to read.
type verification struct {
	checking
	p Policy
	// receipt is the decoded statement, nil when it does not decode
	// (stErr says why); nothing of it is returned unless the receipt is
	// authentic.
	receipt *Receipt
	// grantPredicate is the embedded grant, once its check passed.
	grantPredicate *grant.Predicate
}

// checking is what a phase and a pack receipt's verification share: the
// verifier, the time it verifies as of, the envelope, the statement's
// subjects and finish time, and the trusted key that signed.
type checking struct {
	v        *Verifier
	now      time.Time
	e        *cdsse.Envelope // nil: the envelope does not decode
	subjects []Subject
	stErr    error
	// finished is the receipt's finish time, the signing time; nil when
	// the statement does not decode.
	finished *time.Time
	signer   *TrustedKey // nil: no trusted runner key signed
}

// verdict is a check that passes when reason is "".
func verdict(name, reason string) Check { return Check{Name: name, OK: reason == "", Reason: reason} }

// passed is a check that passes with a note.
func passed(name, note string) Check { return Check{Name: name, OK: true, Reason: note} }

// notDecoded is a check that cannot be evaluated without the statement.
func notDecoded(name string) Check {
	return verdict(name, notEvaluated+"the statement failed its check")
}

func (x *checking) envelope(env []byte) Check {
	e, err := decodeEnvelope(env)
	if err != nil {
		return verdict(CheckEnvelope, err.Error())
	}
	x.e = e
	return passed(CheckEnvelope, "")
}

// decodeStatement decodes the statement whether or not the signature
// verifies, so that every check can say what it finds.
func (x *verification) decodeStatement() {
	if x.e != nil {
		x.receipt, x.subjects, x.stErr = decodeReceiptStatement(x.e.Payload)
	}
	if x.receipt != nil {
		x.finished = &x.receipt.Finished
	}
}

// startIndependent starts the checks of the embedded grant (its own
// signature and statement) and of the retained outputs, which run side by
// side with the receipt's signature: the three are independent and
// together most of a verification's time. They only read the receipt;
// each result is recorded in its place (grant, outputs).
func (x *verification) startIndependent(ctx context.Context) (grantDone, outputsDone chan checked) {
	r, v := x.receipt, x.v // not x: it stays on Verify's stack
	if r == nil {
		return nil, nil
	}
	grantDone = make(chan checked, 1)
	go func() {
		g, reason, err := v.checkGrant(ctx, r)
		grantDone <- checked{reason: reason, err: err, grant: g}
	}()
	if !x.p.outputs.skip {
		outputsDone = make(chan checked, 1)
		dir := x.p.outputs.dir
		go func() {
			reason, err := checkOutputs(ctx, dir, &r.Output)
			outputsDone <- checked{reason: reason, err: err}
		}()
	}
	return grantDone, outputsDone
}

// startSignature starts checking the envelope's signatures, which needs
// the envelope alone, so that it runs beside the statement's decoding;
// nil when the envelope does not decode.
func (x *verification) startSignature(ctx context.Context) chan signatures {
	if x.e == nil {
		return nil
	}
	done := make(chan signatures, 1)
	e, v := x.e, x.v
	go func() { done <- v.checkSignatures(ctx, e) }()
	return done
}

func (x *verification) signature(done chan signatures) Check {
	if done == nil {
		return verdict(CheckSignature, notEvaluated+"the envelope does not decode")
	}
	var reason string
	x.signer, reason = x.v.signedBy(<-done, x.receipt)
	return verdict(CheckSignature, reason)
}

// signingKey is the signing key's checks of the receipt, judged at its
// finish time.
func (x *checking) signingKey() signingKey {
	return signingKey{v: x.v, signer: x.signer, at: x.finished}
}

func (x *verification) issuerTrust() Check { return x.signingKey().issuerTrust() }

func (x *verification) keyRevocation() Check { return x.signingKey().keyRevocation() }

// signingKey is what the issuer-trust and key-revocation checks of a
// phase or a pack receipt read: the trusted runner key that signed it
// (nil: none did) and the signing time, which is the finish time the
// receipt records (nil: the statement does not decode).
type signingKey struct {
	v      *Verifier
	signer *TrustedKey
	at     *time.Time
}

// timeUnknown says why the signing key cannot be judged at the signing
// time; "" when it can.
func (s signingKey) timeUnknown() string {
	switch {
	case s.signer == nil:
		return notEvaluated + "no trusted runner key signed the receipt"
	case s.at == nil:
		return notEvaluated + "the statement failed its check, so the signing time is unknown"
	}
	return ""
}

func (s signingKey) issuerTrust() Check {
	if why := s.timeUnknown(); why != "" {
		return verdict(CheckIssuerTrust, why)
	}
	return verdict(CheckIssuerTrust, s.signer.validAt(*s.at))
}

func (s signingKey) keyRevocation() Check {
	if why := s.timeUnknown(); why != "" {
		return verdict(CheckKeyRevocation, why)
	}
	return verdict(CheckKeyRevocation, s.signer.revokedAt(*s.at, s.v.trust.AcceptBeforeRevocation))
}

func (x *verification) statement() Check {
	switch r := x.receipt; {
	case x.e == nil:
		return verdict(CheckStatement, notEvaluated+"the envelope does not decode")
	case x.stErr != nil:
		return verdict(CheckStatement, x.stErr.Error())
	case x.signer != nil && r.Runner.ID != x.signer.ID():
		return verdict(CheckStatement, fmt.Sprintf("runner.id %s is not the key that signed the receipt (%s)", r.Runner.ID, x.signer.ID()))
	}
	return passed(CheckStatement, "")
}

// grant records the embedded grant's check started by startIndependent;
// the error is for a cancelled ctx only.
func (x *verification) grant(done chan checked) (Check, error) {
	if x.receipt == nil {
		return notDecoded(CheckGrant), nil
	}
	c := <-done
	if c.err != nil {
		return Check{}, c.err
	}
	if c.reason == "" {
		x.grantPredicate = c.grant
	}
	return verdict(CheckGrant, c.reason), nil
}

func (x *verification) freshness() Check {
	if x.receipt == nil {
		return notDecoded(CheckFreshness)
	}
	return x.v.freshness("run", x.receipt.Finished, x.now, x.p.skew)
}

// freshness fails a receipt whose what (the run, a pack operation)
// finished after now by more than skew, or longer than the trust's
// maxAge before now.
func (v *Verifier) freshness(what string, finished, now time.Time, skew time.Duration) Check {
	switch {
	case finished.After(now.Add(skew)):
		return verdict(CheckFreshness, fmt.Sprintf("the %s finished at %s, after now (%s) by more than the clock skew of %v",
			what, finished.Format(time.RFC3339), now.UTC().Format(time.RFC3339), skew))
	case now.Sub(finished) > v.trust.MaxAge:
		return verdict(CheckFreshness, fmt.Sprintf("the %s finished at %s, %v before now (%s), more than maxAge %v",
			what, finished.Format(time.RFC3339), now.Sub(finished).Round(time.Second), now.UTC().Format(time.RFC3339), v.trust.MaxAge))
	}
	return passed(CheckFreshness, "")
}

func (x *verification) tier() Check {
	switch r := x.receipt; {
	case r == nil:
		return notDecoded(CheckTier)
	case !slices.Contains(x.v.trust.Tiers, r.EffectiveTier()):
		return verdict(CheckTier, fmt.Sprintf("tier %q (unqualified: %v) is not accepted; the trust accepts %s",
			r.EffectiveTier(), r.Profile.Unqualified, strings.Join(x.v.trust.Tiers, ", ")))
	}
	return passed(CheckTier, "")
}

// outputs records the outputs' check started by startIndependent, and
// whether the bytes were compared at all; the error is for a cancelled
// ctx only.
func (x *verification) outputs(done chan checked) (Check, bool, error) {
	switch {
	case x.p.outputs.skip:
		return verdict(CheckOutputs, notEvaluated+"the verifier chose to skip the outputs check, so the retained output bytes were not compared with the receipt"), false, nil
	case x.receipt == nil:
		return notDecoded(CheckOutputs), false, nil
	}
	c := <-done
	if c.err != nil {
		return Check{}, true, c.err
	}
	return verdict(CheckOutputs, c.reason), true, nil
}

func (x *verification) exitStatus() Check {
	switch r := x.receipt; {
	case r == nil:
		return notDecoded(CheckExitStatus)
	case !slices.Contains(x.v.trust.Statuses, r.Exit.Status):
		return verdict(CheckExitStatus, fmt.Sprintf("exit status %q (code %d) is not accepted; the trust accepts %s",
			r.Exit.Status, r.Exit.Code, strings.Join(x.v.trust.Statuses, ", ")))
	}
	return passed(CheckExitStatus, "")
}

func (x *verification) cleanup() Check {
	switch r := x.receipt; {
	case r == nil:
		return notDecoded(CheckCleanup)
	case !x.v.trust.RequireCleanVerified:
		return passed(CheckCleanup, "verified cleanup is not required by the trust file")
	case !r.Cleanup.Verified:
		var failed []string
		for _, s := range r.Cleanup.Steps {
			if !s.OK {
				failed = append(failed, fmt.Sprintf("%s (%s)", s.Name, s.Detail))
			}
		}
		reason := "cleanup was not verified"
		if len(failed) > 0 {
			reason += "; failed steps: " + strings.Join(failed, ", ")
		}
		return verdict(CheckCleanup, reason)
	}
	return passed(CheckCleanup, "")
}

func allPass(res *Result, names ...string) bool {
	for _, n := range names {
		c, ok := res.Check(n)
		if !ok || !c.OK {
			return false
		}
	}
	return true
}

// verifySignature checks the envelope's signatures against the trusted
// runner keys and returns the trusted key that signed it, or why none did.
// Every signature whose keyid names a trusted runner key must verify; at
// least one must. Signatures by other keys are ignored. When several
// trusted keys signed, the one the receipt names as its runner is returned.
func (v *Verifier) verifySignature(ctx context.Context, e *cdsse.Envelope, r *Receipt) (*TrustedKey, string) {
	return v.signedBy(v.checkSignatures(ctx, e), r)
}

// signatures is the outcome of cdsse.VerifySignatures under the trusted
// runner keys.
type signatures struct {
	signed []cdsse.Key
	others []string
	err    error
}

func (v *Verifier) checkSignatures(ctx context.Context, e *cdsse.Envelope) signatures {
	signed, others, err := cdsse.VerifySignatures(ctx, e, func(id string) (cdsse.Key, bool) {
		k, ok := v.runners[id]
		if !ok {
			return nil, false
		}
		return k.Key, true
	})
	return signatures{signed, others, err}
}

// signedBy names the trusted runner key that signed the receipt r (the
// one r names, when several did), or says why none did.
func (v *Verifier) signedBy(s signatures, r *Receipt) (*TrustedKey, string) {
	signed, others, err := s.signed, s.others, s.err
	var bad *cdsse.SignatureError
	if errors.As(err, &bad) {
		k := v.runners[bad.KeyID]
		return nil, fmt.Sprintf("the signature by trusted runner key %q (%s) does not verify", k.Name, k.ID())
	}
	if err != nil {
		named := make([]string, len(others))
		for i, id := range others {
			if ik, isIssuer := v.issuers[id]; isIssuer {
				named[i] = fmt.Sprintf("%s (issuer key %q, not trusted to sign receipts)", id, ik.Name)
			} else {
				named[i] = fmt.Sprintf("%q", cdsse.Clip(id))
			}
		}
		return nil, fmt.Sprintf("signed by %s, not by a trusted runner key", strings.Join(named, ", "))
	}
	verified := make([]*TrustedKey, len(signed))
	for i, k := range signed {
		verified[i] = v.runners[k.ID()]
	}
	if r != nil {
		for _, k := range verified {
			if k.ID() == r.Runner.ID {
				return k, ""
			}
		}
	}
	return verified[0], ""
}

// checkGrant verifies the embedded grant under the trusted issuer keys as
// of the run's start and compares the receipt's bindings with the grant's,
// field by field. It returns why the check fails, or "" if it passes; the
// error is for a cancelled ctx only.
// checked is one check's outcome: a failure reason ("" when it passes), or
// an error that stops verification.
type checked struct {
	reason string
	err    error
	grant  *grant.Predicate // the grant check's verified predicate
}

func (v *Verifier) checkGrant(ctx context.Context, r *Receipt) (*grant.Predicate, string, error) {
	g, err := v.grants.Verify(ctx, r.Grant.Envelope, r.Started)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, "", fmt.Errorf("evidence: verify: %w", cerr)
		}
		var ge *grant.Error
		if errors.As(err, &ge) && ge.Code == grant.CodeWrongIssuer {
			return nil, "the embedded grant is not signed by a trusted issuer key: " + ge.Detail, nil
		}
		return nil, "the embedded grant does not verify as of the run's start: " + err.Error(), nil
	}
	var bad []string
	if issuer := v.issuers[g.IssuerKeyID]; issuer == nil {
		bad = append(bad, fmt.Sprintf("issuer key %s is not trusted", g.IssuerKeyID))
	} else {
		if why := issuer.validAt(r.Started); why != "" {
			bad = append(bad, "issuer "+why)
		}
		if why := issuer.revokedAt(r.Started, v.trust.AcceptBeforeRevocation); why != "" {
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
	differ("phase.name", r.Phase.Name, strings.TrimPrefix(g.SubjectName, "phase/"))
	differ("phase.stage", r.Phase.Stage, gp.Stage)
	differ("phase.digest", r.Phase.Digest, g.SubjectDigest)
	differ("image", r.Image, gp.Image)
	differ("profile.runtime.version", r.Profile.Runtime.Version, gp.Runtime.Version)
	differ("profile.runtime.sha256", r.Profile.Runtime.SHA256, gp.Runtime.SHA256)
	differ("profile.os", r.Profile.OS, gp.Target.OS)
	differ("profile.arch", r.Profile.Arch, gp.Target.Arch)

	granted := make(map[string]grant.Input, len(gp.Inputs.Entries))
	for _, in := range gp.Inputs.Entries {
		granted[in.Target] = in
	}
	seen := make(map[string]bool, len(r.Inputs))
	for _, in := range r.Inputs {
		seen[in.Target] = true
		gi, ok := granted[in.Target]
		if !ok {
			bad = append(bad, fmt.Sprintf("inputs: the receipt has target %q, which the grant does not bind", cdsse.Clip(in.Target)))
			continue
		}
		differ(fmt.Sprintf("inputs[target=%q].source", cdsse.Clip(in.Target)), in.Source, gi.Source)
		differ(fmt.Sprintf("inputs[target=%q].digest", cdsse.Clip(in.Target)), in.Digest, gi.Digest)
	}
	for _, in := range gp.Inputs.Entries {
		if !seen[in.Target] {
			bad = append(bad, fmt.Sprintf("inputs: the grant binds target %q, which the receipt lacks", cdsse.Clip(in.Target)))
		}
	}

	var total int64
	for _, f := range r.Output.Files {
		if f.Size > math.MaxInt64-total { // sizes are validated non-negative; saturate
			total = math.MaxInt64
			break
		}
		total += f.Size
	}
	if total > gp.Output.MaxBytes {
		bad = append(bad, fmt.Sprintf("output.files: %d bytes, more than the grant's output.maxBytes %d", total, gp.Output.MaxBytes))
	}
	return &g.Predicate, strings.Join(bad, "; "), nil
}

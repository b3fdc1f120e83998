package grant

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	cdsse "github.com/custody-dev/custody/internal/dsse"
	"github.com/custody-dev/custody/keys"
)

// Verifier verifies grants against a fixed set of trusted issuer keys.
// A Verifier is safe for concurrent use.
type Verifier struct {
	trusted map[string]*keys.Verifier // by keys.KeyID
	retired map[string]retiredKey     // by keys.KeyID; also in trusted
	skew    time.Duration
	// distrusted are keys revoked since the verifier was made: they
	// verify nothing any more.
	distrusted sync.Map
}

// Distrust makes the verifier refuse every grant signed by key id from now
// on (a revoked issuer key), as signed by an untrusted key.
func (v *Verifier) Distrust(id string) { v.distrusted.Store(id, true) }

// retiredKey is a rotated-out issuer key's overlap window.
type retiredKey struct {
	at, until time.Time
	window    time.Duration // the longest a grant it signed may live
}

// Option configures a [Verifier].
type Option func(*Verifier)

// WithClockSkew tolerates clocks that differ by up to d: a grant is accepted
// from NotBefore-d until Expires+d. The default is no skew. A negative d is
// an error in [NewVerifier].
func WithClockSkew(d time.Duration) Option {
	return func(v *Verifier) { v.skew = d }
}

// WithRetired also accepts grants signed by k, an issuer key a rotation
// retired at retiredAt, during the overlap window: only grants whose
// validity began before the rotation, ends by retiredAt+window and lasts at
// most window (the longest grant custodyd issues, maxGrantTTL), and only
// until retiredAt+window. Anything else k signed is refused as
// CodeWrongIssuer.
//
// What this bounds, and what it does not: a grant's times are chosen by
// its signer, so a leaked retired key can still backdate a grant's start
// to before the rotation. What it cannot do is make a grant that lives
// past retiredAt+window, or longer than window, or that verifies after
// retiredAt+window. Until then a leaked retired key mints grants as the
// current key could; revoking it (custody revoke key issuer ID) ends that
// at once.
func WithRetired(k *keys.Verifier, retiredAt time.Time, window time.Duration) Option {
	return func(v *Verifier) {
		if k == nil {
			return
		}
		if v.retired == nil {
			v.retired = map[string]retiredKey{}
		}
		v.trusted[k.ID()] = k
		v.retired[k.ID()] = retiredKey{at: retiredAt, until: retiredAt.Add(window), window: window}
	}
}

// NewVerifier returns a verifier that accepts grants signed by any of the
// trusted issuer keys. The list must not be empty or hold nil; a key listed
// twice counts once.
func NewVerifier(trusted []*keys.Verifier, opts ...Option) (*Verifier, error) {
	if len(trusted) == 0 {
		return nil, errors.New("grant: no trusted issuer keys")
	}
	v := &Verifier{trusted: make(map[string]*keys.Verifier, len(trusted))}
	for i, k := range trusted {
		if k == nil {
			return nil, fmt.Errorf("grant: trusted issuer key %d is nil", i)
		}
		v.trusted[k.ID()] = k
	}
	for _, o := range opts {
		o(v)
	}
	if v.skew < 0 {
		return nil, fmt.Errorf("grant: negative clock skew %v", v.skew)
	}
	return v, nil
}

// Verify verifies envelope as a grant valid at now and returns it. A refused
// grant is an [*Error]; any other error (a cancelled ctx, a zero now) is not
// about the grant. See the package documentation for what is checked.
func (v *Verifier) Verify(ctx context.Context, envelope []byte, now time.Time) (*Grant, error) {
	if now.IsZero() {
		return nil, errors.New("grant: verify: zero time")
	}
	env, issuer, err := v.open(ctx, envelope)
	if err != nil {
		return nil, err
	}
	p, sub, err := decodeStatement(env.Payload)
	if err != nil {
		return nil, err
	}
	name, err := validate(p)
	if err != nil {
		return nil, Refuse(CodeMalformed, "predicate: %v", err)
	}
	if sub.Name != "phase/"+name {
		return nil, Refuse(CodeMalformed, "subject name %q is not %q", sub.Name, "phase/"+name)
	}
	if err := v.checkWindow(p.ID, p.NotBefore, p.Expires, now); err != nil {
		return nil, err
	}
	if err := v.checkRetired(p.ID, issuer, p.NotBefore, p.Expires, now); err != nil {
		return nil, err
	}
	return &Grant{
		Predicate:      *p,
		SubjectName:    sub.Name,
		SubjectDigest:  digestPrefix + sub.Digest["sha256"],
		IssuerKeyID:    issuer,
		EnvelopeDigest: envelopeDigest(envelope),
	}, nil
}

// open checks what every grant verification checks first: a live ctx, the
// envelope's size and strict form, and its signatures. It returns the
// decoded envelope and the key ID of the trusted issuer that signed it.
func (v *Verifier) open(ctx context.Context, envelope []byte) (*cdsse.Envelope, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", fmt.Errorf("grant: verify: %w", err)
	}
	if len(envelope) > MaxEnvelopeSize {
		return nil, "", Refuse(CodeMalformed, "envelope is %d bytes, more than the limit of %d", len(envelope), MaxEnvelopeSize)
	}
	env, err := decodeEnvelope(envelope)
	if err != nil {
		return nil, "", err
	}
	issuer, err := v.verifySignatures(ctx, env)
	if err != nil {
		return nil, "", err
	}
	return env, issuer, nil
}

// checkWindow refuses grant id unless notBefore <= now < expires, within
// the verifier's clock skew.
func (v *Verifier) checkWindow(id string, notBefore, expires, now time.Time) error {
	if now.Add(v.skew).Before(notBefore) {
		return Refuse(CodeNotYetValid, "grant %s is valid from %s, now is %s", id, notBefore.Format(timeFormat), now.Format(timeFormat))
	}
	if !now.Add(-v.skew).Before(expires) {
		return Refuse(CodeExpired, "grant %s expired at %s, now is %s", id, expires.Format(timeFormat), now.Format(timeFormat))
	}
	return nil
}

// checkRetired refuses grant id if issuer is a retired key and the grant
// began at or after its retirement, ends after the overlap window closes,
// lasts longer than the window, or, with a non-zero now, if the window has
// closed.
func (v *Verifier) checkRetired(id, issuer string, notBefore, expires, now time.Time) error {
	r, ok := v.retired[issuer]
	switch {
	case !ok:
		return nil
	case !notBefore.Before(r.at):
		return Refuse(CodeWrongIssuer, "grant %s is signed by issuer key %s, retired at %s, and valid only from %s: a retired key verifies only grants issued before its retirement",
			id, issuer, r.at.Format(timeFormat), notBefore.Format(timeFormat))
	case expires.After(r.until):
		return Refuse(CodeWrongIssuer, "grant %s is signed by issuer key %s, retired at %s, and expires at %s, after the overlap window closes at %s: no grant issued before the retirement lives that long",
			id, issuer, r.at.Format(timeFormat), expires.Format(timeFormat), r.until.Format(timeFormat))
	case expires.Sub(notBefore) > r.window:
		return Refuse(CodeWrongIssuer, "grant %s is signed by issuer key %s, retired at %s, and lasts %s, longer than the %s a grant may live",
			id, issuer, r.at.Format(timeFormat), expires.Sub(notBefore), r.window)
	case !now.IsZero() && !now.Before(r.until):
		return Refuse(CodeWrongIssuer, "grant %s is signed by issuer key %s, retired at %s, whose overlap window closed at %s",
			id, issuer, r.at.Format(timeFormat), r.until.Format(timeFormat))
	}
	return nil
}

// envelopeDigest is "sha256:<hex>" of the raw envelope bytes.
func envelopeDigest(envelope []byte) string {
	sum := sha256.Sum256(envelope)
	return digestPrefix + hex.EncodeToString(sum[:])
}

// verifySignatures checks the envelope's signatures against the trusted keys
// and returns the key ID of the trusted key that signed it. Every signature
// whose keyid names a trusted key must verify (else CodeTampered); at least
// one must (else CodeWrongIssuer). Signatures by other keys are ignored.
func (v *Verifier) verifySignatures(ctx context.Context, env *cdsse.Envelope) (string, error) {
	signed, _, err := cdsse.VerifySignatures(ctx, env, func(id string) (cdsse.Key, bool) {
		if _, gone := v.distrusted.Load(id); gone {
			return nil, false
		}
		k, ok := v.trusted[id]
		return k, ok
	})
	if cerr := ctx.Err(); cerr != nil {
		return "", fmt.Errorf("grant: verify: %w", cerr)
	}
	var bad *cdsse.SignatureError
	switch {
	case errors.As(err, &bad):
		return "", Refuse(CodeTampered, "signature by trusted key %s does not verify", bad.KeyID)
	case errors.Is(err, cdsse.ErrUntrusted):
		var untrusted []string
		for _, s := range env.Signatures {
			untrusted = append(untrusted, s.KeyID)
		}
		return "", Refuse(CodeWrongIssuer, "signed by %s, not by a trusted issuer key", quoteAll(untrusted))
	case err != nil:
		return "", Refuse(CodeTampered, "no signature verifies: %v", err)
	}
	return signed[0].ID(), nil
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", cdsse.Clip(s))
	}
	return strings.Join(q, ", ")
}

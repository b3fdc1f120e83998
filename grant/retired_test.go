package grant_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/keys"
)

// TestRetiredIssuerOverlap: after a rotation, a grant the retired issuer
// key signed before it still verifies during the overlap window (beside a
// grant the new key signs), and is refused once the window closed; a grant
// the retired key signed with a validity starting after its retirement
// (what a leaked retired key would mint) is refused at any time.
func TestRetiredIssuerOverlap(t *testing.T) {
	ctx := context.Background()
	f, next, v, retiredAt, window := retiredFixture(t) // f.issuer is the key being retired
	during := retiredAt.Add(time.Minute)
	if g, err := v.Verify(ctx, f.envelope, during); err != nil || g.IssuerKeyID != f.issuer.ID() {
		t.Fatalf("a grant issued before the rotation, during the window: %v", err)
	}
	fresh, err := grant.Mint(ctx, next, f.pred)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, fresh, during); err != nil {
		t.Fatalf("a grant the new key signed: %v", err)
	}

	var ge *grant.Error
	late := f.pred
	late.NotBefore = retiredAt
	late.Expires = retiredAt.Add(time.Hour)
	forged, err := grant.Mint(ctx, f.issuer, late)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, forged, during); !errors.As(err, &ge) || ge.Code != grant.CodeWrongIssuer {
		t.Fatalf("a grant the retired key signed for after its retirement: %v", err)
	}
	long := f.pred
	long.Expires = retiredAt.Add(window + time.Hour)
	longEnv, err := grant.Mint(ctx, f.issuer, long)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, longEnv, retiredAt.Add(window+time.Minute)); !errors.As(err, &ge) || ge.Code != grant.CodeWrongIssuer {
		t.Fatalf("a retired key's grant after the window closed: %v", err)
	}
	// Without the retired key, the old grant is what it was before this
	// change: signed by an untrusted key.
	bare, err := grant.NewVerifier([]*keys.Verifier{next.Verifier()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.Verify(ctx, f.envelope, during); !errors.As(err, &ge) || ge.Code != grant.CodeWrongIssuer {
		t.Fatalf("no overlap configured: %v", err)
	}
}

// TestRetiredIssuerBackdated: a grant's times are its signer's choice, so
// a leaked retired key can backdate a grant's start to before the
// rotation. Such a grant still verifies only if it ends within the overlap
// window and lasts no longer than the window (the residual: revoke the
// key to end it); one that ends after the window closes, or lasts longer
// than the window, is refused within the window.
func TestRetiredIssuerBackdated(t *testing.T) {
	ctx := context.Background()
	f, _, v, retiredAt, window := retiredFixture(t)
	during := retiredAt.Add(time.Hour)
	mint := func(notBefore, expires time.Time) []byte {
		t.Helper()
		p := f.pred
		p.NotBefore, p.Expires = notBefore, expires
		env, err := grant.Mint(ctx, f.issuer, p)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	// Within the bounds: verifies (what still holds for a leaked key).
	edge := mint(retiredAt.Add(-time.Second), retiredAt.Add(window-time.Second))
	if _, err := v.Verify(ctx, edge, during); err != nil {
		t.Fatalf("a grant ending within the window and lasting the window: %v", err)
	}
	var ge *grant.Error
	for name, env := range map[string][]byte{
		"ends after the window":    mint(retiredAt.Add(-time.Second), retiredAt.Add(window+time.Hour)),
		"lasts longer than window": mint(retiredAt.Add(-window-time.Hour), during.Add(time.Hour)),
	} {
		if _, err := v.Verify(ctx, env, during); !errors.As(err, &ge) || ge.Code != grant.CodeWrongIssuer || !strings.Contains(ge.Error(), "retired at") {
			t.Errorf("%s: %v, want CodeWrongIssuer naming the retirement", name, err)
		}
	}
}

// retiredFixture is a fixture whose issuer a rotation retired a minute
// after its grant's start, with a 24h window, and a verifier trusting the
// successor next and the retired key for that window.
func retiredFixture(t *testing.T) (f *fixture, next *keys.Signer, v *grant.Verifier, retiredAt time.Time, window time.Duration) {
	t.Helper()
	f = newFixture(t)
	next, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	retiredAt = f.pred.NotBefore.Add(time.Minute)
	window = 24 * time.Hour
	v, err = grant.NewVerifier([]*keys.Verifier{next.Verifier()}, grant.WithRetired(f.issuer.Verifier(), retiredAt, window))
	if err != nil {
		t.Fatal(err)
	}
	return f, next, v, retiredAt, window
}

package grant_test

import (
	"context"
	"errors"
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
	f := newFixture(t) // f.issuer is the key being retired
	next, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	retiredAt := f.pred.NotBefore.Add(time.Minute)
	window := 24 * time.Hour
	v, err := grant.NewVerifier([]*keys.Verifier{next.Verifier()}, grant.WithRetired(f.issuer.Verifier(), retiredAt, window))
	if err != nil {
		t.Fatal(err)
	}
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

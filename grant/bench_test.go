package grant_test

import (
	"context"
	"testing"

	"github.com/custody-dev/custody/grant"
)

func BenchmarkVerify(b *testing.B) {
	f := newFixture(b)
	ctx := context.Background()
	b.SetBytes(int64(len(f.envelope)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.verifier.Verify(ctx, f.envelope, validNow); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMint(b *testing.B) {
	f := newFixture(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := grant.Mint(ctx, f.issuer, f.pred); err != nil {
			b.Fatal(err)
		}
	}
}

package evidence_test

import (
	"context"
	"testing"

	"github.com/custody-dev/custody/evidence"
)

// BenchmarkVerify measures verification of a genuine receipt (four output
// files, a two-input grant): every check, with and without re-hashing the
// retained outputs.
func BenchmarkVerify(b *testing.B) {
	f := newFixture(b)
	v := newVerifier(b, f.trust(b, "", ""))
	for _, bc := range []struct {
		name string
		out  evidence.OutputsOption
	}{
		{"receipt-only", evidence.WithoutOutputsUnsafe()},
		{"with-outputs", evidence.WithOutputs(f.outDir)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p, err := evidence.NewPolicy(bc.out, evidence.WithNow(verifyNow))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.SetBytes(int64(len(f.env)))
			for b.Loop() {
				res, err := v.Verify(ctx, f.env, p)
				if err != nil || !res.OK {
					b.Fatalf("err %v, OK %v", err, res != nil && res.OK)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "receipts/s")
		})
	}
}

// BenchmarkSignReceipt measures building and signing a receipt.
func BenchmarkSignReceipt(b *testing.B) {
	f := newFixture(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := evidence.SignReceipt(ctx, f.runner, f.receipt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "receipts/s")
}

package evidence_test

import (
	"testing"
	"time"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/predicate"
)

// TestPooledReceiptIsV5: a receipt of a pooled run is signed as v5 and
// verifies, saying when its sandbox was prepared; v1 to v4 may not carry
// pooled, and v5 without it is refused.
func TestPooledReceiptIsV5(t *testing.T) {
	f := newFixture(t)
	tr := f.trust(t, "", "")
	pooled := &evidence.Pooled{Profile: "small", Sandbox: "abcd1234", PreparedAt: f.receipt.Started.Add(-time.Minute).UTC()}
	t.Run("signed and verified", func(t *testing.T) {
		r := f.receipt
		r.Pooled = pooled
		env := sign(t, f.runner, r)
		res := f.verify(t, tr, env)
		if !res.OK {
			t.Fatalf("a pooled receipt is refused:%s", describe(res))
		}
		if err := evidence.CheckReceiptSchema(env); err != nil {
			t.Fatalf("a pooled receipt fails custody schema receipt: %v", err)
		}
		if res.Receipt.PredicateType() != predicate.ReceiptV5 || res.Receipt.Pooled == nil || !res.Receipt.Pooled.PreparedAt.Equal(pooled.PreparedAt) {
			t.Fatalf("decoded as %s with pooled %+v", res.Receipt.PredicateType(), res.Receipt.Pooled)
		}
	})
	t.Run("cold stays v3", func(t *testing.T) {
		res := f.verify(t, tr, sign(t, f.runner, f.receipt))
		if !res.OK || res.Receipt.PredicateType() != predicate.ReceiptV3 || res.Receipt.Pooled != nil {
			t.Fatalf("a cold receipt: ok=%t %s%s", res.OK, res.Receipt.PredicateType(), describe(res))
		}
	})
	for _, tt := range []struct {
		name, ptype string
		pooled      *evidence.Pooled
		want        string
	}{
		{"pooled in v3", predicate.ReceiptV3, pooled, "has no pooled"},
		{"pooled in v4", predicate.ReceiptV4, pooled, "has no pooled"},
		{"v5 without pooled", predicate.ReceiptV5, nil, "pooled: missing"},
		{"prepared after start", predicate.ReceiptV5, &evidence.Pooled{Profile: "small", Sandbox: "abcd1234", PreparedAt: f.receipt.Started.Add(time.Hour).UTC()}, "after the run started"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := f.receipt
			r.Pooled = tt.pooled
			pl, err := evidence.EncodeReceiptAs(tt.ptype, &r)
			if err != nil {
				t.Fatal(err)
			}
			res := f.verify(t, tr, signPayload(t, pl, f.runner))
			wantCheck(t, res, "statement", false, tt.want)
		})
	}
}

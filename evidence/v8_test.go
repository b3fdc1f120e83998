package evidence_test

import (
	"testing"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/predicate"
)

// TestAuthorizedReceiptIsV8: a receipt of a run whose grant custodyd
// minted under a standing authorization is signed as v8, naming the
// authorization and the policy digest, and verifies and fits the schema,
// with or without unobserved members; authorization in v7 or before, v8
// without it, and a malformed name or digest are refused. Receipts without
// it keep their versions.
func TestAuthorizedReceiptIsV8(t *testing.T) {
	f := newFixture(t)
	tr := f.trust(t, "", "")
	const polDig = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	authorized := func(r evidence.Receipt) evidence.Receipt {
		r.Authorization = &evidence.AuthorizationRef{Name: "agent-loop", PolicyDigest: polDig}
		return r
	}
	t.Run("signed and verified", func(t *testing.T) {
		for _, unobserved := range []bool{false, true} {
			r := authorized(f.receipt)
			if unobserved {
				r.Exit = evidence.Exit{Status: evidence.StatusFailed, Code: -1}
				r.Usage.CPUTimeMillis = -1
				r.Unobserved = []string{"exit.code", "usage.cpuTimeMillis"}
			}
			env := sign(t, f.runner, r)
			res := f.verify(t, tr, env)
			if !res.OK {
				t.Fatalf("an authorized receipt (unobserved %t) is not authentic:%s", unobserved, describe(res))
			}
			if err := evidence.CheckReceiptSchema(env); err != nil {
				t.Fatalf("an authorized receipt fails the receipt schema: %v", err)
			}
			a := res.Receipt.Authorization
			if got := res.Receipt.PredicateType(); got != predicate.ReceiptV8 || a == nil || a.Name != "agent-loop" || a.PolicyDigest != polDig {
				t.Fatalf("decoded as %s with authorization %+v", got, a)
			}
		}
	})
	t.Run("without an authorization stays v3", func(t *testing.T) {
		res := f.verify(t, tr, sign(t, f.runner, f.receipt))
		if !res.OK || res.Receipt.PredicateType() != predicate.ReceiptV3 || res.Receipt.Authorization != nil {
			t.Fatalf("a hand-granted receipt: ok=%t %s%s", res.OK, res.Receipt.PredicateType(), describe(res))
		}
	})
	for _, tt := range []struct {
		name, ptype string
		edit        func(*evidence.Receipt)
		want        string
	}{
		{"authorization in v7", predicate.ReceiptV7, func(r *evidence.Receipt) {
			r.Exit = evidence.Exit{Status: evidence.StatusFailed, Code: -1}
			r.Unobserved = []string{"exit.code"}
		}, "has no authorization"},
		{"authorization in v3", predicate.ReceiptV3, func(*evidence.Receipt) {}, "has no authorization"},
		{"v8 without authorization", predicate.ReceiptV8, func(r *evidence.Receipt) { r.Authorization = nil }, "authorization: missing"},
		{"bad name", predicate.ReceiptV8, func(r *evidence.Receipt) { r.Authorization.Name = "Agent Loop" }, "is not an authorization name"},
		{"bad digest", predicate.ReceiptV8, func(r *evidence.Receipt) { r.Authorization.PolicyDigest = "sha256:xyz" }, "authorization.policyDigest"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := authorized(f.receipt)
			tt.edit(&r)
			pl, err := evidence.EncodeReceiptAs(tt.ptype, &r)
			if err != nil {
				t.Fatal(err)
			}
			res := f.verify(t, tr, signPayload(t, pl, f.runner))
			wantCheck(t, res, "statement", false, tt.want)
		})
	}
}

package evidence_test

import (
	"testing"
	"time"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/predicate"
)

// v6Egress is a run's egress as custody records it now: one allowed
// tunnel, one brokered request, and refusals of which two are listed.
func v6Egress(at time.Time) *evidence.Egress {
	return &evidence.Egress{
		Allow: []string{"allowed.example:443"}, Inspected: []string{"allowed.example:443"},
		Brokered: []evidence.BrokeredCredential{{Name: "provider", Destination: "api.example:443", Requests: []string{"POST /v1/messages"}}},
		Decisions: []evidence.EgressDecision{
			{At: at, Via: "connect", Destination: "junk.example:443", Code: "not-allowlisted"},
			{At: at, Via: "connect", Destination: "allowed.example:443", Allowed: true, Code: "allowed"},
			{At: at, Via: "gateway", Destination: "api.example:443", Allowed: true, Code: "credential-withheld", Credential: "provider"},
			{At: at, Via: "connect", Destination: "junk.example:443", Code: "not-allowlisted"},
		},
		Refused: &evidence.EgressRefusals{Total: 2000, Omitted: 1998, By: []evidence.EgressRefusalCount{{Destination: "junk.example:443", Code: "not-allowlisted", Count: 2000}}},
		Bytes:   10,
	}
}

// TestEgressReceiptIsV6: a run with restricted egress is signed as v6,
// which verifies and meets the schema; a v6 shape under v4, a v6 without
// its refusal counts or with counts that do not add up, and v4's dropped
// in v6 are refused; a v4 receipt of the old shape still verifies.
func TestEgressReceiptIsV6(t *testing.T) {
	f := newFixture(t)
	tr := f.trust(t, "", "")
	at := f.receipt.Started.Add(time.Second).UTC()
	t.Run("signed and verified", func(t *testing.T) {
		r := f.receipt
		r.Egress = v6Egress(at)
		env := sign(t, f.runner, r)
		res := f.verify(t, tr, env)
		if !res.OK || res.Receipt.PredicateType() != predicate.ReceiptV6 {
			t.Fatalf("an egress receipt: ok=%t %s%s", res.OK, res.Receipt.PredicateType(), describe(res))
		}
		if err := evidence.CheckReceiptSchema(env); err != nil {
			t.Fatalf("a v6 receipt fails the receipt schema: %v", err)
		}
	})
	t.Run("v4 of the old shape still verifies", func(t *testing.T) {
		r := f.receipt
		r.Egress = &evidence.Egress{Allow: []string{"allowed.example:443"}, Brokered: []evidence.BrokeredCredential{{Name: "provider", Destination: "api.example:443"}},
			Decisions: []evidence.EgressDecision{{At: at, Via: "connect", Destination: "allowed.example:443", Allowed: true, Code: "allowed"}}, Dropped: 3}
		pl, err := evidence.EncodeReceiptAs(predicate.ReceiptV4, &r)
		if err != nil {
			t.Fatal(err)
		}
		env := signPayload(t, pl, f.runner)
		if res := f.verify(t, tr, env); !res.OK || res.Receipt.PredicateType() != predicate.ReceiptV4 {
			t.Fatalf("a v4 receipt: ok=%t%s", res.OK, describe(res))
		}
		if err := evidence.CheckReceiptSchema(env); err != nil {
			t.Fatalf("a v4 receipt fails the receipt schema: %v", err)
		}
	})
	for _, tt := range []struct {
		name, ptype string
		edit        func(e *evidence.Egress)
		want        string
	}{
		{"v6 shape in v4", predicate.ReceiptV4, func(*evidence.Egress) {}, "has no refused"},
		{"v6 without refused", predicate.ReceiptV6, func(e *evidence.Egress) { e.Refused = nil }, "egress.refused: missing"},
		{"v6 with dropped", predicate.ReceiptV6, func(e *evidence.Egress) { e.Dropped = 5 }, "egress.dropped"},
		{"counts that hide a listed refusal", predicate.ReceiptV6, func(e *evidence.Egress) { e.Refused.Omitted = 1999 }, "do not agree"},
		{"counts that do not add up", predicate.ReceiptV6, func(e *evidence.Egress) { e.Refused.By[0].Count = 10 }, "do not agree"},
		{"v6 without egress", predicate.ReceiptV6, nil, "egress: missing"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := f.receipt
			if tt.edit != nil {
				r.Egress = v6Egress(at)
				tt.edit(r.Egress)
			}
			pl, err := evidence.EncodeReceiptAs(tt.ptype, &r)
			if err != nil {
				t.Fatal(err)
			}
			res := f.verify(t, tr, signPayload(t, pl, f.runner))
			wantCheck(t, res, "statement", false, tt.want)
		})
	}
}

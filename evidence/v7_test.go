package evidence_test

import (
	"testing"
	"time"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/predicate"
)

// TestUnobservedReceiptIsV7: a receipt of a run whose exit code and usage
// were not observed is signed as v7, naming them in unobserved with -1,
// and verifies (pooled or not); an unobserved member in v6 or before, a
// negative usage there, a listed member that holds a value, an unlisted
// negative, an unknown name, an unsorted list and a signal beside an
// unobserved code are refused. v3 receipts keep verifying.
func TestUnobservedReceiptIsV7(t *testing.T) {
	f := newFixture(t)
	tr := f.trust(t, "", "")
	unobserved := func(r evidence.Receipt) evidence.Receipt {
		r.Exit = evidence.Exit{Status: evidence.StatusFailed, Code: -1}
		r.Usage = evidence.Usage{PeakMemoryBytes: 5 << 20, CPUTimeMillis: -1, WallMillis: 1200, OOMKills: -1}
		r.Unobserved = []string{"exit.code", "usage.cpuTimeMillis", "usage.oomKills"}
		return r
	}
	t.Run("signed and verified", func(t *testing.T) {
		for _, pooled := range []*evidence.Pooled{nil, {Profile: "small", Sandbox: "abcd1234", PreparedAt: f.receipt.Started.Add(-time.Minute).UTC()}} {
			r := unobserved(f.receipt)
			r.Pooled = pooled
			env := sign(t, f.runner, r)
			res := f.verify(t, tr, env)
			if !res.OK {
				t.Fatalf("an unobserved receipt (pooled %v) is not authentic:%s", pooled != nil, describe(res))
			}
			if err := evidence.CheckReceiptSchema(env); err != nil {
				t.Fatalf("an unobserved receipt fails custody schema receipt: %v", err)
			}
			if got := res.Receipt.PredicateType(); got != predicate.ReceiptV7 || len(res.Receipt.Unobserved) != 3 || res.Receipt.Exit.Code != -1 {
				t.Fatalf("decoded as %s with unobserved %v, exit %+v", got, res.Receipt.Unobserved, res.Receipt.Exit)
			}
		}
	})
	t.Run("observed stays v3", func(t *testing.T) {
		res := f.verify(t, tr, sign(t, f.runner, f.receipt))
		if !res.OK || res.Receipt.PredicateType() != predicate.ReceiptV3 || res.Receipt.Unobserved != nil {
			t.Fatalf("an observed receipt: ok=%t %s%s", res.OK, res.Receipt.PredicateType(), describe(res))
		}
	})
	for _, tt := range []struct {
		name, ptype string
		edit        func(*evidence.Receipt)
		want        string
	}{
		{"unobserved in v5", predicate.ReceiptV5, func(r *evidence.Receipt) {
			r.Pooled = &evidence.Pooled{Profile: "small", Sandbox: "abcd1234", PreparedAt: r.Started.Add(-time.Minute).UTC()}
		}, "has no unobserved"},
		{"unobserved in v3", predicate.ReceiptV3, func(*evidence.Receipt) {}, "has no unobserved"},
		{"negative usage in v3", predicate.ReceiptV3, func(r *evidence.Receipt) { r.Unobserved = nil; r.Exit.Code = 1 }, "usage.cpuTimeMillis: -1 is negative"},
		{"v7 without unobserved", predicate.ReceiptV7, func(r *evidence.Receipt) {
			r.Unobserved, r.Exit.Code, r.Usage.CPUTimeMillis, r.Usage.OOMKills = nil, 1, 3, 0
		}, "unobserved: empty"},
		{"listed but observed", predicate.ReceiptV7, func(r *evidence.Receipt) { r.Usage.CPUTimeMillis = 0 }, "an unobserved member holds -1"},
		{"unlisted negative", predicate.ReceiptV7, func(r *evidence.Receipt) { r.Usage.WallMillis = -1 }, "usage.wallMillis: -1 is negative"},
		{"unknown name", predicate.ReceiptV7, func(r *evidence.Receipt) { r.Unobserved = append(r.Unobserved, "usage.zzz") }, "is not one of"},
		{"unsorted", predicate.ReceiptV7, func(r *evidence.Receipt) {
			r.Unobserved = []string{"usage.oomKills", "exit.code", "usage.cpuTimeMillis"}
		}, "is not after"},
		{"signal with an unobserved code", predicate.ReceiptV7, func(r *evidence.Receipt) { r.Exit.Signal = "SIGKILL" }, "with an unobserved exit code"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := unobserved(f.receipt)
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

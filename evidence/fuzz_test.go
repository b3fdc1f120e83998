package evidence_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/predicate"
)

// FuzzVerify checks that Verify never fails outright on any input, always
// records every check, and finds authentic only the payloads that the
// golden runner key really signed. The seed corpus in testdata/fuzz holds
// the golden receipts and near misses (see writeGolden).
func FuzzVerify(f *testing.F) {
	tr, envs := golden(f)
	v := newVerifier(f, tr)
	p, err := evidence.NewPolicy(evidence.WithoutOutputsUnsafe(), evidence.WithNow(verifyNow))
	if err != nil {
		f.Fatal(err)
	}
	genuine := map[string]bool{}
	for _, env := range envs {
		f.Add(env)
		genuine[string(payloadOf(f, env))] = true
	}
	f.Add([]byte(`{"payloadType":"application/vnd.in-toto+json","payload":"","signatures":[]}`))

	f.Fuzz(func(t *testing.T, env []byte) {
		res, err := v.Verify(context.Background(), env, p)
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		var names []string
		for _, c := range res.Checks {
			names = append(names, c.Name)
			if !c.OK && c.Reason == "" {
				t.Fatalf("check %s failed without a reason", c.Name)
			}
		}
		if !slices.Equal(names, allChecks) {
			t.Fatalf("checks %v", names)
		}
		if res.Promotable && !res.OK {
			t.Fatal("promotable but not OK")
		}
		if (res.Receipt != nil) != res.OK {
			t.Fatalf("OK=%v but Receipt set=%v", res.OK, res.Receipt != nil)
		}
		if !res.OK {
			return
		}
		var e struct{ Payload string }
		if err := json.Unmarshal(env, &e); err != nil {
			t.Fatalf("authentic, but not JSON: %v", err)
		}
		payload, err := base64.StdEncoding.DecodeString(e.Payload)
		if err != nil || !genuine[string(payload)] {
			t.Fatalf("authentic, but the payload is not one the runner signed:\n%s", payload)
		}
	})
}

// FuzzReceiptStatement holds the fast decoding of a receipt statement to
// the explained one: both accept the same payloads, with the same result.
func FuzzReceiptStatement(f *testing.F) {
	_, envs := golden(f)
	for _, env := range envs {
		f.Add(payloadOf(f, env))
	}
	// A pooled run's receipt (v5), and its pooled record in a v3.
	fx := newFixture(f)
	r := fx.receipt
	r.Pooled = &evidence.Pooled{Profile: "small", Sandbox: "abcd1234", PreparedAt: r.Started.Add(-time.Minute).UTC()}
	for _, pt := range []string{predicate.ReceiptV5, predicate.ReceiptV3} {
		pl, err := evidence.EncodeReceiptAs(pt, &r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(pl)
	}
	// A restricted-egress run's receipt (v6), and its egress in a v4.
	r = fx.receipt
	r.Egress = v6Egress(r.Started.Add(time.Second).UTC())
	for _, pt := range []string{predicate.ReceiptV6, predicate.ReceiptV4} {
		pl, err := evidence.EncodeReceiptAs(pt, &r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(pl)
	}
	// A pooled receipt with unobserved members (v7), and the same list in a
	// v5.
	r = fx.receipt
	r.Pooled = &evidence.Pooled{Profile: "small", Sandbox: "abcd1234", PreparedAt: r.Started.Add(-time.Minute).UTC()}
	r.Exit = evidence.Exit{Status: evidence.StatusFailed, Code: -1}
	r.Usage.CPUTimeMillis, r.Unobserved = -1, []string{"exit.code", "usage.cpuTimeMillis"}
	for _, pt := range []string{predicate.ReceiptV7, predicate.ReceiptV5} {
		pl, err := evidence.EncodeReceiptAs(pt, &r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(pl)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		if err := evidence.DecodePathsAgree(payload); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzParseTrust checks that ParseTrust never panics and that whatever it
// accepts is a usable, consistent trust.
func FuzzParseTrust(f *testing.F) {
	f.Add([]byte(exampleTrust))
	f.Add([]byte("apiVersion: custody.dev/v1alpha1\nkind: Trust\nrunners: []\nissuers: []\n"))
	baseDir := "testdata"
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := evidence.ParseTrust(data, baseDir)
		if err != nil {
			return
		}
		if len(tr.Runners) == 0 || len(tr.Issuers) == 0 {
			t.Fatal("accepted a trust without runners or issuers")
		}
		ids := map[string]bool{}
		for _, k := range append(slices.Clone(tr.Runners), tr.Issuers...) {
			if k.Key == nil || k.Name == "" {
				t.Fatalf("key %+v", k)
			}
			if ids[k.ID()] {
				t.Fatalf("key %s listed twice", k.ID())
			}
			ids[k.ID()] = true
			if !k.NotBefore.IsZero() && !k.NotAfter.IsZero() && !k.NotBefore.Before(k.NotAfter) {
				t.Fatalf("empty window %v..%v", k.NotBefore, k.NotAfter)
			}
			for _, tm := range []time.Time{k.NotBefore, k.NotAfter, k.RevokedAt} {
				if !tm.IsZero() && tm.Location() != time.UTC {
					t.Fatalf("time %v not in UTC", tm)
				}
			}
		}
		if tr.MaxAge <= 0 || tr.ReceiptsRetention <= 0 || tr.OutputsRetention <= 0 {
			t.Fatalf("durations %v %v %v", tr.MaxAge, tr.ReceiptsRetention, tr.OutputsRetention)
		}
		if len(tr.Tiers) == 0 || len(tr.Statuses) == 0 {
			t.Fatal("no tiers or statuses")
		}
		for _, s := range tr.Tiers {
			if s != evidence.TierProduction && s != evidence.TierDevelopment {
				t.Fatalf("tier %q", s)
			}
		}
		for _, s := range tr.Statuses {
			if !slices.Contains([]string{"ok", "failed", "timeout", "oom", "cancelled"}, s) {
				t.Fatalf("status %q", s)
			}
		}
		if tr.Digest != digestOf(string(data)) {
			t.Fatalf("digest %s", tr.Digest)
		}
		if _, err := evidence.NewVerifier(tr); err != nil {
			t.Fatalf("NewVerifier refuses an accepted trust: %v", err)
		}
		// Parsing is deterministic.
		again, err := evidence.ParseTrust(data, baseDir)
		if err != nil || again.Digest != tr.Digest || len(again.Runners) != len(tr.Runners) {
			t.Fatalf("second parse differs: %v", err)
		}
	})
}

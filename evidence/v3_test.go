package evidence_test

import (
	"strings"
	"testing"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/predicate"
)

// TestV2ShapesStillVerify: the v2 shapes a v2 runner signed keep verifying
// now that configSha256 is written only by v1 and v2 (a member present even
// when empty), and the ones v2 always refused stay refused.
func TestV2ShapesStillVerify(t *testing.T) {
	f := newFixture(t)
	tr := f.trust(t, "", "")
	v2 := func(change func(p *evidence.RuntimeProfile)) []byte {
		t.Helper()
		r := f.receipt
		r.Profile.Identity, r.Profile.Evidence = nil, nil
		config := strings.Repeat("c", 64)
		r.Profile.ConfigSHA256 = &config
		r.Profile.GateSHA256, r.Profile.SeccompSHA256 = strings.Repeat("a", 64), strings.Repeat("b", 64)
		change(&r.Profile)
		pl, err := evidence.EncodeReceiptAs(predicate.ReceiptV2, &r)
		if err != nil {
			t.Fatal(err)
		}
		// The fast and explained decodings agree on every shape.
		if err := evidence.DecodePathsAgree(pl); err != nil {
			t.Fatal(err)
		}
		return signPayload(t, pl, f.runner)
	}
	for _, tt := range []struct {
		name   string
		change func(p *evidence.RuntimeProfile)
		want   string // "" for a receipt that verifies
	}{
		{"oci", func(*evidence.RuntimeProfile) {}, ""},
		{"backend without an OCI config", func(p *evidence.RuntimeProfile) {
			empty := ""
			p.Backend, p.ConfigSHA256, p.GateSHA256, p.SeccompSHA256 = "docker", &empty, "", ""
		}, ""},
		{"oci with an empty config digest", func(p *evidence.RuntimeProfile) { empty := ""; p.ConfigSHA256 = &empty }, "profile.configSha256"},
		{"no configSha256 member", func(p *evidence.RuntimeProfile) { p.ConfigSHA256 = nil }, "profile.configSha256: missing"},
		{"v3 evidence in v2", func(p *evidence.RuntimeProfile) { p.Evidence = map[string]string{"gate": strings.Repeat("a", 64)} }, "has no profile.identity or profile.evidence"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := f.verify(t, tr, v2(tt.change))
			if tt.want == "" {
				if !res.OK {
					t.Fatalf("a v2 receipt is refused:%s", describe(res))
				}
				if res.Receipt.PredicateType() != predicate.ReceiptV2 {
					t.Fatalf("decoded as %s", res.Receipt.PredicateType())
				}
				return
			}
			wantCheck(t, res, "statement", false, tt.want)
		})
	}
}

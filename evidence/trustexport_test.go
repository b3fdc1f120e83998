package evidence_test

import (
	"testing"
	"time"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/keys"
)

// An exported trust file parses back to the same keys, age and tiers; a
// key that is not a public key, or two keys of one name, export nothing.
func TestExportTrust(t *testing.T) {
	runner, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	out, err := evidence.ExportTrust(evidence.Export{
		Runners: []evidence.ExportKey{{Name: "r", PEM: string(runner.PublicPEM())}},
		Issuers: []evidence.ExportKey{{Name: "i", PEM: string(issuer.PublicPEM())}},
		MaxAge:  90 * time.Minute,
		Tiers:   []string{"development"},
	})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := evidence.ParseTrust(out, t.TempDir())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(tr.Runners) != 1 || tr.Runners[0].ID() != runner.Verifier().ID() || len(tr.Issuers) != 1 || tr.Issuers[0].ID() != issuer.Verifier().ID() {
		t.Fatalf("keys did not survive the export:\n%s", out)
	}
	if tr.MaxAge != 90*time.Minute || len(tr.Tiers) != 1 || tr.Tiers[0] != "development" {
		t.Fatalf("maxAge %v tiers %v, want 1h30m [development]:\n%s", tr.MaxAge, tr.Tiers, out)
	}
	for name, e := range map[string]evidence.Export{
		"not a key":      {Runners: []evidence.ExportKey{{Name: "r", PEM: "hello"}}, Issuers: []evidence.ExportKey{{Name: "i", PEM: string(issuer.PublicPEM())}}},
		"duplicate name": {Runners: []evidence.ExportKey{{Name: "r", PEM: string(runner.PublicPEM())}, {Name: "r", PEM: string(issuer.PublicPEM())}}, Issuers: []evidence.ExportKey{{Name: "i", PEM: string(issuer.PublicPEM())}}},
		"unknown tier":   {Runners: []evidence.ExportKey{{Name: "r", PEM: string(runner.PublicPEM())}}, Tiers: []string{"staging"}},
	} {
		if out, err := evidence.ExportTrust(e); err == nil {
			t.Errorf("%s: exported:\n%s", name, out)
		}
	}
}

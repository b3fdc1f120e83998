package matrix

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/custody-dev/custody/keys"
)

// FuzzParse feeds row files and disabled lists to the parsers: nothing may
// panic, and a row that verifies under the fuzz key must re-encode to the
// exact statement it carries.
func FuzzParse(f *testing.F) {
	k, err := keys.Generate()
	if err != nil {
		f.Fatal(err)
	}
	q, err := NewQualification(testPlatform(), Info{Tier: TierProduction, CustodyVersion: "1", SuiteVersion: "1",
		RunnerID: k.ID(), QualifiedAt: time.Unix(1e9, 0), Checks: []Check{{Family: "input", Name: "a", Case: CaseRefusal, Passed: true}}})
	if err != nil {
		f.Fatal(err)
	}
	row, err := Sign(context.Background(), k, q)
	if err != nil {
		f.Fatal(err)
	}
	good, _ := json.Marshal(row)
	f.Add(good)
	f.Add([]byte(`{"apiVersion":"custody.dev/v1alpha1","kind":"QualificationRow","envelope":{"payloadType":"x","payload":"","signatures":[]},"runnerPublicKey":""}`))
	f.Add([]byte("oci reason\nsha256:00\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = ParseDisabled(data)
		r, err := ParseRow(data)
		if err != nil {
			return
		}
		_, _ = r.DecodeUnverified()
		v, err := r.Verify(context.Background(), []*keys.Verifier{k.Verifier()})
		if err != nil {
			return
		}
		if _, err := v.Statement(); err != nil {
			t.Fatalf("a verified row does not re-encode: %v", err)
		}
	})
}

package matrix

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
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
	// A row as a runner signed verdicts handed to it, and one it measured.
	info := Info{Tier: TierProduction, CustodyVersion: "1", SuiteVersion: "1",
		RunnerID: k.ID(), QualifiedAt: time.Unix(1e9, 0), Checks: []Check{{Family: "input", Name: "a", Case: CaseRefusal, Passed: true}}}
	for _, m := range []*Measured{nil, measured(time.Unix(1e9, 0))} {
		info.Measured = m
		q, err := NewQualification(testPlatform(), info)
		if err != nil {
			f.Fatal(err)
		}
		row, err := Sign(context.Background(), k, q)
		if err != nil {
			f.Fatal(err)
		}
		good, _ := json.Marshal(row)
		f.Add(good)
	}
	f.Add([]byte(`{"apiVersion":"custody.dev/v1alpha1","kind":"QualificationRow","envelope":{"payloadType":"x","payload":"","signatures":[]},"runnerPublicKey":""}`))
	f.Add([]byte("oci reason\nsha256:00\n"))
	f.Add([]byte("firecracker jailer CVE\nOCI\n"))
	// A row as the code before backend matching wrote it.
	old, err := os.ReadFile(filepath.Join("testdata", "oci-row-before-backend-match.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(old)
	// The same row for a second backend: a platform the fuzzer can mutate
	// the backend name of.
	fc := testPlatform()
	fc.Backend = "firecracker"
	q2, err := NewQualification(fc, info)
	if err != nil {
		f.Fatal(err)
	}
	row2, err := Sign(context.Background(), k, q2)
	if err != nil {
		f.Fatal(err)
	}
	second, _ := json.Marshal(row2)
	f.Add(second)
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

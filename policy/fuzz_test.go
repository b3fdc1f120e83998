package policy_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/policy"
)

// FuzzParse checks that Parse never panics, and that whatever it accepts is
// valid and survives a JSON round trip unchanged.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile(filepath.Join("testdata", "example-policy.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add([]byte(valid))
	f.Add([]byte(valid + "tiers: {development: false}\n"))
	f.Add([]byte(valid + "x: &a 1\ny: *a\n"))
	f.Add([]byte(valid + "---\n{}\n"))

	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := policy.Parse(data)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("Parse accepted a policy that Validate refuses: %v", err)
		}
		j1, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var q policy.Policy
		if err := json.Unmarshal(j1, &q); err != nil {
			t.Fatalf("unmarshal %s: %v", j1, err)
		}
		if err := q.Validate(); err != nil {
			t.Fatalf("round trip made the policy invalid: %v\n%s", err, j1)
		}
		j2, err := json.Marshal(&q)
		if err != nil {
			t.Fatalf("marshal again: %v", err)
		}
		if !bytes.Equal(j1, j2) {
			t.Fatalf("JSON not stable:\n%s\n%s", j1, j2)
		}
	})
}

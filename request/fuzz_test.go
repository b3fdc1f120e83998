package request_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/request"
)

// FuzzParse checks that Parse never panics, and that whatever it accepts is
// valid and survives a JSON round trip unchanged (plans are digested as JSON,
// so the encoding must be stable), and that Canonical is that JSON and
// Digest its hash.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile(filepath.Join("testdata", "example-phase.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add([]byte(valid))
	f.Add([]byte(valid + "tmp: {maxBytes: 1.5Gi}\nenv: {A: \"\\u00e9\", B: '2001-12-14'}\n"))
	f.Add([]byte(valid + "a: &a [x]\nb: *a\n"))
	f.Add([]byte(valid + "---\n{}\n"))
	f.Add([]byte(valid + "toolchain: go1.26\ncredentials: [registry-token, GH_TOKEN]\n"))
	f.Add([]byte(valid + "credentials: [a, a]\n"))
	f.Add([]byte(strings.Replace(valid, "stage: build", "stage: test", 1) + "verifier: true\n"))
	f.Add([]byte(valid + "verifier: true\n"))
	f.Add([]byte(valid + "network: {egress: [proxy.golang.org:443, sum.golang.org:443]}\n"))
	f.Add([]byte(valid + "network: {egress: ['*.x.y:1', '10.0.0.1:80']}\n"))
	f.Add([]byte("{apiVersion: custody.dev/v1alpha1, kind: Phase, resources: {cpu: 1e308}}"))

	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := request.Parse(data)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("Parse accepted a request that Validate refuses: %v", err)
		}
		j1, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var q request.Phase
		if err := json.Unmarshal(j1, &q); err != nil {
			t.Fatalf("unmarshal %s: %v", j1, err)
		}
		if err := q.Validate(); err != nil {
			t.Fatalf("round trip made the request invalid: %v\n%s", err, j1)
		}
		j2, err := json.Marshal(&q)
		if err != nil {
			t.Fatalf("marshal again: %v", err)
		}
		if !bytes.Equal(j1, j2) {
			t.Fatalf("JSON not stable:\n%s\n%s", j1, j2)
		}
		c, err := p.Canonical()
		if err != nil || !bytes.Equal(c, j1) {
			t.Fatalf("Canonical = %s, %v; want %s", c, err, j1)
		}
		d1, err1 := p.Digest()
		d2, err2 := q.Digest()
		if err1 != nil || err2 != nil || d1 != d2 || len(d1) != len("sha256:")+64 {
			t.Fatalf("Digest = %q, %v; after a round trip %q, %v", d1, err1, d2, err2)
		}
	})
}

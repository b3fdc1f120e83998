package policy_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/policy"
)

// FuzzParse checks that Parse never panics, that whatever it accepts is
// valid and survives a JSON round trip unchanged, and that it grants exactly
// what it lists.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile(filepath.Join("testdata", "example-policy.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add([]byte(valid))
	f.Add([]byte(valid + "tiers: {development: false}\n"))
	f.Add([]byte(valid + "verifierRoots: [/srv/hidden, /srv/hidden, relative, /srv/x/../y]\n"))
	f.Add([]byte(valid + "x: &a 1\ny: *a\n"))
	f.Add([]byte(valid + "---\n{}\n"))
	f.Add([]byte(withGrants))
	f.Add([]byte(withPacks))
	f.Add([]byte(withPool))
	f.Add([]byte(withAuthorization))
	f.Add([]byte(withGrants + "authorizations: [{name: a, actor: ci-bot, stages: [run], images: [sha256:00], limits: {grantsPerMinute: 0, concurrentRuns: 1}, notBefore: x, notAfter: y}]\n"))
	f.Add([]byte(valid + "egress: {stages: {generate: ['a.example:443']}, inspect: ['a.example:443', 'b.example:443']}\n" +
		"credentials: {t: {file: /s, destination: a.example:443, header: X, stages: [generate], requests: ['POST /v1/messages', 'GET /', 'TRACE /', 'GET /a/../b']}}\n"))
	f.Add([]byte(valid + "inputRoots: [/srv/work, /]\nactors: [{name: a, stages: [build, build]}]\n"))

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
		// Every listed grant is granted. (Only the first few of each list
		// are checked, as each check scans the whole list.)
		for _, a := range first(p.Actors) {
			for _, s := range a.Stages {
				if !p.ActorMayRun(a.Name, s) {
					t.Fatalf("ActorMayRun(%q, %q) = false", a.Name, s)
				}
			}
			if p.ActorMayRun(a.Name, "") {
				t.Fatalf("ActorMayRun(%q, \"\") = true", a.Name)
			}
		}
		for _, r := range first(p.InputRoots) {
			if !p.InputAllowed(r) || !p.InputAllowed(r+"/x") || p.InputAllowed(r+"/") || p.InputAllowed(r+"/..") {
				t.Fatalf("InputAllowed is wrong about root %q", r)
			}
		}
		if p.InputAllowed("/") {
			t.Fatal(`InputAllowed("/") = true`)
		}
		for name, c := range p.Credentials {
			if !p.AllowsCredential(name) {
				t.Fatalf("AllowsCredential(%q) = false", name)
			}
			for _, s := range first(c.Stages) {
				if _, ok := p.CredentialFor(s, name); !ok {
					t.Fatalf("CredentialFor(%q, %q) = false", s, name)
				}
			}
			if _, ok := p.CredentialFor("", name); ok {
				t.Fatalf("CredentialFor(\"\", %q) = true", name)
			}
		}
		for s, ds := range p.Egress.Stages {
			for _, d := range first(ds) {
				if !p.EgressAllowed(s, d) || p.EgressAllowed(s, d+"0") {
					t.Fatalf("EgressAllowed is wrong about %s %q", s, d)
				}
			}
		}
		checkPacks(t, p)
	})
}

// first returns at most the first 16 elements of s.
func first[T any](s []T) []T { return s[:min(len(s), 16)] }

// checkPacks checks that a parsed packs section grants what it lists and
// nothing it does not.
func checkPacks(t *testing.T, p *policy.Policy) {
	t.Helper()
	if p.Packs == nil {
		if _, ok := p.PackActor(""); ok {
			t.Fatal("a policy without packs has a pack actor")
		}
		return
	}
	for _, a := range first(p.Packs.Actors) {
		got, ok := p.PackActor(a.Name)
		if !ok || got.Name != a.Name {
			t.Fatalf("PackActor(%q) = %v, %v", a.Name, got, ok)
		}
		for _, r := range first(a.BindRoots) {
			if _, ok := a.BindRoot(r + "/x"); !ok {
				t.Fatalf("BindRoot is wrong about root %q", r)
			}
			if _, ok := a.BindRoot(r + "/.."); ok {
				t.Fatalf("BindRoot allows %q/..", r)
			}
		}
		if _, ok := a.BindRoot("/"); ok {
			t.Fatal(`BindRoot("/") = true`)
		}
		for _, c := range first(a.Credentials) {
			for _, s := range first(c.Services) {
				if !a.CredentialFor(c.Name, s) {
					t.Fatalf("CredentialFor(%q, %q) = false", c.Name, s)
				}
			}
			if a.CredentialFor(c.Name, "") {
				t.Fatalf("CredentialFor(%q, \"\") = true", c.Name)
			}
		}
		if a.Ports != nil && len(a.Ports.AllowedHostIPs()) == 0 {
			t.Fatal("ports without an allowed host address")
		}
	}
}

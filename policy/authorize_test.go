package policy_test

import (
	"slices"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/strictyaml"
	"github.com/custody-dev/custody/policy"
)

// withAuthorization is withGrants plus one authorization inside it.
const withAuthorization = withGrants + `authorizations:
  - name: agent-loop
    actor: alice@example.com
    stages: [test, acquire]
    images: [` + digest + `]
    ceilings: {memory: 256Mi, cpu: 1, wallTime: 2m}
    egress: [proxy.golang.org:443]
    credentials: [registry-token]
    inputRoots: [/srv/work/agent]
    pipelines: true
    limits: {grantsPerMinute: 30, concurrentRuns: 2, runsPerDay: 500}
    notBefore: 2026-01-01T00:00:00Z
    notAfter: 2027-01-01T00:00:00Z
`

func TestAuthorizationParses(t *testing.T) {
	p := mustParse(t, withAuthorization)
	a, ok := p.Authorization("agent-loop")
	if !ok {
		t.Fatal("authorization agent-loop not found")
	}
	if a.Actor != "alice@example.com" || !a.Pipelines || a.Verifier || a.Limits.ConcurrentRuns != 2 {
		t.Fatalf("authorization: %+v", a)
	}
	c := a.Effective(p.Ceilings)
	if c.Memory != 256<<20 || c.CPU != 1 || c.Pids != p.Ceilings.Pids || c.Nofile != policy.DefaultNofile {
		t.Fatalf("effective ceilings: %+v", c)
	}
	if !a.Valid(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)) || a.Valid(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatal("validity window not applied")
	}
	if _, ok := a.InputRoot("/srv/work/agent/repo"); !ok {
		t.Fatal("input under the authorization's root not matched")
	}
	if _, ok := a.InputRoot("/srv/work/other"); ok {
		t.Fatal("input outside the authorization's root matched")
	}
	if _, ok := p.Authorization("nope"); ok {
		t.Fatal("unknown authorization found")
	}
}

// TestAuthorizationNeverWidens: an authorization naming anything the policy
// does not grant makes the whole policy invalid, naming the field.
func TestAuthorizationNeverWidens(t *testing.T) {
	const at = "authorizations[0]."
	for _, tc := range []struct{ old, new, field string }{
		{"actor: alice@example.com", "actor: mallory", at + "actor"},
		{"ceilings: {memory: 256Mi", "ceilings: {memory: 1Gi", at + "ceilings.memory"},
		{"cpu: 1, wallTime", "cpu: 3, wallTime", at + "ceilings.cpu"},
		{"wallTime: 2m}", "wallTime: 2h}", at + "ceilings.wallTime"},
		{"egress: [proxy.golang.org:443]", "egress: [evil.example:443]", at + "egress[0]"},
		{"credentials: [registry-token]", "credentials: [provider]", at + "credentials[0]"},
		{"inputRoots: [/srv/work/agent]", "inputRoots: [/etc]", at + "inputRoots[0]"},
		{"grantsPerMinute: 30", "grantsPerMinute: 0", ""},
		{", runsPerDay: 500", "", at + "limits"},
		{"notAfter: 2027-01-01T00:00:00Z", "notAfter: 2025-01-01T00:00:00Z", at + "notAfter"},
	} {
		doc := strictyaml.Edit(t, withAuthorization, tc.old, tc.new)
		_, err := policy.Parse([]byte(doc))
		if err == nil {
			t.Errorf("%q -> %q: accepted", tc.old, tc.new)
			continue
		}
		if tc.field != "" && !slices.Contains(fields(t, err), tc.field) {
			t.Errorf("%q -> %q: fields %v, want %s", tc.old, tc.new, fields(t, err), tc.field)
		}
	}
	// An image the policy does not list, and a stage the actor may not run.
	doc := strictyaml.Edit(t, withAuthorization, "    images: ["+digest+"]", "    images: [sha256:"+digest[7:70]+"0]",
		"actor: alice@example.com\n", "actor: ci-bot\n")
	got := fields(t, mustFail(t, doc))
	for _, want := range []string{at + "images[0]", at + "stages[1]"} {
		if !slices.Contains(got, want) {
			t.Errorf("fields %v, want %s", got, want)
		}
	}
}

func mustFail(t *testing.T, doc string) error {
	t.Helper()
	_, err := policy.Parse([]byte(doc))
	if err == nil {
		t.Fatalf("accepted:\n%s", doc)
	}
	return err
}

package integration

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestAuthorizationJSONMatchesSchemas validates the --json outputs of runs
// under a standing authorization against custody schema's documents: the
// result names the authorization it was minted under, and the refusals
// (an unknown authorization, a rate limit) are error
// documents. A member the schema does not name fails it.
func TestAuthorizationJSONMatchesSchemas(t *testing.T) {
	e := startAuthDaemon(t)
	dir := e.dir
	phase := filepath.Join(dir, "schema-auth.yaml")
	write(t, phase, string(e.authPhase(t, "echo hi", e.noInputs()...).YAML))
	code, out, errs := e.custody("run", "--authorization", "agent-loop", phase, "--json")
	if code != exitOK || !strings.Contains(out, `"authorization"`) {
		t.Fatalf("run --authorization: exit %d\n%s%s", code, out, errs)
	}
	if err := valid(t, "result", out); err != nil {
		t.Fatalf("run --authorization --json against result.schema.json: %v\n%s", err, out)
	}
	code, out, _ = e.custody("run", "--authorization", "no-such", phase, "--json")
	if code != exitRefused || !strings.Contains(out, "authorization-unknown") {
		t.Fatalf("unknown authorization: exit %d\n%s", code, out)
	}
	if err := valid(t, "error", out); err != nil {
		t.Fatalf("unknown authorization --json against error.schema.json: %v\n%s", err, out)
	}
	// burst mints five grants a minute: the sixth is rate-limited.
	for i := 0; ; i++ {
		code, out, errs = e.custody("run", "--authorization", "burst", phase, "--json")
		if code == exitOK && i < 5 {
			continue
		}
		if code != exitRefused || !strings.Contains(out, "rate-limited") {
			t.Fatalf("run %d under burst: exit %d\n%s%s", i+1, code, out, errs)
		}
		break
	}
	if err := valid(t, "error", out); err != nil {
		t.Fatalf("rate-limited --json against error.schema.json: %v\n%s", err, out)
	}
}

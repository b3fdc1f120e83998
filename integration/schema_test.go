package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/custody-dev/custody/internal/testenv"
)

// valid checks out against the named output schema.
func valid(t *testing.T, name, out string) error {
	t.Helper()
	sch, err := compileOutputSchema(name)
	if err != nil {
		t.Fatalf("compile %s: %v", name, err)
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
	if err != nil {
		return err
	}
	return sch.Validate(doc)
}

// TestJSONOutputsMatchSchemas validates real --json outputs of a real
// custodyd (admitted and refused dry runs, a run, a fetched result, the
// doctor) against custody schema's documents, and that the phase commands
// (admit, grant issue, run) answer a refusal under --json with an error
// document on stdout, whether the daemon or the CLI refused. A document
// with a field the schema does not name fails it.
func TestJSONOutputsMatchSchemas(t *testing.T) {
	e := startDaemon(t)
	phase := e.phase(t, "schema", "echo hi; echo x > /out/x", "")
	must := func(name string, wantCode int, args ...string) string {
		t.Helper()
		code, out, errs := e.custody(args...)
		if code != wantCode {
			t.Fatalf("%v: exit %d, want %d\n%s\n%s", args, code, wantCode, out, errs)
		}
		if err := valid(t, name, out); err != nil {
			t.Fatalf("%v against %s.schema.json: %v\n%s", args, name, err, out)
		}
		return out
	}
	must("admit", exitOK, "admit", phase, "--json")
	prod := e.phase(t, "prod", "true", "")
	write(t, prod, strings.Replace(readString(t, prod), "tier: development", "tier: production", 1))
	must("admit", exitRefused, "admit", prod, "--json")
	out := must("result", exitOK, "run", "--grant", e.grant(t, phase), "--json")
	var id string
	if i := strings.Index(out, `"runId": "`); i >= 0 {
		id = strings.SplitN(out[i+len(`"runId": "`):], `"`, 2)[0]
	}
	must("result", exitOK, "result", id, "--json")
	runc, _, _ := testenv.Runc(t)
	must("doctor", exitOK, "doctor", "--json", "--runtime", runc)

	// Refusals under --json: the daemon's, with its checks, and the CLI's own.
	must("error", exitRefused, "grant", "issue", phase, "--actor", "nobody", "--ttl", "5m", "--json")
	must("error", exitRefused, "admit", filepath.Join(e.dir, "missing.yaml"), "--json")
	must("error", exitRefused, "run", "--grant", filepath.Join(e.dir, "missing.json"), "--json")
	must("error", exitRefused, "run", "--grant", e.grant(t, phase), "--receipt", phase, "--json")
	must("error", exitRefused, "result", "no-such-run", "--json")
	code, out, _ := e.custody("--submit", filepath.Join(e.dir, "none.sock"), "admit", phase, "--json")
	if code != exitInternal || valid(t, "error", out) != nil {
		t.Fatalf("admit with no daemon: %d %s", code, out)
	}

	// image import --json is one JSON line; status takes --json.
	if code, out, errs := e.custody("image", "import", testenv.BusyboxRootfs(t), "--json"); code != exitOK || !strings.HasSuffix(out, "}\n") || strings.Count(out, "\n") != 1 {
		t.Fatalf("image import --json: %d %q %s", code, out, errs)
	}
	if code, out, _ := e.custody("status", "--json"); code != exitOK || !strings.HasPrefix(out, "{") {
		t.Fatalf("status --json: %d %q", code, out)
	}

	// Every schema is served, and an unknown field fails its document.
	for _, name := range outputSchemas() {
		if code, out, _ := e.custody("schema", name); code != exitOK || !strings.Contains(out, `"$schema"`) {
			t.Fatalf("schema %s: %d", name, code)
		}
	}
	if err := valid(t, "error", `{"error": {"code": "refused", "message": "m", "extra": 1}}`); err == nil {
		t.Fatal("an unknown field passed error.schema.json")
	}
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := readFile("test file", path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSpace(b)) + "\n"
}

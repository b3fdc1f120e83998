package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/custody-dev/custody/internal/regfile"
	"github.com/custody-dev/custody/internal/testenv"
)

// outputSchemas lists the CLI's output schemas by name: its
// cmd/custody/schemas files, which the binary embeds and custody schema
// NAME prints.
func outputSchemas(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testenv.ModuleRoot(t), "cmd", "custody", "schemas", "*.schema.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the CLI's output schemas: %v %v", files, err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".schema.json"))
	}
	sort.Strings(names)
	return names
}

// compileOutputSchema compiles one output schema with the others as its
// refs' targets, offline, at the $ids the CLI gives them.
func compileOutputSchema(t *testing.T, name string) (*jsonschema.Schema, error) {
	t.Helper()
	const schemaURL = "https://custody.dev/schema/cli/"
	c := jsonschema.NewCompiler()
	for _, n := range outputSchemas(t) {
		b, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "cmd", "custody", "schemas", n+".schema.json"))
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", n, err)
		}
		if err := c.AddResource(schemaURL+n+".json", doc); err != nil {
			return nil, fmt.Errorf("schema %s: %w", n, err)
		}
	}
	return c.Compile(schemaURL + name + ".json")
}

// valid checks out against the named output schema.
func valid(t *testing.T, name, out string) error {
	t.Helper()
	sch, err := compileOutputSchema(t, name)
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
	for _, name := range outputSchemas(t) {
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
	b, err := regfile.ReadFile(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSpace(b)) + "\n"
}

package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/internal/testenv"
)

// TestStatusPlanReceiptTrustMatchSchemas validates the rest of the CLI's
// outputs, taken from a real custodyd, against custody schema's documents:
// status --json (submit socket, and --operator before and after a run),
// the plan inside admit --json, the receipt a real run wrote (envelope and
// statement) and the trust file trust export wrote. Beside them, the
// values the one convention forbids fail the schemas: a zero time, a null
// list, a nanosecond duration.
func TestStatusPlanReceiptTrustMatchSchemas(t *testing.T) {
	e := startDaemon(t)
	phase := e.phase(t, "schemas", "echo hi; echo x > /out/x", "")
	must := func(name string, args ...string) string {
		t.Helper()
		code, out, errs := e.custody(args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d\n%s\n%s", args, code, out, errs)
		}
		if err := valid(t, name, out); err != nil {
			t.Fatalf("%v against %s.schema.json: %v\n%s", args, name, err, out)
		}
		return out
	}
	st := must("status", "status", "--json")
	if strings.Contains(st, "0001-01-01") || !strings.Contains(st, `"quarantined": false`) || !strings.Contains(st, `"pool": []`) {
		t.Fatalf("status --json: %s", st)
	}
	if op := must("status", "status", "--operator", "--json"); !strings.Contains(op, `"attempts": []`) {
		t.Fatalf("status --operator --json with no attempt does not say []: %s", op)
	}

	adm := must("admit", "admit", phase, "--json")
	var a struct{ Plan json.RawMessage }
	if err := json.Unmarshal([]byte(adm), &a); err != nil {
		t.Fatal(err)
	}
	if err := valid(t, "plan", string(a.Plan)); err != nil || !strings.Contains(string(a.Plan), `"wallTimeMillis": 20000`) {
		t.Fatalf("plan: %v\n%s", err, a.Plan)
	}

	receipt := filepath.Join(e.dir, "out", "receipt.json")
	must("result", "run", "--grant", e.grant(t, phase), "--json", "--receipt", receipt)
	data, err := os.ReadFile(receipt)
	if err != nil {
		t.Fatal(err)
	}
	if err := evidence.CheckReceiptSchema(data); err != nil {
		t.Fatalf("the real receipt fails custody schema receipt: %v", err)
	}
	if op := must("status", "status", "--operator", "--json"); !strings.Contains(op, `"state": "clean"`) {
		t.Fatalf("status --operator --json after a run lists no clean attempt: %s", op)
	}

	code, trust, errs := e.custody("trust", "export")
	if code != exitOK {
		t.Fatalf("trust export: %d %s", code, errs)
	}
	var doc any
	if err := yaml.Unmarshal([]byte(trust), &doc); err != nil {
		t.Fatal(err)
	}
	asJSON, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := validTrust(t, string(asJSON)); err != nil {
		t.Fatalf("trust export fails custody schema trust: %v\n%s", err, trust)
	}

	for _, name := range []string{"status", "plan", "receipt", "trust"} {
		if code, out, _ := e.custody("schema", name); code != exitOK || !strings.Contains(out, `"$schema"`) {
			t.Fatalf("schema %s: %d", name, code)
		}
	}

	// Refusals: what the convention rules out fails the schemas.
	for _, c := range []struct{ schema, doc, from, to string }{
		{"status", st, `"quarantined": false`, `"quarantined": false, "since": "0001-01-01T00:00:00Z"`},
		{"status", st, `"running": []`, `"running": null`},
		{"status", st, `"pool": []`, `"pool": null`},
		{"plan", string(a.Plan), `"wallTimeMillis": 20000`, `"wallTime": 20000000000`},
		{"plan", string(a.Plan), `"tier": "development"`, `"tier": "development (unqualified)"`},
	} {
		bad := strings.Replace(c.doc, c.from, c.to, 1)
		if bad == c.doc {
			t.Fatalf("%s: %q is not in the document", c.schema, c.from)
		}
		if valid(t, c.schema, bad) == nil {
			t.Errorf("%s passed %s.schema.json", c.to, c.schema)
		}
	}
	if validTrust(t, strings.Replace(string(asJSON), `"kind":"Trust"`, `"kind":"Trust","extra":1`, 1)) == nil {
		t.Error("a trust file with an unknown member passed custody schema trust")
	}
}

// validTrust checks a trust file, as JSON, against custody schema trust.
func validTrust(t *testing.T, doc string) error {
	t.Helper()
	c := jsonschema.NewCompiler()
	sch, err := jsonschema.UnmarshalJSON(bytes.NewReader(evidence.TrustSchema()))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource("trust.json", sch); err != nil {
		t.Fatal(err)
	}
	compiled, err := c.Compile("trust.json")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	if err != nil {
		return err
	}
	return compiled.Validate(inst)
}

// TestStatusPoolMatchesSchema: custody status of a real custodyd with two
// pool profiles, one ready and one whose members cannot be prepared (a
// 1 MiB memory budget runc's own init cannot start in), matches custody
// schema status: the failing one in backoff with its last error, when it
// failed and its next try. A profile that claims failures without an
// error, or a state the schema does not name, fails it.
func TestStatusPoolMatchesSchema(t *testing.T) {
	e := startDaemon(t)
	pol, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "examples", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	profile := `  - name: %s
    image: "@IMAGE@"
    tier: development
    size: 1
    idleTTL: 10m
    resources: {memory: %s, pids: 64, cpu: 1, tmpBytes: 1Mi, outputPath: /out, outputBytes: 1Mi}
`
	e.d.WritePolicy(string(pol) + "pool:\n" + fmt.Sprintf(profile, "small", "64Mi") + fmt.Sprintf(profile, "tiny", "1Mi"))
	if code, out, errs := e.custody("policy", "reload"); code != exitOK {
		t.Fatalf("policy reload: %s %s", out, errs)
	}
	var st string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		code, out, errs := e.custody("status", "--operator", "--json")
		if code != exitOK {
			t.Fatalf("status: %d %s", code, errs)
		}
		if strings.Contains(out, `"state": "ready"`) && strings.Contains(out, `"state": "backoff"`) {
			st = out
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed one profile ready and one in backoff:\n%s", out)
		}
	}
	if err := valid(t, "status", st); err != nil {
		t.Fatalf("status with a pool against status.schema.json: %v\n%s", err, st)
	}
	for _, c := range []struct{ from, to string }{
		{`"state": "backoff"`, `"state": "broken"`},
		{`"lastError": "`, `"lastErrorX": "`},
		{`"failures": 0`, `"failures": 0, "lastError": "none"`},
	} {
		bad := strings.Replace(st, c.from, c.to, 1)
		if bad == st {
			t.Fatalf("%q is not in the status:\n%s", c.from, st)
		}
		if valid(t, "status", bad) == nil {
			t.Errorf("a status with %s passed status.schema.json", c.to)
		}
	}
}

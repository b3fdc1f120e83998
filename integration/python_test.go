package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/testenv"
)

// TestPythonClient runs the Python client's pytest suite
// (clients/python/tests) against a real custodyd: the suite submits, streams,
// fetches results, receipts, outputs and logs, verifies receipts with the
// custody CLI, cancels, and reads refusals, all through the client over the
// submit socket. It also checks the client's dataclasses against the wire
// types of this build (written here by reflection) and the JSON Schemas the
// CLI prints. A missing python3 or pytest fails the test: the suite is part
// of make test, which installs Debian's python3-pytest.
func TestPythonClient(t *testing.T) {
	py := pythonWithPytest(t)
	bin := os.Getenv("CUSTODY_BIN")
	if bin == "" {
		testenv.Missing(t, "the custody binary ($CUSTODY_BIN, set by make test)")
	}
	e := startDaemon(t)
	pol, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "examples", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	e.d.WritePolicy(string(pol) + pythonAuthorizations)
	if code, out, errs := e.custody("policy", "reload"); code != 0 {
		t.Fatalf("policy reload: %s %s", out, errs)
	}
	trust := e.trust(t, "trust-dev.yaml", "development")
	wire := filepath.Join(e.dir, "wire-fields.json")
	writeWireFields(t, wire)
	root := filepath.Join(testenv.ModuleRoot(t), "clients", "python")
	tests := filepath.Join(root, "tests")
	env := append(os.Environ(),
		"PYTHONPATH="+root,
		"PYTHONDONTWRITEBYTECODE=1",
		"CUSTODY_SUBMIT_SOCKET="+e.submit,
		"CUSTODY_CONTROL_SOCKET="+e.control,
		"CUSTODY_BIN="+bin,
		"CUSTODY_TEST_DIR="+e.dir,
		"CUSTODY_TEST_IMAGE="+e.image,
		"CUSTODY_TEST_TRUST="+trust,
		"CUSTODY_TEST_WIRE="+wire,
		"CUSTODY_TEST_AUTHORIZATION=agent",
		"CUSTODY_TEST_AUTHORIZATION_LIMITED=agent-once",
	)
	// Runs under hand-issued grants, refusals, and the wire checks.
	t.Run("grants", func(t *testing.T) {
		pytest(t, py, root, env, tests, "--ignore", filepath.Join(tests, "test_authorization.py"))
	})
	// Runs under the policy's standing authorizations.
	t.Run("authorizations", func(t *testing.T) {
		pytest(t, py, root, env, filepath.Join(tests, "test_authorization.py"))
	})
}

// pythonAuthorizations, appended to the example policy, delegates to
// ci-bot (whose submitter is root): agent, build phases of the test image
// with room for every run of the suite, and agent-once, one run a day.
const pythonAuthorizations = `authorizations:
  - name: agent
    actor: ci-bot
    stages: [build]
    images: ["@IMAGE@"]
    ceilings: {memory: 128Mi}
    limits: {grantsPerMinute: 1000, concurrentRuns: 4, runsPerDay: 10000}
    notBefore: 2020-01-01T00:00:00Z
    notAfter: 2099-01-01T00:00:00Z
  - name: agent-once
    actor: ci-bot
    stages: [build]
    images: ["@IMAGE@"]
    limits: {grantsPerMinute: 1, concurrentRuns: 1, runsPerDay: 1}
    notBefore: 2020-01-01T00:00:00Z
    notAfter: 2099-01-01T00:00:00Z
`

// pytest runs the suite's args with py and fails t unless every case ran
// and passed.
func pytest(t *testing.T, py, root string, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command(py, append([]string{"-m", "pytest", "-v", "-p", "no:cacheprovider", "-o", "console_output_style=classic"}, args...)...)
	cmd.Dir = root
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil {
		t.Fatalf("the Python client's suite failed: %v", err)
	}
	if !strings.Contains(string(out), " passed") || strings.Contains(string(out), " skipped") {
		t.Fatalf("pytest ran no test, or skipped some: every case must run")
	}
}

// pythonWithPytest is $CUSTODY_PYTHON (make test sets Debian's python3,
// where python3-pytest installs), else python3 on PATH; it fails the test,
// never skips it, when that python or its pytest is missing.
func pythonWithPytest(t *testing.T) string {
	t.Helper()
	py := os.Getenv("CUSTODY_PYTHON")
	if py == "" {
		p, err := exec.LookPath("python3")
		if err != nil {
			t.Fatalf("python3 is not installed: the Python client's suite needs it (make deps installs python3 and python3-pytest)")
		}
		py = p
	}
	if out, err := exec.Command(py, "-c", "import pytest").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import pytest (%v): install Debian's python3-pytest (make deps does) and point CUSTODY_PYTHON at Debian's python3\n%s", py, err, out)
	}
	return py
}

// writeWireFields writes, for every api struct type a submit-socket client
// sends or reads, its JSON member names, walking the types each reaches.
// The Python suite fails when a dataclass lacks one of them or has one the
// wire does not.
func writeWireFields(t *testing.T, path string) {
	t.Helper()
	roots := []any{api.AdmitRequest{}, api.AdmitResponse{}, api.RunRequest{}, api.Event{}, api.Error{},
		api.Status{}, api.Result{}, api.Receipt{}, api.Keys{}, api.AuthorizationsResponse{}}
	fields := map[string][]string{}
	var walk func(reflect.Type)
	walk = func(rt reflect.Type) {
		for rt.Kind() == reflect.Pointer || rt.Kind() == reflect.Slice || rt.Kind() == reflect.Map {
			rt = rt.Elem()
		}
		if rt.Kind() != reflect.Struct || rt.PkgPath() != reflect.TypeOf(api.Error{}).PkgPath() {
			return
		}
		if _, done := fields[rt.Name()]; done {
			return
		}
		fields[rt.Name()] = jsonMembers(rt)
		for i := 0; i < rt.NumField(); i++ {
			walk(rt.Field(i).Type)
		}
	}
	for _, r := range roots {
		walk(reflect.TypeOf(r))
	}
	data, err := json.MarshalIndent(fields, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	write(t, path, string(data))
}

// jsonMembers is rt's JSON member names, embedded structs flattened as
// encoding/json does.
func jsonMembers(rt reflect.Type) []string {
	var names []string
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			names = append(names, jsonMembers(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

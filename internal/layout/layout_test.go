package layout

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/custody-dev/custody"

type pkg struct {
	ImportPath  string
	Doc         string
	Imports     []string
	TestImports []string
	Deps        []string
	Name        string
}

func list(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages; the rules would check nothing", len(pkgs))
	}
	return pkgs
}

// banned: package → custody packages it must not depend on (transitively),
// each with the reason.
var banned = map[string]map[string]string{
	"admission": {
		"backend/oci": "observations never authorize: admission gets platform facts as values",
		"store":       "admission is a pure computation",
		"host":        "admission is a pure computation",
	},
	"policy": {
		"request": "policy imports no custody domain package", "host": "", "backend/oci": "", "store": "",
	},
	"request":     {"policy": "a request asks; it cannot see what is granted", "host": "", "backend/oci": ""},
	"pipeline":    {"policy": "a pipeline asks, stage by stage; it cannot see what is granted", "admission": "", "host": "", "launch": "", "api": ""},
	"backend/oci": {"admission": "backends import no domain package", "policy": "", "request": "", "store": "", "host": ""},
	"store":       {"host": "the store imports no custody package", "backend/oci": "", "admission": ""},
	"platform":    {"host": "the probe reports facts; it does not run work", "admission": "", "policy": "", "backend": "the probe reports facts; backends turn them into their gaps (backend/partial)"},
	"quantity":    {"request": "leaf package", "policy": ""},
	"grant":       {"admission": "grants bind values; they do not decide them", "host": "", "backend/oci": ""},
	"conformance": {"store": "conformance reaches the daemon only through api, never its state", "journal": "", "host": "", "backend/oci": ""},
	"probe":       {"api": "the probe is standard library only", "platform": "", "evidence": "", "grant": ""},
	"evidence":    {"host": "evidence does not know who runs", "backend/oci": "", "store": ""},
	"retention":   {"backend/oci": "retention reads records and stored trees; it never drives a runtime", "api": "", "launch": "retention reads run records (runrecord), never the launch pipeline", "host": ""},
	"keys":        {"store": "keys are files, not state", "host": "", "grant": ""},
	"api":         {"host": "wire types carry no logic", "store": "", "backend/oci": "", "admission": "", "launch": ""},
	"backend":     {"host": "the contract imports no custody domain package", "admission": "", "policy": "", "grant": "", "journal": "", "store": "", "evidence": "", "api": ""},
	"workspace": {
		"backend/docker": "the workspace lifecycle drives its Engine interface; only cmd/custodyd wires the docker engine",
		"backend/oci":    "",
		"host":           "",
		"launch":         "",
		"api":            "the domain returns its own types; only custodyd's edge converts them to wire types",
	},
	"backend/vm": {
		"admission": "backends import no domain package", "policy": "", "request": "", "store": "", "host": "", "launch": "", "backend/oci": "",
	},
	"backend/partial": {
		"backend/oci": "the shared helpers serve every backend and name none", "backend/vm": "", "backend/docker": "",
		"admission": "backends import no domain package", "policy": "", "request": "", "store": "", "host": "", "launch": "", "journal": "", "evidence": "",
	},
	"backend/kube": {
		"admission": "backends import no domain package", "policy": "", "request": "", "store": "", "host": "", "launch": "", "backend/oci": "", "backend/vm": "",
	},
	"internal/kubetest": {"backend": "the test cluster is the control plane alone: it knows no backend", "backend/kube": ""},
	"backend/vm/vmpin":  {"backend": "the pins are a leaf that custody gate reads without any backend", "backend/vm": ""},
	"backend/vm/guest":  {"backend": "the guest protocol is standard library only: the init is a small static binary", "backend/vm": ""},
	"egress": {
		"request": "the proxy is a leaf: it gets its allowlist and gateways as values", "policy": "", "admission": "",
		"grant": "", "host": "", "launch": "", "store": "", "journal": "", "evidence": "", "backend": "", "backend/oci": "",
	},
	"backend/docker": {
		"admission": "backends import no domain package", "policy": "", "store": "", "host": "", "launch": "", "workspace": "",
		"pack": "the engine profile it fills is a neutral backend type (backend.PackEngine), not the pack domain's",
	},
	"launch": {
		"backend/oci": "the launch pipeline drives backend.Backend; only cmd/custodyd wires a concrete backend",
		"backend/vm":  "",
		"api":         "the domain returns its own types; only custodyd's edge converts them to wire types",
	},
	"pool": {
		"host":        "the pool is given its host as a small interface and values at construction, never the host itself",
		"launch":      "the pool serves the launch pipeline; it does not run phases",
		"backend/oci": "the pool drives backend.Pooler; only cmd/custodyd wires a concrete backend",
		"backend/vm":  "",
		"api":         "the domain returns its own types; only custodyd's edge converts them to wire types",
		"grant":       "a member is made before any grant exists and never sees one",
		"evidence":    "the pool keeps sandboxes, not evidence: the receipt is launch's",
	},
	"host": {
		"backend/oci": "the runner drives backend.Backend; only cmd/custodyd wires a concrete backend",
		"backend/vm":  "",
		"api":         "the domain returns its own types; only custodyd's edge converts them to wire types",
	},
	"cmd/custody": {
		"host":        "the CLI reaches the runner only through custodyd's sockets (api)",
		"store":       "the CLI never holds the runner's state",
		"backend/oci": "the CLI never launches anything itself",
		"journal":     "the CLI never reads the journal itself",
		"admission":   "the CLI sends phases and packs to custodyd, whose admission decides; it never decides itself",
	},
	// backend/vm joins these once the vm section's pins (and qualification's
	// vm use) come from a pin-only leaf rather than backend/vm itself.
	"daemon": {
		"backend/oci":    "the daemon drives backend.Backend and workspace.Engine; only cmd/custodyd wires a concrete backend",
		"backend/docker": "",
		"backend/vm":     "",
	},
	"daemon/config": {
		"host":   "the configuration is a leaf: the test harness, the bench and qualification (which the CLI imports) marshal it",
		"launch": "", "store": "", "daemon": "", "backend/oci": "", "backend/docker": "", "backend/vm": "", "workspace": "",
	},
	// The soak loads a real custodyd from outside, as an operator's
	// clients would; what it judges must come from the daemon it runs.
	"bench/soak": {
		"daemon": "the soak reaches custodyd only through its sockets and the built binary, never in process",
		"host":   "", "launch": "", "pool": "",
	},
	"qualification": {
		"store":       "the attester gets the runner's records as values, and the CLI imports this package",
		"journal":     "",
		"host":        "",
		"backend/oci": "",
	},
}

// directOnly: package → the only packages that may import it directly.
var directOnly = map[string][]string{
	// Only custodyd wires a concrete backend; bench: raw-runc baselines
	// with the same profile.
	"backend/oci": {"cmd/custodyd", "bench"},
	"host":        {"cmd/custodyd", "daemon", "launch"},
	// The host owns its pool (recovery holds it, quarantine drains it);
	// launch reserves and takes members; custodyd keeps it filled.
	"pool":   {"host", "launch", "cmd/custodyd", "daemon"},
	"launch": {"cmd/custodyd", "daemon"},
	// The daemon is custodyd's: everything else reaches it through api.
	"daemon": {"cmd/custodyd"},
}

// leaves: package → the only custody packages it may depend on at all
// (transitively), and why.
var leaves = map[string]struct {
	allowed []string
	why     string
}{
	"runrecord": {[]string{"backend"}, "the run record is a leaf of values: it runs no work and knows no pipeline, store, " +
		"wire or receipt (backend only for the usage and cleanup values it records)"},
	"mcpserver": {[]string{"api", "request", "pipeline", "internal/regfile", "internal/strictyaml", "backend", "egress", "quantity"},
		"the MCP server reaches custodyd only through the submit socket's client (api), and parses phases and pipelines to " +
			"refuse malformed ones early: it holds no key, grant signer, policy, state or runtime"},
}

func TestLeaves(t *testing.T) {
	pkgs := list(t)
	found := map[string]bool{}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		rule, ok := leaves[rel]
		if !ok {
			continue
		}
		found[rel] = true
		for _, d := range p.Deps {
			drel, ok := strings.CutPrefix(d, module+"/")
			if ok && !slices.Contains(rule.allowed, drel) {
				t.Errorf("%s depends on %s; it may depend only on %v: %s", rel, drel, rule.allowed, rule.why)
			}
		}
	}
	for name := range leaves {
		if !found[name] {
			t.Errorf("leaf rule for %s, which no longer exists", name)
		}
	}
}

func TestDependencyRules(t *testing.T) {
	pkgs := list(t)
	// A rule about a package that no longer exists checks nothing: say so.
	exists := map[string]bool{}
	for _, p := range pkgs {
		exists[strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")] = true
	}
	for name, deps := range banned {
		if !exists[name] {
			t.Errorf("rule for %s, which no longer exists", name)
		}
		for d := range deps {
			if !exists[d] {
				t.Errorf("rule %s → %s names a package that no longer exists", name, d)
			}
		}
	}
	for name, allowed := range directOnly {
		for _, a := range append([]string{name}, allowed...) {
			if !exists[a] {
				t.Errorf("rule for direct imports of %s names %s, which no longer exists", name, a)
			}
		}
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		rules := banned[rel]
		for _, d := range p.Deps {
			drel, ok := strings.CutPrefix(d, module+"/")
			if !ok {
				continue
			}
			if why, bad := rules[drel]; bad {
				t.Errorf("%s must not depend on %s: %s", rel, drel, why)
			}
		}
		for _, imp := range p.Imports {
			irel, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			if allowed, ruled := directOnly[irel]; ruled && !slices.Contains(allowed, rel) && !slices.Contains(allowed, strings.SplitN(rel, "/", 2)[0]) {
				t.Errorf("%s imports %s; only %v may", rel, irel, allowed)
			}
		}
	}
}

// concrete are the backends that run work; concreteUsers the only
// packages that may depend on one, directly or not: custodyd wires them,
// and the bench (bench/...) measures them against raw baselines with the
// same profile. Everything else drives backend.Backend, so a new backend
// is one more line in custodyd, not a change across the tree.
var (
	concrete      = []string{"backend/oci", "backend/vm", "backend/docker", "backend/kube"}
	concreteUsers = []string{"cmd/custodyd", "bench", "bench/..."}
)

// TestBackendFence checks with the non-test dependency lists (go list's
// Deps, as go list -deps gives them) that only concreteUsers depend on a
// concrete backend.
func TestBackendFence(t *testing.T) {
	pkgs := list(t)
	allowed := func(rel string) bool {
		for _, u := range concreteUsers {
			if prefix, tree := strings.CutSuffix(u, "/..."); tree && strings.HasPrefix(rel, prefix+"/") || rel == u {
				return true
			}
		}
		return false
	}
	exists := map[string]bool{}
	for _, p := range pkgs {
		exists[strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")] = true
	}
	for _, name := range append(slices.Clone(concrete), "cmd/custodyd", "bench") {
		if !exists[name] {
			t.Errorf("the backend fence names %s, which no longer exists", name)
		}
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if rel == "backend" {
			for _, d := range p.Deps {
				if strings.HasPrefix(d, module+"/") {
					t.Errorf("backend depends on %s: the contract, whose Kind names the backends for leaf packages (request, evidence, matrix, policy), imports no custody package", d)
				}
			}
		}
		if allowed(rel) {
			continue
		}
		for _, d := range p.Deps {
			if drel, ok := strings.CutPrefix(d, module+"/"); ok && slices.Contains(concrete, drel) {
				t.Errorf("%s depends on the concrete backend %s; only %v may: drive backend.Backend, or go through custodyd", rel, drel, concreteUsers)
			}
		}
	}
}

func TestEveryPackageHasADoc(t *testing.T) {
	for _, p := range list(t) {
		if strings.TrimSpace(p.Doc) == "" {
			t.Errorf("package %s has no package doc comment", p.ImportPath)
		}
	}
}

// externalOnly: an outside package → the only custody packages that may
// import it directly, with the reason.
var externalOnly = map[string]struct {
	allowed []string
	why     string
}{
	"github.com/secure-systems-lab/go-securesystemslib/dsse": {[]string{"internal/dsse", "keys"},
		"one DSSE signer, reader and verifier (internal/dsse); keys only implements its signer interface"},
	"k8s.io/client-go/kubernetes": {[]string{"backend/kube", "internal/kubetest"},
		"one Kubernetes client: the kube backend (and the test cluster it is tested on); the rest of custody drives backend.Backend"},
}

func TestExternalImports(t *testing.T) {
	pkgs := list(t)
	for ext, rule := range externalOnly {
		used := false
		for _, p := range pkgs {
			rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
			if !slices.Contains(p.Imports, ext) {
				continue
			}
			used = true
			if !slices.Contains(rule.allowed, rel) {
				t.Errorf("%s imports %s; only %v may: %s", rel, ext, rule.allowed, rule.why)
			}
		}
		if !used {
			t.Errorf("no package imports %s any more: remove the rule", ext)
		}
	}
}

// endToEnd are the packages that start a real custodyd or dockerd for a
// test: only the end-to-end tests in integration/ (and the packages whose
// own tests need one) use them; cmd/custody's tests check the CLI's own
// code.
var endToEnd = []string{"internal/daemontest", "internal/dockertest"}

func TestEndToEndTestsLiveInIntegration(t *testing.T) {
	found := false
	for _, p := range list(t) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if rel == "integration" {
			found = true
		}
		if rel != "cmd/custody" {
			continue
		}
		for _, imp := range p.TestImports {
			if r, ok := strings.CutPrefix(imp, module+"/"); ok && slices.Contains(endToEnd, r) {
				t.Errorf("cmd/custody's tests import %s: a test that starts a daemon belongs in integration/", r)
			}
		}
	}
	if !found {
		t.Error("no integration package: where did the end-to-end tests go?")
	}
}

// cliImports are the only custody packages the CLI imports directly: the
// wire client, the formats it reads and verifies offline, and the offline
// tools (doctor, qualification, the gate), and the reference pages it
// writes from its own schemas (internal/schemadoc) and from the daemon's
// flag set (internal/daemonflags), and the crash-safe writes of the files it
// keeps for a reviewer, such as an operations-log checkpoint
// (internal/durable), and the backends' names (backend.Kind, from the
// stdlib-only contract). It never holds the
// runner's state or launches anything itself.
var cliImports = []string{
	"api", "backend", "policy", "request", "evidence", "grant", "keys", "matrix", "platform", "conformance", "qualification", "snapshot", "treehash", "quantity", "pipeline",
	"mcpserver", // custody mcp: the agent's tools, over the submit socket only
	"internal/quote", "internal/regfile", "internal/untar", "internal/schemadoc", "internal/daemonflags", "internal/durable",
}

func TestCLIImports(t *testing.T) {
	pkgs := list(t)
	exists := map[string]bool{}
	for _, p := range pkgs {
		exists[strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")] = true
	}
	for _, a := range cliImports {
		if !exists[a] {
			t.Errorf("cliImports lists %s, which no longer exists", a)
		}
	}
	for _, p := range pkgs {
		if p.ImportPath != module+"/cmd/custody" {
			continue
		}
		for _, imp := range p.Imports {
			rel, ok := strings.CutPrefix(imp, module+"/")
			if ok && !slices.Contains(cliImports, rel) {
				t.Errorf("cmd/custody imports %s; the CLI imports only %v", rel, cliImports)
			}
		}
	}
}

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
	ImportPath string
	Doc        string
	Imports    []string
	Deps       []string
	Name       string
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
		"runner":      "admission is a pure computation",
	},
	"policy": {
		"request": "policy imports no custody domain package", "runner": "", "backend/oci": "", "store": "",
	},
	"request":     {"policy": "a request asks; it cannot see what is granted", "runner": "", "backend/oci": ""},
	"pipeline":    {"policy": "a pipeline asks, stage by stage; it cannot see what is granted", "admission": "", "runner": "", "launch": "", "api": ""},
	"backend/oci": {"admission": "backends import no domain package", "policy": "", "request": "", "store": "", "runner": ""},
	"store":       {"runner": "the store imports no custody package", "backend/oci": "", "admission": ""},
	"platform":    {"runner": "the probe reports facts; it does not run work", "admission": "", "policy": ""},
	"quantity":    {"request": "leaf package", "policy": ""},
	"grant":       {"admission": "grants bind values; they do not decide them", "runner": "", "backend/oci": ""},
	"conformance": {"store": "conformance reaches the daemon only through api, never its state", "journal": "", "runner": "", "backend/oci": ""},
	"probe":       {"api": "the probe is standard library only", "platform": "", "evidence": "", "grant": ""},
	"evidence":    {"runner": "evidence does not know who runs", "backend/oci": "", "store": ""},
	"retention":   {"backend/oci": "retention reads records and stored trees; it never drives a runtime", "api": "", "launch": "retention reads run records (runrecord), never the launch pipeline", "runner": ""},
	"keys":        {"store": "keys are files, not state", "runner": "", "grant": ""},
	"api":         {"runner": "wire types carry no logic", "store": "", "backend/oci": "", "admission": "", "launch": ""},
	"backend":     {"runner": "the contract imports no custody domain package", "admission": "", "policy": "", "grant": "", "journal": "", "store": "", "evidence": "", "api": ""},
	"workspace": {
		"backend/docker": "the workspace lifecycle drives its Engine interface; only cmd/custodyd wires the docker engine",
		"backend/oci":    "",
		"runner":         "",
		"launch":         "",
		"api":            "the domain returns its own types; only custodyd's edge converts them to wire types",
	},
	"backend/vm": {
		"admission": "backends import no domain package", "policy": "", "request": "", "store": "", "runner": "", "launch": "", "backend/oci": "",
	},
	"backend/vm/guest": {"backend": "the guest protocol is standard library only: the init is a small static binary", "backend/vm": ""},
	"egress": {
		"request": "the proxy is a leaf: it gets its allowlist and gateways as values", "policy": "", "admission": "",
		"grant": "", "runner": "", "launch": "", "store": "", "journal": "", "evidence": "", "backend": "", "backend/oci": "",
	},
	"backend/docker": {
		"admission": "backends import no domain package", "policy": "", "store": "", "runner": "", "launch": "", "workspace": "",
	},
	"launch": {
		"backend/oci": "the launch pipeline drives backend.Backend; only cmd/custodyd wires a concrete backend",
		"backend/vm":  "",
		"api":         "the domain returns its own types; only custodyd's edge converts them to wire types",
	},
	"runner": {
		"backend/oci": "the runner drives backend.Backend; only cmd/custodyd wires a concrete backend",
		"backend/vm":  "",
		"api":         "the domain returns its own types; only custodyd's edge converts them to wire types",
	},
	"cmd/custody": {
		"runner":      "the CLI reaches the runner only through custodyd's sockets (api)",
		"store":       "the CLI never holds the runner's state",
		"backend/oci": "the CLI never launches anything itself",
		"journal":     "the CLI never reads the journal itself",
		"admission":   "the CLI sends phases and packs to custodyd, whose admission decides; it never decides itself",
	},
	"qualification": {
		"store":       "the attester gets the runner's records as values, and the CLI imports this package",
		"journal":     "",
		"runner":      "",
		"backend/oci": "",
	},
}

// directOnly: package → the only packages that may import it directly.
var directOnly = map[string][]string{
	// Only custodyd wires a concrete backend; bench: raw-runc baselines
	// with the same profile.
	"backend/oci": {"cmd/custodyd", "bench"},
	"runner":      {"cmd/custodyd", "launch"},
	"launch":      {"cmd/custodyd"},
}

// leaves: package → the only custody packages it may depend on at all
// (transitively), and why.
var leaves = map[string]struct {
	allowed []string
	why     string
}{
	"runrecord": {[]string{"backend"}, "the run record is a leaf of values: it runs no work and knows no pipeline, store, " +
		"wire or receipt (backend only for the usage and cleanup values it records)"},
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

// cliImports are the only custody packages the CLI imports directly: the
// wire client, the formats it reads and verifies offline, and the offline
// tools (doctor, qualification, the gate), and the reference pages it
// writes from its own schemas (internal/schemadoc) and from the daemon's
// flag set (internal/daemonflags), and the crash-safe writes of the files it
// keeps for a reviewer, such as an operations-log checkpoint
// (internal/durable). It never holds the
// runner's state or launches anything itself.
var cliImports = []string{
	"api", "policy", "request", "evidence", "grant", "keys", "matrix", "platform", "conformance", "qualification", "snapshot", "treehash", "quantity", "pipeline",
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

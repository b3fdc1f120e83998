package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/custody-dev/custody/daemon"
)

// handSpoken are the files, outside api/ and daemon/, allowed to speak the
// sockets' HTTP by hand, each with why: a test that sends what no client
// sends, as an attacker would.
var handSpoken = map[string]string{
	"integration/gate_runner_test.go": "hands the runner forged qualification verdicts on a route no client has",
}

// TestSocketProtocolOnlyInAPI: nothing but the api package (the client)
// and the daemon package (the server) speaks custodyd's sockets' HTTP. A
// file that dials a unix socket and names one of the daemon's routes (or
// its http://custodyd host) speaks it by hand; it uses the api client
// instead. The routes come from the daemon's own registration.
func TestSocketProtocolOnlyInAPI(t *testing.T) {
	var routes []string
	for _, r := range slices.Concat(daemon.SubmitRoutes(), daemon.ControlRoutes()) {
		_, path, _ := strings.Cut(r, " ")
		path, _, _ = strings.Cut(path, "{")
		routes = append(routes, path)
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	speaks := func(lit string) bool {
		if rest, ok := strings.CutPrefix(lit, "http://custodyd"); ok && (rest == "" || strings.HasPrefix(rest, "/v1/")) {
			return true
		}
		return slices.ContainsFunc(routes, func(r string) bool {
			return strings.Contains(lit, r) && strings.HasPrefix(r, "/v1/") && len(r) > len("/v1/")
		})
	}
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "api" || rel == "daemon" || d.Name() == "testdata" || d.Name() == "node_modules" || (strings.HasPrefix(d.Name(), ".") && rel != ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		dials, named := false, ""
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if ok && strings.HasPrefix(sel.Sel.Name, "Dial") {
					for _, a := range n.Args {
						if l, ok := a.(*ast.BasicLit); ok && l.Value == `"unix"` {
							dials = true
						}
					}
				}
			case *ast.BasicLit:
				if s, err := strconv.Unquote(n.Value); n.Kind == token.STRING && err == nil && named == "" && speaks(s) {
					named = s
				}
			}
			return true
		})
		if dials && named != "" {
			if _, ok := handSpoken[filepath.ToSlash(rel)]; !ok {
				t.Errorf("%s dials a unix socket and names custodyd's %q: it speaks the sockets' protocol by hand; use the api client (api.NewClient)", rel, named)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("only %d Go files checked: is the module root %s?", checked, root)
	}
}

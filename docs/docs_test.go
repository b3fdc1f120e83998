// Package docs_test checks the documentation as a user meets it: every
// relative link and anchor resolves, no page and no message cites an issue
// number, user pages name no test, and the tutorials' shell examples give
// the output they show when run against a real custodyd.
package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/custody-dev/custody/internal/testenv"
)

// citesIssue matches a reference to an issue tracker entry ("issue 14",
// "issues 3 and 4", "issue #7"): the reader has no tracker.
var citesIssue = regexp.MustCompile(`(?i)\bissues? #?[0-9]+`)

// skipDir says which directories of the repository are not its own
// source or documentation.
func skipDir(rel string) bool {
	base := filepath.Base(rel)
	return rel == "build" || rel == "bin" || base == ".git" || base == "testdata" || base == "node_modules" || strings.HasPrefix(base, ".")
}

// TestNoIssueNumbersInMessages fails when a string literal of a non-test
// Go file cites an issue, or (outside test support and developer tools)
// a custody package: such strings are what custody prints (errors,
// --help, logs, reports), and an operator can look up neither.
func TestNoIssueNumbersInMessages(t *testing.T) {
	root := testenv.ModuleRoot(t)
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && skipDir(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		files++
		for _, hit := range issueCitations(t, path) {
			t.Errorf("%s:%d: a message cites an issue: %q; say what the rule is instead", rel, hit.line, hit.text)
		}
		if !devTool(filepath.ToSlash(rel)) {
			for _, hit := range sourceCitations(t, path) {
				t.Errorf("%s:%d: a message names custody's source (%q); say what holds, in the operator's words", rel, hit.line, hit.text)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read only %d Go files; the check would check nothing", files)
	}
}

type citation struct {
	line int
	text string
}

// citesSource matches a message that points at custody's source rather
// than saying what holds: a package path ("(backend/vm)",
// "internal/untar") or "package pack".
var citesSource = regexp.MustCompile(`\b(?:(?:internal|backend|cmd)/[a-z][a-z-]*|package (?:admission|backend|evidence|grant|pack|policy|request|runner|workspace))\b`)

// devTool says whether a file is test support or a developer's tool, whose
// messages are read by custody's developers.
func devTool(rel string) bool {
	for _, p := range []string{"internal/dockertest/", "internal/daemontest/", "internal/testenv/", "bench/", "tools/"} {
		if strings.HasPrefix(rel, p) {
			return true
		}
	}
	return false
}

func issueCitations(t *testing.T, path string) []citation {
	t.Helper()
	return citations(t, path, citesIssue)
}

func sourceCitations(t *testing.T, path string) []citation {
	t.Helper()
	return citations(t, path, citesSource)
}

// citations finds re in the string literals of a Go file, import paths
// aside.
func citations(t *testing.T, path string, re *regexp.Regexp) []citation {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var hits []citation
	ast.Inspect(f, func(n ast.Node) bool {
		if _, ok := n.(*ast.ImportSpec); ok {
			return false
		}
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			s = lit.Value
		}
		if m := re.FindString(s); m != "" {
			hits = append(hits, citation{fset.Position(lit.Pos()).Line, m})
		}
		return true
	})
	return hits
}

// TestIssueCitationsFound proves the check above sees a citation where
// custody would print one, and only there.
func TestIssueCitationsFound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.go")
	src := "package x\n\n// issue 14 in a comment is fine.\nvar a = \"refused (issue 14: why)\"\nvar b = `see Issue #3`\nvar c = \"reissue 5 times\"\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	hits := issueCitations(t, path)
	if len(hits) != 2 || hits[0].line != 4 || hits[1].line != 5 {
		t.Fatalf("citations %+v, want lines 4 and 5", hits)
	}
	src = "package x\n\nimport _ \"github.com/custody-dev/custody/internal/quote\"\n\nvar a = \"model it in package pack first\"\nvar b = \"see (backend/vm)\"\nvar c = \"the Debian package erofs-utils\"\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	hits = sourceCitations(t, path)
	if len(hits) != 2 || hits[0].line != 5 || hits[1].line != 6 {
		t.Fatalf("source citations %+v, want lines 5 and 6", hits)
	}
}

// page is one Markdown file of the repository's documentation.
type page struct {
	rel  string // relative to the repository root, slash-separated
	text string
}

func pages(t *testing.T) []page {
	t.Helper()
	root := testenv.ModuleRoot(t)
	var out []page
	add := func(rel string) {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page{filepath.ToSlash(rel), string(b)})
	}
	add("README.md")
	add("CONTRIBUTING.md")
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			add(rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 30 {
		t.Fatalf("found only %d pages", len(out))
	}
	return out
}

// fence matches a fenced code block; code spans are matched by codeSpan.
var (
	fence    = regexp.MustCompile("(?ms)^```.*?^```[ \t]*$")
	codeSpan = regexp.MustCompile("`[^`\n]*`")
	link     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading  = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *#*$`)
	testName = regexp.MustCompile(`\b(Test|Fuzz|Benchmark)[A-Z][A-Za-z0-9]+`)
)

// prose is a page without its code: what a link or a citation can be in.
func prose(text string) string {
	return codeSpan.ReplaceAllString(fence.ReplaceAllString(text, ""), "")
}

// TestDocsCiteNoIssuesOrTests: no page cites an issue, and no page for
// users (everything but docs/dev and CONTRIBUTING.md) names a test.
func TestDocsCiteNoIssuesOrTests(t *testing.T) {
	for _, p := range pages(t) {
		if m := citesIssue.FindString(p.text); m != "" {
			t.Errorf("%s cites an issue (%q): say what holds instead", p.rel, m)
		}
		if strings.HasPrefix(p.rel, "docs/dev/") || p.rel == "CONTRIBUTING.md" {
			continue
		}
		if m := testName.FindString(p.text); m != "" {
			t.Errorf("%s names the test %s: user pages say what holds; tests belong in docs/dev", p.rel, m)
		}
	}
}

// TestLinks resolves every relative link of every page: the file must
// exist inside the repository, and an anchor must name a heading of the
// page it points to.
func TestLinks(t *testing.T) {
	root := testenv.ModuleRoot(t)
	all := pages(t)
	anchors := map[string]map[string]bool{}
	for _, p := range all {
		anchors[p.rel] = slugs(p.text)
	}
	checked := 0
	for _, p := range all {
		for _, m := range link.FindAllStringSubmatch(prose(p.text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			file, frag, _ := strings.Cut(target, "#")
			rel := p.rel
			if file != "" {
				rel = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(p.rel), file)))
				if rel == ".." || strings.HasPrefix(rel, "../") {
					t.Errorf("%s: link %s leaves the repository", p.rel, target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
					t.Errorf("%s: link %s: %s does not exist", p.rel, target, rel)
					continue
				}
			}
			if frag == "" {
				continue
			}
			a, ok := anchors[rel]
			if !ok {
				t.Errorf("%s: link %s: an anchor into %s, which is no documentation page", p.rel, target, rel)
			} else if !a[frag] {
				t.Errorf("%s: link %s: %s has no heading #%s", p.rel, target, rel, frag)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d links", checked)
	}
}

// slugs are the anchors GitHub gives a page's headings: lower case,
// punctuation dropped, spaces to hyphens, a repeat numbered.
func slugs(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && !strings.ContainsRune("–—→∩’", r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestSlug pins the anchor rule on headings the pages have.
func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"What was revoked or deleted, and when": "what-was-revoked-or-deleted-and-when",
		"The microVM backend (vm)":              "the-microvm-backend-vm",
		"`custody verify` exit codes":           "custody-verify-exit-codes",
		"1. A directory and the binaries":       "1-a-directory-and-the-binaries",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
}

package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/custody-dev/custody/internal/daemonflags"
	"github.com/custody-dev/custody/internal/testenv"
)

// TestGeneratedDocsUpToDate regenerates the command and schema references
// and compares them with the pages in docs/reference: a command, flag,
// help text or schema field changed without make docs fails here, naming
// the page.
func TestGeneratedDocsUpToDate(t *testing.T) {
	t.Setenv("CUSTODY_CONTROL_SOCKET", "/elsewhere/control.sock")
	t.Setenv("CUSTODY_SUBMIT_SOCKET", "/elsewhere/submit.sock")
	root := testenv.ModuleRoot(t)
	fresh := t.TempDir()
	md, schemas := filepath.Join(fresh, "commands"), filepath.Join(fresh, "schemas")
	if err := writeDocs(md, "", schemas); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{md: "docs/reference/commands", schemas: "docs/reference/schemas"} {
		gen := readPages(t, dir)
		have := readPages(t, filepath.Join(root, want))
		if len(gen) < 4 {
			t.Fatalf("%s: generated only %d pages", want, len(gen))
		}
		for name, b := range gen {
			if old, ok := have[name]; !ok {
				t.Errorf("%s/%s is missing: run make docs", want, name)
			} else if !bytes.Equal(old, b) {
				t.Errorf("%s/%s is out of date: run make docs", want, name)
			}
		}
		for name := range have {
			if _, ok := gen[name]; !ok {
				t.Errorf("%s/%s documents nothing the CLI has: run make docs", want, name)
			}
		}
	}
	// The environment of whoever generates the pages never shows in them.
	if b, _ := os.ReadFile(filepath.Join(md, "custody.md")); bytes.Contains(b, []byte("/elsewhere/")) || !bytes.Contains(b, []byte("/run/custody/control.sock")) {
		t.Fatalf("custody.md shows the generating environment's sockets:\n%s", b)
	}
}

// TestDocsPagesCoverTheTree checks that every visible command has its
// Markdown and man page and the hidden docs command has none.
func TestDocsPagesCoverTheTree(t *testing.T) {
	dir := t.TempDir()
	md, man := filepath.Join(dir, "md"), filepath.Join(dir, "man")
	if err := writeDocs(md, man, ""); err != nil {
		t.Fatal(err)
	}
	if err := writeDaemonMan(man); err != nil {
		t.Fatal(err)
	}
	mdPages, manPages := readPages(t, md), readPages(t, man)
	for _, want := range []string{"custody.md", "custody_run.md", "custody_pack_up.md", "custody_grant_issue.md", "custodyd.md"} {
		if _, ok := mdPages[want]; !ok {
			t.Errorf("no Markdown page %s among %v", want, pageNames(mdPages))
		}
	}
	for _, want := range []string{"custody.1", "custody-run.1", "custody-pack-up.1", "custodyd.8"} {
		b, ok := manPages[want]
		if !ok || !bytes.HasPrefix(b, []byte(".nh\n.TH")) && !bytes.Contains(b, []byte(".TH ")) {
			t.Errorf("no man page %s among %v", want, pageNames(manPages))
		}
	}
	// custodyd's pages list every flag the daemon parses, by the name it
	// parses.
	fs := flag.NewFlagSet("custodyd", flag.ContinueOnError)
	daemonflags.Define(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if !bytes.Contains(mdPages["custodyd.md"], []byte("--"+f.Name+" ")) {
			t.Errorf("custodyd.md does not document --%s", f.Name)
		}
		if !bytes.Contains(manPages["custodyd.8"], []byte(`\fB--`+f.Name+`\fP`)) {
			t.Errorf("custodyd.8 does not document --%s", f.Name)
		}
	})
	if _, ok := mdPages["custody_docs.md"]; ok {
		t.Error("the hidden docs command has a page")
	}
	if len(mdPages) != len(manPages) {
		t.Errorf("%d Markdown pages but %d man pages", len(mdPages), len(manPages))
	}
}

// TestDocsCommandUsage: the hidden command still refuses a call that
// names nothing to write, as a usage error.
func TestDocsCommandUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(t.Context(), []string{"docs"}, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), "--markdown") {
		t.Fatalf("custody docs: exit %d, %q", code, errb.String())
	}
}

func readPages(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	pages := map[string][]byte{}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		pages[e.Name()] = b
	}
	return pages
}

func pageNames(m map[string][]byte) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestDocumentedCommandsExist reads every command line of the
// documentation (a line of a code block, or a code span, that starts with
// custody) and checks that its command exists and takes each --flag the
// line gives it: a renamed command or flag fails here, naming the page.
func TestDocumentedCommandsExist(t *testing.T) {
	root := testenv.ModuleRoot(t)
	var files []string
	for _, dir := range []string{".", "docs"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && path != filepath.Join(root, dir) && (dir == "." || filepath.Base(path) == "commands") {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(path, ".md") {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	tree := docsTree()
	daemon := flag.NewFlagSet("custodyd", flag.ContinueOnError)
	daemonflags.Define(daemon)
	checked, daemonChecked := 0, 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for _, line := range commandLines(string(b), "custodyd ") {
			daemonChecked++
			for _, name := range lineFlags(line) {
				if daemon.Lookup(name) == nil {
					t.Errorf("%s: %q: custodyd takes no --%s", rel, line, name)
				}
			}
		}
		for _, line := range commandLines(string(b), "custody ") {
			words := strings.Fields(line)
			cmd, rest, err := tree.Find(words[1:])
			if err != nil || cmd == tree && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") && !strings.ContainsAny(rest[0], "|[") {
				t.Errorf("%s: %q: no such command", rel, line)
				continue
			}
			checked++
			for _, name := range lineFlags(line) {
				if cmd.Flags().Lookup(name) == nil && cmd.InheritedFlags().Lookup(name) == nil {
					t.Errorf("%s: %q: %s takes no --%s", rel, line, cmd.CommandPath(), name)
				}
			}
		}
	}
	if checked < 60 || daemonChecked < 5 {
		t.Fatalf("checked only %d custody and %d custodyd command lines", checked, daemonChecked)
	}
}

// lineFlags are the --flags a command line gives, up to a # comment; a
// choice of flags (--a|--b) gives each.
func lineFlags(line string) []string {
	var out []string
	for _, w := range strings.Fields(line)[1:] {
		if strings.HasPrefix(w, "#") {
			break
		}
		w = strings.Trim(w, "[]()`")
		name, _, _ := strings.Cut(strings.TrimPrefix(w, "--"), "=")
		if !strings.HasPrefix(w, "--") || name == "" {
			continue
		}
		for _, alt := range strings.Split(name, "|") {
			out = append(out, strings.TrimPrefix(alt, "--"))
		}
	}
	return out
}

// commandLines are the lines of a page's code blocks, and its code spans,
// that start with prefix (the command and a space).
func commandLines(text, prefix string) []string {
	var out []string
	inBlock := false
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock {
			trimmed = strings.TrimPrefix(trimmed, "$ ")
			if strings.HasPrefix(trimmed, prefix) {
				out = append(out, trimmed)
			}
			continue
		}
		// Odd pieces between backquotes are the code spans.
		pieces := strings.Split(line, "`")
		for i := 1; i < len(pieces)-1; i += 2 {
			if strings.HasPrefix(pieces[i], prefix) {
				out = append(out, pieces[i])
			}
		}
	}
	return out
}

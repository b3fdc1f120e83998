package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
	mdPages, manPages := readPages(t, md), readPages(t, man)
	for _, want := range []string{"custody.md", "custody_run.md", "custody_pack_up.md", "custody_grant_issue.md"} {
		if _, ok := mdPages[want]; !ok {
			t.Errorf("no Markdown page %s among %v", want, pageNames(mdPages))
		}
	}
	for _, want := range []string{"custody.1", "custody-run.1", "custody-pack-up.1"} {
		b, ok := manPages[want]
		if !ok || !bytes.HasPrefix(b, []byte(".nh\n.TH")) && !bytes.Contains(b, []byte(".TH ")) {
			t.Errorf("no man page %s among %v", want, pageNames(manPages))
		}
	}
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

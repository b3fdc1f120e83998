package evidence_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/evidence"
)

// TestMissingOutputs: every listed file must be a regular file reached
// without a symlink; a missing one, a directory, a file behind a
// symlinked directory, a symlink and an escaping path are all named.
func TestMissingOutputs(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "d"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "d", "b"), []byte("b"), 0o644))
	must(os.Symlink("d", filepath.Join(dir, "link")))
	must(os.Symlink("a", filepath.Join(dir, "alink")))
	if err := evidence.MissingOutputs(dir, []string{"a", "d/b"}); err != nil {
		t.Fatalf("all there: %v", err)
	}
	err := evidence.MissingOutputs(dir, []string{"a", "gone", "d", "link/b", "alink", "../a", "d/b"})
	if !errors.Is(err, evidence.ErrOutputsMissing) || !strings.Contains(err.Error(), "5 of the 7") {
		t.Fatalf("missing files: %v", err)
	}
	for _, name := range []string{`"gone"`, `"d"`, `"link/b"`, `"alink"`, `"../a"`} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("%s is not named: %v", name, err)
		}
	}
}

package image

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// An absolute symlink resolves at the tree's root, as in a container; one
// that climbs out with ".." stays inside too, and never reads the host.
func TestTreeFS(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"usr/bin", "bin", "etc"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "usr/bin/gcc"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"bin/cc": "/usr/bin/gcc", "etc/passwd": "../../../../etc/passwd", "etc/shadow": "/etc/shadow"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	tree := TreeFS(dir)
	fi, err := fs.Stat(tree, "bin/cc")
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("bin/cc -> /usr/bin/gcc: %v, %v", fi, err)
	}
	for _, name := range []string{"etc/passwd", "etc/shadow"} {
		if _, err := fs.ReadFile(tree, name); err == nil {
			t.Errorf("%s read a file outside the tree", name)
		}
	}
	if _, err := fs.Stat(tree, "../x"); err == nil {
		t.Error("an invalid name was resolved")
	}
}

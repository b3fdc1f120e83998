package durable_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/internal/durable"
)

// TestWriteFile: a file is replaced whole, with its mode, and no staging
// file stays; a write that cannot happen (a directory where the staging
// file goes) leaves the old content.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, data := range []string{"one\n", "two\n"} {
		if err := durable.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); string(b) != data {
			t.Fatalf("holds %q, want %q", b, data)
		}
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if _, err := os.Lstat(path + ".partial"); !os.IsNotExist(err) {
		t.Fatalf("staging file left: %v", err)
	}
	if err := os.Mkdir(path+".partial", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := durable.WriteFile(path, []byte("three\n"), 0o600); err == nil {
		t.Fatal("a write with no room for its staging file succeeded")
	}
	if b, _ := os.ReadFile(path); string(b) != "two\n" {
		t.Fatalf("a failed write changed the file: %q", b)
	}
}

package treehash

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLstatAtAgreesWithFstatat: the walk's statx-based lstat gives, for a
// file, a symlink and a directory, exactly what fstatat does, so an index
// recorded by either matches the other.
func TestLstatAtAgreesWithFstatat(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("f", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for _, name := range []string{"f", "l", "d"} {
		var got, want unix.Stat_t
		var sx unix.Statx_t
		if err := lstatAt(fd, name, &got, &sx); err != nil {
			t.Fatal(err)
		}
		if err := unix.Fstatat(fd, name, &want, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("%s: lstatAt %+v, fstatat %+v", name, got, want)
		}
	}
	var st unix.Stat_t
	var sx unix.Statx_t
	if err := lstatAt(fd, "missing", &st, &sx); err != unix.ENOENT {
		t.Fatalf("lstatAt of a missing name: %v, want ENOENT", err)
	}
}

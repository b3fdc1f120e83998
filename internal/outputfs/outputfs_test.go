package outputfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/internal/testenv"
)

// TestMountIdentityAgrees checks the statx identity against mountinfo's,
// and that a directory with nothing mounted on it has none.
func TestMountIdentityAgrees(t *testing.T) {
	testenv.Root(t)
	d := t.TempDir()
	if err := unix.Mount("tmpfs", d, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(d, 0)
	a, err := MountIdentity(d)
	b, err2 := mountIdentityFromTable(d)
	if err != nil || err2 != nil || a["mountId"] != b["mountId"] || a["fstype"] != b["fstype"] {
		t.Fatalf("statx %v %v, table %v %v", a, err, b, err2)
	}
	if _, err := MountIdentity(t.TempDir()); err == nil {
		t.Fatal("a plain directory has a mount identity")
	}
}

// TestMountBoundsBytesAndFiles: the legitimate write fits, a write past
// the byte bound and an entry past the inode bound fail.
func TestMountBoundsBytesAndFiles(t *testing.T) {
	testenv.Root(t)
	d := t.TempDir()
	if err := Mount(d, 64<<10, 2, nil); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(d, 0)
	if err := os.WriteFile(filepath.Join(d, "a"), make([]byte, 4096), 0o644); err != nil {
		t.Fatalf("a write within the bounds: %v", err)
	}
	if used, err := Used(d); err != nil || used < 4096 {
		t.Errorf("used %d %v", used, err)
	}
	if err := os.WriteFile(filepath.Join(d, "b"), make([]byte, 128<<10), 0o644); !errors.Is(err, unix.ENOSPC) {
		t.Errorf("a write past the byte bound: %v, want ENOSPC", err)
	}
	os.Remove(filepath.Join(d, "b"))
	if err := os.WriteFile(filepath.Join(d, "c"), nil, 0o644); err != nil {
		t.Fatalf("the second entry: %v", err)
	}
	if err := os.WriteFile(filepath.Join(d, "d"), nil, 0o644); !errors.Is(err, unix.ENOSPC) {
		t.Errorf("an entry past the inode bound: %v, want ENOSPC", err)
	}
	if err := Mount(t.TempDir(), 0, 1, nil); err == nil {
		t.Error("a zero byte bound was mounted")
	}
}

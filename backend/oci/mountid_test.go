package oci

import (
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
	a, err := mountIdentity(d)
	b, err2 := mountIdentityFromTable(d)
	if err != nil || err2 != nil || a["mountId"] != b["mountId"] || a["fstype"] != b["fstype"] {
		t.Fatalf("statx %v %v, table %v %v", a, err, b, err2)
	}
	if _, err := mountIdentity(t.TempDir()); err == nil {
		t.Fatal("a plain directory has a mount identity")
	}
}

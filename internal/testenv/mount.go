package testenv

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// SpacedMount mounts a small tmpfs on a directory whose name has a space
// ("dir with space") under a temporary directory and returns its path; the
// kernel writes that space as \040 in mountinfo. It is unmounted when the
// test ends. It needs root.
func SpacedMount(t testing.TB) string {
	t.Helper()
	Root(t) // loud without root, and a failure under CI
	dir := filepath.Join(t.TempDir(), "dir with space")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("custody-test", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64k"); err != nil {
		t.Fatalf("mount tmpfs on %q: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %q: %v", dir, err)
		}
	})
	return dir
}

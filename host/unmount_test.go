package host_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/snapshot"
)

func unmount(p string) error { return unix.Unmount(p, 0) }

// A seal check's tree left mounted at a staging name by a crash is
// detached and removed by recovery. Legit: the image store's own entries
// stay.
func TestRecoverUnmountsALeftSealMount(t *testing.T) {
	h := newHarness(t)
	images := filepath.Join(h.cfg.StateDir, "images")
	before, err := os.ReadDir(images)
	if err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(images, snapshot.StagingPrefix+"seal-crashed")
	if err := os.Mkdir(left, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", left, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(left, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(left, "f"), []byte("x"), 0o400); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(left, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.r.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(left); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the staging seal mount is still there: %v", err)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mi), left) {
		t.Errorf("a mount at or under %s is left", left)
	}
	after, err := os.ReadDir(images)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("image store entries %v, want %v", after, before)
	}
}

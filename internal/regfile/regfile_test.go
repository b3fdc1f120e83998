package regfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/testenv"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(good, filepath.Join(dir, "link-good")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{good, filepath.Join(dir, "link-good")} {
		if b, err := ReadFile(p, 5); err != nil || string(b) != "hello" {
			t.Errorf("ReadFile(%s) = %q, %v", p, b, err)
		}
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "link-zero")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path, says string
		want       error
	}{
		{fifo, "named pipe (FIFO)", ErrNotRegular},
		{"/dev/zero", "character device", ErrNotRegular},
		{filepath.Join(dir, "link-zero"), "character device", ErrNotRegular},
		{dir, "directory", ErrNotRegular},
		{good + "-big", "is 5 bytes; the limit is 4", ErrTooLarge},
	}
	if err := os.WriteFile(good+"-big", []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		start := time.Now()
		_, err := ReadFile(c.path, 4)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "fix:") {
			t.Errorf("ReadFile(%s) = %v, want %v saying %q and a fix", c.path, err, c.want, c.says)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("ReadFile(%s) took %s", c.path, d)
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "none"), 4); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// TestReadSecret: a root-owned 0600 regular file is read; a link to it, a
// directory on its path that is a link, a wider mode, another owner, a FIFO and an oversized file are each refused
// with their own error, and the FIFO without blocking.
func TestReadSecret(t *testing.T) {
	testenv.Root(t) // the secret files must be root's
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := ReadSecret(good, 64); err != nil || string(v) != "s3cret" {
		t.Fatalf("ReadSecret(good) = %q, %v", v, err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(good, link)
	wide := filepath.Join(dir, "wide")
	os.WriteFile(wide, []byte("x"), 0o600)
	os.Chmod(wide, 0o640)
	other := filepath.Join(dir, "other")
	os.WriteFile(other, []byte("x"), 0o600)
	os.Chown(other, 1000, 1000)
	fifo := filepath.Join(dir, "fifo")
	syscall.Mkfifo(fifo, 0o600)
	big := filepath.Join(dir, "big")
	os.WriteFile(big, make([]byte, 65), 0o600)
	// A directory on the way that is a link: the operator's credential
	// directory replaced by a link to another holding a file of that name.
	realDir := filepath.Join(dir, "real")
	os.Mkdir(realDir, 0o700)
	os.WriteFile(filepath.Join(realDir, "good"), []byte("other"), 0o600)
	dirLink := filepath.Join(dir, "creds")
	os.Symlink(realDir, dirLink)
	viaLink := filepath.Join(dirLink, "good")
	_, err := ReadSecret(viaLink, 64)
	if !errors.Is(err, ErrLinkInPath) || !errors.Is(err, syscall.ELOOP) || !strings.Contains(err.Error(), "its directory "+dirLink+" is a symbolic link") {
		t.Errorf("ReadSecret through a linked directory = %v, want ErrLinkInPath naming %s", err, dirLink)
	}
	if _, err := ReadSecret("relative/good", 64); err == nil {
		t.Error("ReadSecret of a relative path succeeded")
	}
	for path, want := range map[string]error{link: ErrLinkInPath, viaLink: ErrLinkInPath, wide: ErrNotSecret, other: ErrNotSecret, fifo: ErrNotRegular, big: ErrTooLarge} {
		done := make(chan error, 1)
		go func() { _, err := ReadSecret(path, 64); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, want) {
				t.Errorf("ReadSecret(%s) = %v, want %v", filepath.Base(path), err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("ReadSecret(%s) blocked", filepath.Base(path))
		}
	}
}

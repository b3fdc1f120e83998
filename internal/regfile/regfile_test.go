package regfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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

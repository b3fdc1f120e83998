package procfs

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// ReadFile reads what os.ReadFile reads, whatever the size against the
// hint (a file of size 0 that is not empty included: /proc's); a missing
// file is fs.ErrNotExist and a file over the limit is refused.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{0, 1, 63, 64, 65, 200, 4096, 100000} {
		p := filepath.Join(dir, "f")
		want := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
		if err := os.WriteFile(p, want, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, hint := range []int{0, 64, 4096} {
			got, err := ReadFile(p, hint)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%d bytes, hint %d: got %d bytes, %v", n, hint, len(got), err)
			}
		}
	}
	want, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile("/proc/self/mountinfo", 64)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("mountinfo: %v\n got %q\nwant %q", err, got, want)
	}
	d, err := syscall.Open("/proc/self", oPath|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(d)
	if got, err := ReadFileAt(d, "mountinfo", 4096); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("mountinfo at /proc/self: %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing"), 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, maxPseudoFile+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(big, 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a file over the limit: %v", err)
	}
}

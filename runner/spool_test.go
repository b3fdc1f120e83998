package runner

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// TestSpoolCapsAndDigests: a spool is a fresh 0600 file; it keeps and
// digests StreamCap bytes, passes them on live, records that more was
// written, tells the live writer once, and is gone when closed.
func TestSpoolCapsAndDigests(t *testing.T) {
	dir := t.TempDir()
	var live bytes.Buffer
	s, err := newSpool(dir, "r1", "stdout", &live)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newSpool(dir, "r1", "stdout", nil); err == nil {
		t.Fatal("a second spool opened over the first")
	}
	fi, err := os.Stat(s.f.Name())
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("spool mode %v %v, want 0600", fi.Mode(), err)
	}
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for range StreamCap/len(chunk) + 2 {
		if n, err := s.Write(chunk); n != len(chunk) || err != nil {
			t.Fatalf("write past the cap: %d %v", n, err)
		}
	}
	d, err := s.close()
	if err != nil {
		t.Fatal(err)
	}
	kept := bytes.Repeat([]byte("x"), StreamCap)
	sum := sha256.Sum256(kept)
	if d.Bytes != StreamCap || !d.Truncated || d.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("record %+v", d)
	}
	if !bytes.HasPrefix(live.Bytes(), kept) || strings.Count(live.String()[StreamCap:], "truncated") != 1 {
		t.Fatalf("live writer got %d bytes, tail %q", live.Len(), live.String()[StreamCap:])
	}
	if _, err := os.Stat(s.f.Name()); !os.IsNotExist(err) {
		t.Fatalf("spool file still there: %v", err)
	}
}

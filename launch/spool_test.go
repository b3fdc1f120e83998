package launch

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/custody-dev/custody/host"
)

// TestSpoolCapsAndDigests: a spool keeps and digests host.StreamCap bytes,
// passes them on live, takes every write whole, records that more was
// written and tells the live writer once.
func TestSpoolCapsAndDigests(t *testing.T) {
	var live bytes.Buffer
	s := newSpool("stdout", &live)
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for range host.StreamCap/len(chunk) + 2 {
		if n, err := s.Write(chunk); n != len(chunk) || err != nil {
			t.Fatalf("write past the cap: %d %v", n, err)
		}
	}
	d := s.digest()
	kept := bytes.Repeat([]byte("x"), host.StreamCap)
	sum := sha256.Sum256(kept)
	if d.Bytes != host.StreamCap || !d.Truncated || d.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("record %+v", d)
	}
	if !bytes.HasPrefix(live.Bytes(), kept) || strings.Count(live.String()[host.StreamCap:], "truncated") != 1 {
		t.Fatalf("live writer got %d bytes, tail %q", live.Len(), live.String()[host.StreamCap:])
	}
}

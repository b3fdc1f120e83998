package snapshot

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/treehash"
)

// TestTakeTreeAhead: a launch's take uses a verification of the stored
// copy started before it (VerifyAhead) only for the digest it verified
// and only while the store still names the very copy it walked. A copy
// swapped in after the verification, with one byte changed in place
// (size and mtime kept), is verified again and refused; so is one
// already changed when the verification ran.
func TestTakeTreeAhead(t *testing.T) {
	ctx := context.Background()
	dir, idx, src := settledSource(t)
	s, taken := takenIndexed(t, dir, idx, src)
	tree, err := s.Digest(ctx, src, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}

	// The legitimate case: verified ahead, then used.
	a := s.VerifyAhead(ctx, tree.Digest)
	got, err := s.TakeTree(ctx, src, tree, treehash.Options{}, a)
	if err != nil || got.Digest != taken.Digest || got.Path != taken.Path || got.Tree == nil || got.Tree.Digest != taken.Digest {
		t.Fatalf("take with a verification ahead: %+v %v", got, err)
	}
	a.Stop()
	a.Stop() // twice is fine

	// A verification of another digest is not used for this one.
	other := s.VerifyAhead(ctx, "sha256:"+repeatedHex('0'))
	if got, err := s.TakeTree(ctx, src, tree, treehash.Options{}, other); err != nil || got.Digest != taken.Digest {
		t.Fatalf("take with another digest's verification: %+v %v", got, err)
	}
	other.Stop()

	// Verified, then the stored copy swapped for a changed one.
	a = s.VerifyAhead(ctx, tree.Digest)
	if a.result(tree.Digest) == nil {
		t.Fatalf("verification ahead failed: %v", a.err)
	}
	swapped := filepath.Join(filepath.Dir(taken.Path), "data.old")
	if err := os.Rename(taken.Path, swapped); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", swapped, taken.Path).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	tamperInPlace(t, filepath.Join(taken.Path, "a.txt"))
	if _, err := s.TakeTree(ctx, src, tree, treehash.Options{}, a); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("take after the stored copy was swapped for a changed one: %v, want ErrCorrupt", err)
	}
	a.Stop()

	// Already changed when the verification ran: refused too.
	a = s.VerifyAhead(ctx, tree.Digest)
	if _, err := s.TakeTree(ctx, src, tree, treehash.Options{}, a); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("take over a stored copy changed before its verification: %v, want ErrCorrupt", err)
	}
	if !errors.Is(a.err, ErrCorrupt) {
		t.Fatalf("the verification ahead of a changed copy: %v, want ErrCorrupt", a.err)
	}
	a.Stop()
}

// repeatedHex is 64 copies of c: a well-formed digest's hex part.
func repeatedHex(c byte) string {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c
	}
	return string(b)
}

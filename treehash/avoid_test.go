package treehash_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/treehash"
)

// TestAvoid: a walk given the identities of a tree refuses another tree
// holding a hard link of one of its files, or the tree itself as root,
// with ErrAvoided; a tree that shares only content, not objects, walks.
func TestAvoid(t *testing.T) {
	dir := t.TempDir()
	private, work, copied := filepath.Join(dir, "private"), filepath.Join(dir, "work"), filepath.Join(dir, "copied")
	for _, d := range []string{filepath.Join(private, "sub"), work, copied} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(private, "sub", "answer.txt")
	if err := os.WriteFile(secret, []byte("42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(copied, "answer.txt"), []byte("42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ids, err := treehash.IdentitiesOf(context.Background(), []string{private, filepath.Join(dir, "missing")})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 3 {
		t.Fatalf("%d identities, want the root, sub and the file", len(ids))
	}
	opts := treehash.Options{Avoid: ids}
	if _, err := treehash.Dir(context.Background(), copied, opts); err != nil {
		t.Fatalf("a copy (other objects, same content): %v", err)
	}
	if err := os.Link(secret, filepath.Join(work, "answer.txt")); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{work, private, filepath.Join(private, "sub"), secret} {
		if _, err := treehash.Dir(context.Background(), root, opts); !errors.Is(err, treehash.ErrAvoided) {
			t.Errorf("walking %s: %v, want ErrAvoided", root, err)
		}
	}
	if _, err := treehash.Dir(context.Background(), work, treehash.Options{}); err != nil {
		t.Fatalf("the same tree without Avoid: %v", err)
	}
}

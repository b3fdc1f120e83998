package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/custody-dev/custody/treehash"
)

func TestReuse(t *testing.T) {
	ctx := context.Background()
	s, dir := newStore(t)
	src := makeSource(t)

	// New content: not reused, and nothing written.
	if _, ok, err := s.Reuse(ctx, src, treehash.Options{}); err != nil || ok {
		t.Fatalf("reuse of content the store lacks: ok=%v err=%v", ok, err)
	}
	if names := append(storeNames(t, dir), objectNames(t, dir)...); len(names) != 0 {
		t.Fatalf("reuse wrote %v", names)
	}

	// Held content: the stored copy, without a staging copy.
	taken, err := s.Take(ctx, src, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	before := storeNames(t, dir)
	snap, ok, err := s.Reuse(ctx, src, treehash.Options{})
	if err != nil || !ok || snap.Digest != taken.Digest || snap.Path != taken.Path {
		t.Fatalf("reuse of held content: %+v ok=%v err=%v, want %+v", snap, ok, err, taken)
	}
	if after := storeNames(t, dir); !slices.Equal(before, after) {
		t.Fatalf("reuse changed the store: %v to %v", before, after)
	}

	// A tampered stored copy is refused, not handed out.
	p := filepath.Join(taken.Path, "a.txt")
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("ALPHA"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o444); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Reuse(ctx, src, treehash.Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reuse of a tampered copy: err = %v, want ErrCorrupt", err)
	}
}

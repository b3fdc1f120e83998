package treehash

import (
	"context"
	"slices"
	"testing"
)

// TestLeave: an entry Leave returns true for is left out with all it
// holds, counts against no bound, and the tree's digest is that of the
// tree without it; without Leave the walk sees everything.
func TestLeave(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"keep": "k", "skip/a": "a", "skip/b": "b", "x/skip": "s", "x/y": "y"})
	var asked []string
	leave := func(p string) bool {
		asked = append(asked, p)
		return p == "skip" || p == "x/skip"
	}
	got, err := Dir(context.Background(), dir, Options{Leave: leave, MaxEntries: 3})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range got.Entries {
		paths = append(paths, e.Path)
	}
	if !slices.Equal(paths, []string{"keep", "x", "x/y"}) || slices.Contains(asked, "skip/a") {
		t.Fatalf("entries %v, asked %v", paths, asked)
	}
	want := t.TempDir()
	writeTree(t, want, map[string]string{"keep": "k", "x/y": "y"})
	if w, err := Dir(context.Background(), want, Options{}); err != nil || w.Digest != got.Digest {
		t.Fatalf("digest %s, the tree without the entries left out %v %v", got.Digest, w, err)
	}
	if all, err := Dir(context.Background(), dir, Options{}); err != nil || len(all.Entries) != 7 {
		t.Fatalf("without Leave: %v %v", all, err)
	}
}

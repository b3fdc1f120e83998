package snapshot

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/custody-dev/custody/treehash"
)

// BenchmarkTakeSmallOutput takes a phase's typical small output (an empty
// directory, and one with a small file) into a store that already holds
// the same content, as repeated runs do: Take stages a copy and discards
// it, Reuse digests in place and re-hashes the stored copy.
func BenchmarkTakeSmallOutput(b *testing.B) {
	ctx := context.Background()
	for _, files := range []int{0, 1} {
		src := b.TempDir()
		for i := range files {
			if err := os.WriteFile(filepath.Join(src, "f"+string(rune('a'+i))), []byte("result\n"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		s, err := New(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		name := map[int]string{0: "empty", 1: "one-file"}[files]
		b.Run(name+"/take", func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Take(ctx, src, treehash.Options{MaxBytes: 1 << 20}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/reuse", func(b *testing.B) {
			for b.Loop() {
				if _, ok, err := s.Reuse(ctx, src, treehash.Options{MaxBytes: 1 << 20}); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

// BenchmarkTakeUnchangedIndexed takes an unchanged 10,000-file input into
// a store that holds it, with the index warm: the launch's cost of an
// unchanged input (walk the source and the stored copy by their indexes).
func BenchmarkTakeUnchangedIndexed(b *testing.B) {
	ctx := context.Background()
	src := b.TempDir()
	for i := range 10000 {
		if err := os.WriteFile(filepath.Join(src, "f"+strconv.Itoa(i)), []byte("file "+strconv.Itoa(i)+"\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	base := b.TempDir()
	s := indexedStore(b, filepath.Join(base, "snapshots"), filepath.Join(base, "index"))
	settle()
	if _, err := s.Take(ctx, src, treehash.Options{}); err != nil {
		b.Fatal(err)
	}
	settle()
	if _, err := s.Take(ctx, src, treehash.Options{}); err != nil { // records the stored copy
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Take(ctx, src, treehash.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

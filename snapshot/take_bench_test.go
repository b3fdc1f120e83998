package snapshot

import (
	"context"
	"os"
	"path/filepath"
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

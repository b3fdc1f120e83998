package treehash

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkDir hashes (a) 64 MiB in 4 files and (b) 10k small files.
func BenchmarkDir(b *testing.B) {
	b.Run("64MiB-4files", func(b *testing.B) {
		dir := b.TempDir()
		chunk := make([]byte, 16<<20)
		for i := range chunk {
			chunk[i] = byte(i * 7)
		}
		for i := range 4 {
			chunk[0] = byte(i)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), chunk, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		benchDir(b, dir, 64<<20)
	})
	b.Run("10k-small", func(b *testing.B) {
		dir := b.TempDir()
		var total int64
		for i := range 10_000 {
			sub := filepath.Join(dir, fmt.Sprintf("d%02d", i%100))
			if i < 100 {
				if err := os.Mkdir(sub, 0o755); err != nil {
					b.Fatal(err)
				}
			}
			data := []byte(fmt.Sprintf("small file number %d\n", i))
			total += int64(len(data))
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d", i)), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		benchDir(b, dir, total)
	})
}

func benchDir(b *testing.B, dir string, bytes int64) {
	b.SetBytes(bytes)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		tr, err := Dir(context.Background(), dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if tr.Bytes != bytes {
			b.Fatalf("Bytes = %d, want %d", tr.Bytes, bytes)
		}
	}
}

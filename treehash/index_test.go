package treehash

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// countingIndex is an in-memory Index that counts what a walk asks of it.
type countingIndex struct {
	mu               sync.Mutex
	m                map[FileStat]string
	hits, misses, rs int
}

func (c *countingIndex) Lookup(st FileStat) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.m[st]
	if ok {
		c.hits++
	} else {
		c.misses++
	}
	return s, ok
}

func (c *countingIndex) Record(st FileStat, sum string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[st] = sum
	c.rs++
}

func (c *countingIndex) reset() { c.hits, c.misses, c.rs = 0, 0, 0 }

// settle waits out the racy window, so that files written before it are
// old enough to be recorded (a lower bound on elapsed time, not a timing
// assertion).
func settle() { time.Sleep(RacyWindow + 100*time.Millisecond) }

// TestIndexTamperInPlace: a walk with an index reads only files whose
// identity and change times moved. Changing one byte in place, keeping the
// size, and putting the mtime back with utimes still moves the ctime: the
// next walk re-reads that file and describes the new bytes, exactly as a
// walk without an index does.
func TestIndexTamperInPlace(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"a": "alpha\n", "sub/b": "bravo\n", "sub/c": "charlie\n"})
	ctx := context.Background()
	idx := &countingIndex{m: map[FileStat]string{}}
	settle()

	first, err := Dir(ctx, dir, Options{Index: idx})
	if err != nil {
		t.Fatal(err)
	}
	if idx.hits != 0 || idx.rs != 3 {
		t.Fatalf("first walk: %d hits, %d recorded; want 0 and 3", idx.hits, idx.rs)
	}
	idx.reset()
	again, err := Dir(ctx, dir, Options{Index: idx})
	if err != nil || again.Digest != first.Digest {
		t.Fatalf("unchanged walk: %v %v, want %s", again, err, first.Digest)
	}
	if idx.hits != 3 || idx.misses != 0 || idx.rs != 0 {
		t.Fatalf("unchanged walk read files: %d hits, %d misses, %d recorded; want 3, 0, 0", idx.hits, idx.misses, idx.rs)
	}

	// One byte changed in place; size and mtime put back.
	p := filepath.Join(dir, "sub", "b")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("B"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Stat(p); after.Size() != fi.Size() || !after.ModTime().Equal(fi.ModTime()) {
		t.Fatalf("the tamper moved size or mtime: %v %v", after.Size(), after.ModTime())
	}

	idx.reset()
	tampered, err := Dir(ctx, dir, Options{Index: idx})
	if err != nil {
		t.Fatal(err)
	}
	full, err := Dir(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tampered.Digest == first.Digest || tampered.Digest != full.Digest {
		t.Fatalf("after an in-place change the indexed walk says %s, a full walk %s, the old digest was %s", tampered.Digest, full.Digest, first.Digest)
	}
	if idx.hits != 2 || idx.misses != 1 {
		t.Fatalf("after one change: %d hits, %d misses; want 2 and 1", idx.hits, idx.misses)
	}
	// Changed within the racy window: re-read, but not recorded yet.
	if idx.rs != 0 {
		t.Fatalf("a file changed within the racy window was recorded (%d)", idx.rs)
	}
}

// TestIndexIgnoredByVisitor: a walk that mirrors the tree reads every
// file, index or not: the mirror must get the bytes.
func TestIndexIgnoredByVisitor(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"a": "alpha\n"})
	idx := &countingIndex{m: map[FileStat]string{}}
	if _, err := Walk(context.Background(), dir, Options{Index: idx}, nopVisitor{}); err != nil {
		t.Fatal(err)
	}
	if idx.hits+idx.misses+idx.rs != 0 {
		t.Fatalf("a mirroring walk used the index: %+v", idx)
	}
}

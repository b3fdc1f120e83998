package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/custody-dev/custody/treehash"
)

// indexedStore opens the store in dir with its index in idx.
func indexedStore(t testing.TB, dir, idx string) *Store {
	t.Helper()
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.UseIndex(idx); err != nil {
		t.Fatal(err)
	}
	return s
}

// tamperInPlace changes the first byte of p, keeping its size, mode and
// mtime (put back with utimes): only the ctime moves.
func tamperInPlace(t *testing.T, p string) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x20
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, fi.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Stat(p); after.Size() != fi.Size() || !after.ModTime().Equal(fi.ModTime()) {
		t.Fatalf("the tamper of %s moved its size or mtime", p)
	}
}

// takenIndexed opens an indexed store in dir (index idx) and takes src
// into it.
func takenIndexed(t *testing.T, dir, idx, src string) (*Store, *Snapshot) {
	t.Helper()
	s := indexedStore(t, dir, idx)
	taken, err := s.Take(context.Background(), src, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s, taken
}

// settle waits out the racy window (a lower bound, not a timing
// assertion): files changed before it may then be recorded.
func settle() { time.Sleep(treehash.RacyWindow + 100*time.Millisecond) }

// settledSource returns a store and an index directory to open, and a
// source tree older than the racy window.
func settledSource(t *testing.T) (dir, idx, src string) {
	base := t.TempDir()
	src = makeSource(t)
	settle()
	return filepath.Join(base, "snapshots"), filepath.Join(base, "index"), src
}

// TestIndexSurvivesRestartAndCatchesTamper: the index of a root walked by
// one store is used by the next store over the same directories (a
// restarted runner), and still catches a one-byte change in place that
// keeps size and mtime, in an input (a new digest) and in a stored copy
// (refused as corrupt).
func TestIndexSurvivesRestartAndCatchesTamper(t *testing.T) {
	ctx := context.Background()
	dir, idx, src := settledSource(t)
	s, taken := takenIndexed(t, dir, idx, src)
	settle()
	if again, err := s.Take(ctx, src, treehash.Options{}); err != nil || again.Digest != taken.Digest {
		t.Fatalf("second take: %v %v", again, err)
	}

	// Restarted: the indexes of the input and of the stored copy are read
	// back from disk.
	s2 := indexedStore(t, dir, idx)
	for _, root := range []string{indexRoot(src, ""), indexRoot(taken.Path, dir)} {
		ri := s2.index.root(root)
		ri.load()
		if len(ri.cur) != taken.Tree.Files {
			t.Fatalf("index of %q after restart: %d entries, want %d", root, len(ri.cur), taken.Tree.Files)
		}
	}
	if again, err := s2.Take(ctx, src, treehash.Options{}); err != nil || again.Digest != taken.Digest {
		t.Fatalf("take after restart: %v %v", again, err)
	}

	// The stored copy changed in place: refused, not handed out.
	tamperInPlace(t, filepath.Join(taken.Path, "a.txt"))
	if _, err := s2.Take(ctx, src, treehash.Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("take over a stored copy changed in place: %v, want ErrCorrupt", err)
	}

	// The input changed in place: a new digest, the bytes as they are now.
	tamperInPlace(t, filepath.Join(src, "sub", "b.txt"))
	got, err := s2.Digest(ctx, src, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	full, err := Digest(ctx, src, treehash.Options{})
	if err != nil || got.Digest != full.Digest || got.Digest == taken.Digest {
		t.Fatalf("digest after an in-place change: %s; a full read says %s (%v); before it was %s", got.Digest, full.Digest, err, taken.Digest)
	}
}

// TestIndexNotTrusted: an index file that is malformed, or is not the
// runner's own private file, is an empty index: the walk reads everything.
func TestIndexNotTrusted(t *testing.T) {
	ctx := context.Background()
	dir, idx, src := settledSource(t)
	s := indexedStore(t, dir, idx)
	want, err := s.Digest(ctx, src, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	path := s.index.root(indexRoot(src, "")).path
	for name, spoil := range map[string]func() error{
		"malformed":      func() error { return os.WriteFile(path, []byte("{not json"), 0o600) },
		"group-readable": func() error { return os.Chmod(path, 0o640) },
		"another root's": func() error {
			return os.WriteFile(path, []byte(`{"root":"/elsewhere","entries":[]}`), 0o600)
		},
	} {
		// A fresh store: a walk that records the index again, then the spoil.
		if _, err := indexedStore(t, dir, idx).Digest(ctx, src, treehash.Options{}); err != nil {
			t.Fatal(err)
		}
		if err := spoil(); err != nil {
			t.Fatal(err)
		}
		s := indexedStore(t, dir, idx)
		ri := s.index.root(indexRoot(src, ""))
		ri.load()
		if len(ri.cur) != 0 {
			t.Fatalf("%s index: %d entries trusted", name, len(ri.cur))
		}
		if got, err := s.Digest(ctx, src, treehash.Options{}); err != nil || got.Digest != want.Digest {
			t.Fatalf("%s index: digest %v %v, want %s", name, got, err, want.Digest)
		}
	}
}

// TestIndexKeptTreeFollowsEveryChange: a walk that finds the entries of
// the root's last walk returns that walk's tree without sorting and
// hashing again; any change to an entry (its bytes in place with size and
// mtime kept, its mode, its name, a new entry) gives the tree a full
// read gives, and a tree handed out is the caller's own.
func TestIndexKeptTreeFollowsEveryChange(t *testing.T) {
	ctx := context.Background()
	dir, idx, src := settledSource(t)
	s := indexedStore(t, dir, idx)
	check := func(what string) *treehash.Tree {
		t.Helper()
		got, err := s.Digest(ctx, src, treehash.Options{})
		if err != nil {
			t.Fatal(err)
		}
		full, err := Digest(ctx, src, treehash.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Digest != full.Digest || len(got.Entries) != len(full.Entries) {
			t.Fatalf("%s: indexed walk %s (%d entries), full read %s (%d entries)", what, got.Digest, len(got.Entries), full.Digest, len(full.Entries))
		}
		for i := range got.Entries {
			if got.Entries[i] != full.Entries[i] {
				t.Fatalf("%s: entry %d is %+v, a full read says %+v", what, i, got.Entries[i], full.Entries[i])
			}
		}
		return got
	}
	first := check("first walk")
	settle()
	check("recorded")
	kept := check("unchanged")
	if kept.Digest != first.Digest {
		t.Fatalf("unchanged tree: %s, was %s", kept.Digest, first.Digest)
	}
	kept.Entries[0].Path = "spoiled by the caller"
	check("after the caller changed its copy")

	tamperInPlace(t, filepath.Join(src, "a.txt"))
	if check("a byte changed in place").Digest == first.Digest {
		t.Fatal("a byte changed in place kept the digest")
	}
	if err := os.Chmod(filepath.Join(src, "sub", "b.txt"), 0o640); err != nil {
		t.Fatal(err)
	}
	check("a mode changed")
	if err := os.Rename(filepath.Join(src, "sub", "b.txt"), filepath.Join(src, "sub", "c.txt")); err != nil {
		t.Fatal(err)
	}
	check("a file renamed")
	mustWrite(t, filepath.Join(src, "sub", "new.txt"), "new", 0o644)
	check("a file added")
}

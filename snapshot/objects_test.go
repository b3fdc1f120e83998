package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/custody-dev/custody/treehash"
)

// lstat is the lstat of p.
func lstat(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

// takeAroundChange takes src, changes its file sub/b.txt and takes it
// again.
func takeAroundChange(t *testing.T, s *Store, src string) (first, second *Snapshot) {
	t.Helper()
	var err error
	if first, err = s.Take(context.Background(), src, treehash.Options{}); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(src, "sub", "b.txt"), "BRAVO", 0o600)
	if second, err = s.Take(context.Background(), src, treehash.Options{}); err != nil {
		t.Fatal(err)
	}
	return first, second
}

// TestLinkTreeSharesObjects: a snapshot is a tree of hard links into the
// store's objects. A second snapshot of the input with one file changed
// links the unchanged files to the same objects (nothing copied) and
// holds the changed file's new bytes; the input itself is never linked,
// so its files' link counts and ctimes (which the index keys by) stay.
func TestLinkTreeSharesObjects(t *testing.T) {
	ctx := context.Background()
	s, dir := newStore(t)
	src := makeSource(t)
	before := lstat(t, filepath.Join(src, "a.txt"))

	first, second := takeAroundChange(t, s, src)
	if first.Digest == second.Digest {
		t.Fatal("a changed file did not change the digest")
	}
	a1, a2 := lstat(t, filepath.Join(first.Path, "a.txt")), lstat(t, filepath.Join(second.Path, "a.txt"))
	if a1.Ino != a2.Ino || a1.Nlink != 3 {
		t.Fatalf("unchanged file: inodes %d and %d, %d links; want one object linked by both snapshots (3 links)", a1.Ino, a2.Ino, a1.Nlink)
	}
	if b, err := os.ReadFile(filepath.Join(second.Path, "sub", "b.txt")); err != nil || string(b) != "BRAVO" {
		t.Fatalf("changed file in the second snapshot: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(first.Path, "sub", "b.txt")); err != nil || string(b) != "bravo" {
		t.Fatalf("changed file in the first snapshot: %q %v", b, err)
	}
	after := lstat(t, filepath.Join(src, "a.txt"))
	if after.Nlink != 1 || after.Ctim != before.Ctim {
		t.Fatalf("the input's file was linked or changed: %d links, ctime %v then %v", after.Nlink, before.Ctim, after.Ctim)
	}
	for _, snap := range []*Snapshot{first, second} {
		if err := s.Verify(ctx, snap); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(objectNames(t, dir)); n != 4 { // alpha, bravo, BRAVO, run.sh
		t.Fatalf("%d objects, want 4: %v", n, objectNames(t, dir))
	}
}

// TestCorruptObjectNotLinked: an object changed in place (size and mtime
// kept) is not linked into a new snapshot: it is re-hashed, found wrong,
// and copied in again from the input; the snapshot that still links the
// bad inode refuses at its next use.
func TestCorruptObjectNotLinked(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	src := makeSource(t)
	first, err := s.Take(ctx, src, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tamperInPlace(t, filepath.Join(first.Path, "a.txt"))
	mustWrite(t, filepath.Join(src, "sub", "b.txt"), "other", 0o600)
	second, err := s.Take(ctx, src, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(second.Path, "a.txt")); err != nil || string(b) != "alpha" {
		t.Fatalf("new snapshot over a corrupt object: %q %v", b, err)
	}
	if err := s.Verify(ctx, second); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(ctx, first); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("the snapshot linking the corrupt inode: %v, want ErrCorrupt", err)
	}
}

// TestPrune: the store is bounded. A snapshot not taken since the cutoff
// and not held by a run goes, with the objects only it linked and the
// index files of roots not walked since; a held one, and the objects it
// links, stay until released.
func TestPrune(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	s := indexedStore(t, filepath.Join(base, "snapshots"), filepath.Join(base, "index"))
	dir := filepath.Join(base, "snapshots")
	src := makeSource(t)
	settle() // so that the walks record the input in its index
	first, second := takeAroundChange(t, s, src)
	s.Release(first.Digest)
	later := time.Now().Add(time.Hour)

	p, err := s.Prune(later)
	if err != nil {
		t.Fatal(err)
	}
	if p.Snapshots != 1 || p.Objects != 1 || p.Indexes == 0 {
		t.Fatalf("prune removed %+v, want the released snapshot, its one object of its own and the index files", p)
	}
	if _, err := s.Get(first.Digest); !errors.Is(err, ErrNotFound) {
		t.Fatalf("released snapshot after prune: %v", err)
	}
	if err := s.Verify(ctx, second); err != nil {
		t.Fatalf("held snapshot after prune: %v", err)
	}

	s.Release(second.Digest)
	if p, err = s.Prune(later); err != nil || p.Snapshots != 1 || p.Objects != 3 {
		t.Fatalf("second prune: %+v %v, want the snapshot and its 3 objects", p, err)
	}
	if names := append(storeNames(t, dir), objectNames(t, dir)...); len(names) != 0 {
		t.Fatalf("store after pruning everything: %v", names)
	}
	if ents, _ := os.ReadDir(filepath.Join(base, "index")); len(ents) != 0 {
		t.Fatalf("index files left: %d", len(ents))
	}

	// Pruned content is taken again from the input, whole.
	again, err := s.Take(ctx, src, treehash.Options{})
	if err != nil || again.Digest != second.Digest {
		t.Fatalf("take after prune: %+v %v", again, err)
	}
}

// TestCrashLeftovers: what a crash midway leaves (a staging object never
// named, a staging snapshot never published, a snapshot renamed out of
// its name by a prune that did not finish) is never taken as content:
// takes ignore it, the next take of the same input is whole, and Prune
// removes it (custodyd's start-up sweep does too).
func TestCrashLeftovers(t *testing.T) {
	ctx := context.Background()
	s, dir := newStore(t)
	src := makeSource(t)
	snap, err := s.Take(ctx, src, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hex, _ := treehash.ParseDigest(snap.Digest)
	// A prune renamed the snapshot out of its name, then the process died.
	if err := os.Rename(filepath.Join(dir, hex), filepath.Join(dir, StagingPrefix+"pruned-"+hex)); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, objectsName, StagingPrefix+"123"), "half an object", 0o600)
	if err := os.Mkdir(filepath.Join(dir, StagingPrefix+"456"), 0o700); err != nil {
		t.Fatal(err)
	}

	again, err := s.Take(ctx, src, treehash.Options{})
	if err != nil || again.Digest != snap.Digest {
		t.Fatalf("take after a crash: %+v %v", again, err)
	}
	if err := s.Verify(ctx, again); err != nil {
		t.Fatal(err)
	}
	s.Release(snap.Digest)
	s.Release(again.Digest)
	if _, err := s.Prune(time.Now().Add(-time.Hour)); err != nil { // nothing old enough: leftovers only
		t.Fatal(err)
	}
	for _, n := range append(storeNames(t, dir), objectNames(t, dir)...) {
		if strings.HasPrefix(n, StagingPrefix) {
			t.Fatalf("a crash's leftover survived the prune: %s", n)
		}
	}
	if err := s.Verify(ctx, again); err != nil {
		t.Fatalf("the live snapshot after the prune: %v", err)
	}
}

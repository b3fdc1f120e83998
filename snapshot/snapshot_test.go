package snapshot

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/custody-dev/custody/treehash"
)

// makeSource creates a source tree with files, an executable, an empty
// directory, a relative symlink and a symlink pointing outside the tree.
func makeSource(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	mustWrite(t, filepath.Join(src, "a.txt"), "alpha", 0o644)
	mustWrite(t, filepath.Join(src, "sub", "b.txt"), "bravo", 0o600)
	mustWrite(t, filepath.Join(src, "sub", "run.sh"), "#!/bin/sh\necho hi\n", 0o750)
	if err := os.Mkdir(filepath.Join(src, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("b.txt", filepath.Join(src, "sub", "rel")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "outside")); err != nil {
		t.Fatal(err)
	}
	return src
}

func mustWrite(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func newStore(t *testing.T) (*Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "snapshots")
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

// storeNames lists the store directory's snapshots (and anything else in
// it but the objects directory, which objectNames lists).
func storeNames(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		if de.Name() != objectsName {
			names = append(names, de.Name())
		}
	}
	return names
}

// objectNames lists the store's objects directory.
func objectNames(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(dir, objectsName))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func TestTakeCopiesSource(t *testing.T) {
	src := makeSource(t)
	s, dir := newStore(t)
	snap, err := s.Take(context.Background(), src, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hex, _ := treehash.ParseDigest(snap.Digest)
	if want := filepath.Join(dir, hex, "data"); snap.Path != want {
		t.Fatalf("Path = %s, want %s", snap.Path, want)
	}
	// The copy equals the source, content and structure.
	for _, f := range []string{"a.txt", "sub/b.txt", "sub/run.sh"} {
		want, _ := os.ReadFile(filepath.Join(src, f))
		got, err := os.ReadFile(filepath.Join(snap.Path, f))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: got %q, %v; want %q", f, got, err, want)
		}
	}
	for link, target := range map[string]string{"sub/rel": "b.txt", "outside": "/etc/passwd"} {
		fi, err := os.Lstat(filepath.Join(snap.Path, link))
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Fatalf("%s: not a symlink: %v %v", link, fi, err)
		}
		if got, _ := os.Readlink(filepath.Join(snap.Path, link)); got != target {
			t.Fatalf("%s -> %q, want %q", link, got, target)
		}
	}
	if fi, err := os.Stat(filepath.Join(snap.Path, "empty")); err != nil || !fi.IsDir() {
		t.Fatalf("empty dir: %v %v", fi, err)
	}
	// Same entries as the source but for the read-only modes.
	srcTree, err := treehash.Dir(context.Background(), src, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(srcTree.Entries) != len(snap.Tree.Entries) {
		t.Fatalf("%d entries, source has %d", len(snap.Tree.Entries), len(srcTree.Entries))
	}
	for i, e := range snap.Tree.Entries {
		se := srcTree.Entries[i]
		se.Mode = e.Mode
		if e != se {
			t.Fatalf("entry %+v, source %+v", e, srcTree.Entries[i])
		}
	}
	// The digest describes the stored copy.
	stored, err := treehash.Dir(context.Background(), snap.Path, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if stored.Digest != snap.Digest {
		t.Fatalf("stored copy hashes to %s, snapshot says %s", stored.Digest, snap.Digest)
	}
	if err := s.Verify(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	// Nothing but the snapshot is left in the store.
	if names := storeNames(t, dir); len(names) != 1 || names[0] != hex {
		t.Fatalf("store holds %v", names)
	}
	got, err := s.Get(snap.Digest)
	if err != nil || got.Path != snap.Path || got.Tree.Digest != snap.Digest || len(got.Tree.Entries) != len(snap.Tree.Entries) {
		t.Fatalf("Get = %+v, %v", got, err)
	}
}

func TestReadOnlyModes(t *testing.T) {
	s, _ := newStore(t)
	snap, err := s.Take(context.Background(), makeSource(t), treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]fs.FileMode{
		"":           0o555,
		"a.txt":      0o444,
		"sub":        0o555,
		"sub/b.txt":  0o444,
		"sub/run.sh": 0o555,
		"empty":      0o555,
	}
	for p, mode := range want {
		fi, err := os.Lstat(filepath.Join(snap.Path, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%q: mode %#o, want %#o", p, fi.Mode().Perm(), mode)
		}
		if os.Geteuid() == 0 {
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
				t.Errorf("%q: owner %d:%d, want 0:0", p, st.Uid, st.Gid)
			}
		}
	}
	for _, e := range snap.Tree.Entries {
		if e.Kind != treehash.KindSymlink && e.Mode != uint32(want[e.Path]) {
			t.Errorf("tree records %s with mode %#o", e.Path, e.Mode)
		}
	}
}

func TestHostChangeDoesNotAffectSnapshot(t *testing.T) {
	src := makeSource(t)
	s, _ := newStore(t)
	snap, err := s.Take(context.Background(), src, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(src, "a.txt"), "ALPHA", 0o644)
	if err := os.Remove(filepath.Join(src, "sub", "b.txt")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(snap.Path, "a.txt")); string(got) != "alpha" {
		t.Fatalf("snapshot changed: %q", got)
	}
	if err := s.Verify(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	again, err := s.Take(context.Background(), src, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if again.Digest == snap.Digest {
		t.Fatal("changed source has the old digest")
	}
}

func TestReuseIdenticalContent(t *testing.T) {
	s, dir := newStore(t)
	first, err := s.Take(context.Background(), makeSource(t), treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ino uint64
	if fi, err := os.Stat(filepath.Join(first.Path, "a.txt")); err == nil {
		ino = fi.Sys().(*syscall.Stat_t).Ino
	}
	// Identical content at another place, taken concurrently.
	var wg sync.WaitGroup
	snaps := make([]*Snapshot, 4)
	errs := make([]error, 4)
	for i := range snaps {
		src := makeSource(t)
		wg.Go(func() { snaps[i], errs[i] = s.Take(context.Background(), src, treehash.Options{Workers: 2}) })
	}
	wg.Wait()
	for i, snap := range snaps {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if snap.Digest != first.Digest || snap.Path != first.Path {
			t.Fatalf("second take: %s at %s, want %s at %s", snap.Digest, snap.Path, first.Digest, first.Path)
		}
	}
	if fi, err := os.Stat(filepath.Join(first.Path, "a.txt")); err != nil || fi.Sys().(*syscall.Stat_t).Ino != ino {
		t.Fatal("stored copy was replaced")
	}
	if names := storeNames(t, dir); len(names) != 1 {
		t.Fatalf("store holds %v, want the one snapshot", names)
	}
}

func TestConcurrentFirstTakes(t *testing.T) {
	s, dir := newStore(t)
	src := makeSource(t)
	var wg sync.WaitGroup
	snaps := make([]*Snapshot, 6)
	errs := make([]error, 6)
	for i := range snaps {
		wg.Go(func() { snaps[i], errs[i] = s.Take(context.Background(), src, treehash.Options{}) })
	}
	wg.Wait()
	for i := range snaps {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if snaps[i].Path != snaps[0].Path {
			t.Fatalf("paths differ: %s %s", snaps[i].Path, snaps[0].Path)
		}
	}
	if names := storeNames(t, dir); len(names) != 1 {
		t.Fatalf("store holds %v", names)
	}
}

// TestRefusedSources checks that refused takes name the culprit and leave
// nothing behind in the store.
func TestRefusedSources(t *testing.T) {
	src := makeSource(t)
	fifo := filepath.Join(src, "sub", "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	small := makeSource(t)
	cases := []struct {
		name   string
		src    string
		limits treehash.Options
		is     error
		naming string
	}{
		{"fifo", src, treehash.Options{}, treehash.ErrUnsupported, fifo},
		{"MaxBytes", small, treehash.Options{MaxBytes: 10}, treehash.ErrTooLarge, small},
		{"MaxEntries", small, treehash.Options{MaxEntries: 3}, treehash.ErrTooLarge, "3 entries"},
		{"missing", filepath.Join(small, "nope"), treehash.Options{}, fs.ErrNotExist, "nope"},
	}
	s, dir := newStore(t)
	for _, c := range cases {
		_, err := s.Take(context.Background(), c.src, c.limits)
		if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.naming) {
			t.Errorf("%s: err = %v, want %v naming %s", c.name, err, c.is, c.naming)
		}
	}
	if names := append(storeNames(t, dir), objectNames(t, dir)...); len(names) != 0 {
		t.Fatalf("refused takes left %v", names)
	}
}

func TestCancelled(t *testing.T) {
	s, _ := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Take(ctx, makeSource(t), treehash.Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

func TestSingleFileSource(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "input.bin")
	mustWrite(t, file, "payload", 0o640)
	s, _ := newStore(t)
	snap, err := s.Take(context.Background(), file, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(snap.Path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o444 || filepath.Base(snap.Path) != "data" {
		t.Fatalf("stored %s: %v %v", snap.Path, fi, err)
	}
	if got, _ := os.ReadFile(snap.Path); string(got) != "payload" {
		t.Fatalf("content %q", got)
	}
	if len(snap.Tree.Entries) != 1 || snap.Tree.Entries[0].Path != "input.bin" {
		t.Fatalf("tree %+v", snap.Tree)
	}
	if err := s.Verify(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	again, err := s.Take(context.Background(), file, treehash.Options{})
	if err != nil || again.Path != snap.Path {
		t.Fatalf("retake: %+v %v", again, err)
	}
	// A directory holding only input.bin has the same digest but another
	// layout: it is refused rather than confused with the file.
	if err := os.Chmod(file, 0o444); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(context.Background(), dir, treehash.Options{}); err == nil || !strings.Contains(err.Error(), "single file") {
		t.Fatalf("layout clash: %v", err)
	}
}

func TestVerifyDetectsTampering(t *testing.T) {
	s, _ := newStore(t)
	snap, err := s.Take(context.Background(), makeSource(t), treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(snap.Path, "sub", "b.txt")
	if err := os.Chmod(target, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, []byte("bravO"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(target, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(context.Background(), snap); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Verify = %v, want ErrCorrupt", err)
	}
	// A Take of the original content now refuses to reuse the corrupt copy.
	if _, err := s.Take(context.Background(), makeSource(t), treehash.Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Take over a corrupt copy = %v, want ErrCorrupt", err)
	}
}

func TestGetUnknown(t *testing.T) {
	s, _ := newStore(t)
	_, err := s.Get("sha256:" + strings.Repeat("0", 64))
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v", err)
	}
	if _, err := s.Get("sha256:../../etc"); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("malformed digest: %v", err)
	}
}

func TestNewRefusesUnsafeDirs(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if _, err := New(real); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(real); fi.Mode().Perm() != 0o700 {
		t.Fatalf("created with mode %#o", fi.Mode().Perm())
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if _, err := New(link); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("symlink: %v", err)
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := New(open); err == nil || !strings.Contains(err.Error(), "writable") {
		t.Fatalf("world-writable: %v", err)
	}
	if os.Geteuid() == 0 {
		other := filepath.Join(base, "other")
		if err := os.Mkdir(other, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(other, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		if _, err := New(other); err == nil || !strings.Contains(err.Error(), "owned") {
			t.Fatalf("foreign owner: %v", err)
		}
	}
}

func TestWriterRefusesSymlinkComponents(t *testing.T) {
	dir := t.TempDir()
	w, err := NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Symlink("l", "/etc"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create("l/passwd", 0o644); !errors.Is(err, ErrUnsafePath) {
		t.Fatalf("Create through symlink: %v", err)
	}
	if err := w.Mkdir("l/x", 0o755); !errors.Is(err, ErrUnsafePath) {
		t.Fatalf("Mkdir through symlink: %v", err)
	}
	if err := w.Symlink("l", "/tmp"); err == nil {
		t.Fatal("existing symlink overwritten")
	}
	for _, bad := range []string{"../x", "/abs", "a/../b", "", "."} {
		if _, err := w.Create(bad, 0o644); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("Create(%q): %v", bad, err)
		}
	}
	if err := w.Link("hard", "l"); !errors.Is(err, ErrUnsafePath) {
		t.Fatalf("hard link to a symlink: %v", err)
	}
}

func TestDigestMatchesTake(t *testing.T) {
	src := t.TempDir()
	mustWrite(t, filepath.Join(src, "a.txt"), "alpha", 0o644)
	mustWrite(t, filepath.Join(src, "bin", "run"), "#!/bin/sh\n", 0o755)
	if err := os.Symlink("a.txt", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	s, err := New(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	tree, err := Digest(context.Background(), src, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := s.Take(context.Background(), src, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tree.Digest != snap.Digest {
		t.Fatalf("Digest %s != Take %s", tree.Digest, snap.Digest)
	}
	mustWrite(t, filepath.Join(src, "a.txt"), "changed", 0o644)
	if tree2, _ := Digest(context.Background(), src, treehash.Options{}); tree2.Digest == snap.Digest {
		t.Fatal("Digest did not change with the content")
	}
}

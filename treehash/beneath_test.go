package treehash_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/treehash"
)

// An input root must be reached without following a symlink anywhere
// below the policy's root: a link to / inside the root once let an input
// read the host's /etc.
func TestBeneathRefusesSymlinkComponents(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "work", "src"), 0o755))
	must(os.WriteFile(filepath.Join(root, "work", "src", "a.txt"), []byte("a\n"), 0o644))
	must(os.Symlink(outside, filepath.Join(root, "rootlink")))
	must(os.Symlink(filepath.Join(root, "work"), filepath.Join(root, "worklink")))
	must(os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "work", "filelink")))

	ctx := context.Background()
	opts := treehash.Options{Beneath: root}
	// Legitimate: a directory and a file below the root, and the root itself.
	for _, p := range []string{filepath.Join(root, "work", "src"), filepath.Join(root, "work", "src", "a.txt"), root + "/work"} {
		if _, err := treehash.Dir(ctx, p, opts); err != nil {
			t.Errorf("Dir(%s) beneath %s: %v", p, root, err)
		}
	}
	want, err := treehash.Dir(ctx, filepath.Join(root, "work", "src"), treehash.Options{})
	must(err)
	got, err := treehash.Dir(ctx, filepath.Join(root, "work", "src"), opts)
	must(err)
	if got.Digest != want.Digest {
		t.Errorf("Beneath changed the digest: %s, want %s", got.Digest, want.Digest)
	}
	// Refused: an intermediate link out of the root, an intermediate link
	// inside it, a final link, and a path outside the root.
	for _, p := range []string{
		filepath.Join(root, "rootlink"),
		filepath.Join(root, "rootlink", "secret"),
		filepath.Join(root, "worklink", "src"),
		filepath.Join(root, "work", "filelink"),
	} {
		if _, err := treehash.Dir(ctx, p, opts); !errors.Is(err, treehash.ErrSymlinkComponent) {
			t.Errorf("Dir(%s) beneath %s = %v, want ErrSymlinkComponent", p, root, err)
		}
	}
	for _, p := range []string{outside, root + "x", filepath.Join(outside, "secret")} {
		if _, err := treehash.Dir(ctx, p, opts); err == nil {
			t.Errorf("Dir(%s) beneath %s succeeded", p, root)
		}
	}
	// Without Beneath the walk of a path with a link component is the
	// caller's business (image stores walk their own trees).
	if _, err := treehash.Dir(ctx, filepath.Join(root, "rootlink", "secret"), treehash.Options{}); err != nil {
		t.Errorf("Dir without Beneath: %v", err)
	}
}

func TestMaxPathBytes(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"aaaa", "bbbb", "cccc"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := treehash.Dir(context.Background(), dir, treehash.Options{MaxPathBytes: 12}); err != nil {
		t.Errorf("12 path bytes within a bound of 12: %v", err)
	}
	if _, err := treehash.Dir(context.Background(), dir, treehash.Options{MaxPathBytes: 11}); !errors.Is(err, treehash.ErrTooLarge) {
		t.Errorf("12 path bytes over a bound of 11: %v, want ErrTooLarge", err)
	}
}

// Options.Root pins the root to an object the caller opened: a walk whose
// root is any other object by then (a path swapped after the caller's
// open) reads nothing of it, and one that is still that object walks.
func TestRootIdentityPinsTheRoot(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"mine", "theirs"} {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p, "f"), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	id := func(p string) *treehash.Identity {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return &treehash.Identity{Dev: uint64(st.Dev), Ino: st.Ino}
	}
	ctx := context.Background()
	mine := filepath.Join(dir, "mine")
	if _, err := treehash.Dir(ctx, mine, treehash.Options{Beneath: dir, Root: id(mine)}); err != nil {
		t.Fatalf("the pinned root itself: %v", err)
	}
	if tree, err := treehash.Dir(ctx, mine, treehash.Options{Beneath: dir, Root: id(filepath.Join(dir, "theirs"))}); err == nil {
		t.Fatalf("a root that is not the pinned object was walked: %v", tree.Entries)
	}
}

// Options.Admit is asked of every entry below the root, with the stat the
// walk then holds it to; its refusal refuses the walk.
func TestAdmitChecksEveryEntry(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"a", "sub/b", "sub/deny"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	refused := errors.New("refused")
	admit := func(deny string) func(int, string, string, *unix.Stat_t) error {
		return func(dirfd int, name, path string, st *unix.Stat_t) error {
			var now unix.Stat_t
			if err := unix.Fstatat(dirfd, name, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil || now.Ino != st.Ino {
				t.Errorf("%s: dirfd/name is not the entry stat: %v", path, err)
			}
			seen = append(seen, path)
			if path == deny {
				return refused
			}
			return nil
		}
	}
	ctx := context.Background()
	if _, err := treehash.Dir(ctx, dir, treehash.Options{Admit: admit("")}); err != nil {
		t.Fatalf("every entry admitted: %v", err)
	}
	if len(seen) != 4 {
		t.Fatalf("admit saw %v, want the 4 entries below the root", seen)
	}
	if _, err := treehash.Dir(ctx, dir, treehash.Options{Admit: admit("sub/deny")}); !errors.Is(err, refused) {
		t.Fatalf("an entry refused: %v", err)
	}
}

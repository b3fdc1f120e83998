package image

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/treehash"
	"golang.org/x/sys/unix"
)

// sealMarker is the content of one file of sealedTree, found again in
// the sealed file's bytes (erofs stores data uncompressed here).
const sealMarker = "sealed-marker-0123456789abcdef"

// sealedStore imports a small tree into a fresh store and returns the
// store, the image and its sealed file, skipping (loudly) where the seal
// cannot be made.
func sealedStore(t *testing.T) (*Store, *Image, string) {
	t.Helper()
	testenv.Root(t)
	if _, err := exec.LookPath("mkfs.erofs"); err != nil {
		testenv.Missing(t, "mkfs.erofs (erofs-utils)")
	}
	src := filepath.Join(t.TempDir(), "rootfs")
	for name, body := range map[string]string{"bin/tool": "#!/bin/sh\n", "etc/marker": sealMarker + strings.Repeat("\n", 8192), "etc/small": sealMarker[:20], "etc/other": "other\n"} {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := s.Import(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	if img.Unsealed != "" {
		testenv.Missing(t, "a kernel that mounts erofs from a file: "+img.Unsealed)
	}
	if img.Sealed == nil {
		t.Fatal("import left no seal and said nothing")
	}
	return s, img, img.Sealed.File
}

// rewrite replaces the first old in the file at path with new (of the
// same length) in place, and sets its mtime back: only ctime, which no
// caller can set, still tells.
func rewrite(t *testing.T, path, old, new string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte(old))
	if i < 0 || len(old) != len(new) {
		t.Fatalf("%s holds no %q", path, old)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(new), int64(i)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(path, time.Time{}, fi.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// TestSealedImage: an imported image is sealed, its tree (mounted from the
// sealed file) hashes to the image digest, and VerifySealed vouches for it
// in this process and in a fresh one. A change of the sealed file's
// content (mtime set back), or a file put in its place, is refused as
// ErrSealChanged; once the content is back, it verifies again.
func TestSealedImage(t *testing.T) {
	ctx := context.Background()
	s, img, file := sealedStore(t)
	got, err := s.VerifySealed(ctx, img.Digest)
	if err != nil || got.Sealed == nil || *got.Sealed != *img.Sealed {
		t.Fatalf("VerifySealed = %+v, %v", got, err)
	}
	if g, err := s.Get(img.Digest); err != nil || g.Sealed == nil {
		t.Fatalf("Get after a verified seal = %+v, %v", g, err)
	}
	rec, err := readSealRecord(filepath.Dir(file))
	if err != nil || rec.Digest != img.Digest || !strings.HasPrefix(rec.SHA256, "sha256:") {
		t.Fatalf("seal record %+v, %v", rec, err)
	}
	// A fresh store (a restarted custodyd) re-hashes once, then trusts.
	cold, err := New(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := cold.Get(img.Digest); err != nil || g.Sealed != nil {
		t.Fatalf("a fresh store vouches for a seal it never checked: %+v, %v", g, err)
	}
	if g, err := cold.VerifySealed(ctx, img.Digest); err != nil || g.Sealed == nil {
		t.Fatalf("cold VerifySealed = %+v, %v", g, err)
	}

	t.Run("content", func(t *testing.T) {
		rewrite(t, file, sealMarker, strings.ToUpper(sealMarker))
		for _, st := range []*Store{s, cold} {
			if _, err := st.VerifySealed(ctx, img.Digest); !errors.Is(err, ErrSealChanged) {
				t.Fatalf("sealed file changed in place: %v", err)
			}
		}
		rewrite(t, file, strings.ToUpper(sealMarker), sealMarker)
		if _, err := s.VerifySealed(ctx, img.Digest); err != nil {
			t.Fatalf("content restored: %v", err)
		}
	})
	t.Run("metadata", func(t *testing.T) {
		// A small file's data is inline in the checksummed metadata.
		rewrite(t, file, sealMarker[:20]+"\x00", strings.ToUpper(sealMarker[:20])+"\x00")
		if _, err := s.VerifySealed(ctx, img.Digest); !errors.Is(err, ErrSealChanged) {
			t.Fatalf("sealed file's metadata changed: %v", err)
		}
		rewrite(t, file, strings.ToUpper(sealMarker[:20])+"\x00", sealMarker[:20]+"\x00")
		if _, err := s.VerifySealed(ctx, img.Digest); err != nil {
			t.Fatalf("metadata restored: %v", err)
		}
	})
	t.Run("replaced", func(t *testing.T) {
		orig, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		other := file + ".other"
		if err := os.WriteFile(other, bytes.Replace(orig, []byte(sealMarker), []byte(strings.ToUpper(sealMarker)), 1), 0o400); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file, file+".orig"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(other, file); err != nil {
			t.Fatal(err)
		}
		if _, err := s.VerifySealed(ctx, img.Digest); !errors.Is(err, ErrSealChanged) {
			t.Fatalf("sealed file replaced: %v", err)
		}
		if err := os.Rename(file+".orig", file); err != nil {
			t.Fatal(err)
		}
		if _, err := s.VerifySealed(ctx, img.Digest); err != nil {
			t.Fatalf("original put back: %v", err)
		}
	})
	t.Run("writable", func(t *testing.T) {
		if err := os.Chmod(file, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(file, 0o400)
		if _, err := s.VerifySealed(ctx, img.Digest); !errors.Is(err, ErrSealChanged) {
			t.Fatalf("sealed file made writable: %v", err)
		}
	})
	t.Run("removed", func(t *testing.T) {
		if err := s.Remove(ctx, img.Digest); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the sealed file outlived its image: %v", err)
		}
	})
}

// TestUnsealedFallsBackToTheWalk: without mkfs.erofs the image imports
// unsealed, saying why, and VerifySealed verifies it by Verify's walk
// (a changed tree is still refused).
func TestUnsealedFallsBackToTheWalk(t *testing.T) {
	testenv.Root(t)
	t.Setenv("PATH", t.TempDir())
	s, err := New(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "rootfs")
	if err := os.MkdirAll(filepath.Join(src, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "etc", "x"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := s.Import(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(img.Unsealed, "mkfs.erofs") || img.Sealed != nil {
		t.Fatalf("import without mkfs.erofs: sealed %+v, unsealed %q", img.Sealed, img.Unsealed)
	}
	got, err := s.VerifySealed(context.Background(), img.Digest)
	if err != nil || got.Sealed != nil {
		t.Fatalf("VerifySealed of an unsealed image = %+v, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(img.Rootfs, "etc", "x"), []byte("y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.VerifySealed(context.Background(), img.Digest); err == nil || !strings.Contains(err.Error(), "now hashes to") {
		t.Fatalf("a changed unsealed tree: %v", err)
	}
}

// TestSealKeepsTheTree: an image with owners, modes and hard links seals
// to a tree with the same digest, owners and metadata (sameMetadata runs
// at import; the digest is checked here once more).
func TestSealKeepsTheTree(t *testing.T) {
	_, img, file := sealedStore(t)
	if !strings.HasSuffix(file, sealName) {
		t.Fatalf("sealed file %s", file)
	}
	tree, err := treehash.Dir(context.Background(), img.Rootfs, treehash.Options{})
	if err != nil || tree.Digest != img.Digest {
		t.Fatalf("rootfs hashes to %v, %v", tree, err)
	}
}

// TestTreeIsHeldWhileTheSealHolds: admission's Tree mounts a sealed file
// once and reads that mount again while the file keeps the identity it
// was mounted at; a file changed since is refused, and once verified
// again (a new identity) read from a fresh mount; removing the image
// lets the mount go.
func TestTreeIsHeldWhileTheSealHolds(t *testing.T) {
	ctx := context.Background()
	s, img, file := sealedStore(t)
	img, err := s.VerifySealed(ctx, img.Digest)
	if err != nil {
		t.Fatal(err)
	}
	read := func(img *Image) (string, string) {
		t.Helper()
		tree, done, err := s.Tree(img, true)
		if err != nil {
			t.Fatalf("Tree: %v", err)
		}
		defer done()
		b, err := fs.ReadFile(tree, "etc/other")
		if err != nil {
			t.Fatal(err)
		}
		return string(tree.(treeFS)), string(b)
	}
	// With the first reader still open, so that a fresh mount could not
	// take the same descriptor number.
	tree, done, err := s.Tree(img, true)
	if err != nil {
		t.Fatal(err)
	}
	if again, body := read(img); again != string(tree.(treeFS)) || body != "other\n" {
		t.Fatalf("a second admission mounted again (%s, then %s) or read %q", tree, again, body)
	}
	done()
	done() // idempotent: the held mount has no reader left, not minus one
	s.sealIDs.mu.Lock()
	if h := s.sealIDs.trees[img.Digest]; h == nil || h.readers != 0 || h.dropped {
		t.Errorf("after both readers: %+v", h)
	}
	s.sealIDs.mu.Unlock()

	s.sealIDs.mu.Lock()
	old := s.sealIDs.trees[img.Digest]
	s.sealIDs.mu.Unlock()
	rewrite(t, file, sealMarker, strings.ToUpper(sealMarker))
	if _, _, err := s.Tree(img, true); !errors.Is(err, ErrSealChanged) {
		t.Fatalf("Tree of a sealed file changed since its check: %v", err)
	}
	rewrite(t, file, strings.ToUpper(sealMarker), sealMarker)
	img2, err := s.VerifySealed(ctx, img.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if img2.Sealed.Identity == img.Sealed.Identity {
		t.Fatal("rewriting the file left its identity")
	}
	if _, _, err := s.Tree(img, true); !errors.Is(err, ErrSealChanged) {
		t.Fatalf("Tree at the old identity: %v", err)
	}
	if old == nil || !old.dropped {
		t.Fatalf("the mount made at the old identity outlived the re-check: %+v", old)
	}
	if _, body := read(img2); body != "other\n" {
		t.Fatalf("etc/other reads %q after the re-check", body)
	}
	s.sealIDs.mu.Lock()
	fresh := s.sealIDs.trees[img.Digest]
	s.sealIDs.mu.Unlock()
	if fresh == nil || fresh == old || fresh.id.String() != img2.Sealed.Identity {
		t.Fatalf("the re-checked file is read from the old mount (old %+v, now %+v)", old, fresh)
	}

	if err := s.Remove(ctx, img.Digest); err != nil {
		t.Fatal(err)
	}
	s.sealIDs.mu.Lock()
	left := s.sealIDs.trees[img.Digest]
	s.sealIDs.mu.Unlock()
	if left != nil || !fresh.dropped {
		t.Fatalf("the removed image's mount is still held: %+v", left)
	}
}

// TestHeldTreeOfARemovedImage: a mount made for an image removed (or
// re-checked to another identity) meanwhile is not held, and its one
// reader's release closes it.
func TestHeldTreeOfARemovedImage(t *testing.T) {
	var s seals
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	tr := &heldTree{mfd: fd}
	s.hold("sha256:removed", tr)
	if !tr.dropped || len(s.trees) != 0 {
		t.Fatalf("a mount of an image with no verified seal is held: %+v, trees %v", tr, s.trees)
	}
	s.release(tr)
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Fatalf("the unheld mount's descriptor is still open: %v", err)
	}
}

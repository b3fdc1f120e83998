package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/sealed"
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

// TestSealKeepsTheTree: an image with owners, a sticky directory, hard
// links and a symlink seals to a file whose tree, as the kernel serves it
// from the file, hashes to the image digest (which covers the owners) and
// has the rootfs's modes, owners, mtimes and sizes, its hard links still
// one inode.
func TestSealKeepsTheTree(t *testing.T) {
	testenv.Root(t)
	if _, err := exec.LookPath("mkfs.erofs"); err != nil {
		testenv.Missing(t, "mkfs.erofs (erofs-utils)")
	}
	entries := []entry{
		{name: "bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "bin/tool", typ: tar.TypeReg, mode: 0o755, body: "#!/bin/sh\n"},
		{name: "bin/again", typ: tar.TypeLink, linkname: "bin/tool"},
		{name: "bin/sym", typ: tar.TypeSymlink, linkname: "tool"},
		{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		{name: "home/", typ: tar.TypeDir, mode: 0o700},
	}
	s, _ := newStore(t)
	ctx := context.Background()
	img, err := s.Import(ctx, writeFile(t, t.TempDir(), "owned.tar", buildTarOwned(t, entries, 1000, 100)))
	if err != nil {
		t.Fatal(err)
	}
	if img.Unsealed != "" {
		testenv.Missing(t, "a kernel that mounts erofs from a file: "+img.Unsealed)
	}
	if img.Sealed == nil || !strings.HasSuffix(img.Sealed.File, sealName) || len(img.IDs) == 0 {
		t.Fatalf("import of an owned tree: sealed %+v, owners %+v", img.Sealed, img.IDs)
	}
	id, err := sealed.Parse(img.Sealed.Identity)
	if err != nil {
		t.Fatal(err)
	}
	f, err := sealed.Open(img.Sealed.File, id)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mfd, err := sealed.Mount(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeMount(mfd)
	root, detach, err := attach(mfd, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer detach()
	tree, err := treehash.Dir(ctx, root, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mounted := *img
	mounted.Rootfs = root
	if err := checkDigest(&mounted, tree); err != nil {
		t.Fatalf("the sealed tree does not hash to the image digest: %v", err)
	}
	if err := sameMetadata(img.Rootfs, root, true); err != nil {
		t.Fatalf("the sealed tree's metadata: %v", err)
	}
	var a, b syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(root, "bin", "tool"), &a); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Lstat(filepath.Join(root, "bin", "again"), &b); err != nil {
		t.Fatal(err)
	}
	if a.Ino != b.Ino || a.Nlink != 2 || a.Uid != 1000 || a.Gid != 100 {
		t.Fatalf("the sealed hard link: inodes %d %d, nlink %d, owner %d:%d", a.Ino, b.Ino, a.Nlink, a.Uid, a.Gid)
	}
}

// TestTreeIsHeldWhileTheSealHolds: admission's Tree reads the mount this
// process made of a sealed file when it verified it (the one launches
// mount), not a fresh mount per admission; a file changed in place is
// verified again before its tree is read; removing the image ends it.
func TestTreeIsHeldWhileTheSealHolds(t *testing.T) {
	ctx := context.Background()
	s, img, file := sealedStore(t)
	img, err := s.VerifySealed(ctx, img.Digest)
	if err != nil {
		t.Fatal(err)
	}
	mountID := func(p string) uint64 {
		t.Helper()
		var stx unix.Statx_t
		if err := unix.Statx(unix.AT_FDCWD, p, 0, unix.STATX_MNT_ID, &stx); err != nil {
			t.Fatal(err)
		}
		return stx.Mnt_id
	}
	read := func(img *Image) (uint64, string, error) {
		t.Helper()
		tree, done, err := s.Tree(img, true)
		if err != nil {
			return 0, "", err
		}
		defer done()
		b, err := fs.ReadFile(tree, "etc/other")
		if err != nil {
			t.Fatal(err)
		}
		return mountID(string(tree.(treeFS))), string(b), nil
	}
	first, body, err := read(img)
	if err != nil || body != "other\n" {
		t.Fatalf("etc/other reads %q, %v", body, err)
	}
	if again, _, _ := read(img); again != first {
		t.Fatalf("a second admission read another mount (%d, then %d)", first, again)
	}
	// The marker's pages read through the held mount first, so that they
	// are in its cache: a re-check through that mount would miss what
	// follows. In place, mtime set back: only ctime tells; the tree then
	// hashes to another digest, so admission is refused.
	tree, done, err := s.Tree(img, true)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := fs.ReadFile(tree, "etc/marker"); err != nil || !strings.HasPrefix(string(b), sealMarker) {
		t.Fatalf("etc/marker: %.40q, %v", b, err)
	}
	done()
	rewrite(t, file, sealMarker, strings.ToUpper(sealMarker))
	if _, _, err := read(img); !errors.Is(err, ErrSealChanged) {
		t.Fatalf("Tree of a sealed file changed since its check: %v", err)
	}
	// Restored, the file is verified again (a fresh mount, hashed), and
	// admission reads that mount.
	rewrite(t, file, strings.ToUpper(sealMarker), sealMarker)
	if img, err = s.VerifySealed(ctx, img.Digest); err != nil {
		t.Fatalf("content restored: %v", err)
	}
	if again, body, err := read(img); err != nil || body != "other\n" || again == first {
		t.Fatalf("after the re-check: mount %d (was %d), %q, %v", again, first, body, err)
	}
	if err := s.Remove(ctx, img.Digest); err != nil {
		t.Fatal(err)
	}
	if _, _, err := read(img); !errors.Is(err, ErrSealChanged) {
		t.Fatalf("Tree of a removed image: %v", err)
	}
}

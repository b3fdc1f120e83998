package image

import (
	"archive/tar"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/internal/testenv"
)

// layeredStore imports two OCI images sharing a base layer (which whites
// out and replaces files, and marks a directory opaque, in the second's
// top layer) into a fresh store, skipping (loudly) where seals cannot be
// made.
func layeredStore(t *testing.T) (s *Store, dir string, base, app *Image) {
	t.Helper()
	testenv.Root(t)
	if _, err := exec.LookPath("mkfs.erofs"); err != nil {
		testenv.Missing(t, "mkfs.erofs (erofs-utils)")
	}
	lower := buildTar(t, []entry{
		{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		{name: "etc/marker", typ: tar.TypeReg, mode: 0o644, body: sealMarker + strings.Repeat("\n", 8192)},
		{name: "etc/gone", typ: tar.TypeReg, mode: 0o644, body: "gone"},
		{name: "opt/", typ: tar.TypeDir, mode: 0o750},
		{name: "opt/old", typ: tar.TypeReg, mode: 0o644, body: "old"},
		{name: "bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "bin/sh", typ: tar.TypeSymlink, linkname: "tool"},
		{name: "bin/tool", typ: tar.TypeReg, mode: 0o755, body: "#!/bin/tool\n"},
	})
	upper := buildTar(t, []entry{
		{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		{name: "etc/.wh.gone", typ: tar.TypeReg, mode: 0o644},
		{name: "etc/app", typ: tar.TypeReg, mode: 0o600, body: "app-" + sealMarker},
		{name: "opt/", typ: tar.TypeDir, mode: 0o700},
		{name: "opt/.wh..wh..opq", typ: tar.TypeReg, mode: 0o644},
		{name: "opt/new", typ: tar.TypeReg, mode: 0o644, body: "new"},
		{name: "bin/tool", typ: tar.TypeReg, mode: 0o755, body: "#!/bin/tool v2\n"},
	})
	s, dir = newStore(t)
	ctx := context.Background()
	var err error
	if base, err = s.Import(ctx, "oci:"+writeLayout(t, imageOf(t, lower), "base")); err != nil {
		t.Fatal(err)
	}
	if base.Unsealed != "" {
		testenv.Missing(t, "a kernel that mounts erofs from a file: "+base.Unsealed)
	}
	if app, err = s.Import(ctx, "oci:"+writeLayout(t, imageOf(t, lower, upper), "app")); err != nil {
		t.Fatal(err)
	}
	return s, dir, base, app
}

// TestLayersSealedOnce: each layer is sealed once, in the layer store, and
// an image is the overlay of its layers' seals: the second image shares
// the base's seal file, its seal record names its layers and no whole
// seal, and the tree the kernel serves (whiteouts, an opaque directory, a
// replaced file) is the image's, in this process and in a fresh one.
func TestLayersSealedOnce(t *testing.T) {
	ctx := context.Background()
	s, dir, base, app := layeredStore(t)
	for _, img := range []*Image{base, app} {
		if img.Sealed == nil || !img.Sealed.layered {
			rec, _ := readSealRecord(filepath.Dir(img.Rootfs))
			t.Fatalf("image %s is not sealed per layer: %+v (unsealed: %q, record %+v)", img.Digest, img.Sealed, img.Unsealed, rec)
		}
		rec, err := readSealRecord(filepath.Dir(img.Rootfs))
		if err != nil || rec.File != "" || len(rec.Layers) != len(img.Layers) || rec.Whole != "" {
			t.Fatalf("seal record %+v, %v", rec, err)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(img.Rootfs), sealName)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("image %s has a whole seal too: %v", img.Digest, err)
		}
	}
	seals, _ := filepath.Glob(filepath.Join(dir, layersName, "*", layerSealName))
	if len(seals) != 2 {
		t.Fatalf("the layer store holds %d layer seals, want 2 (one per layer): %q", len(seals), seals)
	}
	cold, err := New(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []*Store{s, cold} {
		got, err := st.VerifySealed(ctx, app.Digest)
		if err != nil || got.Sealed == nil {
			t.Fatalf("VerifySealed = %+v, %v", got, err)
		}
		tree, done, err := st.Tree(got, true)
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]string{"etc/app": "app-" + sealMarker, "opt/new": "new", "bin/tool": "#!/bin/tool v2\n"} {
			if b, err := fs.ReadFile(tree, name); err != nil || string(b) != want {
				t.Errorf("%s through the sealed layers = %q, %v; want %q", name, b, err, want)
			}
		}
		for _, name := range []string{"etc/gone", "opt/old", "etc/.wh.gone", "opt/.wh..wh..opq"} {
			if _, err := fs.ReadFile(tree, name); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s shows through the sealed layers: %v", name, err)
			}
		}
		done()
		lowers, err := got.Sealed.Layers(ctx)
		if err != nil || len(lowers) != 2 {
			t.Fatalf("Layers = %v, %v", lowers, err)
		}
		for _, fd := range lowers {
			closeMount(fd)
		}
	}
}

// TestLayerSealTampered: a layer's seal changed in place (mtime set back),
// or swapped for another layer's, is refused (ErrSealChanged) by a store
// that verified it and by a fresh one, and by the mounts a launch takes
// (Sealed.Mount and Sealed.Layers); once put back, it verifies again.
func TestLayerSealTampered(t *testing.T) {
	ctx := context.Background()
	s, _, base, app := layeredStore(t)
	top, err := s.layerSealPath(app.Layers[1])
	if err != nil {
		t.Fatal(err)
	}
	bottom, err := s.layerSealPath(base.Layers[0])
	if err != nil {
		t.Fatal(err)
	}
	verified, err := s.VerifySealed(ctx, app.Digest)
	if err != nil {
		t.Fatal(err)
	}
	cold, err := New(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	// mounts says whether the launch's mounts are refused too: a file
	// changed in place is, one swapped under the name is not (the launch
	// mounts the very files verified, which still hold the image).
	refused := func(t *testing.T, what string, mounts bool) {
		t.Helper()
		for _, st := range []*Store{s, cold} {
			if _, err := st.VerifySealed(ctx, app.Digest); !errors.Is(err, ErrSealChanged) {
				t.Errorf("%s: VerifySealed = %v, want ErrSealChanged", what, err)
			}
		}
		if !mounts {
			tree, done, err := s.Tree(verified, true)
			if err != nil {
				t.Fatalf("%s: the verified mount: %v", what, err)
			}
			defer done()
			if b, err := fs.ReadFile(tree, "etc/app"); err != nil || string(b) != "app-"+sealMarker {
				t.Errorf("%s: the verified mount serves etc/app = %q, %v", what, b, err)
			}
			return
		}
		if fd, err := verified.Sealed.Mount(ctx); !errors.Is(err, ErrSealChanged) {
			closeMount(fd)
			t.Errorf("%s: the launch's Mount = %v, want ErrSealChanged", what, err)
		}
		if fds, err := verified.Sealed.Layers(ctx); !errors.Is(err, ErrSealChanged) {
			for _, fd := range fds {
				closeMount(fd)
			}
			t.Errorf("%s: the launch's Layers = %v, want ErrSealChanged", what, err)
		}
	}
	t.Run("content", func(t *testing.T) {
		old, new := "app-"+sealMarker, "APP-"+sealMarker
		rewrite(t, top, old, new)
		refused(t, "a layer seal changed in place", true)
		rewrite(t, top, new, old)
		if _, err := s.VerifySealed(ctx, app.Digest); err != nil {
			t.Fatalf("content restored: %v", err)
		}
	})
	t.Run("swapped", func(t *testing.T) {
		if err := os.Rename(top, top+".orig"); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(bottom, top); err != nil {
			t.Fatal(err)
		}
		refused(t, "a layer seal swapped for another layer's", false)
		if err := os.Remove(top); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(top+".orig", top); err != nil {
			t.Fatal(err)
		}
		if _, err := s.VerifySealed(ctx, app.Digest); err != nil {
			t.Fatalf("original put back: %v", err)
		}
	})
	// The base image does not hold the top layer: its seal is untouched.
	if _, err := s.VerifySealed(ctx, base.Digest); err != nil {
		t.Fatalf("the base image: %v", err)
	}
}

// TestLayerSealFallsBackWhole: an image whose layers' seals cannot serve
// its tree (here a layer hard-links a lower layer's file, which a seal of
// the layer alone cannot hold) is sealed whole, its seal record saying
// why, and verifies as a whole seal does, warm and after a restart.
func TestLayerSealFallsBackWhole(t *testing.T) {
	testenv.Root(t)
	if _, err := exec.LookPath("mkfs.erofs"); err != nil {
		testenv.Missing(t, "mkfs.erofs (erofs-utils)")
	}
	base := buildTar(t, []entry{
		{name: "bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "bin/tool", typ: tar.TypeReg, mode: 0o755, body: "tool"},
	})
	top := buildTar(t, []entry{
		{name: "bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "bin/again", typ: tar.TypeLink, linkname: "bin/tool"},
	})
	s, _ := newStore(t)
	ctx := context.Background()
	img, err := s.Import(ctx, "oci:"+writeLayout(t, imageOf(t, base, top), "v1"))
	if err != nil {
		t.Fatal(err)
	}
	if img.Unsealed != "" {
		testenv.Missing(t, "a kernel that mounts erofs from a file: "+img.Unsealed)
	}
	rec, err := readSealRecord(filepath.Dir(img.Rootfs))
	if err != nil || rec.File != sealName || len(rec.Layers) != 0 || !strings.Contains(rec.Whole, "links to files of lower layers") {
		t.Fatalf("seal record %+v, %v: want a whole seal saying why", rec, err)
	}
	cold, err := New(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []*Store{s, cold} {
		got, err := st.VerifySealed(ctx, img.Digest)
		if err != nil || got.Sealed == nil || got.Sealed.layered || got.Sealed.Spec().Layers != nil {
			t.Fatalf("VerifySealed = %+v, %v: want the whole seal", got, err)
		}
	}
}

// TestWholeSealOfAnOCIImageKeepsVerifying: an OCI image a store sealed
// whole before layers were sealed (its seal.json names rootfs.erofs)
// keeps verifying by that seal after a restart, and a change to it is
// still refused.
func TestWholeSealOfAnOCIImageKeepsVerifying(t *testing.T) {
	ctx := context.Background()
	s, _, _, app := layeredStore(t)
	dir := filepath.Dir(app.Rootfs)
	// What an earlier custody left: a whole seal and its record.
	s.sealIDs.drop(app.Digest)
	if err := os.Remove(filepath.Join(dir, sealRecordName)); err != nil {
		t.Fatal(err)
	}
	if err := s.sealWhole(ctx, app, ""); err != nil {
		t.Fatal(err)
	}
	cold, err := New(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cold.VerifySealed(ctx, app.Digest)
	if err != nil || got.Sealed == nil || got.Sealed.layered || got.Sealed.File != filepath.Join(dir, sealName) {
		t.Fatalf("VerifySealed of the old whole seal = %+v, %v", got, err)
	}
	file := filepath.Join(dir, sealName)
	rewrite(t, file, "app-"+sealMarker, "APP-"+sealMarker)
	if _, err := cold.VerifySealed(ctx, app.Digest); !errors.Is(err, ErrSealChanged) {
		t.Fatalf("the old whole seal changed: %v", err)
	}
}

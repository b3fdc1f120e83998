package oci_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/image"
	"github.com/custody-dev/custody/image/imagetest"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/snapshot"
)

// layeredBusybox imports into a fresh image store an OCI image of the
// busybox rootfs with a top layer that writes /marker "sealed" and whites
// out /bin/false, then writes "dir" into its rootfs directory's /marker:
// a launch shows which it ran.
func layeredBusybox(t *testing.T, h *harness) (*image.Store, *image.Image, string) {
	t.Helper()
	if _, err := exec.LookPath("mkfs.erofs"); err != nil {
		testenv.Missing(t, "mkfs.erofs (erofs-utils)")
	}
	var base bytes.Buffer
	if err := snapshot.WriteTar(&base, h.rootfs); err != nil {
		t.Fatal(err)
	}
	var top bytes.Buffer
	tw := tar.NewWriter(&top)
	now := time.Now()
	for _, hdr := range []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now},
		{Name: "bin/.wh.false", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: now},
		{Name: "marker", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: now, Size: 7},
	} {
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			tw.Write([]byte("sealed\n"))
		}
	}
	tw.Close()
	s, err := image.New(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := s.Import(context.Background(), "oci:"+imagetest.Layout(t, imagetest.Image(t, v1.Config{}, base.Bytes(), top.Bytes()), "v1"))
	if err != nil {
		t.Fatal(err)
	}
	if img.Sealed == nil {
		testenv.Missing(t, "a kernel that mounts erofs from a file: "+img.Unsealed)
	}
	spec := img.Sealed.Spec()
	if spec.Layers == nil {
		t.Fatalf("the image is not sealed per layer: %+v", img.Sealed)
	}
	if err := os.WriteFile(filepath.Join(img.Rootfs, "marker"), []byte("dir\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var top1 string
	if seals, _ := filepath.Glob(filepath.Join(filepath.Dir(filepath.Dir(img.Rootfs)), "layers", strings.TrimPrefix(img.Layers[1], "sha256:"), "seal.erofs")); len(seals) == 1 {
		top1 = seals[0]
	} else {
		t.Fatalf("no seal of the top layer: %q", seals)
	}
	return s, img, top1
}

// TestLayeredSealLaunch: an image sealed per layer launches as the overlay
// of its layers' seals (each idmapped under a user namespace): the
// workload sees the top layer's file and not the one it whites out, not
// the rootfs directory. Once the top layer's seal is changed in place, the
// runner's verify refuses the image and a launch from the verified seal
// is refused, never run.
func TestLayeredSealLaunch(t *testing.T) {
	for _, userns := range []bool{true, false} {
		t.Run(map[bool]string{false: "no-userns", true: "userns"}[userns], func(t *testing.T) {
			h := newHarness(t, userns)
			s, img, topSeal := layeredBusybox(t, h)
			ctx := context.Background()
			if _, err := s.VerifySealed(ctx, img.Digest); err != nil {
				t.Fatal(err)
			}
			_, out, _ := h.run(t, "layered-ok", []string{"/bin/sh", "-c", "cat /marker; ls /bin/false 2>&1 || echo whited-out"},
				func(sp *backend.Spec) { sp.Rootfs, sp.Sealed = img.Rootfs, img.Sealed.Spec() })
			if !strings.HasPrefix(out, "sealed\n") || !strings.HasSuffix(out, "whited-out\n") {
				t.Fatalf("a launch of the layered seal printed %q, want the sealed marker and /bin/false whited out", out)
			}

			// The top layer's seal changed in place, its mtime set back.
			fi, err := os.Stat(topSeal)
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(topSeal)
			if err != nil {
				t.Fatal(err)
			}
			i := bytes.Index(b, []byte("sealed\n"))
			if i < 0 {
				t.Fatal("the top layer's seal does not hold the marker")
			}
			f, err := os.OpenFile(topSeal, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("forged\n"), int64(i)); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if err := os.Chtimes(topSeal, time.Time{}, fi.ModTime()); err != nil {
				t.Fatal(err)
			}
			if _, err := s.VerifySealed(ctx, img.Digest); !errors.Is(err, image.ErrSealChanged) {
				t.Fatalf("verify of a tampered layer seal = %v, want ErrSealChanged", err)
			}
			sp := h.spec("/bin/cat", "/marker")
			sp.Rootfs, sp.Sealed = img.Rootfs, img.Sealed.Spec()
			if c, err := h.b.Prepare(ctx, "layered-tampered", sp, nil); err == nil {
				var out bytes.Buffer
				ex, rerr := c.Run(ctx, 10*time.Second, backend.IO{Stdout: &out, Stderr: &out})
				c.Cleanup(ctx)
				t.Fatalf("a launch from a tampered layer seal was prepared and ran: %+v %v %q", ex, rerr, out.String())
			} else if !errors.Is(err, image.ErrSealChanged) {
				t.Fatalf("a launch from a tampered layer seal: %v, want ErrSealChanged", err)
			}
			intents, err := h.b.Intents("layered-tampered")
			if err != nil {
				t.Fatal(err)
			}
			if rep := h.b.Recover(ctx, "layered-tampered", intents, nil); !rep.Verified {
				t.Fatalf("cleanup after the refused launch: %+v", rep)
			}
		})
	}
}

package oci_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/backendtest"
	"github.com/custody-dev/custody/backend/oci"
	"github.com/custody-dev/custody/internal/sealed"
)

// sealedBusybox seals a copy of the busybox rootfs holding /marker
// "sealed" as an erofs file, and returns it with a rootfs directory of
// the same image whose /marker says "dir": a launch shows which it ran.
func sealedBusybox(t *testing.T, h *harness) (dir string, seal *backend.SealedImage) {
	t.Helper()
	return backendtest.SealedCopy(t, h.rootfs)
}

// TestSealedMountsProbed: a backend launches from a sealed image only
// once it has done what such a launch does (an overlay over the detached
// erofs mount, cloned idmapped under a user namespace). Here the kernel
// can, and the workload sees the sealed tree. With the probe failing as
// a kernel that cannot would (EINVAL from the overlay), Capabilities says
// no SealedImages before anything is launched, a launch given the seal
// mounts the rootfs directory instead and succeeds, and the backend still
// idmaps (the refusal never set its no-idmap flag).
func TestSealedMountsProbed(t *testing.T) {
	for _, userns := range []bool{true, false} {
		t.Run(map[bool]string{false: "no-userns", true: "userns"}[userns], func(t *testing.T) {
			h := newHarness(t, userns)
			dir, seal := sealedBusybox(t, h)
			if caps := h.b.Capabilities(); !caps.SealedImages {
				t.Fatalf("this host overlays sealed images, yet Capabilities say no SealedImages: %+v", caps)
			}
			_, out, _ := h.run(t, "sealed-ok", []string{"/bin/cat", "/marker"}, func(s *backend.Spec) { s.Rootfs, s.Sealed = dir, seal })
			if strings.TrimSpace(out) != "sealed" {
				t.Fatalf("a launch given the seal ran %q, want the sealed tree", out)
			}

			cannot := newHarness(t, userns)
			probed := 0
			oci.SetSealedProbe(cannot.b, func(ctx context.Context, d string, idmap func(string) (int, error)) error {
				probed++
				if userns != (idmap != nil) {
					return fmt.Errorf("the probe idmaps %v, the backend maps users %v", idmap != nil, userns)
				}
				return fmt.Errorf("%w: overlay over the sealed mount: %w", sealed.ErrCannotOverlay, unix.EINVAL)
			})
			if caps := cannot.b.Capabilities(); caps.SealedImages {
				t.Fatal("the probe failed, yet Capabilities say SealedImages")
			}
			_, out, _ = cannot.run(t, "sealed-refused", []string{"/bin/cat", "/marker"}, func(s *backend.Spec) { s.Rootfs, s.Sealed = dir, seal })
			if strings.TrimSpace(out) != "dir" {
				t.Fatalf("a launch on a host that cannot overlay seals ran %q, want the rootfs directory", out)
			}
			if caps := cannot.b.Capabilities(); probed != 1 || caps.SealedImages || userns && caps.HostImageOwners {
				t.Fatalf("after the launch: probed %d times, caps %+v (want one probe, no seals, images still idmapped)", probed, caps)
			}
		})
	}
}

package host_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/image/imagetest"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/launch"
	"github.com/custody-dev/custody/platform"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/runrecord"
	"github.com/custody-dev/custody/snapshot"
)

// An image whose layer gives a file to uid 1000 is refused at admission,
// before any grant is spent, on a runner whose real runc backend has no
// user namespace (the file would be host uid 1000's), naming the fix; a
// rootfs import (all 0:0) still runs there. With a user namespace the same
// image is admitted and runs, its file owned by 1000 inside.
func TestImageOwnersNeedAUserNamespace(t *testing.T) {
	testenv.Root(t)
	path, version, sha := testenv.Runc(t)
	rt := host.Runtime{Path: path, Version: version, SHA256: sha}
	layout := ownedLayout(t)

	for _, userns := range []bool{false, true} {
		t.Run(map[bool]string{false: "no-userns", true: "userns"}[userns], func(t *testing.T) {
			h := ownersHarness(t, rt, userns)
			ctx := context.Background()
			img, err := h.r.Images().Import(ctx, "oci:"+layout+":v1")
			if err != nil {
				t.Fatal(err)
			}
			h.policy.Images = append(h.policy.Images, policy.Image{Digest: img.Digest, Name: "owned"})
			req := h.phase(`stat -c '%u:%g' /home/u`)
			req.Image = img.Digest
			_, err = launch.Admit(h.r, req, h.policy)
			if userns {
				if err != nil {
					t.Fatalf("admit with a user namespace: %v", err)
				}
				res, _ := h.run(req)
				want(t, res, runrecord.StatusOK, "1000:1000")
				return
			}
			var re *admission.RefusedError
			if !errors.As(err, &re) {
				t.Fatalf("admitted without a user namespace: %v", err)
			}
			found := false
			for _, c := range re.Checks {
				found = found || (c.Refused() && c.Requirement == "image.owners" && strings.Contains(c.Fix, "userNamespace"))
			}
			if !found {
				t.Fatalf("no image.owners refusal naming the fix: %v", err)
			}
			// The all-0:0 rootfs import runs on the same runner.
			res, _ := h.run(h.phase("echo ran"))
			want(t, res, runrecord.StatusOK, "ran")
		})
	}
}

// ownedLayout is an OCI layout (tag v1) of the busybox rootfs and a layer
// that gives /home/u to 1000:1000.
func ownedLayout(t *testing.T) string {
	t.Helper()
	var base, owned bytes.Buffer
	if err := snapshot.WriteTar(&base, testenv.BusyboxRootfs(t)); err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(&owned)
	for _, h := range []*tar.Header{
		{Name: "home/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "home/u/", Typeflag: tar.TypeDir, Mode: 0o755, Uid: 1000, Gid: 1000},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return imagetest.Layout(t, imagetest.Image(t, v1.Config{Env: []string{"PATH=/bin"}}, base.Bytes(), owned.Bytes()), "v1")
}

// ownersHarness is a runner on the real runc with a user namespace or
// without one, whichever the test asks (ociBackend takes one where the
// host allows it).
func ownersHarness(t *testing.T, rt host.Runtime, userns bool) *harness {
	t.Helper()
	base := launchBase(t)
	cfg := host.Config{StateDir: filepath.Join(base, "state"), RuntimeDir: filepath.Join(base, "run"), Runtime: rt, Gate: testenv.Gate(t)}
	r, db := openRunnerWith(t, cfg, ociBackendWith(cfg, func(p *platform.Profile) bool {
		if userns && !p.UserNS.OK {
			testenv.Missing(t, "user namespaces on this host (the owned image's legitimate case)")
		}
		return userns
	}))
	// The usual harness's policy, for this runner's busybox import.
	std := newHarnessWith(t, rt)
	img, err := r.Images().Import(context.Background(), testenv.BusyboxRootfs(t))
	if err != nil {
		t.Fatal(err)
	}
	pol := *std.policy
	pol.Images = []policy.Image{{Digest: img.Digest, Name: "busybox"}}
	return &harness{t: t, r: r, db: db, cfg: cfg, image: img.Digest, policy: &pol}
}

// TestIdmapProbedAtStart: with a user namespace, a runner whose start
// probe found that the kernel cannot idmap the image store's filesystem
// (forced here: the fact is the real probe's on /proc, which no kernel
// idmaps) refuses an image with non-root owners at admission, before any
// launch tried the mount, naming the stateDir fix; the all-0:0 image still
// runs. With the probe's own fact (this host idmaps its state dir) the
// owned image is admitted.
func TestIdmapProbedAtStart(t *testing.T) {
	testenv.Root(t)
	path, version, sha := testenv.Runc(t)
	rt := host.Runtime{Path: path, Version: version, SHA256: sha}
	layout := ownedLayout(t)
	unmappable := platform.ProbeIdmap(context.Background(), "/proc")
	if unmappable.OK {
		t.Fatalf("the kernel idmapped /proc: %+v", unmappable)
	}
	for _, forced := range []bool{false, true} {
		t.Run(map[bool]string{false: "idmap-works", true: "idmap-refused"}[forced], func(t *testing.T) {
			base := launchBase(t)
			cfg := host.Config{StateDir: filepath.Join(base, "state"), RuntimeDir: filepath.Join(base, "run"), Runtime: rt, Gate: testenv.Gate(t)}
			factory := ociBackendWith(cfg, func(p *platform.Profile) bool {
				if !p.UserNS.OK {
					testenv.Missing(t, "user namespaces on this host")
				}
				return true
			})
			r, db := openRunnerWith(t, cfg, func(profile func() *platform.Profile) (backend.Backend, error) {
				if !forced {
					if f := profile().Idmap; !f.OK {
						testenv.Missing(t, "a kernel that idmaps the state dir's filesystem: "+f.Detail)
					}
					return factory(profile)
				}
				return factory(func() *platform.Profile {
					p := *profile()
					p.Idmap = unmappable
					return &p
				})
			})
			std := newHarnessWith(t, rt)
			ctx := context.Background()
			plain, err := r.Images().Import(ctx, testenv.BusyboxRootfs(t))
			if err != nil {
				t.Fatal(err)
			}
			img, err := r.Images().Import(ctx, "oci:"+layout+":v1")
			if err != nil {
				t.Fatal(err)
			}
			pol := *std.policy
			pol.Images = []policy.Image{{Digest: plain.Digest, Name: "busybox"}, {Digest: img.Digest, Name: "owned"}}
			h := &harness{t: t, r: r, db: db, cfg: cfg, image: plain.Digest, policy: &pol}
			req := h.phase(`stat -c '%u:%g' /home/u`)
			req.Image = img.Digest
			_, err = launch.Admit(r, req, h.policy)
			if !forced {
				if err != nil {
					t.Fatalf("admit where the kernel idmaps: %v", err)
				}
				return
			}
			var re *admission.RefusedError
			if !errors.As(err, &re) {
				t.Fatalf("admitted though the probe said the kernel cannot idmap: %v", err)
			}
			found := false
			for _, c := range re.Checks {
				found = found || (c.Refused() && c.Requirement == "image.owners" && strings.Contains(c.Fix, "stateDir") && strings.Contains(c.Detail, "idmap"))
			}
			if !found {
				t.Fatalf("no image.owners refusal naming the stateDir fix: %v", err)
			}
			res, _ := h.run(h.phase("echo ran"))
			want(t, res, runrecord.StatusOK, "ran")
		})
	}
}

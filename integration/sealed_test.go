package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/custody-dev/custody/image/imagetest"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/snapshot"
)

// sealedMarker starts a file of the sealed test image; erofs keeps a file
// this large in data blocks, uncompressed, so the test finds it in the
// sealed file's bytes.
const sealedMarker = "sealed-launch-marker-0123456789"

// TestSealedImageLaunch runs phases on an image that custodyd sealed at
// import, through real custodyd and runc. Legitimate: the phase sees the
// image's content and owners (uid 1000's files are 1000's inside, through
// the idmapped erofs lower layer), and a change to the store's rootfs
// directory does not reach the run, since the sealed file is what is
// mounted. Refused as image-changed before the grant is spent: the sealed
// file changed in place (its mtime set back), and the sealed file
// replaced by another; the same grants then run once the file is back.
func TestSealedImageLaunch(t *testing.T) {
	root := testenv.BusyboxRootfs(t)
	var base bytes.Buffer
	if err := snapshot.WriteTar(&base, root); err != nil {
		t.Fatal(err)
	}
	owned := ownersLayer(t,
		ownedEntry{"home/", 0, 0, 0o755, ""},
		ownedEntry{"home/u/", 1000, 1000, 0o755, ""},
		ownedEntry{"home/u/mine", 1000, 1000, 0o600, "mine\n"},
		ownedEntry{"marker", 0, 0, 0o644, sealedMarker + strings.Repeat("\n", 8192)},
	)
	img := imagetest.Image(t, v1.Config{Env: []string{"PATH=/bin"}}, base.Bytes(), owned)
	e := startDaemonWith(t, "oci:"+imagetest.Layout(t, img, "v1")+":v1")
	dir := filepath.Join(e.dir, "state", "images", strings.TrimPrefix(e.image, "sha256:"))
	// An OCI image is sealed per layer: the file that holds /marker is
	// its top layer's seal, in the layer store.
	file := filepath.Join(dir, "rootfs.erofs")
	var rec struct {
		Layers []string `json:"layers"`
	}
	if js, err := os.ReadFile(filepath.Join(dir, "seal.json")); err == nil && json.Unmarshal(js, &rec) == nil && len(rec.Layers) > 0 {
		file = filepath.Join(filepath.Dir(dir), "layers", strings.TrimPrefix(rec.Layers[len(rec.Layers)-1], "sha256:"), "seal.erofs")
	}
	if _, err := os.Stat(file); err != nil {
		testenv.Missing(t, "a sealed image (mkfs.erofs and a kernel that mounts erofs from a file): "+err.Error())
	}
	t.Logf("the sealed file holding /marker: %s", strings.TrimPrefix(file, filepath.Dir(dir)))
	script := `head -c 31 /marker; echo; stat -c '%n %u:%g' /home/u/mine /marker`
	run := func(g string) (int, string, string) { return e.custody("run", "--grant", g) }
	ok := func(what string, code int, out, errs string) {
		t.Helper()
		for _, want := range []string{sealedMarker, "/home/u/mine 1000:1000", "/marker 0:0"} {
			if code != exitOK || !strings.Contains(out, want) {
				t.Fatalf("%s: want %q; exit %d\n%s\n%s", what, want, code, out, errs)
			}
		}
	}
	refused := func(what string, code int, out, errs string) {
		t.Helper()
		if code != exitRefused || !strings.Contains(out+errs, "image-changed") || !strings.Contains(out+errs, "sealed") {
			t.Fatalf("%s: exit %d\n%s\n%s", what, code, out, errs)
		}
	}
	code, out, errs := run(e.grant(t, e.phase(t, "sealed", script, "")))
	ok("a phase on the sealed image", code, out, errs)

	// The directory is not what runs.
	dirMarker := filepath.Join(dir, "rootfs", "marker")
	orig, err := os.ReadFile(dirMarker)
	if err != nil {
		t.Fatal(err)
	}
	write(t, dirMarker, "DIRECTORY-CHANGED\n")
	code, out, errs = run(e.grant(t, e.phase(t, "dir-changed", script, "")))
	write(t, dirMarker, string(orig))
	ok("a phase after the rootfs directory changed", code, out, errs)
	if strings.Contains(out, "DIRECTORY-CHANGED") {
		t.Fatalf("the rootfs directory, not the sealed file, reached the run:\n%s", out)
	}

	t.Run("changed in place", func(t *testing.T) {
		g := e.grant(t, e.phase(t, "in-place", script, ""))
		flip(t, file, sealedMarker, strings.ToUpper(sealedMarker))
		code, out, errs := run(g)
		flip(t, file, strings.ToUpper(sealedMarker), sealedMarker)
		refused("the sealed file changed in place", code, out, errs)
		code, out, errs = run(g)
		ok("the same grant once the content is back", code, out, errs)
	})
	t.Run("replaced", func(t *testing.T) {
		g := e.grant(t, e.phase(t, "replaced", script, ""))
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		other := filepath.Join(dir, "other.erofs")
		if err := os.WriteFile(other, bytes.Replace(b, []byte(sealedMarker), []byte(strings.ToUpper(sealedMarker)), 1), 0o400); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file, file+".orig"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(other, file); err != nil {
			t.Fatal(err)
		}
		code, out, errs := run(g)
		if err := os.Rename(file+".orig", file); err != nil {
			t.Fatal(err)
		}
		refused("the sealed file replaced", code, out, errs)
		code, out, errs = run(g)
		ok("the same grant once the file is back", code, out, errs)
	})
}

// flip replaces old with new (of the same length) in the file at path, in
// place, and sets its mtime back, so that only its ctime tells.
func flip(t *testing.T, path, old, new string) {
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
	defer f.Close()
	if _, err := f.WriteAt([]byte(new), int64(i)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, time.Time{}, fi.ModTime()); err != nil {
		t.Fatal(err)
	}
}

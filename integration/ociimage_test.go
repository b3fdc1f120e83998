package integration

import (
	"archive/tar"
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/custody-dev/custody/image/imagetest"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/snapshot"
)

// TestImportOCIImageAndRun imports a two-layer OCI layout (the busybox
// rootfs, then a layer whose whiteout deletes a file) through the CLI and
// runs real phases on it under runc: the deleted file is gone, the added
// one is there with its mtime, and a phase that reads the deleted file
// fails.
func TestImportOCIImageAndRun(t *testing.T) {
	root := testenv.BusyboxRootfs(t)
	write(t, filepath.Join(root, "etc", "gone"), "deleted by the upper layer\n")
	var base bytes.Buffer
	if err := snapshot.WriteTar(&base, root); err != nil {
		t.Fatal(err)
	}
	// snapshot.WriteTar ends the archive; append a device node to it the
	// way a Debian rootfs holds one, by writing a second archive.
	var dev bytes.Buffer
	tw := tar.NewWriter(&dev)
	if err := tw.WriteHeader(&tar.Header{Name: "dev/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3}); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	var upper bytes.Buffer
	tw = tar.NewWriter(&upper)
	for _, h := range []*tar.Header{
		{Name: "etc/.wh.gone", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "etc/added", Typeflag: tar.TypeReg, Mode: 0o644, Uid: 1000, Gid: 1000, Size: 6, ModTime: time.Unix(1700000000, 0)},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	tw.Write([]byte("added\n"))
	tw.Close()
	img := imagetest.Image(t, v1.Config{Env: []string{"PATH=/bin"}}, base.Bytes(), dev.Bytes(), upper.Bytes())
	src := "oci:" + imagetest.Layout(t, img, "v1") + ":v1"

	e := startDaemonWith(t, src)
	code, out, errs := e.custody("image", "import", src)
	if code != exitOK || strings.TrimSpace(out) != e.image || !strings.Contains(errs, "dev/null (character device)") {
		t.Fatalf("re-import: %d %q %q", code, out, errs)
	}
	code, out, errs = e.custody("image", "import", "--json", src)
	manifest, _ := img.Digest()
	if code != exitOK || !strings.Contains(out, `"manifest":"`+manifest.String()+`"`) {
		t.Fatalf("import --json: %d %s %s", code, out, errs)
	}

	ok := e.phase(t, "oci-ok", "test ! -e /etc/gone && test -c /dev/null && test \"$(stat -c %Y /etc/added)\" = 1700000000 && cat /etc/added > /out/x", "")
	if code, out, errs := e.custody("run", "--grant", e.grant(t, ok)); code != exitOK {
		t.Fatalf("phase on the OCI image: exit %d %s %s", code, out, errs)
	}
	bad := e.phase(t, "oci-gone", "cat /etc/gone", "")
	if code, _, _ := e.custody("run", "--grant", e.grant(t, bad)); code != exitFailed {
		t.Fatalf("reading the whited-out file: exit %d, want %d", code, exitFailed)
	}
}

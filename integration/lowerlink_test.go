package integration

import (
	"archive/tar"
	"bytes"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/custody-dev/custody/image/imagetest"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/snapshot"
)

// TestLayerHardLinkToLowerLayer imports, through the real custodyd, an OCI
// image whose upper layer hard-links files of the lower one (as the OCI
// image spec allows), one into a directory only the link implies, and
// runs a phase on it under runc: each link is the lower file, one inode.
// Links to a path no lower layer holds, through a lower symlink to /etc,
// or to a lower symlink to /etc/passwd are refused, saying why, and the
// host's /etc/passwd gains no link.
func TestLayerHardLinkToLowerLayer(t *testing.T) {
	base := busyboxTar(t)
	lower := tarOf(t,
		&tar.Header{Name: "opt/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "opt/tool", Typeflag: tar.TypeReg, Mode: 0o755, Uid: 1000, Gid: 1000, Size: 9},
		&tar.Header{Name: "hostetc", Typeflag: tar.TypeSymlink, Linkname: "/etc"},
		&tar.Header{Name: "pw", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"})
	upper := tarOf(t,
		&tar.Header{Name: "opt/again", Typeflag: tar.TypeLink, Linkname: "opt/tool"},
		&tar.Header{Name: "usr/local/bin/tool", Typeflag: tar.TypeLink, Linkname: "./opt/tool"})
	cfg := v1.Config{Env: []string{"PATH=/bin"}}
	src := "oci:" + imagetest.Layout(t, imagetest.Image(t, cfg, base, lower, upper), "v1") + ":v1"
	e := startDaemonWith(t, src)

	ok := e.phase(t, "lower-link", `test "$(cat /usr/local/bin/tool)" = "the tool" && `+
		`test "$(stat -c %i /usr/local/bin/tool)" = "$(stat -c %i /opt/tool)" && `+
		`test "$(stat -c %i /opt/again)" = "$(stat -c %i /opt/tool)" && test "$(stat -c %h /opt/tool)" -ge 3 && echo ok > /out/x`, "")
	if code, out, errs := e.custody("run", "--grant", e.grant(t, ok)); code != exitOK {
		t.Fatalf("phase on the image: exit %d %s %s", code, out, errs)
	}

	var before syscall.Stat_t
	if err := syscall.Stat("/etc/passwd", &before); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, target string }{
		{"absent", "opt/none"},
		{"through-symlink", "hostetc/passwd"},
		{"to-symlink", "pw"},
	} {
		bad := tarOf(t, &tar.Header{Name: "stolen", Typeflag: tar.TypeLink, Linkname: c.target})
		src := "oci:" + imagetest.Layout(t, imagetest.Image(t, cfg, lower, bad), "v1") + ":v1"
		code, out, errs := e.custody("image", "import", src)
		t.Logf("%s: %s", c.name, strings.TrimSpace(errs))
		if code == exitOK || !strings.Contains(errs, "hold no regular file "+c.target) {
			t.Errorf("%s: exit %d, want a refusal naming the target: %s %s", c.name, code, out, errs)
		}
	}
	var after syscall.Stat_t
	if err := syscall.Stat("/etc/passwd", &after); err != nil {
		t.Fatal(err)
	}
	if after.Nlink != before.Nlink || after.Ino != before.Ino {
		t.Errorf("host /etc/passwd: links %d -> %d", before.Nlink, after.Nlink)
	}
}

// tarOf is a tar of the headers, each regular file holding "the tool" and
// a newline (or as much of it as its size says).
func tarOf(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("the tool\n")[:h.Size])
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// busyboxTar is the busybox test rootfs as a layer tar.
func busyboxTar(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := snapshot.WriteTar(&buf, testenv.BusyboxRootfs(t)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

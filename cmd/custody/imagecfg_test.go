package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/custody-dev/custody/image/imagetest"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/snapshot"
)

// TestImageDefaultsThroughGrant issues a grant for a phase that declares
// no command, workdir, env or user, and runs it through custodyd: the
// image's config supplies each, resolved at issue and again, identically,
// when the grant is spent. A phase whose workdir the image lacks is
// refused at admission, before a grant exists.
func TestImageDefaultsThroughGrant(t *testing.T) {
	root := testenv.BusyboxRootfs(t)
	if err := os.MkdirAll(filepath.Join(root, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "etc", "passwd"), "root:x:0:0:root:/root:/bin/sh\nbuilder:x:1000:1000::/work:/bin/sh\n")
	var layer bytes.Buffer
	if err := snapshot.WriteTar(&layer, root); err != nil {
		t.Fatal(err)
	}
	img := imagetest.Image(t, v1.Config{Env: []string{"PATH=/bin", "FOO=image"}, WorkingDir: "/work", User: "builder",
		Cmd: []string{"sh", "-c", `echo "uid=$(id -u) pwd=$(pwd) foo=$FOO"; echo done > /out/x`}}, layer.Bytes())
	e := startDaemonWith(t, "oci:"+imagetest.Layout(t, img, "v1")+":v1")

	phase := func(name, extra string) string {
		p := filepath.Join(e.dir, name+".yaml")
		write(t, p, fmt.Sprintf("apiVersion: custody.dev/v1alpha1\nkind: Phase\nname: %s\nstage: build\ntier: development\nimage: %q\n"+
			"output:\n  path: /out\nresources:\n  memory: 64Mi\n  pids: 64\n  wallTime: 20s\n%s", name, e.image, extra))
		return p
	}
	ok := phase("defaults", "")
	code, out, errs := e.custody("run", "--grant", e.grant(t, ok))
	if code != exitOK || !strings.Contains(out, "uid=1000 pwd=/work foo=image") {
		t.Fatalf("phase on the image's defaults: exit %d\n%s\n%s", code, out, errs)
	}
	bad := phase("no-workdir", "workdir: /src\n")
	code, out, errs = e.custody("admit", bad)
	if code != exitRefused || !strings.Contains(out+errs, "/src is not in the image") {
		t.Fatalf("a workdir the image lacks: exit %d\n%s\n%s", code, out, errs)
	}
}

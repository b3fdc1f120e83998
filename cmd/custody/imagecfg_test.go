package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/custody-dev/custody/grant"
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

// TestGrantBindsImageConfig issues grants on an image's config defaults,
// then alters what is stored after issue: the record's run defaults, or
// the config blob itself. Each launch is refused as image-changed before
// the grant is spent, and the same grant runs once the store is restored.
// The receipt's grant carries the image's digests and the resolved process.
func TestGrantBindsImageConfig(t *testing.T) {
	root := testenv.BusyboxRootfs(t)
	var layer bytes.Buffer
	if err := snapshot.WriteTar(&layer, root); err != nil {
		t.Fatal(err)
	}
	img := imagetest.Image(t, v1.Config{Env: []string{"PATH=/bin"}, WorkingDir: "/",
		Cmd: []string{"sh", "-c", "echo from-image > /out/x"}}, layer.Bytes())
	e := startDaemonWith(t, "oci:"+imagetest.Layout(t, img, "v1")+":v1")
	cfgDigest, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	images := filepath.Join(e.dir, "state", "images")
	record := filepath.Join(images, strings.TrimPrefix(e.image, "sha256:"), "image.json")
	blob := filepath.Join(images, "configs", cfgDigest.Hex, "config.json")
	p := filepath.Join(e.dir, "defaults.yaml")
	write(t, p, fmt.Sprintf("apiVersion: custody.dev/v1alpha1\nkind: Phase\nname: defaults\nstage: build\ntier: development\nimage: %q\n"+
		"output:\n  path: /out\nresources:\n  memory: 64Mi\n  pids: 64\n  wallTime: 20s\n", e.image))

	alter := func(path, from, to string) func() {
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		changed := strings.Replace(string(orig), from, to, 1)
		if changed == string(orig) {
			t.Fatalf("%s has no %q", path, from)
		}
		write(t, path, changed)
		return func() { write(t, path, string(orig)) }
	}
	for _, c := range []struct{ name, path, from, to, want string }{
		{"record's command", record, "from-image", "TAMPERED", "run defaults"},
		{"config blob", blob, "from-image", "TAMPERED", "now hashes to"},
		{"record's config digest", record, cfgDigest.String(), "sha256:" + strings.Repeat("0", 64), "not kept"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := e.grant(t, p)
			restore := alter(c.path, c.from, c.to)
			code, out, errs := e.custody("run", "--grant", g)
			restore()
			if code != exitRefused || !strings.Contains(out+errs, "image-changed") || !strings.Contains(out+errs, c.want) {
				t.Fatalf("a grant whose image config changed after issue: exit %d\n%s\n%s", code, out, errs)
			}
			code, out, errs = e.custody("run", "--grant", g, "--json")
			if code != exitOK {
				t.Fatalf("the same grant once the store is restored: exit %d\n%s\n%s", code, out, errs)
			}
		})
	}

	// The grant itself binds the digests and what runs.
	g, err := os.ReadFile(e.grant(t, p))
	if err != nil {
		t.Fatal(err)
	}
	pred := grantPredicate(t, g)
	if pred.ImageRef == nil || pred.ImageRef.Config != cfgDigest.String() || !strings.HasPrefix(pred.ImageRef.Manifest, "sha256:") ||
		pred.Process == nil || len(pred.Process.Command) != 3 || pred.Process.Command[0] != "/bin/sh" ||
		pred.Process.Workdir != "/" || pred.Process.Env["PATH"] != "/bin" {
		t.Fatalf("grant binds image %+v process %+v", pred.ImageRef, pred.Process)
	}
}

// grantPredicate decodes the predicate of a grant envelope, unverified.
func grantPredicate(t *testing.T, env []byte) grant.Predicate {
	t.Helper()
	var e struct{ Payload string }
	if err := json.Unmarshal(env, &e); err != nil {
		t.Fatal(err)
	}
	payload, err := base64.StdEncoding.DecodeString(e.Payload)
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ Predicate grant.Predicate }
	if err := json.Unmarshal(payload, &st); err != nil {
		t.Fatal(err)
	}
	return st.Predicate
}

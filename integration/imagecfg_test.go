package integration

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

	phase := func(name, extra string) string { return e.barePhase(t, name, "20s", extra) }
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
	p := e.barePhase(t, "defaults", "20s", "")

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

// ownersLayer is a layer tar of entries with the given owners: name,
// uid, gid, mode, and content (a directory when it ends in "/").
func ownersLayer(t *testing.T, entries ...ownedEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Uid: e.uid, Gid: e.gid, Mode: e.mode, Typeflag: tar.TypeReg, Size: int64(len(e.data))}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

type ownedEntry struct {
	name     string
	uid, gid int
	mode     int64
	data     string
}

// TestImageOwnersInside runs phases on an image whose layer gives files to
// uid 1000 and to root: inside, each is owned by the id the image gives it
// (container root owns image root's files through the user namespace), a
// user: 1000 phase reads its own private file but neither reads nor writes
// root's, and root (without capabilities) reads its own but not uid 1000's.
func TestImageOwnersInside(t *testing.T) {
	root := testenv.BusyboxRootfs(t)
	var base bytes.Buffer
	if err := snapshot.WriteTar(&base, root); err != nil {
		t.Fatal(err)
	}
	owned := ownersLayer(t,
		ownedEntry{"home/", 0, 0, 0o755, ""},
		ownedEntry{"home/u/", 1000, 1000, 0o755, ""},
		ownedEntry{"home/u/mine", 1000, 1000, 0o600, "mine\n"},
		ownedEntry{"secret", 0, 0, 0o600, "secret\n"},
		ownedEntry{"rootfile", 0, 0, 0o644, "root's\n"},
	)
	img := imagetest.Image(t, v1.Config{Env: []string{"PATH=/bin"}}, base.Bytes(), owned)
	e := startDaemonWith(t, "oci:"+imagetest.Layout(t, img, "v1")+":v1")
	run := func(name, user, script string) (int, string, string) {
		extra := ""
		if user != "" {
			extra = "user: \"" + user + "\"\n"
		}
		return e.custody("run", "--grant", e.grant(t, e.phase(t, name, script, extra)))
	}
	code, out, errs := run("owners", "", `stat -c '%n %u:%g' /home/u /home/u/mine /secret /rootfile /bin/sh; cat /secret; cat /home/u/mine && echo READ-MINE; true`)
	for _, want := range []string{"/home/u 1000:1000", "/home/u/mine 1000:1000", "/secret 0:0", "/rootfile 0:0", "/bin/sh 0:0", "secret"} {
		if code != exitOK || !strings.Contains(out, want) || strings.Contains(out, "READ-MINE") {
			t.Fatalf("owners as root: want %q; exit %d\n%s\n%s", want, code, out, errs)
		}
	}
	code, out, errs = run("as-1000", "1000", `cat /home/u/mine; cat /secret && echo READ-SECRET; echo x >> /rootfile && echo WROTE-ROOTFILE; id -u`)
	if code != exitOK || !strings.Contains(out, "mine") || !strings.Contains(out, "1000") ||
		strings.Contains(out, "READ-SECRET") || strings.Contains(out, "WROTE-ROOTFILE") || !strings.Contains(out+errs, "Permission denied") {
		t.Fatalf("user 1000: exit %d\n%s\n%s", code, out, errs)
	}
}

// TestImageStopSignal: an image whose config names StopSignal SIGTERM gets
// it first when its phase times out, so a workload that traps it ends
// cleanly (and writes its last output); one that ignores it is killed after
// the grace period all the same.
func TestImageStopSignal(t *testing.T) {
	root := testenv.BusyboxRootfs(t)
	var layer bytes.Buffer
	if err := snapshot.WriteTar(&layer, root); err != nil {
		t.Fatal(err)
	}
	img := imagetest.Image(t, v1.Config{Env: []string{"PATH=/bin"}, StopSignal: "SIGTERM"}, layer.Bytes())
	e := startDaemonWith(t, "oci:"+imagetest.Layout(t, img, "v1")+":v1")
	phase := func(name, script string) string {
		return e.barePhase(t, name, "1s", fmt.Sprintf("command: [\"/bin/sh\", \"-c\", %q]\n", script))
	}
	code, out, errs := e.custody("run", "--grant", e.grant(t, phase("traps", `trap 'echo stopped > /out/term; exit 3' TERM; sleep 30 & wait`)), "--json")
	if !strings.Contains(out, `"status": "timeout"`) && !strings.Contains(out, `"status":"timeout"`) || !strings.Contains(out, `"term"`) || !strings.Contains(out, "SIGTERM") {
		t.Fatalf("a workload that traps the image's StopSignal: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = e.custody("run", "--grant", e.grant(t, phase("ignores", `trap '' TERM; sleep 30 & wait; sleep 30`)), "--json")
	if !strings.Contains(out, `"timeout"`) || !strings.Contains(out, "SIGKILL") {
		t.Fatalf("a workload that ignores the image's StopSignal: exit %d\n%s\n%s", code, out, errs)
	}
}

// barePhase writes a phase that declares only its image, output, budgets
// (wallTime wall) and extra, leaving the rest to the image's config.
func (e *env) barePhase(t *testing.T, name, wall, extra string) string {
	t.Helper()
	p := filepath.Join(e.dir, name+".yaml")
	write(t, p, fmt.Sprintf("apiVersion: custody.dev/v1alpha1\nkind: Phase\nname: %s\nstage: build\ntier: development\nimage: %q\n"+
		"output:\n  path: /out\nresources:\n  memory: 64Mi\n  pids: 64\n  wallTime: %s\n%s", name, e.image, wall, extra))
	return p
}

// TestImageListInspect lists and inspects a stored OCI image on the
// control socket: by tree digest and by the manifest digest it was
// imported by; an unknown digest is not found; the submit socket may not
// list images.
func TestImageListInspect(t *testing.T) {
	root := testenv.BusyboxRootfs(t)
	var layer bytes.Buffer
	if err := snapshot.WriteTar(&layer, root); err != nil {
		t.Fatal(err)
	}
	img := imagetest.Image(t, v1.Config{Env: []string{"PATH=/bin"}, Cmd: []string{"/bin/true"}}, layer.Bytes())
	e := startDaemonWith(t, "oci:"+imagetest.Layout(t, img, "v1")+":v1")
	manifest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs := e.custody("image", "list")
	if code != exitOK || !strings.Contains(out, e.image) || !strings.Contains(out, "manifest "+manifest.String()) {
		t.Fatalf("image list: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = e.custody("image", "list", "--json")
	var imgs []struct{ Digest, Manifest string }
	if code != exitOK || json.Unmarshal([]byte(out), &imgs) != nil || len(imgs) != 1 || imgs[0].Digest != e.image {
		t.Fatalf("image list --json: exit %d\n%s\n%s", code, out, errs)
	}
	for _, ref := range []string{e.image, manifest.String()} {
		code, out, errs = e.custody("image", "inspect", ref)
		if code != exitOK || !strings.Contains(out, `"/bin/true"`) || !strings.Contains(out, e.image) {
			t.Fatalf("image inspect %s: exit %d\n%s\n%s", ref, code, out, errs)
		}
	}
	if code, out, errs = e.custody("image", "inspect", "sha256:"+strings.Repeat("0", 64)); code == exitOK || !strings.Contains(out+errs, "not found") {
		t.Fatalf("image inspect of an unknown digest: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, errs = e.custody("--control", e.submit, "image", "list"); code == exitOK {
		t.Fatalf("image list on the submit socket: exit %d\n%s\n%s", code, out, errs)
	}
}

// TestImageRmPrune: rm refuses an image a live grant binds, naming the
// grant, and removes one no grant binds; prune keeps the bound image and
// removes the layer only the removed image used; once the grant is
// revoked (never spent), prune removes the image too.
func TestImageRmPrune(t *testing.T) {
	root := testenv.BusyboxRootfs(t)
	var layer bytes.Buffer
	if err := snapshot.WriteTar(&layer, root); err != nil {
		t.Fatal(err)
	}
	cfg := v1.Config{Env: []string{"PATH=/bin"}, Cmd: []string{"/bin/true"}}
	e := startDaemonWith(t, "oci:"+imagetest.Layout(t, imagetest.Image(t, cfg, layer.Bytes()), "v1")+":v1")
	extra := ownersLayer(t, ownedEntry{"opt/", 0, 0, 0o755, ""}, ownedEntry{"opt/v2", 0, 0, 0o644, "2\n"})
	code, out, errs := e.custody("image", "import", "oci:"+imagetest.Layout(t, imagetest.Image(t, cfg, layer.Bytes(), extra), "v2")+":v2")
	if code != exitOK {
		t.Fatalf("import v2: exit %d\n%s", code, errs)
	}
	second := strings.TrimSpace(out)
	g, err := os.ReadFile(e.grant(t, e.barePhase(t, "bound", "20s", "")))
	if err != nil {
		t.Fatal(err)
	}
	id := grantPredicate(t, g).ID
	code, out, errs = e.custody("image", "rm", e.image)
	if code != exitRefused || !strings.Contains(out+errs, id) {
		t.Fatalf("rm of an image a live grant binds: exit %d\n%s\n%s", code, out, errs)
	}
	layers := filepath.Join(e.dir, "state", "images", "layers")
	before, _ := os.ReadDir(layers)
	if code, out, errs = e.custody("image", "rm", second); code != exitOK {
		t.Fatalf("rm of an unbound image: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, _ = e.custody("image", "list"); strings.Contains(out, second) || !strings.Contains(out, e.image) {
		t.Fatalf("list after rm:\n%s", out)
	}
	code, out, errs = e.custody("image", "prune", "--json")
	after, _ := os.ReadDir(layers)
	if code != exitOK || !strings.Contains(out, `"images":[]`) || !strings.Contains(out, `"layers":1`) || len(after) != len(before)-1 {
		t.Fatalf("prune with a live grant: exit %d (layers %d -> %d)\n%s\n%s", code, len(before), len(after), out, errs)
	}
	if code, out, errs = e.custody("grant", "revoke", id); code != exitOK {
		t.Fatalf("revoke: %d %s %s", code, out, errs)
	}
	code, out, errs = e.custody("image", "prune")
	if code != exitOK || !strings.Contains(out, e.image) || !strings.Contains(out, "removed 1 images, 1 layers") {
		t.Fatalf("prune once the grant is revoked: exit %d\n%s\n%s", code, out, errs)
	}
}

// TestRootfsTarOwnersInside: a plain rootfs tar (no image config) that
// gives files to uid 1000 keeps them: inside a launched container they are
// 1000's, a user: 1000 phase reads its own 0600 file and not root's, and
// root's files stay root's.
func TestRootfsTarOwnersInside(t *testing.T) {
	var base bytes.Buffer
	if err := snapshot.WriteTar(&base, testenv.BusyboxRootfs(t)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	tr := tar.NewReader(&base)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []ownedEntry{
		{"home/", 0, 0, 0o755, ""},
		{"home/u/", 1000, 1000, 0o755, ""},
		{"home/u/mine", 1000, 1000, 0o600, "mine\n"},
		{"secret", 0, 0, 0o600, "secret\n"},
	} {
		h := &tar.Header{Name: e.name, Uid: e.uid, Gid: e.gid, Mode: e.mode, Typeflag: tar.TypeReg, Size: int64(len(e.data))}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(t.TempDir(), "rootfs.tar")
	if err := os.WriteFile(tarPath, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	e := startDaemonWith(t, tarPath)
	run := func(name, user, script string) (int, string, string) {
		extra := ""
		if user != "" {
			extra = "user: \"" + user + "\"\n"
		}
		return e.custody("run", "--grant", e.grant(t, e.phase(t, name, script, extra)))
	}
	code, stdout, errs := run("tar-owners", "", `stat -c '%n %u:%g' /home/u /home/u/mine /secret /bin/sh; cat /secret`)
	for _, want := range []string{"/home/u 1000:1000", "/home/u/mine 1000:1000", "/secret 0:0", "/bin/sh 0:0", "secret"} {
		if code != exitOK || !strings.Contains(stdout, want) {
			t.Fatalf("a rootfs tar's owners inside: want %q; exit %d\n%s\n%s", want, code, stdout, errs)
		}
	}
	code, stdout, errs = run("tar-as-1000", "1000", `cat /home/u/mine; cat /secret && echo READ-SECRET; id -u`)
	if code != exitOK || !strings.Contains(stdout, "mine") || strings.Contains(stdout, "READ-SECRET") || !strings.Contains(stdout+errs, "Permission denied") {
		t.Fatalf("user 1000 on a rootfs tar: exit %d\n%s\n%s", code, stdout, errs)
	}
}

// TestImageRmWhileRunLive: rm judges liveness from the journal. While a
// run that spent its grant on the image is running, rm is refused naming
// the grant and the run; once the run ended (its attempt clean), the spent
// grant binds nothing, though it has not expired, and rm removes the image.
func TestImageRmWhileRunLive(t *testing.T) {
	e := startDaemon(t)
	g := e.grant(t, e.phase(t, "sleeper", "sleep 6", ""))
	done := make(chan string, 1)
	go func() {
		code, out, errs := e.custody("run", "--grant", g)
		done <- fmt.Sprintf("exit %d\n%s\n%s", code, out, errs)
	}()
	var refusal string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		code, out, errs := e.custody("image", "rm", e.image)
		if code == exitOK {
			t.Fatalf("rm while the run is live removed the image\n%s", out)
		}
		if strings.Contains(out+errs, "is running in the journal") {
			refusal = out + errs
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if refusal == "" || !strings.Contains(refusal, "run-") && !strings.Contains(refusal, "run ") {
		t.Fatalf("rm while the run is live: no refusal naming the running run: %q", refusal)
	}
	if r := <-done; !strings.HasPrefix(r, "exit 0") {
		t.Fatalf("the run: %s", r)
	}
	if code, out, errs := e.custody("image", "rm", e.image); code != exitOK {
		t.Fatalf("rm after the run ended (its grant spent, unexpired): exit %d\n%s\n%s", code, out, errs)
	}
	if _, out, _ := e.custody("image", "list"); strings.Contains(out, e.image) {
		t.Fatalf("list after rm:\n%s", out)
	}
}

package integration

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/custody-dev/custody/image/imagetest"
	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/testenv"
)

// debianPackages are what the acceptance image holds beyond Debian's
// essential set: a C toolchain, Go and pytest.
var debianPackages = []string{"gcc", "make", "libc6-dev", "golang-go", "python3-pytest"}

// debianRootfs returns a Debian bookworm rootfs with debianPackages, made
// with mmdebstrap from Debian's mirror into build/_images once and reused
// (a directory named with "_" is one that go's ./... patterns skip: the
// rootfs holds Go's own sources).
func debianRootfs(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(testenv.ModuleRoot(t), "build", "_images", "debian-toolchain")
	if _, err := os.Stat(filepath.Join(dir, "usr", "bin", "gcc")); err == nil {
		return dir
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		t.Fatalf("mmdebstrap is needed to build the acceptance image: apt-get install mmdebstrap (%v)", err)
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := exec.Command("mmdebstrap", "--mode=root", "--variant=apt", "--format=directory",
		"--include="+strings.Join(debianPackages, ","), "bookworm", tmp, "http://deb.debian.org/debian").CombinedOutput()
	if err != nil {
		t.Fatalf("mmdebstrap: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("built the Debian rootfs in %s", time.Since(start).Round(time.Second))
	return dir
}

// writeTreeTar writes the tree under root as a tar that keeps owners,
// modes, mtimes and hard links, as docker or umoci would; device nodes,
// fifos and sockets go in too (the import skips them).
func writeTreeTar(t *testing.T, root, file string) {
	t.Helper()
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	links := map[uint64]string{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		target := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, target)
		if err != nil {
			return err
		}
		h.Name, h.Uname, h.Gname = filepath.ToSlash(rel), "", ""
		if info.IsDir() {
			h.Name += "/"
		}
		st := info.Sys().(*syscall.Stat_t)
		if info.Mode().IsRegular() && st.Nlink > 1 {
			if first, ok := links[st.Ino]; ok {
				h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
			} else {
				links[st.Ino] = h.Name
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// duKiB is the disk use of dir, hard-linked files counted once.
func duKiB(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command("du", "-sk", dir).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))[0]
}

// TestDebianToolchains is the acceptance test of real images (make
// test-images): a ~1 GB Debian rootfs with gcc, make, Go and pytest,
// imported as a rootfs tar and as an OCI layout of the same tree (one tree
// digest), then work run in it with network denied, declaring only the
// command and the inputs: a C program built with make from a writable
// input copy, a Go module built and tested, a pytest suite, and localhost
// resolved. It logs import times, disk use (and that of a second image
// sharing the base layer), and launch p50 of /bin/true against busybox.
func TestDebianToolchains(t *testing.T) {
	if os.Getenv("CUSTODY_IMAGE_TESTS") == "" {
		t.Skip("set CUSTODY_IMAGE_TESTS=1 (make test-images) to build and run the Debian acceptance image")
	}
	root := debianRootfs(t)
	work := t.TempDir()
	layerTar := filepath.Join(work, "rootfs.tar")
	writeTreeTar(t, root, layerTar)

	d := daemontest.New(t, daemontest.Options{})
	d.Start()
	e := newEnv(t, d)
	images := filepath.Join(d.Dir, "state", "images")
	importImage := func(src string) (string, time.Duration) {
		t.Helper()
		start := time.Now()
		code, out, errs := e.custody("image", "import", src)
		if code != 0 {
			t.Fatalf("image import %s: %d %s", src, code, errs)
		}
		return strings.TrimSpace(out), time.Since(start)
	}
	// Other work shares the machine: each figure is logged with the load
	// before and after it.
	loadBefore := loadavg(t)
	tarDigest, tarTime := importImage(layerTar)
	tarDisk := duKiB(t, images)

	layer, err := tarball.LayerFromFile(layerTar, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		t.Fatal(err)
	}
	base, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	withConfig := func(img v1.Image) v1.Image {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture = "linux", "amd64"
		cf.Config = v1.Config{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, Cmd: []string{"/bin/bash"}}
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			t.Fatal(err)
		}
		return img
	}
	debian := withConfig(base)
	start := time.Now()
	layoutDir := imagetest.Layout(t, debian, "bookworm")
	layoutTime := time.Since(start)
	ociDigest, ociTime := importImage("oci:" + layoutDir + ":bookworm")
	ociDisk := duKiB(t, images)
	if ociDigest != tarDigest {
		t.Fatalf("the OCI layout of the tree imports as %s, the rootfs tar as %s", ociDigest, tarDigest)
	}
	// A second image: the same base layer and a small one of its own.
	extra := ownersLayer(t, ownedEntry{"opt/app/", 0, 0, 0o755, ""}, ownedEntry{"opt/app/VERSION", 1000, 1000, 0o644, "2\n"})
	second, err := mutate.AppendLayers(base, imagetest.Layer(t, extra))
	if err != nil {
		t.Fatal(err)
	}
	secondDigest, secondTime := importImage("oci:" + imagetest.Layout(t, withConfig(second), "v2") + ":v2")
	secondDisk := duKiB(t, images)
	busybox := d.ImportBusybox(context.Background())
	t.Logf("rootfs %s KiB on disk; OCI layout written in %s", duKiB(t, root), layoutTime.Round(time.Millisecond))
	t.Logf("import: rootfs tar %s (store %s KiB); OCI layout %s (store %s KiB, same tree %s); second image sharing the base layer %s (store %s KiB); load before %s, after %s",
		tarTime.Round(time.Millisecond), tarDisk, ociTime.Round(time.Millisecond), ociDisk, ociDigest, secondTime.Round(time.Millisecond), secondDisk, loadBefore, loadavg(t))
	// Where the store's bytes are: image trees (hard links into the
	// layers for OCI imports), their sealed files, and the layers.
	for _, part := range []string{"*/rootfs", "*/rootfs.erofs", "layers"} {
		ps, _ := filepath.Glob(filepath.Join(images, part))
		args := append([]string{"-skc"}, ps...)
		if out, err := exec.Command("du", args...).Output(); err == nil && len(ps) > 0 {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			t.Logf("store %s: %s KiB over %d entries", part, strings.Fields(lines[len(lines)-1])[0], len(ps))
		}
	}

	pol, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "examples", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var entries strings.Builder
	for _, dg := range []string{ociDigest, secondDigest, busybox} {
		fmt.Fprintf(&entries, "  - digest: %q\n    name: acceptance\n", dg)
	}
	d.WritePolicy(strings.Replace(string(pol), "  - digest: \"@IMAGE@\"\n    name: busybox test image\n", entries.String(), 1))
	if code, out, errs := e.custody("policy", "reload"); code != 0 {
		t.Fatalf("policy reload: %s %s", out, errs)
	}

	// The work, each declaring only its command and inputs (and budgets).
	srcs := filepath.Join(d.Dir, "src")
	files := map[string]string{
		"c/Makefile":          "hello: hello.c\n\tcc -O2 -o hello hello.c\ntest: hello\n\t./hello | grep -q 'hello from C'\n\techo C-OK\n",
		"c/hello.c":           "#include <stdio.h>\nint main(void) { puts(\"hello from C\"); return 0; }\n",
		"go/go.mod":           "module example.test/hello\n\ngo 1.19\n",
		"go/hello.go":         "package hello\n\nfunc Hello() string { return \"hello from Go\" }\n",
		"go/hello_test.go":    "package hello\n\nimport \"testing\"\n\nfunc TestHello(t *testing.T) {\n\tif Hello() != \"hello from Go\" {\n\t\tt.Fatal(Hello())\n\t}\n}\n",
		"py/test_sample.py":   "def add(a, b):\n    return a + b\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
		"py/test_sample_2.py": "import pytest\n\n\n@pytest.mark.parametrize('n', [1, 2, 3])\ndef test_positive(n):\n    assert n > 0\n",
	}
	for name, data := range files {
		p := filepath.Join(srcs, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, p, data)
	}
	phase := func(name, img, command, inputs string) string {
		p := filepath.Join(d.Dir, name+".yaml")
		write(t, p, fmt.Sprintf("apiVersion: custody.dev/v1alpha1\nkind: Phase\nname: %s\nstage: build\ntier: development\nimage: %q\n"+
			"command: %s\noutput:\n  path: /out\ntmp:\n  maxBytes: 128Mi\nresources:\n  memory: 512Mi\n  pids: 256\n  wallTime: 10m\n%s",
			name, img, command, inputs))
		return p
	}
	rw := func(dir string) string {
		return "inputs:\n  - {source: " + filepath.Join(srcs, dir) + ", target: /src, writable: true}\n"
	}
	for _, c := range []struct{ name, command, inputs, want string }{
		{"c-make", `["/usr/bin/make", "-C", "/src", "test"]`, rw("c"), "C-OK"},
		{"go-test", `["/bin/sh", "-c", "cd /src && export GOCACHE=/tmp/gocache GOPATH=/tmp/gopath GOPROXY=off && go build ./... && go vet ./... && go test -count=1 ./... && echo GO-OK"]`, rw("go"), "GO-OK"},
		{"pytest", `["/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "/src"]`, rw("py"), "4 passed"},
		{"localhost", `["/bin/sh", "-c", "getent hosts localhost && python3 -c 'import socket; print(socket.gethostbyname(\"localhost\"))'"]`, "", "127.0.0.1"},
	} {
		start := time.Now()
		code, out, errs := e.custody("run", "--grant", e.grant(t, phase(c.name, ociDigest, c.command, c.inputs)))
		if code != exitOK || !strings.Contains(out, c.want) {
			t.Fatalf("%s: exit %d\n%s\n%s", c.name, code, out, errs)
		}
		t.Logf("%s: ok in %s", c.name, time.Since(start).Round(time.Millisecond))
	}

	// Launch p50 of /bin/true through custodyd (custody run, grants
	// issued beforehand): the Debian image next to busybox, interleaved so
	// that changing load falls on both alike.
	const runs = 30
	images2 := map[string]string{"debian": ociDigest, "busybox": busybox}
	grants := map[string][]string{}
	for name, img := range images2 {
		for i := range runs {
			grants[name] = append(grants[name], e.grant(t, phase(fmt.Sprintf("true-%d-%s", i, name), img, `["/bin/true"]`, "")))
		}
	}
	loadBefore = loadavg(t)
	times := map[string][]time.Duration{}
	for i := range runs {
		for _, name := range []string{"debian", "busybox"} {
			start := time.Now()
			if code, out, errs := e.custody("run", "--grant", grants[name][i]); code != exitOK {
				t.Fatalf("/bin/true on %s: exit %d\n%s\n%s", name, code, out, errs)
			}
			times[name] = append(times[name], time.Since(start))
		}
	}
	pct := func(ds []time.Duration, p int) time.Duration {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return ds[len(ds)*p/100].Round(time.Millisecond)
	}
	t.Logf("launch of /bin/true through custodyd (%d runs each, interleaved): debian p50 %s p90 %s, busybox p50 %s p90 %s; load before %s, after %s",
		runs, pct(times["debian"], 50), pct(times["debian"], 90), pct(times["busybox"], 50), pct(times["busybox"], 90), loadBefore, loadavg(t))
}

// loadavg is the host's load averages now.
func loadavg(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"github.com/custody-dev/custody/image/imagetest"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/snapshot"
)

// testConfig is the run config of the test images.
var testConfig = v1.Config{Env: []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}, WorkingDir: "/work", User: "1000:1000",
	Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{"echo hi"}, StopSignal: "SIGINT"}

func imageOf(t *testing.T, layers ...[]byte) v1.Image {
	return imagetest.Image(t, testConfig, layers...)
}

func writeLayout(t *testing.T, img v1.Image, tag string) string { return imagetest.Layout(t, img, tag) }

func writeDockerArchive(t *testing.T, img v1.Image) string { return imagetest.DockerArchive(t, img) }

// tarDir writes the tree at dir as a tar file.
func tarDir(t *testing.T, dir string) string {
	t.Helper()
	var buf bytes.Buffer
	if err := snapshot.WriteTar(&buf, dir); err != nil {
		t.Fatal(err)
	}
	return writeFile(t, t.TempDir(), "archive.tar", buf.Bytes())
}

func digestOf(t *testing.T, f func() (v1.Hash, error)) string {
	t.Helper()
	h, err := f()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// busyboxLayer is the test busybox rootfs as a layer tar.
func busyboxLayer(t *testing.T) ([]byte, string) {
	t.Helper()
	dir := testenv.BusyboxRootfs(t)
	var buf bytes.Buffer
	if err := snapshot.WriteTar(&buf, dir); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), dir
}

func TestDockerArchiveAndOCILayoutSameTree(t *testing.T) {
	data, dir := busyboxLayer(t)
	img := imageOf(t, data)
	s, storeDir := newStore(t)
	ctx := context.Background()

	oci, err := s.Import(ctx, "oci:"+writeLayout(t, img, "v1")+":v1")
	if err != nil {
		t.Fatal(err)
	}
	docker, err := s.Import(ctx, "docker-archive:"+writeDockerArchive(t, img))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := s.Import(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if oci.Digest != docker.Digest || oci.Digest != plain.Digest {
		t.Fatalf("tree digests differ: oci %s, docker-archive %s, rootfs %s", oci.Digest, docker.Digest, plain.Digest)
	}
	if want := digestOf(t, img.Digest); oci.Manifest != want {
		t.Errorf("manifest %s, want %s", oci.Manifest, want)
	}
	wantConfig := digestOf(t, img.ConfigName)
	if oci.ConfigDigest != wantConfig || docker.ConfigDigest != wantConfig {
		t.Errorf("config digests %s, %s, want %s", oci.ConfigDigest, docker.ConfigDigest, wantConfig)
	}
	if docker.Manifest != "" {
		t.Errorf("a classic docker-save archive has no manifest, got %s", docker.Manifest)
	}
	want := &Config{Env: testConfig.Env, WorkingDir: "/work", User: "1000:1000", Entrypoint: testConfig.Entrypoint, Cmd: testConfig.Cmd, StopSignal: "SIGINT"}
	for _, got := range []*Image{oci, docker} {
		if got.Config == nil || !slices.Equal(got.Config.Env, want.Env) || got.Config.WorkingDir != want.WorkingDir ||
			got.Config.User != want.User || !slices.Equal(got.Config.Entrypoint, want.Entrypoint) ||
			!slices.Equal(got.Config.Cmd, want.Cmd) || got.Config.StopSignal != want.StopSignal {
			t.Errorf("config %+v, want %+v", got.Config, want)
		}
		if got.Owners != OwnersRecorded || got.Platform != "linux/amd64" || len(got.Layers) != 1 {
			t.Errorf("record %+v", got)
		}
	}
	// Both imports bound their manifest (or config) to the tree, and the
	// layer was unpacked once.
	for _, key := range []string{oci.Manifest, docker.ConfigDigest} {
		b, err := s.Binding(key)
		if err != nil || b.Digest != oci.Digest || b.Rootfs != oci.Rootfs {
			t.Errorf("Binding(%s) = %+v, %v", key, b, err)
		}
	}
	if _, err := s.Binding("sha256:" + strings.Repeat("0", 64)); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown binding: %v", err)
	}
	if layers, _ := os.ReadDir(filepath.Join(storeDir, layersName)); len(layers) != 1 {
		t.Errorf("layer store holds %d layers, want 1", len(layers))
	}
	checkStored(t, s, storeDir, 1)
	if _, err := s.Verify(ctx, oci.Digest); err != nil {
		t.Fatal(err)
	}
	// An OCI archive of the same layout is the same image, and so is a
	// docker-save archive that is also an OCI layout (docker 25 and later).
	for _, src := range []string{"oci-archive:", "docker-archive:"} {
		arch, err := s.Import(ctx, src+tarDir(t, writeLayout(t, img, "v1")))
		if err != nil || arch.Digest != oci.Digest || arch.Manifest != oci.Manifest {
			t.Fatalf("%s: %+v, %v", src, arch, err)
		}
	}
}

func TestLayersWhiteoutsAndSharing(t *testing.T) {
	base := buildTar(t, []entry{
		{name: "a/", typ: tar.TypeDir, mode: 0o755},
		{name: "a/keep", typ: tar.TypeReg, mode: 0o644, body: "keep"},
		{name: "a/gone", typ: tar.TypeReg, mode: 0o644, body: "gone"},
		{name: "d/", typ: tar.TypeDir, mode: 0o755},
		{name: "d/x", typ: tar.TypeReg, mode: 0o644, body: "x"},
		{name: "d/sub/y", typ: tar.TypeReg, mode: 0o644, body: "y"},
		{name: "f", typ: tar.TypeReg, mode: 0o644, body: "file"},
	})
	top := buildTar(t, []entry{
		{name: "a/.wh.gone", typ: tar.TypeReg, mode: 0o644},
		{name: "d/", typ: tar.TypeDir, mode: 0o755},
		{name: "d/.wh..wh..opq", typ: tar.TypeReg, mode: 0o644},
		{name: "d/z", typ: tar.TypeReg, mode: 0o644, body: "z"},
		{name: "f/", typ: tar.TypeDir, mode: 0o755}, // a directory replaces the file
		{name: "f/in", typ: tar.TypeReg, mode: 0o644, body: "in"},
	})
	s, storeDir := newStore(t)
	ctx := context.Background()
	one, err := s.Import(ctx, "oci:"+writeLayout(t, imageOf(t, base), "base"))
	if err != nil {
		t.Fatal(err)
	}
	two, err := s.Import(ctx, "oci:"+writeLayout(t, imageOf(t, base, top), "top"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a/gone", "d/x", "d/sub", "a/.wh.gone", "d/.wh..wh..opq"} {
		if _, err := os.Lstat(filepath.Join(two.Rootfs, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there: %v", p, err)
		}
	}
	for p, want := range map[string]string{"a/keep": "keep", "d/z": "z", "f/in": "in"} {
		if got, err := os.ReadFile(filepath.Join(two.Rootfs, p)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v", p, got, err)
		}
	}
	// The owners recorded (buildTar gives every entry 1000:1000) are those
	// of what remains.
	var ids []string
	for _, o := range two.IDs {
		ids = append(ids, o.Path)
	}
	if want := []string{"a", "a/keep", "d", "d/z", "f", "f/in"}; !slices.Equal(ids, want) {
		t.Errorf("ids %q, want %q", ids, want)
	}
	// The lower image is untouched, and shares the base layer's files.
	if _, err := os.Stat(filepath.Join(one.Rootfs, "a/gone")); err != nil {
		t.Errorf("the base image lost a/gone: %v", err)
	}
	fi1, err1 := os.Stat(filepath.Join(one.Rootfs, "a/keep"))
	fi2, err2 := os.Stat(filepath.Join(two.Rootfs, "a/keep"))
	if err1 != nil || err2 != nil || !os.SameFile(fi1, fi2) {
		t.Errorf("a/keep is not shared by the two images: %v %v", err1, err2)
	}
	if layers, _ := os.ReadDir(filepath.Join(storeDir, layersName)); len(layers) != 2 {
		t.Errorf("layer store holds %d layers, want 2", len(layers))
	}
	for _, img := range []*Image{one, two} {
		if _, err := s.Verify(ctx, img.Digest); err != nil {
			t.Error(err)
		}
	}
}

// TestOCIKeepsOwnersModesTimes: an OCI import keeps modes, sticky bits,
// mtimes and hard links on disk, and records the image's owners.
func TestOCIKeepsOwnersModesTimes(t *testing.T) {
	mtime := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "home/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime},
		{Name: "home/user/", Typeflag: tar.TypeDir, Mode: 0o700, Uid: 1000, Gid: 1000, ModTime: mtime},
		{Name: "home/user/notes", Typeflag: tar.TypeReg, Mode: 0o640, Uid: 1000, Gid: 100, ModTime: mtime, Size: 1},
		{Name: "home/user/again", Typeflag: tar.TypeLink, Linkname: "home/user/notes", Uid: 1000, Gid: 100},
		{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: mtime},
		{Name: "bin/su", Typeflag: tar.TypeReg, Mode: 0o4755, ModTime: mtime, Size: 1},
		{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "home", Uid: 7, Gid: 8},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte("x"))
		}
	}
	tw.Close()
	s, _ := newStore(t)
	img, err := s.Import(context.Background(), "oci:"+writeLayout(t, imageOf(t, buf.Bytes()), "v1"))
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string][2]uint32{"home/user": {1000, 1000}, "home/user/notes": {1000, 100}, "link": {7, 8}}
	check := func(p string, mode os.FileMode, wantTime bool) {
		t.Helper()
		fi, err := os.Lstat(filepath.Join(img.Rootfs, p))
		if err != nil {
			t.Fatal(err)
		}
		// On disk each entry has the image's owner (0:0 unless it says).
		if st, o := fi.Sys().(*syscall.Stat_t), owners[p]; st.Uid != o[0] || st.Gid != o[1] {
			t.Errorf("%s: owner %d:%d on disk, want %d:%d", p, st.Uid, st.Gid, o[0], o[1])
		}
		if mode != 0 && fi.Mode()&(os.ModePerm|os.ModeSticky|os.ModeSetuid|os.ModeSetgid) != mode {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), mode)
		}
		if wantTime && !fi.ModTime().Equal(mtime) {
			t.Errorf("%s: mtime %v, want %v", p, fi.ModTime(), mtime)
		}
	}
	check("home/user", 0o700, true)
	check("home/user/notes", 0o640, true)
	check("tmp", 0o777|os.ModeSticky, true)
	check("bin/su", 0o755, true) // setuid dropped
	check("link", 0, false)
	want := []Owner{{"home/user", 1000, 1000}, {"home/user/again", 1000, 100}, {"home/user/notes", 1000, 100}, {"link", 7, 8}}
	if img.Owners != OwnersRecorded || !slices.Equal(img.IDs, want) {
		t.Errorf("owners %q, ids %+v, want %+v", img.Owners, img.IDs, want)
	}
	a, _ := os.Stat(filepath.Join(img.Rootfs, "home/user/notes"))
	b, _ := os.Stat(filepath.Join(img.Rootfs, "home/user/again"))
	if !os.SameFile(a, b) {
		t.Error("the hard link was not kept")
	}
}

func TestOCIRefusesCorruption(t *testing.T) {
	data := buildTar(t, sampleEntries)
	img := imageOf(t, data)
	layerDigest := digestOf(t, func() (v1.Hash, error) {
		ls, err := img.Layers()
		if err != nil {
			return v1.Hash{}, err
		}
		return ls[0].Digest()
	})
	manifestDigest := digestOf(t, img.Digest)
	blob := func(dir, digest string) string {
		return filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
	}
	corrupt := func(t *testing.T, path string, f func([]byte) []byte) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, f(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hostileLayer := func(entries []entry) func(t *testing.T) string {
		return func(t *testing.T) string { return "oci:" + writeLayout(t, imageOf(t, buildTar(t, entries)), "v1") }
	}
	cases := []struct {
		name   string
		source func(t *testing.T) string
		naming string
		is     error
	}{
		{"corrupted layer blob", func(t *testing.T) string {
			dir := writeLayout(t, img, "v1")
			corrupt(t, blob(dir, layerDigest), func(b []byte) []byte { b[len(b)/2] ^= 0xff; return b })
			return "oci:" + dir
		}, layerDigest, nil},
		{"manifest digest mismatch", func(t *testing.T) string {
			dir := writeLayout(t, img, "v1")
			corrupt(t, blob(dir, manifestDigest), func(b []byte) []byte { return append(b, ' ') })
			return "oci:" + dir
		}, "manifest " + manifestDigest, ErrDigestMismatch},
		{"config digest mismatch", func(t *testing.T) string {
			dir := writeLayout(t, img, "v1")
			corrupt(t, blob(dir, digestOf(t, img.ConfigName)), func(b []byte) []byte { return append(b, ' ') })
			return "oci:" + dir
		}, "config " + digestOf(t, img.ConfigName), ErrDigestMismatch},
		{"corrupted docker-archive layer", func(t *testing.T) string {
			// Rewrite the layer inside the archive: its diff id no
			// longer matches the config.
			src := writeDockerArchive(t, imageOf(t, data))
			other := writeDockerArchive(t, imageOf(t, buildTar(t, sampleEntries[:3])))
			return "docker-archive:" + swapLayer(t, src, other)
		}, "uncompressed layer", ErrDigestMismatch},
		{"layer escaping with ../", hostileLayer([]entry{{name: "../evil", typ: tar.TypeReg, mode: 0o644, body: "x"}}), "../evil", ErrUnsafeEntry},
		{"layer through a symlink", hostileLayer([]entry{
			{name: "l", typ: tar.TypeSymlink, linkname: "/etc"},
			{name: "l/passwd", typ: tar.TypeReg, mode: 0o644, body: "x"},
		}), "l/passwd", snapshot.ErrUnsafePath},
		{"later layer through an earlier symlink", func(t *testing.T) string {
			lower := buildTar(t, []entry{{name: "l", typ: tar.TypeSymlink, linkname: "/etc"}})
			upper := buildTar(t, []entry{{name: "l/passwd", typ: tar.TypeReg, mode: 0o644, body: "x"}})
			return "oci:" + writeLayout(t, imageOf(t, lower, upper), "v1")
		}, "l/...", snapshot.ErrUnsafePath},
		{"whiteout of ..", hostileLayer([]entry{{name: "a/.wh..", typ: tar.TypeReg, mode: 0o644}}), ".wh..", ErrUnsafeEntry},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, dir := newStore(t)
			_, err := s.Import(context.Background(), c.source(t))
			wantRefused(t, err, c.naming, c.is)
			checkStored(t, s, dir, 0)
			if _, err := os.Lstat("/evil"); err == nil {
				t.Fatal("/evil was written")
			}
		})
	}
}

// swapLayer returns a copy of the docker archive src with its layer file
// replaced by other's.
func swapLayer(t *testing.T, src, other string) string {
	t.Helper()
	read := func(p string) map[string][]byte {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		out := map[string][]byte{}
		tr := tar.NewReader(f)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return out
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(tr)
			out[h.Name] = b
		}
	}
	a, b := read(src), read(other)
	var layer []byte
	for n, d := range b {
		if strings.HasSuffix(n, ".tar.gz") {
			layer = d
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for n, d := range a {
		if strings.HasSuffix(n, ".tar.gz") {
			d = layer
		}
		tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(d))})
		tw.Write(d)
	}
	tw.Close()
	return writeFile(t, t.TempDir(), "swapped.tar", buf.Bytes())
}

func TestMultiPlatformIndex(t *testing.T) {
	img := imageOf(t, buildTar(t, sampleEntries))
	write := func(t *testing.T, platforms ...v1.Platform) string {
		t.Helper()
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		for _, p := range platforms {
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
		}
		dir := filepath.Join(t.TempDir(), "layout")
		lp, err := layout.Write(dir, empty.Index)
		if err != nil {
			t.Fatal(err)
		}
		if err := lp.AppendIndex(idx); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	s, _ := newStore(t)
	dir := write(t, v1.Platform{OS: "linux", Architecture: "arm64"}, v1.Platform{OS: "linux", Architecture: "s390x"})
	_, err := s.Import(context.Background(), "oci:"+dir)
	if !errors.Is(err, ErrPlatform) || !strings.Contains(err.Error(), "linux/arm64, linux/s390x") {
		t.Fatalf("err = %v, want a refusal naming the platforms present", err)
	}
	t.Log(err)
	dir = write(t, v1.Platform{OS: "linux", Architecture: "arm64"}, v1.Platform{OS: "linux", Architecture: "amd64"})
	got, err := s.Import(context.Background(), "oci:"+dir)
	if err != nil || got.Manifest != digestOf(t, img.Digest) {
		t.Fatalf("linux/amd64 from an index: %+v, %v", got, err)
	}
}

func TestOCITags(t *testing.T) {
	img := imageOf(t, buildTar(t, sampleEntries))
	other := imageOf(t, buildTar(t, sampleEntries[:4]))
	dir := writeLayout(t, img, "one")
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(other, layout.WithAnnotations(map[string]string{refNameAnnotation: "two"})); err != nil {
		t.Fatal(err)
	}
	s, _ := newStore(t)
	if _, err := s.Import(context.Background(), "oci:"+dir); err == nil || !strings.Contains(err.Error(), "one, two") {
		t.Fatalf("no tag of two images: %v", err)
	}
	if _, err := s.Import(context.Background(), "oci:"+dir+":three"); err == nil || !strings.Contains(err.Error(), `"three"`) {
		t.Fatalf("unknown tag: %v", err)
	}
	got, err := s.Import(context.Background(), "oci:"+dir+":two")
	if err != nil || got.Manifest != digestOf(t, other.Digest) {
		t.Fatalf("tag two: %+v, %v", got, err)
	}
}

func TestUnprefixedImageRefused(t *testing.T) {
	img := imageOf(t, buildTar(t, sampleEntries))
	layoutDir := writeLayout(t, img, "v1")
	cases := map[string]string{
		writeDockerArchive(t, img): "docker-archive:",
		layoutDir:                  "oci:",
		tarDir(t, layoutDir):       "oci-archive:",
	}
	s, dir := newStore(t)
	for src, prefix := range cases {
		_, err := s.Import(context.Background(), src)
		if !errors.Is(err, ErrWrongTransport) || !strings.Contains(err.Error(), prefix+src) {
			t.Errorf("%s: err = %v, want a refusal naming %s", src, err, prefix)
		}
	}
	checkStored(t, s, dir, 0)
	// A rootfs with a manifest.json of its own is still a rootfs.
	own := append(slices.Clone(sampleEntries), entry{name: "manifest.json", typ: tar.TypeReg, mode: 0o644, body: `{"name":"app"}`})
	if _, err := s.Import(context.Background(), writeFile(t, t.TempDir(), "r.tar", buildTar(t, own))); err != nil {
		t.Fatal(err)
	}
}

func TestCompressedRootfsTars(t *testing.T) {
	plain := buildTar(t, sampleEntries)
	var zbuf, xbuf bytes.Buffer
	zw, err := zstd.NewWriter(&zbuf)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(plain)
	zw.Close()
	xw, err := xz.NewWriter(&xbuf)
	if err != nil {
		t.Fatal(err)
	}
	xw.Write(plain)
	xw.Close()
	s, _ := newStore(t)
	want, err := s.Import(context.Background(), writeFile(t, t.TempDir(), "r.tar", plain))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"r.tar.zst": zbuf.Bytes(), "r.tar.xz": xbuf.Bytes()} {
		got, err := s.Import(context.Background(), writeFile(t, t.TempDir(), name, data))
		if err != nil || got.Digest != want.Digest {
			t.Errorf("%s: %+v, %v", name, got, err)
		}
		bad := slices.Clone(data)
		bad[len(bad)-5] ^= 0xff
		if _, err := s.Import(context.Background(), writeFile(t, t.TempDir(), name, bad)); err == nil {
			t.Errorf("corrupt %s accepted", name)
		}
	}
}

func TestDeviceNodesSkippedAndListed(t *testing.T) {
	entries := append(slices.Clone(sampleEntries),
		entry{name: "dev/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "dev/null", typ: tar.TypeChar, mode: 0o666},
		entry{name: "dev/full", typ: tar.TypeChar, mode: 0o666},
		entry{name: "run/initctl", typ: tar.TypeFifo, mode: 0o600})
	s, _ := newStore(t)
	img, err := s.Import(context.Background(), writeFile(t, t.TempDir(), "r.tar", buildTar(t, entries)))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"dev/null (character device)", "dev/full (character device)", "run/initctl (fifo)"}
	if !slices.Equal(img.Skipped, want) {
		t.Errorf("skipped %q, want %q", img.Skipped, want)
	}
	if _, err := os.Lstat(filepath.Join(img.Rootfs, "dev/null")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dev/null was created: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(img.Rootfs, "dev")); err != nil || !fi.IsDir() {
		t.Errorf("dev: %v", err)
	}
	// The same in an image layer.
	oimg, err := s.Import(context.Background(), "oci:"+writeLayout(t, imageOf(t, buildTar(t, entries)), "v1"))
	if err != nil || !slices.Equal(oimg.Skipped, want) {
		t.Errorf("layer: %+v, %v", oimg, err)
	}
}

func TestParseSource(t *testing.T) {
	for in, want := range map[string]Source{
		"./rootfs":                 {Path: "./rootfs"},
		"rootfs.tar.zst":           {Path: "rootfs.tar.zst"},
		"docker-archive:app.tar":   {Transport: TransportDockerArchive, Path: "app.tar"},
		"oci:./layout":             {Transport: TransportOCI, Path: "./layout"},
		"oci:./layout:v1.2":        {Transport: TransportOCI, Path: "./layout", Tag: "v1.2"},
		"oci:/a:b/layout":          {Transport: TransportOCI, Path: "/a:b/layout"},
		"oci-archive:/x/app.tar":   {Transport: TransportOCIArchive, Path: "/x/app.tar"},
		"./oci:not-a-prefix":       {Path: "./oci:not-a-prefix"},
		"oci-archive:app.tar:v1.0": {Transport: TransportOCIArchive, Path: "app.tar:v1.0"},
	} {
		got, err := ParseSource(in)
		if err != nil || got != want {
			t.Errorf("ParseSource(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if err == nil && got.String() != in {
			t.Errorf("%+v.String() = %q, want %q", got, got.String(), in)
		}
	}
	for _, in := range []string{"", "oci:", "oci:./layout:", "docker-archive:"} {
		if _, err := ParseSource(in); err == nil {
			t.Errorf("ParseSource(%q) accepted", in)
		}
	}
}

// TestOCILayoutBlobNotAFile: a layer blob that is a fifo is refused without
// blocking, and one that is a symlink out of the layout is not followed.
func TestOCILayoutBlobNotAFile(t *testing.T) {
	img := imageOf(t, buildTar(t, sampleEntries))
	dir := writeLayout(t, img, "v1")
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	d, err := ls[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(dir, "blobs", "sha256", d.Hex)
	if err := os.Remove(blob); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(blob, 0o644); err != nil {
		t.Fatal(err)
	}
	s, _ := newStore(t)
	done := make(chan error, 1)
	go func() { _, err := s.Import(context.Background(), "oci:"+dir); done <- err }()
	select {
	case err := <-done:
		wantRefused(t, err, "not a regular file", nil)
	case <-time.After(20 * time.Second):
		t.Fatal("the import blocked on a fifo blob")
	}
	os.Remove(blob)
	if err := os.Symlink("/etc/passwd", blob); err != nil {
		t.Fatal(err)
	}
	_, err = s.Import(context.Background(), "oci:"+dir)
	wantRefused(t, err, d.Hex, nil)
}

func TestConcurrentImportsShareLayers(t *testing.T) {
	base := buildTar(t, sampleEntries)
	top := buildTar(t, []entry{{name: "etc/extra", typ: tar.TypeReg, mode: 0o644, body: "x"}})
	sources := []string{
		"oci:" + writeLayout(t, imageOf(t, base), "a"),
		"oci:" + writeLayout(t, imageOf(t, base, top), "b"),
		"docker-archive:" + writeDockerArchive(t, imageOf(t, base)),
		"oci:" + writeLayout(t, imageOf(t, base, top), "b"),
	}
	s, dir := newStore(t)
	errs := make(chan error, len(sources))
	for _, src := range sources {
		go func() { _, err := s.Import(context.Background(), src); errs <- err }()
	}
	for range sources {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	checkStored(t, s, dir, 2)
	if layers, _ := os.ReadDir(filepath.Join(dir, layersName)); len(layers) != 2 {
		t.Errorf("layer store holds %d entries, want 2", len(layers))
	}
}

// TestLayerLinksToLowerLayers: a layer's hard links to files of lower
// layers are made in the image, as one inode with the lower file (into a
// directory only the link implies, and replacing a lower entry); a link
// a later entry of its layer replaces is not made; and a link whose target
// is absent, is reached through a symlink, is a symlink, or is replaced
// by the same layer, or whose name lies beneath a lower symlink, is
// refused with ErrLinkTarget or snapshot.ErrUnsafePath, writing nothing
// outside the image.
func TestLayerLinksToLowerLayers(t *testing.T) {
	outside := t.TempDir()
	base := buildTar(t, []entry{
		{name: "bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "bin/tool", typ: tar.TypeReg, mode: 0o755, body: "tool"},
		{name: "bin/old", typ: tar.TypeReg, mode: 0o644, body: "old"},
		{name: "bin/later", typ: tar.TypeReg, mode: 0o644, body: "later"},
		{name: "esc", typ: tar.TypeSymlink, linkname: outside},
		{name: "abs-link", typ: tar.TypeSymlink, linkname: "/etc/passwd"},
	})
	top := buildTar(t, []entry{
		{name: "new/dir/tool", typ: tar.TypeLink, linkname: "bin/tool"},
		{name: "bin/old", typ: tar.TypeLink, linkname: "bin/tool"},
		{name: "bin/chain", typ: tar.TypeLink, linkname: "new/dir/tool"},
		{name: "bin/replaced", typ: tar.TypeLink, linkname: "bin/tool"},
		{name: "bin/replaced", typ: tar.TypeReg, mode: 0o644, body: "own"},
	})
	s, _ := newStore(t)
	ctx := context.Background()
	img, err := s.Import(ctx, "oci:"+writeLayout(t, imageOf(t, base, top), "top"))
	if err != nil {
		t.Fatal(err)
	}
	tool, err := os.Stat(filepath.Join(img.Rootfs, "bin/tool"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"new/dir/tool", "bin/old", "bin/chain"} {
		if fi, err := os.Stat(filepath.Join(img.Rootfs, p)); err != nil || !os.SameFile(fi, tool) {
			t.Errorf("%s is not bin/tool: %v", p, err)
		}
	}
	if got, err := os.ReadFile(filepath.Join(img.Rootfs, "bin/replaced")); err != nil || string(got) != "own" {
		t.Errorf("bin/replaced = %q, %v", got, err)
	}
	if _, err := s.Verify(ctx, img.Digest); err != nil {
		t.Error(err)
	}
	for name, c := range map[string]struct {
		top  []entry
		want error
	}{
		"absent":          {[]entry{{name: "x", typ: tar.TypeLink, linkname: "bin/none"}}, ErrLinkTarget},
		"through symlink": {[]entry{{name: "x", typ: tar.TypeLink, linkname: "esc/f"}}, ErrLinkTarget},
		"to symlink":      {[]entry{{name: "x", typ: tar.TypeLink, linkname: "abs-link"}}, ErrLinkTarget},
		"to a directory":  {[]entry{{name: "x", typ: tar.TypeLink, linkname: "bin"}}, ErrLinkTarget},
		"replaced after": {[]entry{{name: "x", typ: tar.TypeLink, linkname: "bin/later"},
			{name: "bin/later", typ: tar.TypeReg, mode: 0o644, body: "new"}}, ErrLinkTarget},
		"name beneath symlink": {[]entry{{name: "esc/x", typ: tar.TypeLink, linkname: "bin/tool"}}, snapshot.ErrUnsafePath},
	} {
		src := "oci:" + writeLayout(t, imageOf(t, base, buildTar(t, c.top)), "bad")
		if _, err := s.Import(ctx, src); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	if ents, err := os.ReadDir(outside); err != nil || len(ents) != 0 {
		t.Errorf("something was written outside the image: %v %v", ents, err)
	}
}

// TestStoredLayerStillChecked: an OCI image whose config names a layer the
// store holds, but whose manifest's blob (present, and matching its own
// digest) is another layer, is refused with ErrDigestMismatch: a stored
// layer is reused only once the image's blob is shown to be it.
func TestStoredLayerStillChecked(t *testing.T) {
	app := buildTar(t, []entry{{name: "app", typ: tar.TypeReg, mode: 0o644, body: "the app"}})
	other := buildTar(t, []entry{{name: "app", typ: tar.TypeReg, mode: 0o644, body: "another"}})
	s, _ := newStore(t)
	ctx := context.Background()
	good := imageOf(t, app)
	if _, err := s.Import(ctx, "oci:"+writeLayout(t, good, "good")); err != nil {
		t.Fatal(err)
	}
	want, err := good.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	bad := imageOf(t, other)
	cf, err := bad.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.RootFS.DiffIDs = want.RootFS.DiffIDs
	if bad, err = mutate.ConfigFile(bad, cf); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(ctx, "oci:"+writeLayout(t, bad, "bad")); !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), "uncompressed layer") {
		t.Errorf("a blob of another layer under a stored diff id: %v, want ErrDigestMismatch", err)
	}
}

package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// DebianImagesEnv turns on the tests that build Debian images with
// mmdebstrap (make test sets it): the first run downloads Debian's
// packages, so a plain go test leaves them out.
const DebianImagesEnv = "CUSTODY_DEBIAN_IMAGES"

// DebianImages skips a test that builds Debian images unless
// DebianImagesEnv is set.
func DebianImages(t testing.TB) {
	t.Helper()
	if os.Getenv(DebianImagesEnv) == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("NOT TESTED: " + DebianImagesEnv + " is unset under CI=true; make test sets it")
		}
		t.Skip("set " + DebianImagesEnv + "=1 (make test sets it) to build Debian images with mmdebstrap (cached under build/_images) and run this test")
	}
}

// ImageCacheEnv names a directory where the Debian images are cached
// instead of build/_images: a cache that outlives a clone, as Go's module
// and build caches do (.ci/run sets one, so that a fresh clone does not
// fetch and unpack the same Debian packages again). The cache is keyed by
// every mmdebstrap argument; an empty one is filled as build/_images is.
const ImageCacheEnv = "CUSTODY_IMAGE_CACHE"

// ImageCache is where the Debian images are cached: ImageCacheEnv when set,
// else build/_images in the module.
func ImageCache(t testing.TB) string {
	t.Helper()
	if d := os.Getenv(ImageCacheEnv); d != "" {
		if !filepath.IsAbs(d) {
			t.Fatalf("%s=%q: want an absolute path", ImageCacheEnv, d)
		}
		return d
	}
	return filepath.Join(ModuleRoot(t), "build", "_images")
}

// DebianTar returns a rootfs tar of Debian suite with packages installed,
// made with mmdebstrap from Debian's own packages (--variant=apt: the
// essential set, apt and packages, with no recommends; documentation, man
// pages and locales left out). It is cached under ImageCache, keyed by
// every mmdebstrap argument, so a re-run costs nothing; the first costs
// what mmdebstrap takes, which the test log says.
func DebianTar(t testing.TB, name, suite string, packages ...string) string {
	t.Helper()
	args := []string{"--mode=root", "--variant=apt", "--format=tar",
		"--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/doc/*",
		"--dpkgopt=path-exclude=/usr/share/locale/*", "--dpkgopt=path-exclude=/usr/share/info/*",
		"--include=" + strings.Join(packages, ","), suite}
	sum := sha256.Sum256([]byte(strings.Join(args, "\n")))
	file := filepath.Join(ImageCache(t), name+"-"+hex.EncodeToString(sum[:8])+".tar")
	if _, err := os.Stat(file); err == nil {
		return file
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		Missing(t, "mmdebstrap (apt-get install mmdebstrap), to build the "+name+" image from Debian's packages")
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := file + ".tmp"
	os.Remove(tmp)
	start := time.Now()
	out, err := exec.Command("mmdebstrap", append(args, tmp, "http://deb.debian.org/debian")...).CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		t.Fatalf("mmdebstrap: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s (Debian %s with %s) in %s: %d MiB", filepath.Base(file), suite, strings.Join(packages, " "), time.Since(start).Round(time.Second), fi.Size()>>20)
	return file
}

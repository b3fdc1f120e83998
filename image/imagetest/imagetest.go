// Package imagetest builds OCI images for tests, with go-containerregistry's
// writers: layers from tar bytes, an image of them for linux/amd64, written
// as an OCI layout or a docker-save archive. Nothing is downloaded.
package imagetest

import (
	"bytes"
	"io"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// RefName is the annotation that tags an image of an OCI layout.
const RefName = "org.opencontainers.image.ref.name"

// Layer makes an image layer of the tar data (go-containerregistry
// compresses it with gzip).
func Layer(t testing.TB, data []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Image makes a linux/amd64 image with the run config cfg of the layer tars,
// lowest first.
func Image(t testing.TB, cfg v1.Config, layers ...[]byte) v1.Image {
	t.Helper()
	img := empty.Image
	for _, data := range layers {
		var err error
		if img, err = mutate.AppendLayers(img, Layer(t, data)); err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", "amd64", cfg
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// Layout writes img as a fresh OCI layout, tagged tag, and returns its dir.
func Layout(t testing.TB, img v1.Image, tag string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{RefName: tag})); err != nil {
		t.Fatal(err)
	}
	return dir
}

// DockerArchive writes img as `docker save` would and returns the file.
func DockerArchive(t testing.TB, img v1.Image) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "app.tar")
	tag, err := name.NewTag("example.test/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(file, tag, img); err != nil {
		t.Fatal(err)
	}
	return file
}

package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/custody-dev/custody/image"
	"github.com/custody-dev/custody/snapshot"
)

// SharedBase is what importing two images that share a base layer cost
// the image store: the first holds the base layer, the second that layer
// and one small layer of its own.
type SharedBase struct {
	// BaseBytes and OwnBytes are the uncompressed sizes of the base
	// layer's and the second image's own layer's tars.
	BaseBytes, OwnBytes int64
	// First and Second are the store's growth (bytes on disk, hard links
	// counted once) by the first and the second import.
	First, Second int64
	// OwnLayerStored is the second image's own layer as the store keeps
	// it: its unpacked tree and its seal.
	OwnLayerStored int64
	// PerLayer says whether both images were sealed per layer; Unsealed
	// says why not, if the store could not seal at all.
	PerLayer bool
	Unsealed string
}

// MeasureSharedBase imports, into a fresh image store under work, an OCI
// image whose one layer is the tree at base, then one of that layer and
// an own layer of ownBytes of incompressible files, and measures the
// store after each.
func MeasureSharedBase(ctx context.Context, base, work string, ownBytes int64) (*SharedBase, error) {
	var res SharedBase
	baseTar, err := tarOf(base)
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	own := filepath.Join(work, "own")
	if err := ownTree(own, ownBytes); err != nil {
		return nil, err
	}
	ownTar, err := tarOf(own)
	if err != nil {
		return nil, fmt.Errorf("own layer: %w", err)
	}
	res.BaseBytes, res.OwnBytes = int64(len(baseTar)), int64(len(ownTar))
	first, err := writeLayout(filepath.Join(work, "first"), baseTar)
	if err != nil {
		return nil, err
	}
	second, err := writeLayout(filepath.Join(work, "second"), baseTar, ownTar)
	if err != nil {
		return nil, err
	}
	baseTar = nil
	storeDir := filepath.Join(work, "images")
	s, err := image.New(storeDir)
	if err != nil {
		return nil, err
	}
	before, err := DiskUsage(storeDir)
	if err != nil {
		return nil, err
	}
	one, err := s.Import(ctx, "oci:"+first+":v1")
	if err != nil {
		return nil, fmt.Errorf("import the first image: %w", err)
	}
	afterFirst, err := DiskUsage(storeDir)
	if err != nil {
		return nil, err
	}
	two, err := s.Import(ctx, "oci:"+second+":v1")
	if err != nil {
		return nil, fmt.Errorf("import the second image: %w", err)
	}
	afterSecond, err := DiskUsage(storeDir)
	if err != nil {
		return nil, err
	}
	res.First, res.Second = afterFirst-before, afterSecond-afterFirst
	res.Unsealed = two.Unsealed
	res.PerLayer = one.Sealed != nil && two.Sealed != nil && filepath.Base(two.Sealed.File) == "seal.json"
	if n := len(two.Layers); n > 0 {
		hex := two.Layers[n-1][len("sha256:"):]
		if res.OwnLayerStored, err = DiskUsage(filepath.Join(storeDir, "layers", hex)); err != nil {
			return nil, err
		}
	}
	return &res, nil
}

// tarOf is the tree at dir as a layer tar.
func tarOf(dir string) ([]byte, error) {
	var buf bytes.Buffer
	if err := snapshot.WriteTar(&buf, dir); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ownTree writes n bytes of random data in 1 MiB files under dir/opt/app.
func ownTree(dir string, n int64) error {
	app := filepath.Join(dir, "opt", "app")
	if err := os.MkdirAll(app, 0o755); err != nil {
		return err
	}
	for i := 0; n > 0; i++ {
		size := min(n, 1<<20)
		f, err := os.Create(filepath.Join(app, fmt.Sprintf("blob-%04d", i)))
		if err != nil {
			return err
		}
		_, err = io.CopyN(f, rand.Reader, size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		n -= size
	}
	return nil
}

// writeLayout writes an OCI layout of a linux/amd64 image of the layer
// tars (lowest first), tagged v1, stored rather than compressed (gzip at
// level 0): the bench measures the store, not gzip.
func writeLayout(dir string, layers ...[]byte) (string, error) {
	img := empty.Image
	for _, data := range layers {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
			tarball.WithCompressionLevel(gzip.NoCompression))
		if err != nil {
			return "", err
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return "", err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return "", err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return "", err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "v1"})); err != nil {
		return "", err
	}
	return dir, nil
}

// DiskUsage is the bytes on disk under dir, each inode counted once (as
// du counts hard links).
func DiskUsage(dir string) (int64, error) {
	seen := map[[2]uint64]bool{}
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		k := [2]uint64{st.Dev, st.Ino}
		if !seen[k] {
			seen[k] = true
			total += st.Blocks * 512
		}
		return nil
	})
	return total, err
}

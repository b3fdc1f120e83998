package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ErrDigestMismatch is returned (wrapped, naming the blob) when a blob of an
// image does not hash to the digest that refers to it.
var ErrDigestMismatch = errors.New("blob does not match its digest (the image is damaged or was altered: export it again)")

// ErrPlatform is returned when an image index holds no image for this host's
// platform, or an image is for another platform.
var ErrPlatform = errors.New("no image for this host's platform")

// Bounds on the JSON documents of an image (index, manifest, config).
const maxDocument = 4 << 20

// refNameAnnotation names an image of an OCI layout (its tag).
const refNameAnnotation = "org.opencontainers.image.ref.name"

// resolved is an image chosen from a layout or archive, its manifest and
// config verified against their digests.
type resolved struct {
	// manifest is the manifest's digest; empty for a classic docker-save
	// archive, which has none.
	manifest string
	config   string // the config blob's digest
	raw      []byte // the config blob, verified against config
	cfg      *v1.ConfigFile
	platform string
	layers   []layerRef
}

// layerRef is one layer blob of a resolved image.
type layerRef struct {
	path   string // inside the layout or archive
	digest string // of the blob as stored; empty when nothing names it
	diffID string // of the uncompressed tar, from the config
}

// hostPlatform is the platform an image must be built for to run here.
func hostPlatform() string { return runtime.GOOS + "/" + runtime.GOARCH }

func platformString(p *v1.Platform) string {
	if p == nil {
		return "unknown"
	}
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// blobPath is where an OCI layout keeps the blob of digest.
func blobPath(h v1.Hash) string { return path.Join("blobs", h.Algorithm, h.Hex) }

// openRegular opens the regular file name in root (which no symlink
// leaves). A fifo or device is refused without blocking on it.
func openRegular(root *os.Root, name string) (*os.File, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s is not a regular file (mode %s)", name, fi.Mode().Type())
		}
		return nil, err
	}
	return f, nil
}

// readDocument reads at most maxDocument bytes of the file name in root.
func readDocument(root *os.Root, name string) ([]byte, error) {
	f, err := openRegular(root, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxDocument+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(data) > maxDocument {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, maxDocument)
	}
	return data, nil
}

// readBlob reads the document blob h of an OCI layout and verifies it.
func readBlob(root *os.Root, h v1.Hash, what string) ([]byte, error) {
	if h.Algorithm != "sha256" {
		return nil, fmt.Errorf("%s %s: digest algorithm %q is not supported (sha256 only)", what, h, h.Algorithm)
	}
	data, err := readDocument(root, blobPath(h))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, h, err)
	}
	if err := verifyBytes(data, h.String(), what); err != nil {
		return nil, err
	}
	return data, nil
}

// verifyBytes checks that data hashes to digest ("sha256:<hex>").
func verifyBytes(data []byte, digest, what string) error {
	sum := sha256.Sum256(data)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != digest {
		return fmt.Errorf("%s %s hashes to %s: %w", what, digest, got, ErrDigestMismatch)
	}
	return nil
}

func isIndex(mt types.MediaType) bool {
	return mt == types.OCIImageIndex || mt == types.DockerManifestList
}

// resolveLayout chooses the image of the OCI layout in root: by tag when one
// is given, else the only image, else the host's platform of an index.
func resolveLayout(root *os.Root, tag string) (*resolved, error) {
	data, err := readDocument(root, "index.json")
	if err != nil {
		return nil, fmt.Errorf("OCI layout: %w", err)
	}
	idx, err := v1.ParseIndexManifest(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("OCI layout: index.json: %w", err)
	}
	desc, err := selectManifest(idx, tag, "index.json")
	if err != nil {
		return nil, err
	}
	// An entry of index.json may itself be an index (a multi-platform
	// image); one level of nesting is all the spec's writers make.
	for depth := 0; isIndex(desc.MediaType); depth++ {
		if depth == 2 {
			return nil, fmt.Errorf("image index %s: indexes nested deeper than 2 are not supported", desc.Digest)
		}
		data, err := readBlob(root, desc.Digest, "image index")
		if err != nil {
			return nil, err
		}
		idx, err := v1.ParseIndexManifest(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("image index %s: %w", desc.Digest, err)
		}
		if desc, err = selectManifest(idx, "", "image index "+desc.Digest.String()); err != nil {
			return nil, err
		}
	}
	return resolveManifest(root, desc)
}

// selectManifest picks one descriptor of idx (named what, for errors).
func selectManifest(idx *v1.IndexManifest, tag, what string) (v1.Descriptor, error) {
	cands := idx.Manifests
	if tag != "" {
		cands = nil
		var tags []string
		for _, d := range idx.Manifests {
			if t := d.Annotations[refNameAnnotation]; t == tag {
				cands = append(cands, d)
			} else if t != "" {
				tags = append(tags, t)
			}
		}
		if len(cands) == 0 {
			return v1.Descriptor{}, fmt.Errorf("%s has no image tagged %q (tags: %s)", what, tag, listOrNone(tags))
		}
	}
	switch {
	case len(cands) == 0:
		return v1.Descriptor{}, fmt.Errorf("%s lists no image", what)
	case len(cands) == 1 && cands[0].Platform == nil:
		return cands[0], nil
	}
	var match []v1.Descriptor
	var platforms, tags []string
	for _, d := range cands {
		if d.Platform == nil {
			if t := d.Annotations[refNameAnnotation]; t != "" {
				tags = append(tags, t)
			}
			continue
		}
		platforms = append(platforms, platformString(d.Platform))
		if d.Platform.OS+"/"+d.Platform.Architecture == hostPlatform() {
			match = append(match, d)
		}
	}
	switch {
	case len(match) == 1:
		return match[0], nil
	case len(match) > 1:
		return v1.Descriptor{}, fmt.Errorf("%s lists %d images for %s; give one by its tag", what, len(match), hostPlatform())
	case len(platforms) > 0:
		slices.Sort(platforms)
		return v1.Descriptor{}, fmt.Errorf("%s has no image for %s (platforms: %s); import an image built for %s: %w",
			what, hostPlatform(), strings.Join(slices.Compact(platforms), ", "), hostPlatform(), ErrPlatform)
	default:
		return v1.Descriptor{}, fmt.Errorf("%s lists %d images (tags: %s); choose one as oci:PATH:TAG", what, len(cands), listOrNone(tags))
	}
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// resolveManifest reads and verifies the manifest desc names and its
// config.
func resolveManifest(root *os.Root, desc v1.Descriptor) (*resolved, error) {
	data, err := readBlob(root, desc.Digest, "manifest")
	if err != nil {
		return nil, err
	}
	m, err := v1.ParseManifest(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", desc.Digest, err)
	}
	cdata, err := readBlob(root, m.Config.Digest, "config")
	if err != nil {
		return nil, err
	}
	res, err := resolveConfig(cdata, m.Config.Digest.String())
	if err != nil {
		return nil, err
	}
	res.manifest = desc.Digest.String()
	if len(m.Layers) != len(res.cfg.RootFS.DiffIDs) {
		return nil, fmt.Errorf("manifest %s lists %d layers, its config %d diff ids", desc.Digest, len(m.Layers), len(res.cfg.RootFS.DiffIDs))
	}
	for i, l := range m.Layers {
		if l.Digest.Algorithm != "sha256" {
			return nil, fmt.Errorf("layer %s: digest algorithm %q is not supported (sha256 only)", l.Digest, l.Digest.Algorithm)
		}
		res.layers = append(res.layers, layerRef{path: blobPath(l.Digest), digest: l.Digest.String(), diffID: res.cfg.RootFS.DiffIDs[i].String()})
	}
	return res, nil
}

// resolveConfig parses the config blob data (whose digest is digest) and
// checks that it is for this host.
func resolveConfig(data []byte, digest string) (*resolved, error) {
	cf, err := v1.ParseConfigFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", digest, err)
	}
	p := cf.Platform()
	if p == nil {
		return nil, fmt.Errorf("config %s names no os and architecture; import an image built for %s: %w", digest, hostPlatform(), ErrPlatform)
	}
	if p.OS+"/"+p.Architecture != hostPlatform() {
		return nil, fmt.Errorf("config %s is for %s, not %s; import an image built for %s: %w", digest, platformString(p), hostPlatform(), hostPlatform(), ErrPlatform)
	}
	for _, d := range cf.RootFS.DiffIDs {
		if d.Algorithm != "sha256" {
			return nil, fmt.Errorf("config %s: diff id %s: only sha256 is supported", digest, d)
		}
	}
	return &resolved{config: digest, raw: data, cfg: cf, platform: platformString(p)}, nil
}

// resolveDockerArchive chooses the image of an unpacked docker-save archive.
// An archive made by docker 25 or later is also an OCI layout, read as one
// (it has a manifest digest); a classic one has only manifest.json, and its
// image is bound by config digest (docker's image id) alone.
func resolveDockerArchive(root *os.Root) (*resolved, error) {
	if _, err := root.Lstat("oci-layout"); err == nil {
		return resolveLayout(root, "")
	}
	data, err := readDocument(root, "manifest.json")
	if err != nil {
		return nil, fmt.Errorf("docker archive: %w", err)
	}
	var m tarball.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("docker archive: manifest.json: %w", err)
	}
	if len(m) != 1 {
		var tags []string
		for _, d := range m {
			tags = append(tags, d.RepoTags...)
		}
		return nil, fmt.Errorf("docker archive holds %d images (tags: %s); save one image per archive", len(m), listOrNone(tags))
	}
	d := m[0]
	cdata, err := readDocument(root, d.Config)
	if err != nil {
		return nil, fmt.Errorf("docker archive: config: %w", err)
	}
	sum := sha256.Sum256(cdata)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	// The config's name is its digest (as "<hex>.json", "sha256:<hex>" or
	// "blobs/sha256/<hex>"): check it when it is.
	if named, ok := digestOfName(d.Config); ok && named != digest {
		return nil, fmt.Errorf("config %s hashes to %s: %w", d.Config, digest, ErrDigestMismatch)
	}
	res, err := resolveConfig(cdata, digest)
	if err != nil {
		return nil, err
	}
	if len(d.Layers) != len(res.cfg.RootFS.DiffIDs) {
		return nil, fmt.Errorf("docker archive lists %d layers, its config %d diff ids", len(d.Layers), len(res.cfg.RootFS.DiffIDs))
	}
	for i, l := range d.Layers {
		ref := layerRef{path: l, diffID: res.cfg.RootFS.DiffIDs[i].String()}
		if strings.HasPrefix(l, "blobs/sha256/") {
			ref.digest, _ = digestOfName(l)
		}
		res.layers = append(res.layers, ref)
	}
	return res, nil
}

// digestOfName reads a sha256 digest out of a blob's file name.
func digestOfName(name string) (string, bool) {
	base := strings.TrimSuffix(strings.TrimPrefix(path.Base(name), "sha256:"), ".json")
	if len(base) != 64 {
		return "", false
	}
	if _, err := hex.DecodeString(base); err != nil || strings.ToLower(base) != base {
		return "", false
	}
	return "sha256:" + base, true
}

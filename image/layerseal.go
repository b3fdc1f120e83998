package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/custody-dev/custody/internal/sealed"
	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/treehash"
)

// layerSealName is a layer's seal in its directory of the layer store,
// beside its tree and layer.json; seal.json there describes it.
const layerSealName = "seal.erofs"

// heldLayer is one layer's sealed file, open, and its detached mount, as
// one image's verification held it: identities are kept per image, since
// only the image's tree was hashed (a layer changed where an image hides
// it still serves that image, not another).
type heldLayer struct {
	file *os.File
	id   sealed.Identity // guarded by the seals' mu
	mfd  int
}

func (s *Store) layerSealPath(diffID string) (string, error) {
	hex, err := treehash.ParseDigest(diffID)
	if err != nil {
		return "", fmt.Errorf("layer %s: %w", diffID, err)
	}
	return filepath.Join(s.dir, layersName, hex, layerSealName), nil
}

// sealLayers seals each layer of img the store has not sealed yet, then
// checks the overlay of the layers' seals against img (checkLayered, with
// the rootfs's metadata too) and records that img is sealed per layer.
func (s *Store) sealLayers(ctx context.Context, img *Image, dir string) error {
	mkfs, err := exec.LookPath("mkfs.erofs")
	if err != nil {
		return fmt.Errorf("no mkfs.erofs (Debian package erofs-utils): %w", err)
	}
	for _, d := range img.Layers {
		if err := s.sealLayer(ctx, mkfs, d, img.Rootfs); err != nil {
			return err
		}
	}
	rec := sealRecord{Digest: img.Digest, Layers: img.Layers}
	if err := s.checkLayered(ctx, img, &rec, true); err != nil {
		return err
	}
	if err := writeSealRecord(dir, &rec); err != nil {
		s.sealIDs.drop(img.Digest)
		return err
	}
	return nil
}

// sealLayer makes the seal of the stored layer diffID unless the store
// holds it: an erofs file of layerSource's tree. A seal already there is
// trusted for nothing: each image checks the tree its layers' seals serve.
func (s *Store) sealLayer(ctx context.Context, mkfs, diffID, rootfs string) error {
	file, err := s.layerSealPath(diffID)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(file); err == nil {
		return nil
	}
	var info layerInfo
	final, err := snapshot.ReadRecord(filepath.Join(s.dir, layersName), diffID, layerRecord, &info)
	if err != nil {
		return fmt.Errorf("layer %s: %w", diffID, err)
	}
	work, err := os.MkdirTemp(s.dir, snapshot.StagingPrefix+"layerseal-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	src, tmp := filepath.Join(work, "tree"), filepath.Join(work, layerSealName)
	if err := os.Mkdir(src, 0o700); err == nil {
		err = os.Chmod(src, rootMode)
	}
	if err != nil {
		return err
	}
	if err := layerSource(filepath.Join(final, layerTreeName), &info, rootfs, src); err != nil {
		return fmt.Errorf("layer %s: %w", diffID, err)
	}
	hexd := strings.TrimPrefix(diffID, treehash.DigestPrefix)
	uuid := hexd[0:8] + "-" + hexd[8:12] + "-" + hexd[12:16] + "-" + hexd[16:20] + "-" + hexd[20:32]
	// Xattrs are kept (-x0): an opaque directory is one.
	cmd := exec.CommandContext(ctx, mkfs, "--quiet", "-x0", "--preserve-mtime", "-U"+uuid, tmp, src)
	cmd.Env = []string{}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("layer %s: mkfs.erofs: %w: %s", diffID, err, strings.TrimSpace(string(out)))
	}
	_, sum, err := sealed.Seal(tmp)
	if err != nil {
		return err
	}
	// A link never replaces: a concurrent import's seal of the same
	// layer, published first, is the one kept.
	if err := os.Link(tmp, file); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("layer %s: %w", diffID, err)
	}
	id, err := sealed.Current(file)
	if err != nil {
		return err
	}
	return writeSealRecord(filepath.Dir(file), &sealRecord{Digest: diffID, File: layerSealName, SHA256: "sha256:" + sum, Identity: id.String()})
}

// checkLayered mounts the seals of img's layers (rec.Layers, which must
// be img's), makes the read-only overlay of them, and checks the tree the
// kernel serves from it as checkSeal checks a whole seal's: it hashes to
// the image digest with the image's owners; with againstDir it also has
// the rootfs directory's modes and mtimes (a symlink's mtime aside). Then
// it holds the layers' identities, files and mounts, and the overlay.
func (s *Store) checkLayered(ctx context.Context, img *Image, rec *sealRecord, againstDir bool) error {
	if len(rec.Layers) != len(img.Layers) {
		return fmt.Errorf("image %s: %w: the seal record names %d layers, the image has %d; fix: remove the image and import it again", img.Digest, ErrSealChanged, len(rec.Layers), len(img.Layers))
	}
	layers := make([]*heldLayer, 0, len(rec.Layers))
	held := false
	defer func() {
		if !held {
			for _, l := range layers {
				closeMount(l.mfd)
				l.file.Close()
			}
		}
	}()
	for i, d := range rec.Layers {
		if d != img.Layers[i] {
			return fmt.Errorf("image %s: %w: the seal record names layer %s where the image has %s; fix: remove the image and import it again", img.Digest, ErrSealChanged, d, img.Layers[i])
		}
		file, err := s.layerSealPath(d)
		if err != nil {
			return err
		}
		id, err := sealed.Current(file)
		if err != nil {
			return fmt.Errorf("image %s: layer %s: %w", img.Digest, d, err)
		}
		f, err := sealed.Open(file, id)
		if err != nil {
			return fmt.Errorf("image %s: layer %s: %w", img.Digest, d, err)
		}
		mfd, err := sealed.Mount(f, nil)
		if err != nil {
			f.Close()
			return fmt.Errorf("image %s: %w: the seal of layer %s does not mount: %w", img.Digest, ErrSealChanged, d, err)
		}
		layers = append(layers, &heldLayer{file: f, id: id, mfd: mfd})
	}
	merged, err := mergeLayers(layers)
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Digest, err)
	}
	against := ""
	if againstDir {
		against = img.Rootfs
	}
	if err := s.hashTree(ctx, img, merged, against); err != nil {
		closeMount(merged)
		return fmt.Errorf("image %s: %w", img.Digest, err)
	}
	// Only identities that held across the hash vouch for it.
	for _, l := range layers {
		if err := sealed.Check(l.file, l.id); err != nil {
			closeMount(merged)
			return fmt.Errorf("image %s: %w", img.Digest, err)
		}
	}
	held = true
	s.sealIDs.put(img.Digest, &heldSeal{mfd: merged, layers: layers})
	return nil
}

// mergeLayers is the read-only overlay of layers (bottom first), or a
// new descriptor of the one layer's mount (overlayfs wants two lower
// layers when it has no upper one).
func mergeLayers(layers []*heldLayer) (int, error) {
	if len(layers) == 1 {
		return dupMount(layers[0].mfd)
	}
	lowers := make([]int, len(layers))
	for i, l := range layers {
		lowers[len(layers)-1-i] = l.mfd
	}
	return roOverlay(lowers)
}

// recheckLayers is dupVerified's check of a layered seal h: while every
// layer's file has the identity last verified, nothing more; once one
// moved, the tree served by fresh mounts of the held files is hashed
// again, and only identities that held across the hash are kept.
func (s *Store) recheckLayers(ctx context.Context, digest string, h *heldSeal) error {
	ids := s.sealIDs.layerIDs(h)
	var moved error
	for i, l := range h.layers {
		if err := sealed.Check(l.file, ids[i]); err != nil {
			if !errors.Is(err, sealed.ErrChanged) {
				return fmt.Errorf("image %s: %w", digest, err)
			}
			moved = err
		}
	}
	if moved == nil {
		return nil
	}
	img, err := s.Get(digest)
	if err != nil {
		return fmt.Errorf("image %s: %w", digest, err)
	}
	fresh := make([]*heldLayer, 0, len(h.layers))
	ok := false
	defer func() {
		if !ok {
			for _, l := range fresh {
				closeMount(l.mfd)
			}
		}
	}()
	for _, l := range h.layers {
		now, err := sealed.Of(l.file)
		if err != nil {
			return fmt.Errorf("image %s: %w", digest, err)
		}
		// Fresh mounts: the held ones serve pages cached before the
		// change, which would hide it.
		mfd, err := sealed.Mount(l.file, nil)
		if err != nil {
			return fmt.Errorf("image %s: a verified layer seal changed (%v) and %w: it does not mount: %w", digest, moved, ErrSealChanged, err)
		}
		fresh = append(fresh, &heldLayer{file: l.file, id: now, mfd: mfd})
	}
	merged, err := mergeLayers(fresh)
	if err != nil {
		return fmt.Errorf("image %s: %w", digest, err)
	}
	if err := s.hashTree(ctx, img, merged, ""); err != nil {
		closeMount(merged)
		return fmt.Errorf("image %s: a verified layer seal changed (%v) and %w", digest, moved, err)
	}
	for _, l := range fresh {
		if err := sealed.Check(l.file, l.id); err != nil {
			closeMount(merged)
			return fmt.Errorf("image %s: %w", digest, err)
		}
	}
	ok = true
	closeMount(h.mfd)
	h.mfd = merged
	now := make([]sealed.Identity, len(fresh))
	for i, l := range fresh {
		closeMount(h.layers[i].mfd)
		h.layers[i].mfd = l.mfd
		now[i] = l.id
	}
	s.sealIDs.setLayerIDs(h, now)
	return nil
}

// layersHold says whether each of the layer seals of rec still is the
// file this process verified for the image h holds: opened by name, so a
// file renamed over one is seen.
func (s *Store) layersHold(rec *sealRecord, h *heldSeal) (bool, error) {
	ids := s.sealIDs.layerIDs(h)
	if len(ids) != len(rec.Layers) {
		return false, nil
	}
	for i, d := range rec.Layers {
		file, err := s.layerSealPath(d)
		if err != nil {
			return false, err
		}
		f, err := sealed.Open(file, ids[i])
		if errors.Is(err, sealed.ErrChanged) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		f.Close()
	}
	return true, nil
}

// layerMounts is Sealed.Layers for the image of digest.
func (s *Store) layerMounts(ctx context.Context, digest string) ([]int, error) {
	for {
		h := s.sealIDs.current(digest)
		if h == nil || h.layers == nil {
			return nil, fmt.Errorf("image %s: %w: this process holds no verified layer seals of it (was it removed?); fix: import it again", digest, ErrSealChanged)
		}
		fds, err := s.dupLayers(ctx, digest, h)
		if errors.Is(err, errReleased) {
			continue
		}
		return fds, err
	}
}

func (s *Store) dupLayers(ctx context.Context, digest string, h *heldSeal) ([]int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errReleased
	}
	if err := s.recheckLayers(ctx, digest, h); err != nil {
		return nil, err
	}
	fds := make([]int, 0, len(h.layers))
	for i := len(h.layers) - 1; i >= 0; i-- {
		fd, err := dupMount(h.layers[i].mfd)
		if err != nil {
			for _, f := range fds {
				closeMount(f)
			}
			return nil, fmt.Errorf("image %s: the verified layer mount: %w", digest, err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/custody-dev/custody/internal/sealed"
	"github.com/custody-dev/custody/treehash"
)

// An image is sealed at import: its verified rootfs is written once more
// as an erofs filesystem in one file,
//
//	<dir>/<hex>/rootfs.erofs   the sealed image (root's, 0400)
//	<dir>/<hex>/seal.json      its sealRecord
//
// and a backend that can (Capabilities.SealedImages) mounts that file as
// the image instead of the directory. VerifySealed then re-derives the
// image by the file's identity (internal/sealed): an open, an fstat and
// two ioctls, whatever the file count, where Verify walks every entry.
// Why that is as strong as the walk is said in internal/sealed.
//
// Trust in a sealed file comes from re-hashing the tree the kernel serves
// from it, never from the record alone: at import, the mounted file's tree
// must hash to the image digest, carry the image's owners and have the
// rootfs's modes and mtimes; after a restart, the first VerifySealed
// re-hashes the mounted tree again (as Verify re-hashes the directory),
// and so does the first after the file's identity moved. Only then is the
// file's identity kept, in memory, for the cheap checks; the record's
// identity and sha256 say what was sealed, for an operator, and vouch for
// nothing.
//
// mkfs.erofs (erofs-utils) makes the file. Its superblock carries the
// build time: erofs-utils 1.5's fixed timestamp (-T) would also overwrite
// every mtime, so the file is not bitwise reproducible; its tree is, and
// the tree is what is checked. Xattrs are left out (-x-1): the tree digest
// does not cover them and the container needs none.
//
// The rootfs directory stays beside the sealed file, because launch paths
// other than a sealed oci launch read the tree: the vm backend builds its
// guest's disk from it, the docker backend imports it into the engine, an
// oci backend on a kernel that cannot overlay a sealed mount launches from
// it (its Capabilities then say no SealedImages), Verify walks it, and
// admission reads it for the backends that do not mount seals. An OCI
// image's tree is hard links into its unpacked layers, which layer sharing
// keeps anyway, so its seal is the one extra copy; a rootfs import's tree
// and its seal are two.
//
// An OCI image is sealed per layer instead: each layer of the layer store
// is sealed once, for every image holding it,
//
//	<dir>/layers/<diff-id hex>/seal.erofs   the layer's seal (root's, 0400)
//	<dir>/layers/<diff-id hex>/seal.json    its record (for an operator)
//	<dir>/<hex>/seal.json                   the image's: its layers, no file
//
// of the layer's tree as overlayfs reads a lower layer (OCI whiteouts made
// overlayfs's: a character device 0:0, an opaque directory's xattr), and
// the image is the read-only overlay of its layers' seals. A second image
// sharing a base layer adds only its own layers' seals. The trust is the
// whole seal's, made per layer:
//   - what is checked is the same: the tree the kernel serves from the
//     overlay of the sealed files hashes to the image digest, with the
//     image's owners, at import (and has the rootfs's modes and mtimes)
//     and again after a restart; never a record, never a layer's own
//     digest alone (a layer's seal is trusted only inside an image whose
//     merged tree was hashed);
//   - what is kept is the identity of every layer file, per image: the
//     overlay's tree is a function of its lower layers' bytes, so while
//     each file's identity (internal/sealed) is the one held across that
//     image's hash, the merged tree is the one hashed. A changed, renamed
//     or swapped layer file (another layer's seal, say) moves its
//     identity, and the image's tree is hashed again before anything
//     mounts it; a layer changed where one image hides it is re-checked
//     by every image holding it, since identities are kept per image;
//   - launches mount what was verified: Sealed.Mount gives the verified
//     overlay and Sealed.Layers the verified layer mounts, which a backend
//     overlays itself (idmapping each: overlayfs cannot be idmapped);
//   - the cost stays independent of the file count: one open, fstat and
//     ioctl per layer.
// An image whose layers' seals do not serve exactly its tree is sealed
// whole, as above, its seal record saying why (Whole): a layer with hard
// links to files of lower layers, a directory its tar leaves implicit whose
// metadata another image's lower layers made otherwise, a whiteout left in
// a bottom layer. Stores sealed before keep their whole seals, which keep
// verifying as they did; they are not re-sealed per layer (a re-import of
// the image after removing it is).
//
// When a seal cannot be made (no mkfs.erofs, or a kernel that cannot mount
// erofs from a file, such as Debian's 6.1 without a loop device), the image
// stays unsealed, Image.Unsealed says why, and VerifySealed falls back to
// Verify's walk. A sealed image whose file changed is refused, never
// walked instead.

const (
	sealName       = "rootfs.erofs"
	sealRecordName = "seal.json"
)

// ErrSealChanged is returned (wrapped) when a sealed image's file is not the
// file that was sealed, or its tree no longer hashes to the image digest.
var ErrSealChanged = sealed.ErrChanged

// Sealed is a sealed image's file as this process verified it: what a
// backend mounts, and the identity it checks on the descriptor it mounts.
type Sealed struct {
	File     string `json:"file"`
	Identity string `json:"identity"`
	// store verified the seal of the image digest; what Mount mounts.
	store  *Store
	digest string
	// layered: the image is sealed per layer (see Layers).
	layered bool
}

// Layers, for an image sealed per layer, returns new descriptors of the
// detached, read-only erofs mounts of its layers' seals, top first, that
// this process verified (checked and, if one moved, re-hashed as Mount
// does): a backend that idmaps the image idmaps each, since overlayfs
// cannot be idmapped itself, and makes its overlay of them. Mount gives
// the same tree merged. The caller closes the descriptors.
func (s *Sealed) Layers(ctx context.Context) ([]int, error) {
	if s.store == nil || !s.layered {
		return nil, fmt.Errorf("sealed image %s: %w: not verified per layer by this process", s.File, ErrSealChanged)
	}
	return s.store.layerMounts(ctx, s.digest)
}

// Mount returns a new descriptor of the detached, read-only erofs mount
// this process made of the image's sealed file when it verified it, for a
// launch's lower layer: the very bytes verified, whatever became of the
// file's name since (a file renamed over it, say), so a seal changed
// after a launch's verify, and before its mount, cannot refuse a launch
// whose grant is spent. The verified file's identity is checked first; if
// it moved (a rename over the name unlinks the file, which moves its
// ctime), the tree the mount serves is hashed again and must still be the
// image's, else ErrSealChanged. The caller closes the descriptor.
func (s *Sealed) Mount(ctx context.Context) (int, error) {
	if s.store == nil {
		return -1, fmt.Errorf("sealed image %s: %w: not verified by this process", s.File, ErrSealChanged)
	}
	return s.store.mountVerified(ctx, s.digest)
}

// sealRecord is seal.json.
type sealRecord struct {
	Digest   string `json:"digest"`
	File     string `json:"file,omitempty"`
	SHA256   string `json:"sha256,omitempty"`
	Identity string `json:"identity,omitempty"`
	// Layers, for an image sealed per layer (File is then empty), are
	// its layers' diff IDs, bottom first: their seals are in the layer
	// store.
	Layers []string `json:"layers,omitempty"`
	// Whole, for an OCI image sealed whole, says why its layers' seals
	// could not serve it.
	Whole string `json:"whole,omitempty"`
}

// seals remembers, per image digest, the sealed file as it was when the
// tree mounted from it last hashed to the digest: its identity, the file
// open, and a detached mount made from that descriptor (what launches
// mount, Sealed.Mount).
type seals struct {
	mu   sync.Mutex
	held map[string]*heldSeal
	// making keeps two imports of one tree from making its seal at once.
	making sync.Mutex
}

// heldSeal is one verified sealed file, open, and its detached mount.
// mu guards the descriptors; id is guarded by the seals' mu.
type heldSeal struct {
	mu     sync.Mutex
	id     sealed.Identity
	file   *os.File
	mfd    int
	closed bool
	// layers, for an image sealed per layer (file is then nil and mfd
	// the read-only overlay of the layers' mounts), bottom first.
	layers []*heldLayer
}

func (h *heldSeal) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		closeMount(h.mfd)
		if h.file != nil {
			h.file.Close()
		}
		for _, l := range h.layers {
			closeMount(l.mfd)
			l.file.Close()
		}
	}
}

// layerIDs are the identities of h's layer seals, and setLayerIDs moves
// them.
func (s *seals) layerIDs(h *heldSeal) []sealed.Identity {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]sealed.Identity, len(h.layers))
	for i, l := range h.layers {
		ids[i] = l.id
	}
	return ids
}

func (s *seals) setLayerIDs(h *heldSeal, ids []sealed.Identity) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, l := range h.layers {
		l.id = ids[i]
	}
}

func (s *seals) get(digest string) (sealed.Identity, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[digest]
	if !ok {
		return sealed.Identity{}, false
	}
	return h.id, true
}

// identity is h's identity, and setIdentity moves it.
func (s *seals) identity(h *heldSeal) sealed.Identity {
	s.mu.Lock()
	defer s.mu.Unlock()
	return h.id
}

func (s *seals) setIdentity(h *heldSeal, id sealed.Identity) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h.id = id
}

func (s *seals) current(digest string) *heldSeal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[digest]
}

// put holds h for digest, releasing what was held before: a launch that
// already took a descriptor of the old mount keeps it.
func (s *seals) put(digest string, h *heldSeal) {
	s.mu.Lock()
	old := s.held[digest]
	if s.held == nil {
		s.held = map[string]*heldSeal{}
	}
	s.held[digest] = h
	s.mu.Unlock()
	if old != nil {
		old.close()
	}
}

func (s *seals) drop(digest string) {
	s.mu.Lock()
	old := s.held[digest]
	delete(s.held, digest)
	s.mu.Unlock()
	if old != nil {
		old.close()
	}
}

// sealedOf is img's Sealed if this process verified its seal, else nil.
func (s *Store) sealedOf(img *Image) *Sealed {
	h := s.sealIDs.current(img.Digest)
	if h == nil {
		return nil
	}
	if h.layers != nil {
		// No one file: the backend mounts what Mount and Layers give.
		ids := s.sealIDs.layerIDs(h)
		parts := make([]string, len(ids))
		for i, id := range ids {
			parts[i] = id.String()
		}
		return &Sealed{File: filepath.Join(filepath.Dir(img.Rootfs), sealRecordName), Identity: "layers " + strings.Join(parts, " "),
			store: s, digest: img.Digest, layered: true}
	}
	return &Sealed{File: filepath.Join(filepath.Dir(img.Rootfs), sealName), Identity: s.sealIDs.identity(h).String(), store: s, digest: img.Digest}
}

// mountVerified is Sealed.Mount for the image of digest.
func (s *Store) mountVerified(ctx context.Context, digest string) (int, error) {
	for {
		h := s.sealIDs.current(digest)
		if h == nil {
			return -1, fmt.Errorf("image %s: %w: this process holds no verified seal of it (was it removed?); fix: import it again", digest, ErrSealChanged)
		}
		fd, err := s.dupVerified(ctx, digest, h)
		if errors.Is(err, errReleased) {
			continue // verified again meanwhile: take what is held now
		}
		return fd, err
	}
}

var errReleased = errors.New("released")

// dupVerified checks h (see Sealed.Mount) and returns a new descriptor of
// its mount.
func (s *Store) dupVerified(ctx context.Context, digest string, h *heldSeal) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return -1, errReleased
	}
	if h.layers != nil {
		if err := s.recheckLayers(ctx, digest, h); err != nil {
			return -1, err
		}
	} else if err := sealed.Check(h.file, s.sealIDs.identity(h)); err != nil {
		if !errors.Is(err, sealed.ErrChanged) {
			return -1, fmt.Errorf("image %s: %w", digest, err)
		}
		img, gerr := s.Get(digest)
		if gerr != nil {
			return -1, fmt.Errorf("image %s: %w", digest, gerr)
		}
		now, ierr := sealed.Of(h.file)
		if ierr != nil {
			return -1, fmt.Errorf("image %s: %w", img.Digest, ierr)
		}
		// Hashed through a fresh mount of the file: the held one serves
		// pages it cached before the change, which would hide it.
		fresh, merr := sealed.Mount(h.file, nil)
		if merr != nil {
			return -1, fmt.Errorf("image %s: the verified sealed file changed (%v) and %w: it does not mount: %w", img.Digest, err, ErrSealChanged, merr)
		}
		if herr := s.hashMount(ctx, img, fresh); herr != nil {
			closeMount(fresh)
			return -1, fmt.Errorf("image %s: the verified sealed file changed (%v) and %w", img.Digest, err, herr)
		}
		// Only an identity that held across the hash vouches for it.
		if err := sealed.Check(h.file, now); err != nil {
			closeMount(fresh)
			return -1, fmt.Errorf("image %s: %w", img.Digest, err)
		}
		// Launches from now on mount what was hashed; those that hold
		// the old mount keep it (the pool retires members made from it).
		closeMount(h.mfd)
		h.mfd = fresh
		s.sealIDs.setIdentity(h, now)
	}
	fd, err := dupMount(h.mfd)
	if err != nil {
		return -1, fmt.Errorf("image %s: the verified sealed mount: %w", digest, err)
	}
	return fd, nil
}

// hashMount hashes the tree of the detached mount mfd (through a clone of
// it, attached at a private name) and checks it against img's digest.
func (s *Store) hashMount(ctx context.Context, img *Image, mfd int) error {
	return s.hashTree(ctx, img, mfd, "")
}

// hashTree is hashMount, and when against is not "" it also checks that
// the tree has the modes and mtimes of the directory against (a
// symlink's mtime aside: see sameMetadata).
func (s *Store) hashTree(ctx context.Context, img *Image, mfd int, against string) error {
	clone, err := cloneMount(mfd)
	if err != nil {
		return fmt.Errorf("clone the sealed mount: %w", err)
	}
	defer closeMount(clone)
	root, detach, err := attach(clone, s.dir)
	if err != nil {
		return err
	}
	defer detach()
	tree, err := treehash.Dir(ctx, root, treehash.Options{})
	if err != nil {
		return fmt.Errorf("hash the sealed tree: %w", err)
	}
	mounted := *img
	mounted.Rootfs = root
	if err := checkDigest(&mounted, tree); err != nil {
		return fmt.Errorf("%w: the sealed tree: %w", ErrSealChanged, err)
	}
	if against != "" {
		if err := sameMetadata(against, root, false); err != nil {
			return fmt.Errorf("the sealed tree differs from the rootfs: %w", err)
		}
	}
	return nil
}

// VerifySealed re-derives that the image of digest is still its content,
// by its sealed file when it has one, and the returned Image's Sealed
// names the file for the backend to mount. While the file's identity is
// the one this process last verified, that is all it checks: an open, an
// fstat and an ioctl, whatever the file count. The first time, and
// whenever the identity moved, the tree mounted from the file is hashed
// again, as Verify re-hashes a tree whose metadata moved: a file whose
// tree still hashes to the digest is trusted under its new identity; any
// other is refused (ErrSealChanged). An image without a seal is verified
// by Verify's walk, and its Sealed is nil.
func (s *Store) VerifySealed(ctx context.Context, digest string) (*Image, error) {
	img, err := s.Get(digest)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(img.Rootfs)
	rec, err := readSealRecord(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return s.Verify(ctx, digest)
	}
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", digest, err)
	}
	if err := s.verifyConfig(img); err != nil {
		return nil, err
	}
	if rec.Digest != digest || rec.File != sealName && (rec.File != "" || len(rec.Layers) == 0) {
		return nil, fmt.Errorf("image %s: %w: the seal record does not describe this image; fix: remove the image and import it again", digest, ErrSealChanged)
	}
	if rec.File == "" {
		if h := s.sealIDs.current(digest); h != nil && h.layers != nil {
			ok, err := s.layersHold(rec, h)
			if err != nil {
				return nil, fmt.Errorf("image %s: %w", digest, err)
			}
			if ok {
				img.Sealed = s.sealedOf(img)
				return img, nil
			}
		}
		if err := s.checkLayered(ctx, img, rec, false); err != nil {
			return nil, err
		}
		img.Sealed = s.sealedOf(img)
		return img, nil
	}
	file := filepath.Join(dir, sealName)
	if id, ok := s.sealIDs.get(digest); ok {
		f, err := sealed.Open(file, id)
		if err == nil {
			f.Close()
			img.Sealed = &Sealed{File: file, Identity: id.String(), store: s, digest: digest}
			return img, nil
		}
		if !errors.Is(err, sealed.ErrChanged) {
			return nil, fmt.Errorf("image %s: %w", digest, err)
		}
	}
	id, err := sealed.Current(file)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", digest, err)
	}
	if err := s.checkSeal(ctx, img, file, id, false); err != nil {
		return nil, err
	}
	img.Sealed = s.sealedOf(img)
	return img, nil
}

// Tree is img's tree as a container sees it (TreeFS), for the names
// admission resolves in it: the tree mounted from its sealed file when
// sealed is true (the backend mounts sealed images) and this process
// verified the seal, so that what admission reads is what runs; else the
// rootfs directory. The caller calls done once it has read what it needs.
func (s *Store) Tree(img *Image, sealedOK bool) (tree fs.FS, done func(), err error) {
	if !sealedOK || img.Sealed == nil {
		return TreeFS(img.Rootfs), func() {}, nil
	}
	// The mount this process made of the sealed file when it verified it,
	// the one launches mount (Sealed.Mount): what admission reads is what
	// runs, and no erofs is mounted and unmounted at every admission. Its
	// checks re-hash only a file whose identity moved, which admission
	// then waits for, as a launch would.
	fd, err := img.Sealed.Mount(context.Background())
	if err != nil {
		return nil, nil, err
	}
	var once sync.Once
	return TreeFS(fmt.Sprintf("/proc/self/fd/%d", fd)), func() { once.Do(func() { closeMount(fd) }) }, nil
}

// checkSeal mounts the sealed file of img, which must have identity id,
// and checks the tree the kernel serves from it: it hashes to the image
// digest and has the image's owners; with againstDir, it also has the
// rootfs directory's modes and mtimes. Then it trusts id.
func (s *Store) checkSeal(ctx context.Context, img *Image, file string, id sealed.Identity, againstDir bool) error {
	f, err := sealed.Open(file, id)
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Digest, err)
	}
	held := false
	defer func() {
		if !held {
			f.Close()
		}
	}()
	mfd, err := sealed.Mount(f, nil)
	if err != nil {
		// erofs checks its superblock and metadata: a file changed there
		// does not mount at all.
		return fmt.Errorf("image %s: %w: the sealed file does not mount: %w", img.Digest, ErrSealChanged, err)
	}
	defer closeMount(mfd)
	root, detach, err := attach(mfd, s.dir)
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Digest, err)
	}
	defer detach()
	tree, err := treehash.Dir(ctx, root, treehash.Options{})
	if err != nil {
		return fmt.Errorf("image %s: hash the sealed tree: %w", img.Digest, err)
	}
	// The same check as Verify's walk: the tree with the owners the
	// kernel serves hashes to the image digest (which covers owners).
	mounted := *img
	mounted.Rootfs = root
	if err := checkDigest(&mounted, tree); err != nil {
		return fmt.Errorf("image %s: %w: the sealed tree: %w", img.Digest, ErrSealChanged, err)
	}
	if againstDir {
		if err := sameMetadata(img.Rootfs, root, true); err != nil {
			return fmt.Errorf("image %s: the sealed tree differs from the rootfs: %w", img.Digest, err)
		}
	}
	// What launches mount: a detached mount made from the descriptor
	// just checked (the one hashed is attached, for the walk).
	keep, err := sealed.Mount(f, nil)
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Digest, err)
	}
	// The file may have been changed while it was hashed: only an
	// identity that held across the hash vouches for it.
	if err := sealed.Check(f, id); err != nil {
		closeMount(keep)
		return fmt.Errorf("image %s: %w", img.Digest, err)
	}
	held = true
	s.sealIDs.put(img.Digest, &heldSeal{id: id, file: f, mfd: keep})
	return nil
}

// seal seals img (see above) unless it is sealed already, in which case
// its seal is checked. An error says why the image stays unsealed; the
// image itself is stored either way.
func (s *Store) seal(ctx context.Context, img *Image) error {
	s.sealIDs.making.Lock()
	defer s.sealIDs.making.Unlock()
	dir := filepath.Dir(img.Rootfs)
	file := filepath.Join(dir, sealName)
	if rec, err := readSealRecord(dir); err == nil {
		if _, ok := s.sealIDs.get(img.Digest); ok {
			return nil
		}
		if rec.Digest != img.Digest {
			return fmt.Errorf("image %s: %w: the seal record names %s", img.Digest, ErrSealChanged, rec.Digest)
		}
		if rec.File == "" {
			return s.checkLayered(ctx, img, rec, false)
		}
		id, err := sealed.Current(file)
		if err != nil {
			return fmt.Errorf("image %s: %w", img.Digest, err)
		}
		return s.checkSeal(ctx, img, file, id, false)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	// An OCI image is sealed per layer, each layer once for every image
	// holding it; whole when its layers' seals cannot serve its tree.
	whole := ""
	if len(img.Layers) > 0 {
		err := s.sealLayers(ctx, img, dir)
		if err == nil {
			return nil
		}
		whole = err.Error()
	}
	return s.sealWhole(ctx, img, whole)
}

// sealWhole seals img as one erofs file of its rootfs; whole, for an OCI
// image, says why its layers' seals could not serve it.
func (s *Store) sealWhole(ctx context.Context, img *Image, whole string) error {
	dir := filepath.Dir(img.Rootfs)
	file := filepath.Join(dir, sealName)
	mkfs, err := exec.LookPath("mkfs.erofs")
	if err != nil {
		return fmt.Errorf("no mkfs.erofs (Debian package erofs-utils): %w", err)
	}
	// A seal left by an interrupted import is made again.
	tmp := file + ".tmp"
	for _, p := range []string{file, tmp} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	hexd, err := treehash.ParseDigest(img.Digest)
	if err != nil {
		return err
	}
	// The filesystem UUID is the digest's first 16 bytes, so that it says
	// which tree the file holds.
	uuid := hexd[0:8] + "-" + hexd[8:12] + "-" + hexd[12:16] + "-" + hexd[16:20] + "-" + hexd[20:32]
	cmd := exec.CommandContext(ctx, mkfs, "--quiet", "-x-1", "--preserve-mtime", "-U"+uuid, tmp, img.Rootfs)
	cmd.Env = []string{}
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("mkfs.erofs: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp, file); err != nil {
		os.Remove(tmp)
		return err
	}
	fail := func(err error) error {
		_ = os.Remove(file)
		return err
	}
	id, sum, err := sealed.Seal(file)
	if err != nil {
		return fail(err)
	}
	if err := s.checkSeal(ctx, img, file, id, true); err != nil {
		s.sealIDs.drop(img.Digest)
		return fail(err)
	}
	rec := sealRecord{Digest: img.Digest, File: sealName, SHA256: "sha256:" + sum, Identity: id.String(), Whole: whole}
	if err := writeSealRecord(dir, &rec); err != nil {
		s.sealIDs.drop(img.Digest)
		return fail(err)
	}
	return nil
}

func readSealRecord(dir string) (*sealRecord, error) {
	js, err := os.ReadFile(filepath.Join(dir, sealRecordName))
	if err != nil {
		return nil, err
	}
	var rec sealRecord
	if err := json.Unmarshal(js, &rec); err != nil {
		return nil, fmt.Errorf("seal record: %w", err)
	}
	return &rec, nil
}

// writeSealRecord writes seal.json durably: a reader sees the whole
// record or none.
func writeSealRecord(dir string, rec *sealRecord) error {
	js, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+sealRecordName+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(js, '\n')); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, sealRecordName)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

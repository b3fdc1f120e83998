package image

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/custody-dev/custody/internal/untar"
	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/treehash"
)

const (
	layersName     = "layers"     // the layer store, beside the images
	bindingsName   = "manifests"  // image records by manifest (or config) digest
	layerTreeName  = "tree"       // a layer's unpacked files, whiteouts included
	layerRecord    = "layer.json" // its layerInfo
	whiteoutPrefix = ".wh."
	opaqueWhiteout = ".wh..wh..opq"
	// OwnersRecorded is Image.Owners when the image's owners are in
	// Image.IDs (and, for images imported since owners are applied, on
	// disk) and its modes and mtimes are kept.
	OwnersRecorded = "recorded"
)

// ErrLinkTarget is returned (wrapped, naming the link and the fix) for a
// layer's hard link to a file of a lower layer that is not there as a
// regular file of the image.
var ErrLinkTarget = errors.New("a hard link must name a regular file of the image")

// Owner is an entry of an image not owned by 0:0, as the image says.
type Owner struct {
	Path string `json:"path"`
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
}

// layerInfo is the record of a stored layer.
type layerInfo struct {
	DiffID string `json:"diffID"`
	// Dirs are the directories the layer's tar names itself (the others
	// beneath its files are implicit and keep what lower layers made).
	Dirs    []string `json:"dirs"`
	Skipped []string `json:"skipped,omitempty"`
	// Owners are the layer's entries not owned by 0:0 (paths relative to
	// the layer's root); the layer tree is 0:0 until an image assembled
	// from it gives its files their owners.
	Owners []Owner `json:"owners,omitempty"`
	// Blob is the digest of the blob the layer was unpacked from, checked
	// to decompress to DiffID; empty when nothing named one (a classic
	// docker-save archive) and in records written before it was kept.
	Blob string `json:"blob,omitempty"`
	// Links are the layer's hard links to files of lower layers, in the
	// layer's order: the layer tree cannot hold them, so assembling an
	// image makes them in its rootfs.
	Links []Link `json:"links,omitempty"`
}

// Link is a hard link of a layer to a file a lower layer made (paths
// relative to the layer's root).
type Link struct {
	Name   string `json:"name"`
	Target string `json:"target"`
}

// index is the layer's explicit directories and its owners, by path.
func (info *layerInfo) index() (explicit map[string]bool, owners map[string]Owner) {
	explicit = make(map[string]bool, len(info.Dirs))
	for _, d := range info.Dirs {
		explicit[d] = true
	}
	owners = make(map[string]Owner, len(info.Owners))
	for _, o := range info.Owners {
		owners[o.Path] = o
	}
	return explicit, owners
}

// attrs is what a Writer does not keep of an entry and the layer store
// restores after closing it.
type attrs struct {
	name  string
	typ   byte
	mode  fs.FileMode
	mtime time.Time
}

// modeOf keeps the permission and sticky bits of a tar mode; setuid and
// setgid are dropped (no_new_privileges makes them inert anyway).
func modeOf(m int64) fs.FileMode {
	mode := fs.FileMode(m).Perm()
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// layer returns the stored tree of the layer ref of the image in root,
// unpacking it into the layer store unless it is there already. Either way
// the blob is verified against its digest (when something names one), and
// an unpacked one against its diff id.
func (s *Store) layer(ctx context.Context, root *os.Root, ref layerRef) (string, *layerInfo, error) {
	dir := filepath.Join(s.dir, layersName)
	if _, err := snapshot.PrepareStoreDir(dir); err != nil {
		return "", nil, err
	}
	var info layerInfo
	final, err := snapshot.ReadRecord(dir, ref.diffID, layerRecord, &info)
	if err == nil && info.DiffID == ref.diffID {
		// The store holds the layer; the image must still hold its blob,
		// and the blob must be that layer.
		if ref.digest != "" && ref.digest == info.Blob {
			err = verifyFile(root, ref) // a blob already checked to be this layer
		} else {
			err = s.verifyLayerBlob(root, ref)
		}
		if err != nil {
			return "", nil, err
		}
		return filepath.Join(final, layerTreeName), &info, nil
	}
	final, _, err = snapshot.Stage(dir, func(staging string) (string, error) {
		rec, err := s.unpackLayer(ctx, root, ref, staging)
		if err != nil {
			return "", err
		}
		info = *rec
		js, err := json.Marshal(rec)
		if err != nil {
			return "", err
		}
		return ref.diffID, os.WriteFile(filepath.Join(staging, layerRecord), js, 0o644)
	})
	if err != nil {
		return "", nil, fmt.Errorf("layer %s: %w", ref.diffID, err)
	}
	// A concurrent import may have published it first: its record is the
	// same content's.
	if _, err := snapshot.ReadRecord(dir, ref.diffID, layerRecord, &info); err != nil {
		return "", nil, fmt.Errorf("layer %s: %w", ref.diffID, err)
	}
	return filepath.Join(final, layerTreeName), &info, nil
}

// openBlob opens the blob of ref in root, or says that the image does not
// hold it: a name outside the image, or of no regular file, is not there.
func openBlob(root *os.Root, ref layerRef) (*os.File, error) {
	f, err := openRegular(root, ref.path)
	if err != nil {
		return nil, fmt.Errorf("layer %s (diff id %s): the image does not hold it: %w; fix: export the image again, whole", ref.path, ref.diffID, err)
	}
	return f, nil
}

// verifyLayerBlob checks that the blob of ref is there, hashes to its
// digest (when something names one) and decompresses to its diff id,
// reading no more than an unpack of it would have been allowed.
func (s *Store) verifyLayerBlob(root *os.Root, ref layerRef) error {
	f, err := openBlob(root, ref)
	if err != nil {
		return err
	}
	defer f.Close()
	blobSum, tarSum := sha256.New(), sha256.New()
	br := bufio.NewReaderSize(io.TeeReader(f, blobSum), 1<<16)
	dr, err := decompress(br)
	if err != nil {
		return fmt.Errorf("layer %s: %w", ref.path, err)
	}
	limit := int64(math.MaxInt64 - 1)
	if s.limits.MaxBytes > 0 && s.limits.MaxEntries > 0 {
		// The files, a header and padding per entry, and the trailer.
		limit = s.limits.MaxBytes + int64(s.limits.MaxEntries)*2048 + maxTrailing
	}
	n, err := io.Copy(tarSum, io.LimitReader(dr, limit+1))
	if err == nil && n > limit {
		err = fmt.Errorf("decompresses to more than %d bytes: %w", limit, treehash.ErrTooLarge)
	}
	if err == nil {
		_, err = io.Copy(io.Discard, br) // the rest of the blob, for its digest
	}
	if err != nil {
		return fmt.Errorf("layer %s: %w", ref.path, err)
	}
	if ref.digest != "" {
		if err := checkSum(blobSum, ref.digest, "layer"); err != nil {
			return err
		}
	}
	return checkSum(tarSum, ref.diffID, "uncompressed layer")
}

// verifyFile hashes the blob of ref.
func verifyFile(root *os.Root, ref layerRef) error {
	f, err := openBlob(root, ref)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("layer %s: %w", ref.digest, err)
	}
	return checkSum(h, ref.digest, "layer")
}

func checkSum(h hash.Hash, want, what string) error {
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%s %s hashes to %s: %w", what, want, got, ErrDigestMismatch)
	}
	return nil
}

// unpackLayer extracts the blob of ref into staging/tree with every entry's
// owner, mode and mtime, and verifies it.
func (s *Store) unpackLayer(ctx context.Context, root *os.Root, ref layerRef, staging string) (*layerInfo, error) {
	f, err := openBlob(root, ref)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	blobSum, tarSum := sha256.New(), sha256.New()
	br := bufio.NewReaderSize(io.TeeReader(f, blobSum), 1<<16)
	dr, err := decompress(br)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", ref.path, err)
	}
	tr := io.TeeReader(dr, tarSum)

	w, err := snapshot.NewWriter(staging)
	if err != nil {
		return nil, err
	}
	var sk skipped
	var hl headerLog
	info := &layerInfo{DiffID: ref.diffID, Dirs: []string{}, Blob: ref.digest}
	err = w.Mkdir(layerTreeName, 0o755)
	if err == nil {
		err = untar.Extract(ctx, tr, w, untar.Options{Under: layerTreeName,
			MaxEntries: s.limits.MaxEntries, MaxBytes: s.limits.MaxBytes, Symlinks: true, HardLinks: true,
			Skip: sk.add(layerTreeName), Written: hl.record(layerTreeName),
			LowerLink: func(name, target string) error {
				info.Links = append(info.Links, Link{Name: strings.TrimPrefix(name, layerTreeName+"/"),
					Target: strings.TrimPrefix(target, layerTreeName+"/")})
				return nil
			}})
	}
	if err == nil {
		err = drain(tr)
	}
	if err == nil {
		_, err = io.Copy(io.Discard, br) // the rest of the blob, for its digest
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil && ref.digest != "" {
		// A corrupted blob most often fails to decompress or parse
		// first: say that it is corrupted, naming it.
		if _, rerr := io.Copy(io.Discard, br); rerr == nil {
			if serr := checkSum(blobSum, ref.digest, "layer"); serr != nil {
				return nil, serr
			}
		}
	}
	if err != nil {
		return nil, err
	}
	if ref.digest != "" {
		if err := checkSum(blobSum, ref.digest, "layer"); err != nil {
			return nil, err
		}
	}
	if err := checkSum(tarSum, ref.diffID, "uncompressed layer"); err != nil {
		return nil, err
	}
	info.Skipped, info.Owners = sk.list, hl.owners
	info.Dirs = append(info.Dirs, hl.dirs...)
	return info, restoreAttrs(staging, hl.written)
}

// headerLog keeps what an extraction's tar headers say that a Writer does
// not apply: modes beyond 0o777, mtimes and owners.
type headerLog struct {
	written []attrs
	// owners are the entries not owned by 0:0, and dirs the directories
	// the tar names, both relative to the extraction's root.
	owners []Owner
	dirs   []string
}

// record returns an untar.Options.Written for an extraction under the
// Writer directory under.
func (l *headerLog) record(under string) func(string, *tar.Header) {
	return func(name string, hdr *tar.Header) {
		rel := strings.TrimPrefix(name, under+"/")
		l.written = append(l.written, attrs{name: name, typ: hdr.Typeflag, mode: modeOf(hdr.Mode), mtime: hdr.ModTime})
		if hdr.Uid != 0 || hdr.Gid != 0 {
			l.owners = append(l.owners, Owner{Path: rel, UID: hdr.Uid, GID: hdr.Gid})
		}
		if hdr.Typeflag == tar.TypeDir {
			l.dirs = append(l.dirs, rel)
		}
	}
}

// apply gives the entries extracted under dir/under their modes, mtimes and
// owners, once the Writer closed.
func (l *headerLog) apply(dir, under string) error {
	if err := restoreAttrs(dir, l.written); err != nil {
		return err
	}
	return chownAll(filepath.Join(dir, under), l.owners)
}

// chownAll gives each of owners (relative to root) its uid and gid. The
// store is root's alone, so no host user reaches a file by these ids.
func chownAll(root string, owners []Owner) error {
	for _, o := range owners {
		if err := os.Lchown(filepath.Join(root, filepath.FromSlash(o.Path)), o.UID, o.GID); err != nil {
			return fmt.Errorf("owner of %s: %w", o.Path, err)
		}
	}
	return nil
}

// restoreAttrs gives each written entry its mode (sticky bit included) and
// mtime (a hard link shares its target's). It runs after the Writer closed,
// so no later entry moves a directory's mtime again. Owners are given
// when an image is assembled (see the package doc).
func restoreAttrs(dir string, written []attrs) error {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	for _, a := range written {
		if a.typ == tar.TypeLink || a.typ == tar.TypeSymlink {
			continue // no lutimes through os.Root; a link's mode is meaningless
		}
		if err := r.Chmod(a.name, a.mode); err != nil {
			return err
		}
		if err := r.Chtimes(a.name, a.mtime, a.mtime); err != nil {
			return err
		}
	}
	return nil
}

// assembler builds an image rootfs from layer trees, in order.
type assembler struct {
	rootfs string
	// dirMeta maps a directory of the rootfs to the layer directory whose
	// mode and mtime it gets at the end ("" for an implicit one).
	dirMeta map[string]string
	// owners maps a rootfs path to its owner in the image, if not 0:0.
	owners map[string]Owner
	// implicit maps an implicit directory (dirMeta "") to the layer
	// directory whose mtime it gets, so that it is the same in every
	// image made of that layer (and in the layer's seal); none for one
	// a hard link's parents made.
	implicit map[string]string
}

// apply applies one layer: its whiteouts, then its entries.
func (a *assembler) apply(ctx context.Context, tree string, info *layerInfo) error {
	explicit, owners := info.index()
	// own records the owner the layer gives rel (0:0 unless it says).
	own := func(rel string) {
		if o, ok := owners[rel]; ok {
			a.owners[rel] = o
		} else {
			delete(a.owners, rel)
		}
	}
	// Whiteouts hide what lower layers made, never this layer's own files,
	// so they all go first.
	err := filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !strings.HasPrefix(d.Name(), whiteoutPrefix) {
			return ctx.Err()
		}
		rel, _ := filepath.Rel(tree, p)
		return a.whiteout(filepath.ToSlash(rel))
	})
	if err != nil {
		return err
	}
	err = filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == tree {
			return err
		}
		if strings.HasPrefix(d.Name(), whiteoutPrefix) {
			return nil
		}
		rel, _ := filepath.Rel(tree, p)
		rel = filepath.ToSlash(rel)
		dst := filepath.Join(a.rootfs, rel)
		fi, lerr := os.Lstat(dst)
		exists := lerr == nil
		if lerr != nil && !errors.Is(lerr, fs.ErrNotExist) {
			return lerr
		}
		switch {
		case d.IsDir():
			if exists && fi.IsDir() {
				if explicit[rel] {
					a.dirMeta[rel] = p
					own(rel)
				}
				return nil
			}
			if exists {
				if !explicit[rel] {
					return fmt.Errorf("%s lies beneath %s, which an earlier layer made a %s; an import never writes through it: %w",
						rel+"/...", rel, kindOf(fi.Mode()), snapshot.ErrUnsafePath)
				}
				if err := os.RemoveAll(dst); err != nil {
					return err
				}
			}
			if err := os.Mkdir(dst, 0o700); err != nil {
				return err
			}
			a.dirMeta[rel], a.implicit[rel] = "", p
			if explicit[rel] {
				a.dirMeta[rel] = p
			}
			own(rel)
			return nil
		case exists:
			// A file or link replaces whatever lower layers had there.
			a.forget(rel)
			if err := os.RemoveAll(dst); err != nil {
				return err
			}
		}
		own(rel)
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, dst)
		}
		// The layer store's file itself, shared by every image holding
		// the layer: hard links, never a write.
		return os.Link(p, dst)
	})
	if err != nil {
		return err
	}
	for _, l := range info.Links {
		if err := a.lowerLink(tree, l); err != nil {
			return fmt.Errorf("hard link %s to %s: %w", l.Name, l.Target, err)
		}
	}
	return nil
}

// lowerLink makes the layer's hard link l to a file of a lower layer, in
// the rootfs as the layers below and this one's files left it. The target
// must be a regular file reached through real directories of the rootfs
// only: never a symlink, so never a file outside the image.
func (a *assembler) lowerLink(tree string, l Link) error {
	if _, err := os.Lstat(filepath.Join(tree, l.Name)); err == nil {
		return nil // a later entry of the layer replaced the link
	}
	if _, err := os.Lstat(filepath.Join(tree, l.Target)); err == nil {
		return fmt.Errorf("the layer links to the lower layers' %s and then replaces it: %w; fix: build the layer with the link after its own %s, or without it", l.Target, ErrLinkTarget, l.Target)
	}
	ok, err := a.realDir(path.Dir(l.Target))
	if err != nil {
		return err
	}
	var fi fs.FileInfo
	if ok {
		fi, err = os.Lstat(filepath.Join(a.rootfs, l.Target))
	}
	if !ok || err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("the lower layers hold no regular file %s reached through directories only: %w; fix: link to a regular file of the image, never to a symlink, through one, or outside the image", l.Target, ErrLinkTarget)
	}
	// The link's parents: real directories, made as implicit ones when
	// missing, never followed through a symlink.
	parent := ""
	for _, c := range strings.Split(path.Dir(l.Name), "/") {
		if c == "." {
			break
		}
		parent = path.Join(parent, c)
		pfi, err := os.Lstat(filepath.Join(a.rootfs, parent))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(filepath.Join(a.rootfs, parent), 0o700); err != nil {
				return err
			}
			a.dirMeta[parent] = ""
			delete(a.implicit, parent)
			delete(a.owners, parent)
		case err != nil:
			return err
		case !pfi.IsDir():
			return fmt.Errorf("%s lies beneath %s, which is a %s; an import never writes through it: %w", l.Name, parent, kindOf(pfi.Mode()), snapshot.ErrUnsafePath)
		}
	}
	dst := filepath.Join(a.rootfs, l.Name)
	if _, err := os.Lstat(dst); err == nil {
		a.forget(l.Name)
		if err := os.RemoveAll(dst); err != nil {
			return err
		}
	}
	// One inode, one owner: the target's.
	if o, ok := a.owners[l.Target]; ok {
		a.owners[l.Name] = o
	}
	return os.Link(filepath.Join(a.rootfs, l.Target), dst)
}

func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsRegular():
		return "file"
	}
	return m.Type().String()
}

// whiteout applies the whiteout file rel ("dir/.wh.name" or an opaque
// "dir/.wh..wh..opq") to the rootfs.
func (a *assembler) whiteout(rel string) error {
	dir, name := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	target := strings.TrimPrefix(name, whiteoutPrefix)
	if name != opaqueWhiteout && (target == "" || target == "." || target == ".." || strings.HasPrefix(target, whiteoutPrefix)) {
		return fmt.Errorf("whiteout %q names no file: %w", rel, ErrUnsafeEntry)
	}
	if ok, err := a.realDir(dir); err != nil || !ok {
		return err // nothing lower to hide beneath a non-directory
	}
	if name == opaqueWhiteout {
		ents, err := os.ReadDir(filepath.Join(a.rootfs, dir))
		if err != nil {
			return err
		}
		for _, e := range ents {
			a.forget(path.Join(dir, e.Name()))
			if err := os.RemoveAll(filepath.Join(a.rootfs, dir, e.Name())); err != nil {
				return err
			}
		}
		return nil
	}
	a.forget(path.Join(dir, target))
	return os.RemoveAll(filepath.Join(a.rootfs, dir, target))
}

// realDir says whether every component of rel is a real directory of the
// rootfs.
func (a *assembler) realDir(rel string) (bool, error) {
	p := a.rootfs
	for _, c := range strings.Split(rel, "/") {
		if c == "" {
			continue
		}
		p = filepath.Join(p, c)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if !fi.IsDir() {
			return false, nil
		}
	}
	return true, nil
}

// forget drops the directory metadata and owners of rel and beneath it.
func (a *assembler) forget(rel string) {
	for d := range a.dirMeta {
		if d == rel || strings.HasPrefix(d, rel+"/") {
			delete(a.dirMeta, d)
		}
	}
	for p := range a.owners {
		if p == rel || strings.HasPrefix(p, rel+"/") {
			delete(a.owners, p)
		}
	}
}

// finish gives every directory its final mode and mtime, deepest first
// (after every entry beneath it is in place).
func (a *assembler) finish() error {
	dirs := make([]string, 0, len(a.dirMeta))
	for d := range a.dirMeta {
		dirs = append(dirs, d)
	}
	slices.SortFunc(dirs, func(x, y string) int { return strings.Count(y, "/") - strings.Count(x, "/") })
	for _, d := range dirs {
		dst := filepath.Join(a.rootfs, d)
		src := a.dirMeta[d]
		if src == "" {
			if err := os.Chmod(dst, 0o755); err != nil {
				return err
			}
			if from := a.implicit[d]; from != "" {
				fi, err := os.Lstat(from)
				if err != nil {
					return err
				}
				if err := os.Chtimes(dst, fi.ModTime(), fi.ModTime()); err != nil {
					return err
				}
			}
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(src, &st); err != nil {
			return err
		}
		if err := os.Chmod(dst, modeOf(int64(st.Mode&0o7777))); err != nil {
			return err
		}
		mtime := time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
		if err := os.Chtimes(dst, mtime, mtime); err != nil {
			return err
		}
	}
	return nil
}

// assemble builds staging/rootfs from the layers of res and hashes it. It
// also returns the image's entries not owned by 0:0, sorted by path.
func (s *Store) assemble(ctx context.Context, staging string, trees []string, infos []*layerInfo) (*treehash.Tree, []Owner, error) {
	rootfs := filepath.Join(staging, rootfsName)
	if err := os.Mkdir(rootfs, rootMode); err != nil {
		return nil, nil, err
	}
	a := &assembler{rootfs: rootfs, dirMeta: map[string]string{}, owners: map[string]Owner{}, implicit: map[string]string{}}
	for i, tree := range trees {
		if err := a.apply(ctx, tree, infos[i]); err != nil {
			return nil, nil, fmt.Errorf("applying layer %s: %w", infos[i].DiffID, err)
		}
	}
	if err := a.finish(); err != nil {
		return nil, nil, err
	}
	tree, err := treehash.Dir(ctx, rootfs, s.limits)
	if err != nil {
		return nil, nil, err
	}
	owners := make([]Owner, 0, len(a.owners))
	for p, o := range a.owners {
		o.Path = p
		owners = append(owners, o)
	}
	slices.SortFunc(owners, func(x, y Owner) int { return strings.Compare(x.Path, y.Path) })
	// The owners are the image's, on disk, and the image digest covers
	// them (see imageDigest).
	if err := chownAll(rootfs, owners); err != nil {
		return nil, nil, err
	}
	onDisk, err := ownersOf(rootfs)
	return tree, onDisk, err
}

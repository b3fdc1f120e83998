// Package image keeps a content-addressed store of root filesystems.
//
// Import takes a rootfs as a directory or as a tar file (plain or gzip-,
// zstd- or xz-compressed, told apart by their magic bytes), or an image as
// a docker-save archive ("docker-archive:PATH"), an OCI image layout
// ("oci:PATH[:TAG]") or an OCI archive ("oci-archive:PATH"). It unpacks or
// copies it into a staging directory inside the store, and publishes it
// under the treehash digest of the unpacked tree:
//
//	<dir>/<hex>/rootfs                 the unpacked root filesystem
//	<dir>/<hex>/image.json             the Image record
//	<dir>/layers/<diff id hex>/tree    an image layer, unpacked once
//	<dir>/manifests/<hex>/image.json   the Image an import of that manifest made
//	<dir>/configs/<hex>/config.json    an image's config blob, by its digest
//
// Because the digest is that of the unpacked tree, a directory and a tar of
// the same content have the same digest, and an image is unpacked once and
// reused by every later import of the same content. A docker-save archive
// and an OCI layout of the same image give the same tree.
//
// Unpacking is safe against hostile tars: absolute names and ".." components
// are refused, nothing is ever written through a symlink, hard links may only
// point at regular files already unpacked, and entries other than
// directories, regular files, symlinks and hard links are refused, each with
// an error naming the entry. Device nodes and fifos are not refused: they are
// skipped and listed in Image.Skipped (a Debian rootfs has /dev/null; the
// runner makes its own minimal /dev), and so are sockets in a directory.
// Total bytes and entry count are capped, and so is the window or
// dictionary a compressed stream's header asks its decoder for (MaxWindow,
// refused before the decoder allocates it). ImportIsolated reads the file
// in a helper process with a memory ceiling of its own, whose exit gives
// back all it took; custodyd imports so. The
// rootfs directory itself is always 0755, whatever the source says, since
// its mode is not part of the digest. The rootfs is not made read-only: it
// is mounted read-only, under an overlay, by the runner.
//
// A rootfs tar keeps what its headers say, as an image layer does: each
// entry's owner (when the store runs as root), mode (the sticky bit kept,
// setuid and setgid dropped) and mtime; Image.Owners is then
// OwnersRecorded. A rootfs directory is copied with its entries owned by
// 0:0, their permission bits masked with 0o777 and fresh mtimes. A
// directory or tar that is really an image layout or a docker-save archive
// is refused, naming the prefix that imports it.
//
// An image import verifies every blob it reads against its digest (the
// index entry, manifest, config and each layer blob, and each layer's
// uncompressed tar against its diff id from the config), refusing a mismatch
// with ErrDigestMismatch naming the blob. From an index it takes the image
// for this host's platform, or refuses naming the platforms present
// (ErrPlatform). Layers are unpacked into the layer store, keyed by diff id,
// with their modes (the sticky bit kept; setuid and setgid dropped, which
// no_new_privileges makes inert anyway), mtimes and hard links; Image.Owners
// is then OwnersRecorded. The image's rootfs is assembled from the layer trees in
// order, applying whiteouts (".wh.NAME") and opaque directories
// (".wh..wh..opq") to the lower layers only, with hard links to the layer
// store's files: two images sharing a layer share its disk space and
// inodes. That keeps the tree immutable (no one writes to either copy, and
// the runner mounts it read-only under an overlay), at one cost: linking a
// file moves its change time, so assembling a second image makes Verify
// re-hash the first once. Directories are made per image (a link cannot
// be) with their layer's metadata. A layer that adds entries beneath
// something a lower layer made a symlink is refused: an import never writes
// through a symlink, within a layer or across them.
//
// An image is bound by its manifest digest (none for a classic docker-save
// archive, which has no manifest: its config digest, docker's image id,
// binds it), its config digest and its tree digest; Binding finds the tree
// from either. The config blob itself is kept too, so Verify can
// re-derive the record's Config from the bytes its digest names. The
// record also carries the image's Config (Env,
// WorkingDir, User, Entrypoint, Cmd, StopSignal) for callers to use as
// defaults (admission does; TreeFS reads the tree as a container sees
// it, for the names it resolves). Records written before these
// fields existed decode as before.
//
// Owners are applied: an image or rootfs tar import gives each entry of the
// rootfs the uid:gid its layer or header gave it, and Image.IDs lists those
// not 0:0, as they are on disk. The store is root's alone (0700), so no
// host user reaches a file by those ids; the runner mounts the tree through
// an idmapped mount that shifts them into the container's id range, so
// container root owns what image root owns and uid 1000 what uid 1000
// owns. A rootfs directory import is all 0:0. The image digest covers the
// owners (imageDigest: the tree digest when all is root's, the tree's
// manifest followed by the owners otherwise), so one tree with two sets of
// owners is two images, and a rootfs tar, a docker-save archive and an OCI
// layout of one tree with the same owners are one. Verify re-derives it
// from the owners on disk. Images imported before owners were applied
// are 0:0 on disk; records written before the digest covered owners keep
// their tree digest, and Verify checks their owners against Image.IDs.
package image

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"

	"github.com/custody-dev/custody/internal/untar"
	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/treehash"
)

// ErrNotFound is returned (wrapped with the digest) by Get for an image the
// store does not hold.
var ErrNotFound = errors.New("image not found")

// Default limits of a store made by New.
const (
	DefaultMaxBytes   int64 = 4 << 30
	DefaultMaxEntries       = 1 << 20
)

const (
	rootfsName = "rootfs"
	recordName = "image.json"
	// rootMode is the mode of every rootfs directory itself.
	rootMode fs.FileMode = 0o755
)

// Store is a directory of images. Its methods are safe for concurrent use,
// also by several processes sharing the directory.
type Store struct {
	dir    string
	limits treehash.Options
	seen   verified
	// sealIDs are the sealed files' identities this process verified.
	sealIDs seals
	// mu keeps Remove and Prune apart from imports in this process (an
	// import links the layers a prune would delete).
	mu sync.RWMutex
}

// Image is a stored root filesystem.
type Image struct {
	// Digest is the image digest of the rootfs: its treehash digest,
	// covering its owners when they are not all 0:0 (see the package doc).
	Digest string `json:"digest"`
	// Rootfs is the directory holding the unpacked root filesystem.
	Rootfs string `json:"rootfs"`
	// Files is the number of regular files in the rootfs.
	Files int `json:"files"`
	// Bytes is their total size.
	Bytes int64 `json:"bytes"`
	// Source is where the image was first imported from: an absolute
	// path, with its transport prefix for an image archive or layout.
	Source string `json:"source"`

	// The fields below are absent from records of images imported before
	// they existed, and from plain rootfs imports (but Skipped, and for a
	// tar Owners and IDs).

	// Manifest is the digest of the image manifest an OCI layout or
	// archive gave; empty for a classic docker-save archive, which has no
	// manifest (ConfigDigest, docker's image id, binds it).
	Manifest string `json:"manifest,omitempty"`
	// ConfigDigest is the digest of the image's config blob.
	ConfigDigest string `json:"configDigest,omitempty"`
	// Config holds the image's run defaults, which admission uses.
	Config *Config `json:"config,omitempty"`
	// Platform is the image's os/arch[/variant].
	Platform string `json:"platform,omitempty"`
	// Layers are the diff ids of the image's layers, lowest first.
	Layers []string `json:"layers,omitempty"`
	// Owners is OwnersRecorded when the rootfs keeps the image's modes
	// (sticky bits included) and mtimes, and IDs holds its owners; empty
	// when every entry has its permission bits masked, a fresh mtime and
	// 0:0, as for a rootfs directory import.
	Owners string `json:"owners,omitempty"`
	// IDs are the image's entries that the image does not give to 0:0,
	// with the owners it gives them, sorted by path.
	IDs []Owner `json:"ids,omitempty"`
	// Skipped lists the device nodes and fifos the import left out, as
	// "path (kind)".
	Skipped []string `json:"skipped,omitempty"`

	// Sealed names the image's sealed file once this process has verified
	// it (see seal.go); nil for an unsealed image. Never stored.
	Sealed *Sealed `json:"-"`
	// Unsealed, on an Import's result, says why the image could not be
	// sealed; its launches then re-derive it by walking every entry.
	Unsealed string `json:"unsealed,omitempty"`
}

// New opens the image store in dir with the default limits
// (DefaultMaxBytes, DefaultMaxEntries). It creates dir with mode 0700 if it
// is absent, and refuses a dir that is a symlink, is not owned by the
// effective user, or is group- or world-writable.
func New(dir string) (*Store, error) {
	return NewWithLimits(dir, treehash.Options{MaxBytes: DefaultMaxBytes, MaxEntries: DefaultMaxEntries})
}

// NewWithLimits is New with explicit limits on the size (MaxBytes) and
// number of entries (MaxEntries) of an imported rootfs; zero means
// unlimited.
func NewWithLimits(dir string, limits treehash.Options) (*Store, error) {
	abs, err := snapshot.PrepareStoreDir(dir)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	return &Store{dir: abs, limits: limits}, nil
}

// Import stores the image at src, in any form ParseSource reads: a rootfs
// directory or tar (plain or gzip-, zstd- or xz-compressed), or, with its
// transport prefix, a docker-save archive, an OCI layout or an OCI archive.
// If the store already holds the same tree, the new copy is discarded and
// the stored image returned (with the binding of this import's manifest).
// A file or directory named by src must not be a symlink; symlinks inside it
// are kept as symlinks.
func (s *Store) Import(ctx context.Context, src string) (*Image, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	img, err := s.importTree(ctx, src)
	if err != nil {
		return nil, err
	}
	s.sealOrSay(ctx, img)
	return img, nil
}

// importTree is Import without the seal: it unpacks, verifies and
// publishes the tree, the part that reads the untrusted file (and that
// an isolated import runs in a helper process).
func (s *Store) importTree(ctx context.Context, src string) (*Image, error) {
	source, err := ParseSource(src)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	abs, err := filepath.Abs(source.Path)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	source.Path = abs
	fi, err := os.Lstat(abs)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if source.Transport != TransportRootfs {
		img, err := s.importImage(ctx, source, fi)
		if err != nil {
			return nil, fmt.Errorf("image: importing %s: %w", source, err)
		}
		return img, nil
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("image: source %s is neither a directory nor a tar file (mode %s); symlinks are not followed", abs, fi.Mode().Type())
	}
	if fi.IsDir() {
		if err := checkDir(abs, abs, false); err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
	}

	var img *Image
	_, existed, err := snapshot.Stage(s.dir, func(staging string) (string, error) {
		var tree *treehash.Tree
		var skipped []string
		var err error
		if fi.IsDir() {
			tree, err = snapshot.Copy(ctx, abs, filepath.Join(staging, rootfsName), snapshot.CopyOptions{Limits: s.limits})
			if errors.Is(err, treehash.ErrUnsupported) {
				// A device node or fifo (a Debian rootfs has /dev/null):
				// start again, leaving them out.
				if err = os.RemoveAll(filepath.Join(staging, rootfsName)); err == nil {
					tree, skipped, err = s.copySkipping(ctx, abs, staging)
				}
			}
		} else {
			tree, skipped, err = s.unpack(ctx, abs, staging)
			if err == nil {
				err = checkDir(filepath.Join(staging, rootfsName), abs, true)
			}
		}
		if err != nil {
			return "", err
		}
		// The root's own mode is not part of the digest, so it must not
		// depend on the source either.
		if err := os.Chmod(filepath.Join(staging, rootfsName), rootMode); err != nil {
			return "", err
		}
		img = &Image{Files: tree.Files, Bytes: tree.Bytes, Source: abs, Skipped: skipped}
		if !fi.IsDir() {
			// A tar keeps its owners, modes and mtimes (extractRootfs).
			if img.IDs, err = ownersOf(filepath.Join(staging, rootfsName)); err != nil {
				return "", err
			}
			img.Owners = OwnersRecorded
		}
		img.Digest = imageDigest(tree, img.IDs)
		hex, err := treehash.ParseDigest(img.Digest)
		if err != nil {
			return "", err
		}
		img.Rootfs = filepath.Join(s.dir, hex, rootfsName)
		return img.Digest, writeRecord(filepath.Join(staging, recordName), img)
	})
	if err != nil {
		return nil, fmt.Errorf("image: importing %s: %w", abs, err)
	}
	if existed {
		stored, err := s.Get(img.Digest)
		if err != nil {
			return nil, err
		}
		stored.Skipped = img.Skipped
		img = stored
	}
	return img, nil
}

// sealOrSay seals img, or records in img.Unsealed why not: an unsealed
// image still launches, by the walk.
func (s *Store) sealOrSay(ctx context.Context, img *Image) {
	img.Unsealed = ""
	if err := s.seal(ctx, img); err != nil {
		img.Unsealed = err.Error()
	}
	img.Sealed = s.sealedOf(img)
}

// checkDir refuses a rootfs directory (unpacked from the tar source when
// archive) that is an image layout or archive.
func checkDir(dir, source string, archive bool) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return checkNotImage(root, source, archive)
}

// importImage imports an image from a docker-save archive, OCI layout or
// OCI archive: it verifies the chosen manifest, config and every layer
// against their digests, unpacks each layer once into the layer store, and
// assembles the rootfs from them.
func (s *Store) importImage(ctx context.Context, src Source, fi fs.FileInfo) (*Image, error) {
	var root *os.Root
	var err error
	switch {
	case src.Transport == TransportOCI:
		if !fi.IsDir() {
			return nil, fmt.Errorf("%s is not a directory (mode %s); an OCI layout is a directory, an OCI archive is imported as %s:PATH", src.Path, fi.Mode().Type(), TransportOCIArchive)
		}
		root, err = os.OpenRoot(src.Path)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file (mode %s); symlinks are not followed", src.Path, fi.Mode().Type())
	default:
		var work string
		work, err = s.unpackArchive(ctx, src.Path)
		if work != "" {
			defer os.RemoveAll(work)
		}
		if err == nil {
			root, err = os.OpenRoot(work)
		}
	}
	if err != nil {
		return nil, err
	}
	defer root.Close()

	var res *resolved
	if src.Transport == TransportDockerArchive {
		res, err = resolveDockerArchive(root)
	} else {
		res, err = resolveLayout(root, src.Tag)
	}
	if err != nil {
		return nil, err
	}
	trees := make([]string, len(res.layers))
	infos := make([]*layerInfo, len(res.layers))
	var skipped, diffIDs []string
	for i, ref := range res.layers {
		if trees[i], infos[i], err = s.layer(ctx, root, ref); err != nil {
			return nil, err
		}
		skipped = append(skipped, infos[i].Skipped...)
		diffIDs = append(diffIDs, ref.diffID)
	}
	if err := s.keepConfig(res.config, res.raw); err != nil {
		return nil, fmt.Errorf("keeping config %s: %w", res.config, err)
	}
	img := &Image{Source: src.String(), Manifest: res.manifest, ConfigDigest: res.config, Config: configOf(res.cfg),
		Platform: res.platform, Layers: diffIDs, Owners: OwnersRecorded, Skipped: skipped}
	_, existed, err := snapshot.Stage(s.dir, func(staging string) (string, error) {
		tree, ids, err := s.assemble(ctx, staging, trees, infos)
		if err != nil {
			return "", err
		}
		img.IDs = ids
		digest := imageDigest(tree, ids)
		hex, err := treehash.ParseDigest(digest)
		if err != nil {
			return "", err
		}
		img.Digest, img.Rootfs, img.Files, img.Bytes = digest, filepath.Join(s.dir, hex, rootfsName), tree.Files, tree.Bytes
		return digest, writeRecord(filepath.Join(staging, recordName), img)
	})
	if err != nil {
		return nil, err
	}
	if existed {
		// The same tree with the same owners is stored already, maybe
		// from another manifest or as a rootfs tar: it is what runs.
		stored, err := s.Get(img.Digest)
		if err != nil {
			return nil, err
		}
		img.Rootfs, img.Files, img.Bytes, img.Owners = stored.Rootfs, stored.Files, stored.Bytes, stored.Owners
	}
	if err := s.bind(img); err != nil {
		return nil, err
	}
	return img, nil
}

// bind records img under its manifest digest (its config digest for a
// classic docker-save archive), for Binding.
func (s *Store) bind(img *Image) error {
	key := img.Manifest
	if key == "" {
		key = img.ConfigDigest
	}
	dir := filepath.Join(s.dir, bindingsName)
	if _, err := snapshot.PrepareStoreDir(dir); err != nil {
		return err
	}
	_, _, err := snapshot.Stage(dir, func(staging string) (string, error) {
		return key, writeRecord(filepath.Join(staging, recordName), img)
	})
	return err
}

// Binding returns the image an import bound to the manifest digest (for a
// classic docker-save archive, the config digest): its tree digest, config
// digest and Config. It wraps ErrNotFound when no import bound it, and
// checks that the tree is still stored.
func (s *Store) Binding(digest string) (*Image, error) {
	var img Image
	_, err := snapshot.ReadRecord(filepath.Join(s.dir, bindingsName), digest, recordName, &img)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("image manifest %s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("image manifest %s: %w", digest, err)
	}
	stored, err := s.Get(img.Digest)
	if err != nil {
		return nil, err
	}
	img.Rootfs = stored.Rootfs
	return &img, nil
}

// unpackArchive extracts an image archive (a docker-save or OCI tar,
// optionally compressed) into a private work directory inside the store.
// Only directories, regular files and symlinks (classic docker-save links
// a repeated layer) are accepted; blobs are later opened through an
// os.Root, so no link reaches outside.
func (s *Store) unpackArchive(ctx context.Context, path string) (string, error) {
	work, err := os.MkdirTemp(s.dir, snapshot.StagingPrefix+"archive-*")
	if err != nil {
		return "", err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return work, err
	}
	defer f.Close()
	r, err := decompress(bufio.NewReaderSize(f, 1<<16))
	if err != nil {
		return work, err
	}
	w, err := snapshot.NewWriter(work)
	if err != nil {
		return work, err
	}
	err = untar.Extract(ctx, r, w, untar.Options{MaxEntries: s.limits.MaxEntries, MaxBytes: s.limits.MaxBytes, Symlinks: true, DirMode: 0o700})
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return work, err
}

// writeRecord writes img as JSON to path.
func writeRecord(path string, img *Image) error {
	js, err := json.MarshalIndent(img, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding image record: %w", err)
	}
	return os.WriteFile(path, append(js, '\n'), 0o644)
}

// Get returns the stored image with the given digest, or an error wrapping
// ErrNotFound if the store does not hold it.
func (s *Store) Get(digest string) (*Image, error) {
	var img Image
	final, err := snapshot.ReadRecord(s.dir, digest, recordName, &img)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("image %s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", digest, err)
	}
	if img.Digest != digest {
		return nil, fmt.Errorf("image %s: %s records digest %s", digest, recordName, img.Digest)
	}
	// The store may have moved since the record was written.
	img.Rootfs = filepath.Join(final, rootfsName)
	img.Unsealed = ""
	img.Sealed = s.sealedOf(&img)
	return &img, nil
}

// List returns the stored images sorted by digest.
func (s *Store) List() ([]Image, error) {
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("image: listing store: %w", err)
	}
	images := []Image{}
	for _, de := range des {
		digest := treehash.DigestPrefix + de.Name()
		if _, err := treehash.ParseDigest(digest); err != nil || !de.IsDir() {
			continue // staging directories and strays
		}
		img, err := s.Get(digest)
		if err != nil {
			return nil, err
		}
		images = append(images, *img)
	}
	sort.Slice(images, func(i, j int) bool { return images[i].Digest < images[j].Digest })
	return images, nil
}

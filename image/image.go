// Package image keeps a content-addressed store of root filesystems.
//
// Import takes a rootfs as a directory or as a tar file (plain or
// gzip-compressed, told apart by their magic bytes), unpacks or copies it into
// a staging directory inside the store, and publishes it under the treehash
// digest of the unpacked tree:
//
//	<dir>/<hex>/rootfs      the unpacked root filesystem
//	<dir>/<hex>/image.json  the Image record
//
// Because the digest is that of the unpacked tree, a directory and a tar of
// the same content have the same digest, and an image is unpacked once and
// reused by every later import of the same content.
//
// Unpacking is safe against hostile tars: absolute names and ".." components
// are refused, nothing is ever written through a symlink, hard links may only
// point at regular files already unpacked, and device nodes, fifos and other
// special entries are refused, each with an error naming the entry. Total
// bytes and entry count are capped. Entries are owned by 0:0 (when the store
// runs as root) and keep their permission bits masked with 0o777 (setuid,
// setgid and sticky are dropped). The rootfs directory itself is always 0755,
// whatever the source says, since its mode is not part of the digest. The
// rootfs is not made read-only: it is mounted read-only, under an overlay, by
// the runner.
package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

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
}

// Image is a stored root filesystem.
type Image struct {
	// Digest is the treehash digest of the rootfs.
	Digest string `json:"digest"`
	// Rootfs is the directory holding the unpacked root filesystem.
	Rootfs string `json:"rootfs"`
	// Files is the number of regular files in the rootfs.
	Files int `json:"files"`
	// Bytes is their total size.
	Bytes int64 `json:"bytes"`
	// Source is the absolute path the image was first imported from.
	Source string `json:"source"`
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

// Import stores the rootfs at src, a directory or a tar file (optionally
// gzip-compressed), and returns its image. If the store already holds the
// same content, the unpacked copy is discarded and the stored image returned.
// src itself must not be a symlink; symlinks inside it are kept as symlinks.
func (s *Store) Import(ctx context.Context, src string) (*Image, error) {
	abs, err := filepath.Abs(src)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	fi, err := os.Lstat(abs)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("image: source %s is neither a directory nor a tar file (mode %s); symlinks are not followed", abs, fi.Mode().Type())
	}

	var img *Image
	_, existed, err := snapshot.Stage(s.dir, func(staging string) (string, error) {
		var tree *treehash.Tree
		var err error
		if fi.IsDir() {
			tree, err = snapshot.Copy(ctx, abs, filepath.Join(staging, rootfsName), snapshot.CopyOptions{Limits: s.limits})
		} else {
			tree, err = s.unpack(ctx, abs, staging)
		}
		if err != nil {
			return "", err
		}
		// The root's own mode is not part of the digest, so it must not
		// depend on the source either.
		if err := os.Chmod(filepath.Join(staging, rootfsName), rootMode); err != nil {
			return "", err
		}
		hex, err := treehash.ParseDigest(tree.Digest)
		if err != nil {
			return "", err
		}
		img = &Image{Digest: tree.Digest, Rootfs: filepath.Join(s.dir, hex, rootfsName), Files: tree.Files, Bytes: tree.Bytes, Source: abs}
		return tree.Digest, writeRecord(filepath.Join(staging, recordName), img)
	})
	if err != nil {
		return nil, fmt.Errorf("image: importing %s: %w", abs, err)
	}
	if existed {
		return s.Get(img.Digest)
	}
	return img, nil
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

package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/treehash"
)

// ErrUnsafeEntry is returned for tar entries whose names (or hard link
// targets) are absolute or contain "..".
var ErrUnsafeEntry = errors.New("unsafe tar entry name")

// maxTrailing bounds the data accepted after the end of a tar archive
// (record padding is at most a few KiB).
const maxTrailing = 1 << 20

// unpack extracts the tar file at path into staging/rootfs and returns the
// tree of what was written.
func (s *Store) unpack(ctx context.Context, path, staging string) (*treehash.Tree, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := decompress(bufio.NewReaderSize(f, 1<<16))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}

	w, err := snapshot.NewWriter(staging)
	if err != nil {
		return nil, err
	}
	err = w.Mkdir(rootfsName, rootMode)
	if err == nil {
		err = extract(ctx, tar.NewReader(r), w, s.limits)
	}
	if err == nil {
		err = drain(r)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	// Hash what was written. This reads the rootfs back once, and describes
	// the unpacked tree exactly as a directory import would (implicit
	// parents, hard links as two files) and enforces the limits on it.
	return treehash.Dir(ctx, filepath.Join(staging, rootfsName), s.limits)
}

// decompress returns the tar stream in r, gunzipping it if it starts with
// the gzip magic bytes.
func decompress(r *bufio.Reader) (io.Reader, error) {
	magic, err := r.Peek(6)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading: %w", err)
	}
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return zr, nil
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return nil, errors.New("zstd-compressed tars are not supported")
	case bytes.HasPrefix(magic, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return nil, errors.New("xz-compressed tars are not supported")
	case bytes.HasPrefix(magic, []byte("BZh")):
		return nil, errors.New("bzip2-compressed tars are not supported")
	}
	return r, nil
}

// drain reads what follows the end of the archive, so that a gzip stream's
// checksum is verified, and refuses more than record padding.
func drain(r io.Reader) error {
	n, err := io.Copy(io.Discard, io.LimitReader(r, maxTrailing+1))
	if err != nil {
		return fmt.Errorf("reading after the end of the tar: %w", err)
	}
	if n > maxTrailing {
		return fmt.Errorf("more than %d bytes of data after the end of the tar", maxTrailing)
	}
	return nil
}

// extract writes the entries of tr under rootfsName through w, enforcing
// limits on the declared sizes and the entry count.
func extract(ctx context.Context, tr *tar.Reader, w *snapshot.Writer, limits treehash.Options) error {
	buf := make([]byte, 1<<20)
	var entries int
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading tar: %w", err)
		}
		entries++
		if limits.MaxEntries > 0 && entries > limits.MaxEntries {
			return fmt.Errorf("tar entry %q: more than %d entries: %w", hdr.Name, limits.MaxEntries, treehash.ErrTooLarge)
		}
		if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeGNUSparse {
			total += hdr.Size
			if limits.MaxBytes > 0 && total > limits.MaxBytes {
				return fmt.Errorf("tar entry %q: files total more than %d bytes: %w", hdr.Name, limits.MaxBytes, treehash.ErrTooLarge)
			}
		}
		if err := extractEntry(tr, hdr, w, buf); err != nil {
			return fmt.Errorf("tar entry %q: %w", hdr.Name, err)
		}
	}
}

// extractEntry writes one entry.
func extractEntry(tr *tar.Reader, hdr *tar.Header, w *snapshot.Writer, buf []byte) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		// PAX global metadata (git archive writes one), not a file.
		return nil
	}
	name, err := entryPath(hdr.Name)
	if err != nil {
		return err
	}
	mode := fs.FileMode(hdr.Mode).Perm()
	if name == rootfsName {
		// "./": the root itself, whose mode is fixed (see rootMode).
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("the root of the archive must be a directory: %w", ErrUnsafeEntry)
		}
		return nil
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return w.Mkdir(name, mode)
	case tar.TypeReg, tar.TypeGNUSparse:
		fw, err := w.Create(name, mode)
		if err != nil {
			return err
		}
		n, err := io.CopyBuffer(fw, tr, buf)
		if cerr := fw.Close(); err == nil {
			err = cerr
		}
		if err == nil && n != hdr.Size {
			err = fmt.Errorf("read %d bytes, header says %d", n, hdr.Size)
		}
		return err
	case tar.TypeSymlink:
		if hdr.Linkname == "" {
			return errors.New("symlink with an empty target")
		}
		return w.Symlink(name, hdr.Linkname)
	case tar.TypeLink:
		target, err := entryPath(hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hard link target: %w", err)
		}
		return w.Link(name, target)
	case tar.TypeChar:
		return fmt.Errorf("character device: %w", treehash.ErrUnsupported)
	case tar.TypeBlock:
		return fmt.Errorf("block device: %w", treehash.ErrUnsupported)
	case tar.TypeFifo:
		return fmt.Errorf("fifo: %w", treehash.ErrUnsupported)
	default:
		return fmt.Errorf("entry type %q: %w", hdr.Typeflag, treehash.ErrUnsupported)
	}
}

// entryPath maps a tar name to its path under the Writer: rootfsName for the
// archive root ("./"), rootfsName/<clean name> otherwise. Absolute names and
// ".." components are refused; "." components and repeated or trailing
// slashes are dropped.
func entryPath(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("absolute name %q: %w", name, ErrUnsafeEntry)
	}
	parts := strings.Split(name, "/")
	clean := append(make([]string, 0, len(parts)+1), rootfsName)
	for _, p := range parts {
		switch p {
		case "", ".":
		case "..":
			return "", fmt.Errorf("name %q contains \"..\": %w", name, ErrUnsafeEntry)
		default:
			clean = append(clean, p)
		}
	}
	return strings.Join(clean, "/"), nil
}

package image

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"github.com/custody-dev/custody/internal/untar"
	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/treehash"
)

// ErrUnsafeEntry is returned for tar entries whose names (or hard link
// targets) are absolute or contain "..".
var ErrUnsafeEntry = untar.ErrUnsafeEntry

// maxTrailing bounds the data accepted after the end of a tar archive
// (record padding is at most a few KiB).
const maxTrailing = 1 << 20

// unpack extracts the tar file at path into staging/rootfs and returns the
// tree of what was written and the device nodes and fifos it skipped.
func (s *Store) unpack(ctx context.Context, path, staging string) (*treehash.Tree, []string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	r, err := decompress(bufio.NewReaderSize(f, 1<<16))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}

	var sk skipped
	return s.extractRootfs(ctx, r, staging, &sk, &headerLog{}, func() error { return drain(r) })
}

// extractRootfs extracts the tar stream r into staging/rootfs, calls finish
// once the archive ended, and returns the tree of what was written and the
// special files sk collected. With a headerLog, every entry then gets the
// mode (sticky bit included), mtime and owner its header gives it, as an
// image layer's do; without one (a directory copied through a tar) modes
// are masked with 0o777, mtimes fresh and owners 0:0.
func (s *Store) extractRootfs(ctx context.Context, r io.Reader, staging string, sk *skipped, hl *headerLog, finish func() error) (*treehash.Tree, []string, error) {
	w, err := snapshot.NewWriter(staging)
	if err != nil {
		return nil, nil, err
	}
	opts := untar.Options{Under: rootfsName,
		MaxEntries: s.limits.MaxEntries, MaxBytes: s.limits.MaxBytes, Symlinks: true, HardLinks: true,
		Skip: sk.add(rootfsName)}
	if hl != nil {
		opts.Written = hl.record(rootfsName)
	}
	err = w.Mkdir(rootfsName, rootMode)
	if err == nil {
		err = untar.Extract(ctx, r, w, opts)
	}
	if err == nil {
		err = finish()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil && hl != nil {
		err = hl.apply(staging, rootfsName)
	}
	if err != nil {
		return nil, nil, err
	}
	// Hash what was written. This reads the rootfs back once, and describes
	// the unpacked tree exactly as a directory import would (implicit
	// parents, hard links as two files) and enforces the limits on it.
	tree, err := treehash.Dir(ctx, filepath.Join(staging, rootfsName), s.limits)
	return tree, sk.list, err
}

// skipped collects the device nodes and fifos an extraction skipped, as
// "path (kind)" relative to the image root.
type skipped struct{ list []string }

// add returns an untar.Options.Skip for an extraction under the Writer
// directory under.
func (sk *skipped) add(under string) func(name, kind string) {
	return func(name, kind string) {
		rel := strings.TrimPrefix(strings.TrimPrefix(name, under), "/")
		sk.list = append(sk.list, rel+" ("+kind+")")
	}
}

// maxZstdWindow bounds the memory a zstd stream may ask the decoder for.
const maxZstdWindow = 128 << 20

// decompress returns the tar stream in r, decompressing it when it starts
// with the magic bytes of gzip, zstd or xz.
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
		// A bounded window: a hostile frame header cannot make the
		// decoder allocate more than this.
		zr, err := zstd.NewReader(r, zstd.WithDecoderMaxWindow(maxZstdWindow), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		return zr.IOReadCloser(), nil
	case bytes.HasPrefix(magic, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		xr, err := xz.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("xz: %w", err)
		}
		return xr, nil
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

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
	"slices"
	"strings"
	"syscall"

	"github.com/klauspost/compress/zstd"
	"github.com/xi2/xz"

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

// MaxWindow bounds the memory a compressed stream may make its decoder
// take for its window (zstd) or dictionary (xz): the size comes from the
// stream's own header, so without a bound a small file could ask for
// gigabytes. zstd's own decoders default to this bound, and xz -9 uses
// half of it. gzip's window is 32 KiB by its format.
const MaxWindow = 128 << 20

// ErrWindow is returned (wrapped, naming the format, the bound and the
// fix) for a compressed stream that asks for more than MaxWindow, before
// the decoder allocates it.
var ErrWindow = errors.New("the compressed stream asks for more decoder memory than an import allows")

// decompress returns the tar stream in r, decompressing it when it starts
// with the magic bytes of gzip, zstd or xz. Every decoder is bounded by
// MaxWindow.
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
		// Each frame's header gives its window; the decoder refuses one
		// above the bound before allocating it.
		zr, err := zstd.NewReader(r, zstd.WithDecoderMaxWindow(MaxWindow), zstd.WithDecoderMaxMemory(MaxWindow),
			zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		return boundedReader{r: zr.IOReadCloser(), format: "zstd", lib: []error{zstd.ErrWindowSizeExceeded, zstd.ErrDecoderSizeExceeded},
			fix: "zstd without --long, or --long=27 at most"}, nil
	case bytes.HasPrefix(magic, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		// Each block's header gives its dictionary size; the decoder
		// refuses one above the bound before allocating it.
		xr, err := xz.NewReader(r, MaxWindow)
		if err != nil {
			return nil, boundedReader{format: "xz", lib: []error{xz.ErrMemlimit}, fix: xzFix}.wrap(err)
		}
		return boundedReader{r: xr, format: "xz", lib: []error{xz.ErrMemlimit}, fix: xzFix}, nil
	case bytes.HasPrefix(magic, []byte("BZh")):
		return nil, errors.New("bzip2-compressed tars are not supported; recompress it with gzip, zstd or xz")
	}
	return r, nil
}

const xzFix = "xz -9 or less, whose dictionary is 64 MiB"

// boundedReader reads a decoder's output and says, when the decoder
// refused a stream for the memory it asked (lib), which bound it was and
// how to make a stream that fits it.
type boundedReader struct {
	r      io.Reader
	format string
	lib    []error // the decoder's errors for a stream over the bound
	fix    string
}

func (b boundedReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	return n, b.wrap(err)
}

func (b boundedReader) wrap(err error) error {
	switch {
	case err == nil || errors.Is(err, io.EOF):
		return err
	case slices.ContainsFunc(b.lib, func(e error) bool { return errors.Is(err, e) }):
		return fmt.Errorf("%s: the stream needs a window or dictionary larger than %d MiB: %w; fix: recompress it within that bound (%s)",
			b.format, MaxWindow>>20, ErrWindow, b.fix)
	}
	return fmt.Errorf("%s: %w", b.format, err)
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

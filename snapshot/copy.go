package snapshot

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"

	"github.com/custody-dev/custody/treehash"
)

// Read-only modes given by CopyOptions.ReadOnly.
const (
	readOnlyFile fs.FileMode = 0o444
	readOnlyExec fs.FileMode = 0o555
	readOnlyDir  fs.FileMode = 0o555
)

// CopyOptions tune Copy.
type CopyOptions struct {
	// Limits bound the source tree; they are enforced before the excess is
	// copied.
	Limits treehash.Options
	// ReadOnly gives the copy read-only modes: files 0444, or 0555 if any
	// execute bit was set, and directories 0555. Otherwise permission bits
	// are kept (masked with 0o777).
	ReadOnly bool
}

// Copy copies src (a directory or a single regular file) to dst, hashing
// each file's bytes as they are written, and returns the Tree of the copy:
// its digest describes exactly the bytes and modes written to dst.
//
// Symlinks in src are copied as symlinks and never followed; device nodes,
// fifos and sockets are refused with an error naming the path (wrapping
// treehash.ErrUnsupported). dst must not exist, and its parent directory must
// be private to the caller while Copy runs (see Writer). On error, dst may
// hold part of the tree; the caller removes it.
func Copy(ctx context.Context, src, dst string, opts CopyOptions) (*treehash.Tree, error) {
	w, err := NewWriter(filepath.Dir(dst))
	if err != nil {
		return nil, err
	}
	c := &copier{w: w, name: filepath.Base(dst), readOnly: opts.ReadOnly}
	tree, err := treehash.Walk(ctx, src, opts.Limits, c)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: copying %s: %w", src, err)
	}
	return tree, nil
}

// copier is the treehash.Visitor that writes the copy.
type copier struct {
	w        *Writer
	name     string // base name of dst, relative to the Writer
	readOnly bool
	single   bool // the root is a file: it is written to name itself
}

func (c *copier) Root(kind treehash.Kind, mode uint32) error {
	if kind == treehash.KindFile {
		c.single = true
		return nil
	}
	return c.w.Mkdir(c.name, c.dirMode(mode))
}

func (c *copier) Dir(e *treehash.Entry) error {
	e.Mode = uint32(c.dirMode(e.Mode))
	return c.w.Mkdir(c.dest(e.Path), fs.FileMode(e.Mode))
}

func (c *copier) Symlink(e *treehash.Entry) error {
	return c.w.Symlink(c.dest(e.Path), e.Target)
}

func (c *copier) File(e *treehash.Entry) (io.WriteCloser, error) {
	mode := fs.FileMode(e.Mode).Perm()
	if c.readOnly {
		mode = readOnlyFile
		if e.Mode&0o111 != 0 {
			mode = readOnlyExec
		}
	}
	e.Mode = uint32(mode)
	return c.w.Create(c.dest(e.Path), mode)
}

func (c *copier) dest(p string) string {
	if c.single {
		return c.name
	}
	return c.name + "/" + p
}

func (c *copier) dirMode(mode uint32) fs.FileMode {
	if c.readOnly {
		return readOnlyDir
	}
	return fs.FileMode(mode).Perm()
}

// Digest returns the tree Take would store for src — the same read-only
// modes, the same digest — without writing anything. Checks that must come
// before any mutation use it.
func Digest(ctx context.Context, src string, limits treehash.Options) (*treehash.Tree, error) {
	tree, err := treehash.Walk(ctx, src, limits, digester{})
	if err != nil {
		return nil, fmt.Errorf("snapshot: digesting %s: %w", src, err)
	}
	return tree, nil
}

// digester is a treehash.Visitor that writes nothing but records the modes
// a read-only copy would have.
type digester struct{}

func (digester) DescribesOnly() {}

func (digester) Root(treehash.Kind, uint32) error { return nil }

func (digester) Dir(e *treehash.Entry) error {
	e.Mode = uint32(readOnlyDir)
	return nil
}

func (digester) Symlink(*treehash.Entry) error { return nil }

func (digester) File(e *treehash.Entry) (io.WriteCloser, error) {
	mode := readOnlyFile
	if e.Mode&0o111 != 0 {
		mode = readOnlyExec
	}
	e.Mode = uint32(mode)
	return nopWriter{}, nil
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (nopWriter) Close() error                { return nil }

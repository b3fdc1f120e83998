// Package untar extracts tar archives from untrusted sources into a
// directory. Every name is checked (no absolute names, no ".."), hard links
// resolve only inside the tree, device nodes and fifos are refused (or, when
// the caller asks, skipped and reported), the entry count and the total file size are bounded, and every entry is
// created through a snapshot.Writer, whose os.Root refuses to reach outside
// the directory and whose checks refuse to write through a symlink.
package untar

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/treehash"
)

// ErrUnsafeEntry is returned for tar entries whose names (or hard link
// targets) are absolute or contain "..", and for an archive root that is
// not a directory.
var ErrUnsafeEntry = errors.New("unsafe tar entry name")

// Options say what Extract accepts beyond directories and regular files,
// and its bounds. The zero value accepts directories and regular files
// only, with no bound on their number or size.
type Options struct {
	// Under is the directory, relative to the Writer's, that the archive's
	// root maps to; empty for the Writer's directory itself. The caller
	// creates it.
	Under string
	// MaxEntries bounds the number of entries, counting the parent
	// directories the Writer makes for entries whose parents no earlier
	// entry named; 0 is no bound.
	MaxEntries int
	// MaxBytes bounds the total declared size of regular files; 0 is no
	// bound.
	MaxBytes int64
	// Symlinks accepts symbolic links (their targets are not interpreted,
	// and the Writer never writes through one).
	Symlinks bool
	// HardLinks accepts hard links to regular files earlier in the archive.
	HardLinks bool
	// LowerLink, if set, takes a hard link whose target no earlier entry
	// wrote (an image layer's link to a file of a lower layer, which the
	// OCI image spec allows): it is not made, and LowerLink is told its
	// Writer-relative name and target, both checked as every name is, to
	// make it itself. Without it such a link is refused, saying so.
	LowerLink func(name, target string) error
	// DirMode, if not zero, is the mode of every directory instead of the
	// one in its header.
	DirMode fs.FileMode
	// Skip, if set, makes device nodes and fifos not an error: they are
	// not created, and Skip is told each one's name (Writer-relative) and
	// kind. Nothing else is ever skipped.
	Skip func(name, kind string)
	// Written, if set, is called with each entry's Writer-relative name and
	// header once it is written (not for the archive root, skipped entries
	// or PAX globals), so that a caller can restore what a Writer does not
	// keep (owners, times) after closing it.
	Written func(name string, hdr *tar.Header)
}

// Extract writes the entries of the tar stream r through w. Errors name the
// entry and wrap ErrUnsafeEntry, snapshot.ErrUnsafePath (a path through a
// symlink), treehash.ErrTooLarge (a bound) or treehash.ErrUnsupported (an
// entry type not accepted). On error, w's directory may hold part of the
// tree; the caller removes it. Extract reads r up to the end of the archive
// only: what follows it is the caller's.
func Extract(ctx context.Context, r io.Reader, w *snapshot.Writer, opts Options) error {
	tr := tar.NewReader(r)
	buf := make([]byte, 1<<20)
	var entries int
	var total int64
	dirs := map[string]bool{}    // the directories named or implied so far
	written := map[string]bool{} // the names entries were written to so far
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
		if opts.MaxEntries > 0 && entries <= opts.MaxEntries {
			entries += impliedDirs(dirs, hdr.Name, hdr.Typeflag == tar.TypeDir, opts.MaxEntries-entries)
		}
		if opts.MaxEntries > 0 && entries > opts.MaxEntries {
			return fmt.Errorf("tar entry %q: more than %d entries: %w", hdr.Name, opts.MaxEntries, treehash.ErrTooLarge)
		}
		if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeGNUSparse {
			total += hdr.Size
			if opts.MaxBytes > 0 && total > opts.MaxBytes {
				return fmt.Errorf("tar entry %q: files total more than %d bytes: %w", hdr.Name, opts.MaxBytes, treehash.ErrTooLarge)
			}
		}
		if err := extractEntry(tr, hdr, w, &opts, buf, written); err != nil {
			return fmt.Errorf("tar entry %q: %w", hdr.Name, err)
		}
	}
}

// impliedDirs counts the parents of a tar name that no earlier entry named
// or implied (the Writer creates them: "a/b/c/f" alone is four entries on
// disk) and marks them, and a directory entry itself, as seen. It stops
// counting past budget, so a name of many components costs no more than
// the bound allows.
func impliedDirs(seen map[string]bool, name string, isDir bool, budget int) int {
	parts := strings.Split(name, "/")
	clean := parts[:0]
	for _, p := range parts {
		if p != "" && p != "." {
			clean = append(clean, p)
		}
	}
	full := strings.Join(clean, "/")
	n := 0
	for i := 0; i < len(full) && n <= budget; i++ {
		if full[i] == '/' && !seen[full[:i]] {
			seen[full[:i]] = true
			n++
		}
	}
	if isDir && full != "" {
		seen[full] = true
	}
	return n
}

// extractEntry writes one entry.
func extractEntry(tr *tar.Reader, hdr *tar.Header, w *snapshot.Writer, opts *Options, buf []byte, written map[string]bool) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		// PAX global metadata (git archive writes one), not a file.
		return nil
	}
	name, err := entryPath(opts.Under, hdr.Name)
	if err != nil {
		return err
	}
	mode := fs.FileMode(hdr.Mode).Perm()
	if name == "" || name == opts.Under {
		// "./": the root itself, whose mode is the caller's.
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("the root of the archive must be a directory: %w", ErrUnsafeEntry)
		}
		return nil
	}
	if kind := special(hdr.Typeflag); kind != "" && opts.Skip != nil {
		opts.Skip(name, kind)
		return nil
	}
	if hdr.Typeflag == tar.TypeLink && opts.HardLinks {
		target, err := entryPath(opts.Under, hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hard link target: %w", err)
		}
		if !written[target] {
			if opts.LowerLink == nil {
				return fmt.Errorf("hard link to %q, which no earlier entry of the archive wrote", hdr.Linkname)
			}
			delete(written, name)
			return opts.LowerLink(name, target)
		}
	}
	if err := writeEntry(tr, hdr, name, mode, w, opts, buf); err != nil {
		return err
	}
	written[name] = true
	if opts.Written != nil {
		opts.Written(name, hdr)
	}
	return nil
}

// special names the kind of a device node or fifo entry, "" for others.
func special(typ byte) string {
	switch typ {
	case tar.TypeChar:
		return "character device"
	case tar.TypeBlock:
		return "block device"
	case tar.TypeFifo:
		return "fifo"
	}
	return ""
}

// writeEntry creates one entry of an accepted type through w.
func writeEntry(tr *tar.Reader, hdr *tar.Header, name string, mode fs.FileMode, w *snapshot.Writer, opts *Options, buf []byte) error {
	switch hdr.Typeflag {
	case tar.TypeDir:
		if opts.DirMode != 0 {
			mode = opts.DirMode
		}
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
		if !opts.Symlinks {
			return fmt.Errorf("symlink: %w", treehash.ErrUnsupported)
		}
		if hdr.Linkname == "" {
			return errors.New("symlink with an empty target")
		}
		return w.Symlink(name, hdr.Linkname)
	case tar.TypeLink:
		if !opts.HardLinks {
			return fmt.Errorf("hard link: %w", treehash.ErrUnsupported)
		}
		target, err := entryPath(opts.Under, hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hard link target: %w", err)
		}
		return w.Link(name, target)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return fmt.Errorf("%s: %w", special(hdr.Typeflag), treehash.ErrUnsupported)
	default:
		return fmt.Errorf("entry type %q: %w", hdr.Typeflag, treehash.ErrUnsupported)
	}
}

// entryPath maps a tar name to its path under the Writer: under for the
// archive root ("./"), under/<clean name> otherwise. Absolute names and
// ".." components are refused; "." components and repeated or trailing
// slashes are dropped.
func entryPath(under, name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("absolute name %q: %w", name, ErrUnsafeEntry)
	}
	parts := strings.Split(name, "/")
	clean := make([]string, 0, len(parts)+1)
	if under != "" {
		clean = append(clean, under)
	}
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

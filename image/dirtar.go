package image

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/custody-dev/custody/treehash"
)

// copySkipping copies the rootfs directory src into staging/rootfs as a tar
// stream through untar, leaving out (and listing) device nodes, fifos and
// sockets. It is the path for a directory the plain copy refused for
// holding one, so every entry still passes the extractor's checks.
func (s *Store) copySkipping(ctx context.Context, src, staging string) (*treehash.Tree, []string, error) {
	var sk skipped
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeDirTar(ctx, pw, src, sk.add(""))) }()
	tree, list, err := s.extractRootfs(ctx, pr, staging, &sk, nil, func() error {
		_, err := io.Copy(io.Discard, pr) // the writer's error, if any
		return err
	})
	pr.CloseWithError(err) // stops the writer if the extract failed first
	return tree, list, err
}

// writeDirTar writes the tree under root as a tar to w, telling skip about
// each special file instead. Files are opened without following links or
// blocking, and must still be the regular file the walk saw.
func writeDirTar(ctx context.Context, w io.Writer, root string, skip func(name, kind string)) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		name := filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := int64(fi.Mode().Perm())
		switch t := fi.Mode().Type(); {
		case t == fs.ModeDir:
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode})
		case t == fs.ModeSymlink:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target})
		case t == 0:
			return writeDirFile(tw, p, name, mode)
		case t&fs.ModeCharDevice != 0:
			skip(name, "character device")
		case t&fs.ModeDevice != 0:
			skip(name, "block device")
		case t&fs.ModeNamedPipe != 0:
			skip(name, "fifo")
		case t&fs.ModeSocket != 0:
			skip(name, "socket")
		default:
			return fmt.Errorf("%s: file type %s: %w", p, t, treehash.ErrUnsupported)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// writeDirFile writes the regular file at p as the entry name.
func writeDirFile(tw *tar.Writer, p, name string, mode int64) error {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s changed while it was imported: %w", p, treehash.ErrUnsupported)
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: fi.Size()}); err != nil {
		return err
	}
	// A file that shrinks fails the tar writer; one that grows is cut at
	// the size in the header.
	_, err = io.Copy(tw, io.LimitReader(f, fi.Size()))
	return err
}

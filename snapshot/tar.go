package snapshot

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// WriteTar writes the stored tree under root as a tar: directories, regular
// files and symlinks (what a stored tree holds), never following a
// symlink, so a tree can leave the store the way it went in.
func WriteTar(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case info.Mode().IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: filepath.ToSlash(rel) + "/", Mode: int64(info.Mode().Perm())})
		case info.Mode().IsRegular():
			f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: filepath.ToSlash(rel),
				Mode: int64(info.Mode().Perm()), Size: info.Size()}); err != nil {
				return err
			}
			_, err = io.Copy(tw, io.LimitReader(f, info.Size()))
			return err
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: filepath.ToSlash(rel), Linkname: target})
		}
		return fmt.Errorf("unexpected file type at %s", p)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

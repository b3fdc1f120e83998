//go:build linux

package image

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// layerSource builds at dst (a new directory) the tree a layer's seal is
// made of: the layer's tree (tree) as overlayfs reads a lower layer. Its
// files are hard links to the layer store's (the same inodes, which an
// assembled image already gave their owners); its directories and
// symlinks are made anew with the layer's modes, owners and mtimes; an OCI
// whiteout ".wh.name" becomes overlayfs's (a character device 0:0 named
// name) and an opaque one ".wh..wh..opq" marks its directory opaque.
//
// A directory the layer's tar does not name (an implicit one) keeps, in
// an assembled image, what lower layers made of it, but overlayfs shows
// the topmost layer's: the seal gives it the mode, owner and mtime it has
// in rootfs, the first image sealing the layer. An image whose lower
// layers made it otherwise does not verify against the seals, and is
// sealed whole.
func layerSource(tree string, info *layerInfo, rootfs, dst string) error {
	if len(info.Links) > 0 {
		// The tree cannot hold them: the image's rootfs makes them.
		return fmt.Errorf("layer %s links to files of lower layers, which a seal of the layer alone cannot hold", info.DiffID)
	}
	explicit, owners := info.index()
	var dirs []string
	err := filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(tree, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		out := filepath.Join(dst, filepath.FromSlash(rel))
		name := d.Name()
		switch {
		case rel == ".":
			return nil
		case name == opaqueWhiteout:
			return markOpaque(filepath.Dir(out))
		case strings.HasPrefix(name, whiteoutPrefix):
			target := strings.TrimPrefix(name, whiteoutPrefix)
			if target == "" || target == "." || target == ".." || strings.HasPrefix(target, whiteoutPrefix) {
				return fmt.Errorf("whiteout %q names no file: %w", rel, ErrUnsafeEntry)
			}
			if _, err := os.Lstat(filepath.Join(p, "..", target)); err == nil {
				return fmt.Errorf("the layer both holds %s and whites it out", path.Join(path.Dir(rel), target))
			}
			return whiteoutNode(filepath.Join(filepath.Dir(out), target))
		case d.IsDir():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if !explicit[rel] {
				if in, err := os.Lstat(filepath.Join(rootfs, filepath.FromSlash(rel))); err == nil && in.IsDir() {
					fi = in
				}
			}
			if err := os.Mkdir(out, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, rel)
			return os.Chmod(out, fi.Mode().Perm()|fi.Mode()&fs.ModeSticky)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, out); err != nil {
				return err
			}
		case d.Type().IsRegular():
			if err := os.Link(p, out); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s is a %s, which a layer tree never holds", rel, d.Type())
		}
		o := owners[rel]
		var st unix.Stat_t
		if err := unix.Lstat(out, &st); err != nil {
			return err
		}
		if int(st.Uid) != o.UID || int(st.Gid) != o.GID {
			if err := os.Lchown(out, o.UID, o.GID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Directories last, deepest first: their owners and mtimes once
	// nothing is made beneath them any more.
	slices.SortFunc(dirs, func(x, y string) int { return strings.Count(y, "/") - strings.Count(x, "/") })
	for _, rel := range dirs {
		out := filepath.Join(dst, filepath.FromSlash(rel))
		from := filepath.Join(tree, filepath.FromSlash(rel))
		o := owners[rel]
		if !explicit[rel] {
			in := filepath.Join(rootfs, filepath.FromSlash(rel))
			var st unix.Stat_t
			if err := unix.Lstat(in, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				from, o = in, Owner{UID: int(st.Uid), GID: int(st.Gid)}
			}
		}
		if err := os.Lchown(out, o.UID, o.GID); err != nil {
			return err
		}
		mt, err := statTimes(from)
		if err != nil {
			return err
		}
		if err := setLinkTimes(out, mt); err != nil {
			return err
		}
	}
	return nil
}

package vm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DefaultInitramfsRoot is the largest rootfs (its regular files' bytes)
// carried in the initramfs rather than on an erofs disk.
const DefaultInitramfsRoot = 16 << 20

// maxInitramfsRootEntries bounds the entries of such a rootfs.
const maxInitramfsRootEntries = 8192

// errNotInitramfs says a rootfs goes on an erofs disk: it is too large, or
// holds what a newc archive does not carry as erofs does (hard links,
// extended attributes, special files).
var errNotInitramfs = errors.New("the rootfs goes on an erofs disk")

// rootEntry is one entry of a rootfs carried in the initramfs.
type rootEntry struct {
	name string // relative, slash-separated, "." for the root
	hdr  cpioHeader
	data []byte // a regular file's bytes or a symlink's target
	// path and size locate a regular file's bytes until they are read.
	path string
	size int64
}

// initramfsRoot reads the tree at root for the initramfs, with the owners,
// modes and mtimes mkfs.erofs would keep, or returns errNotInitramfs when
// the tree is larger than maxBytes or holds anything an erofs image would
// keep and a newc archive would not. Files are read only once the walk has
// found the whole tree fits: a large image costs a walk of its metadata up
// to the bound, not its bytes. The tree is the image store's own
// (immutable); symlinks are read, never followed.
func initramfsRoot(root string, maxBytes int64) ([]rootEntry, error) {
	if maxBytes <= 0 {
		return nil, errNotInitramfs
	}
	var out []rootEntry
	var total int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if len(out) >= maxInitramfsRootEntries {
			return errNotInitramfs
		}
		if n, err := unix.Llistxattr(p, nil); err != nil && !errors.Is(err, unix.ENOTSUP) {
			return fmt.Errorf("list the xattrs of %s: %w", p, err)
		} else if n > 0 {
			return errNotInitramfs
		}
		e := rootEntry{name: filepath.ToSlash(rel), hdr: cpioHeader{mode: st.Mode, uid: st.Uid, gid: st.Gid, mtime: st.Mtim.Sec}}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			e.data = []byte(target)
		case unix.S_IFREG:
			if st.Nlink > 1 {
				return errNotInitramfs
			}
			if total += st.Size; total > maxBytes {
				return errNotInitramfs
			}
			e.size, e.path = st.Size, p // read once the whole tree fits
		default:
			return errNotInitramfs
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range out {
		if out[i].path == "" {
			continue
		}
		if out[i].data, err = readRegular(out[i].path, out[i].size); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readRegular reads the regular file at p, which Lstat found to be size
// bytes long, without following a symlink put in its place.
func readRegular(p string, size int64) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil && size > 0 {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return data, nil
}

// writeRoot puts entries under dir in the archive.
func (c *cpioWriter) writeRoot(dir string, entries []rootEntry) {
	for _, e := range entries {
		c.entryOf(path.Join(dir, e.name), e.hdr, e.data)
	}
}

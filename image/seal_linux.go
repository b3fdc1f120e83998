//go:build linux

package image

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/snapshot"
)

// attach attaches the detached mount mfd at a private name in the store
// (dir) that readers skip, for the walk: treehash walks a path, and never
// through the magic link of a detached mount's descriptor. detach
// unmounts and removes it.
func attach(mfd int, dir string) (root string, detach func(), err error) {
	root, err = os.MkdirTemp(dir, snapshot.StagingPrefix+"seal-*")
	if err != nil {
		return "", nil, err
	}
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, root, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		os.Remove(root)
		return "", nil, fmt.Errorf("attach the sealed tree: %w", err)
	}
	return root, func() {
		if unix.Unmount(root, unix.MNT_DETACH) == nil {
			os.Remove(root)
		}
	}, nil
}

func closeMount(mfd int) { unix.Close(mfd) }

// dupMount is a new descriptor of the detached mount mfd.
func dupMount(mfd int) (int, error) { return unix.FcntlInt(uintptr(mfd), unix.F_DUPFD_CLOEXEC, 0) }

// cloneMount is a detached clone of the detached mount mfd, which can be
// attached (and detached) without touching mfd's own mount.
func cloneMount(mfd int) (int, error) {
	return unix.OpenTree(mfd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
}

// sameMetadata checks that every entry of the tree b has the type, mode
// (sticky bit included), owner and mtime of the same entry of a, and the
// size for files and symlinks, and that both have the same entries. With
// linkMtimes false, a symlink's mtime is not compared: an image's rootfs
// gets its symlinks when it is assembled, a layer's seal when the layer is
// sealed, and the tree digest covers neither (nothing reads it).
func sameMetadata(a, b string, linkMtimes bool) error {
	n := 0
	err := filepath.WalkDir(a, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(a, p)
		if err != nil {
			return err
		}
		var sa, sb unix.Stat_t
		if err := unix.Lstat(p, &sa); err != nil {
			return err
		}
		if err := unix.Lstat(filepath.Join(b, rel), &sb); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		n++
		sized := sa.Mode&unix.S_IFMT != unix.S_IFDIR
		switch {
		case rel == ".":
			return nil // the root's own metadata is not the image's
		case sa.Mode != sb.Mode, sa.Uid != sb.Uid, sa.Gid != sb.Gid:
			return fmt.Errorf("%s: mode %#o owner %d:%d, sealed as %#o %d:%d", rel, sa.Mode, sa.Uid, sa.Gid, sb.Mode, sb.Uid, sb.Gid)
		case sa.Mtim != sb.Mtim && (linkMtimes || sa.Mode&unix.S_IFMT != unix.S_IFLNK):
			return fmt.Errorf("%s: mtime %d.%09d, sealed as %d.%09d", rel, sa.Mtim.Sec, sa.Mtim.Nsec, sb.Mtim.Sec, sb.Mtim.Nsec)
		case sized && sa.Size != sb.Size:
			return fmt.Errorf("%s: size %d, sealed as %d", rel, sa.Size, sb.Size)
		}
		return nil
	})
	if err != nil {
		return err
	}
	m := 0
	if err := filepath.WalkDir(b, func(_ string, _ fs.DirEntry, err error) error { m++; return err }); err != nil {
		return err
	}
	if m != n {
		return fmt.Errorf("%d entries, sealed as %d", n, m)
	}
	return nil
}

// whiteoutNode makes the overlay whiteout (a character device 0:0) that
// hides name of the lower layers.
func whiteoutNode(name string) error {
	return unix.Mknod(name, unix.S_IFCHR, 0)
}

// markOpaque makes dir opaque to overlayfs: nothing of the lower layers
// beneath it shows through.
func markOpaque(dir string) error {
	return unix.Lsetxattr(dir, "trusted.overlay.opaque", []byte("y"), 0)
}

// setLinkTimes gives the symlink (or any entry, not followed) name its
// mtime.
func setLinkTimes(name string, mtime unix.Timespec) error {
	return unix.UtimesNanoAt(unix.AT_FDCWD, name, []unix.Timespec{mtime, mtime}, unix.AT_SYMLINK_NOFOLLOW)
}

// statTimes is name's mtime, not followed.
func statTimes(name string) (unix.Timespec, error) {
	var st unix.Stat_t
	if err := unix.Lstat(name, &st); err != nil {
		return unix.Timespec{}, err
	}
	return st.Mtim, nil
}

// roOverlay is a detached, read-only overlay of the detached mounts
// lowers (top first), without an upper layer: the image as its sealed
// layers serve it.
func roOverlay(lowers []int) (int, error) {
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("overlay: fsopen: %w", err)
	}
	defer unix.Close(fsfd)
	for _, l := range lowers {
		if err := unix.FsconfigSetString(fsfd, "lowerdir+", fmt.Sprintf("/proc/self/fd/%d", l)); err != nil {
			return -1, fmt.Errorf("overlay: lowerdir: %w", err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("overlay of the sealed layers: %w", err)
	}
	return unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOSUID)
}

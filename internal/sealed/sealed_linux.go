//go:build linux

package sealed

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fsIocGetVersion is FS_IOC_GETVERSION (linux/fs.h), which reads an
// inode's generation; x/sys has no name for it.
const fsIocGetVersion = 0x80087601

// identify reads f's Identity, refusing a file that is not a regular,
// root-owned, unwritable one.
func identify(f *os.File) (Identity, error) {
	fd := int(f.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Identity{}, fmt.Errorf("stat sealed image: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != 0 || st.Mode&0o7222 != 0 {
		return Identity{}, fmt.Errorf("%w: mode %#o owner %d; fix: remove the image and import it again", ErrChanged, st.Mode, st.Uid)
	}
	// A filesystem without generations (ENOTTY) has dev, inode and ctime
	// left to tell a replaced file apart.
	gen, err := unix.IoctlGetUint32(fd, fsIocGetVersion)
	if err != nil && !errors.Is(err, unix.ENOTTY) && !errors.Is(err, unix.EOPNOTSUPP) {
		return Identity{}, fmt.Errorf("read the sealed image's inode generation: %w", err)
	}
	return Identity{Dev: st.Dev, Ino: st.Ino, Generation: gen, Size: st.Size,
		Mtime: st.Mtim.Sec*1e9 + st.Mtim.Nsec, Ctime: st.Ctim.Sec*1e9 + st.Ctim.Nsec}, nil
}

// Mount mounts the erofs image in f, which the caller has checked (Open),
// as a detached, read-only mount without devices or setuid, and returns
// its descriptor: the caller uses it (as an overlay's lower layer by
// /proc/self/fd, say) and closes it. If userns is not nil, the mount is
// idmapped through that user namespace. The kernel mounts erofs straight
// from a regular file only with CONFIG_EROFS_FS_BACKED_BY_FILE (Linux 6.12
// and later); elsewhere this fails, wrapping the kernel's error.
func Mount(f *os.File, userns *os.File) (int, error) {
	fsfd, err := unix.Fsopen("erofs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("erofs: fsopen: %w", err)
	}
	defer unix.Close(fsfd)
	// By descriptor: the kernel opens the very file that was checked.
	if err := unix.FsconfigSetString(fsfd, "source", fmt.Sprintf("/proc/self/fd/%d", f.Fd())); err != nil {
		return -1, fmt.Errorf("erofs: source: %w", err)
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("erofs: mount the sealed file: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOSUID)
	if err != nil {
		return -1, fmt.Errorf("erofs: fsmount: %w", err)
	}
	if userns != nil {
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns.Fd())}
		if err := unix.MountSetattr(mfd, "", unix.AT_EMPTY_PATH, attr); err != nil {
			unix.Close(mfd)
			return -1, fmt.Errorf("erofs: idmap the sealed mount: %w", err)
		}
	}
	return mfd, nil
}

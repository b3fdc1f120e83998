// Package outputfs is the bounded output filesystem that every backend
// gives a launch: a tmpfs with a hard byte bound and an inode bound, so a
// workload's writes past either fail with ENOSPC and it cannot leave more
// entries than its receipt may list; how much it holds; and the kernel's
// identity of a mount, which proves a later unmount acts on the mount the
// launch made. backend/oci mounts it at the launch's output path; the
// docker backend binds it into the container.
package outputfs

import (
	"fmt"
	"strconv"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// Owner, when set, owns the filesystem's root (a user namespace's root).
type Owner struct{ UID, GID int }

// Mount mounts the bounded tmpfs on dir (which exists): size bytes and,
// when files > 0, at most files entries. A bound that cannot be mounted is
// an error: the caller refuses the launch rather than run it unbounded.
func Mount(dir string, size, files int64, owner *Owner) error {
	if size <= 0 {
		return fmt.Errorf("output bound of %d bytes: a positive bound is required", size)
	}
	opts := fmt.Sprintf("size=%d,mode=0755", size)
	if files > 0 {
		opts += fmt.Sprintf(",nr_inodes=%d", files+1) // the root is an inode too
	}
	if owner != nil {
		opts += fmt.Sprintf(",uid=%d,gid=%d", owner.UID, owner.GID)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, opts); err != nil {
		return fmt.Errorf("output bound of %d bytes cannot be enforced: mount tmpfs: %w", size, err)
	}
	return nil
}

// Used is how many bytes the filesystem at dir holds.
func Used(dir string) (int64, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return 0, err
	}
	return int64(fs.Blocks-fs.Bfree) * fs.Bsize, nil
}

// MountIdentity is the kernel's id of the mount at p (the topmost, where
// several are stacked) and its filesystem type. statx answers for the one
// path; reading mountinfo means the kernel printing every mount of the
// namespace, which cost more than anything else custodyd did per launch.
func MountIdentity(p string) (map[string]string, error) {
	var stx unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx)
	if err != nil || stx.Mask&unix.STATX_MNT_ID == 0 || stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return mountIdentityFromTable(p) // kernels before 5.8
	}
	if stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return nil, fmt.Errorf("nothing mounted at %s", p)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(p, &fs); err != nil {
		return nil, err
	}
	return map[string]string{"mountId": strconv.FormatUint(stx.Mnt_id, 10), "fstype": fsTypeName(fs.Type)}, nil
}

func mountIdentityFromTable(p string) (map[string]string, error) {
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(p))
	if err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("nothing mounted at %s", p)
	}
	m := ms[len(ms)-1]
	return map[string]string{"mountId": strconv.Itoa(m.ID), "fstype": m.FSType}, nil
}

// fsTypeName names the filesystems custody mounts as mountinfo does.
func fsTypeName(magic int64) string {
	switch magic {
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay"
	}
	return fmt.Sprintf("0x%x", magic)
}

// PathIdentity is a file's device and inode: a path alone proves nothing.
func PathIdentity(p string) (map[string]string, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return nil, err
	}
	return map[string]string{"dev": strconv.FormatUint(st.Dev, 10), "ino": strconv.FormatUint(st.Ino, 10)}, nil
}

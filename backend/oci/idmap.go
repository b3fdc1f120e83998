package oci

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
)

// The image's files keep the image's owners on disk (in the store, which
// only root can enter). With a user namespace, the rootfs overlay's lower
// layer is an idmapped mount of the image that shifts them into the
// container's host range, so container root owns what image root owns and
// uid 1000 owns what uid 1000 owns. Without one they would be host ids
// (the image's uid 1000 is the host's), so Capabilities says
// HostImageOwners and admission refuses an image whose entries are not all
// 0:0.

// idmapUserns returns a user namespace whose mapping is the containers',
// for idmapped mounts.
func (b *Backend) idmapUserns(ctx context.Context) (*os.File, error) {
	m := *b.opts.UserNS
	return b.usernsFor(ctx, m.HostID, m.HostID, m.Size)
}

// usernsFor returns a user namespace mapping ids 0..size-1 to uid.. and
// gid..: made once per mapping, then kept open for the backend's life.
func (b *Backend) usernsFor(ctx context.Context, uid, gid, size uint32) (*os.File, error) {
	b.usernsMu.Lock()
	defer b.usernsMu.Unlock()
	key := [3]uint32{uid, gid, size}
	if ns := b.userns[key]; ns != nil {
		return ns, nil
	}
	ns, err := makeUserns(ctx, b.gate, b.filter,
		[]syscall.SysProcIDMap{{ContainerID: 0, HostID: int(uid), Size: int(size)}},
		[]syscall.SysProcIDMap{{ContainerID: 0, HostID: int(gid), Size: int(size)}})
	if err != nil {
		return nil, fmt.Errorf("user namespace for an idmapped mount: %w", err)
	}
	if b.userns == nil {
		b.userns = map[[3]uint32]*os.File{}
	}
	b.userns[key] = ns
	return ns, nil
}

// makeUserns makes a user namespace with the given mappings and returns a
// descriptor of it. A namespace needs a process to be made in:
// the sealed gate runs there as its mapped root (an unprivileged host id),
// says it is ready, and exits on the EOF that follows once the namespace
// is open, without ever running anything else.
func makeUserns(ctx context.Context, gate, filter *os.File, uidMap, gidMap []syscall.SysProcIDMap) (*os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fds[0], true); err != nil { // so reads can time out
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "userns-control"), os.NewFile(uintptr(fds[1]), "userns-gate")
	defer ours.Close()
	cmd := &exec.Cmd{
		Path: fmt.Sprintf("/proc/self/fd/%d", GateFD), Args: []string{"custody-gate", "/nonexistent"}, Env: []string{},
		ExtraFiles: []*os.File{theirs, gate, filter},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWUSER, UidMappings: uidMap, GidMappings: gidMap,
			Credential: &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true}, Pdeathsig: syscall.SIGKILL,
		},
	}
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		return nil, fmt.Errorf("start the gate in a new user namespace: %w", err)
	}
	defer func() { _ = cmd.Wait() }()
	defer cmd.Process.Kill() //nolint:errcheck // it exits on EOF; this is for a gate that did not
	deadline := time.Now().Add(5 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := ours.SetReadDeadline(deadline); err != nil {
		return nil, err
	}
	var b [1]byte
	if n, err := ours.Read(b[:]); n != 1 || b[0] != 'r' {
		return nil, fmt.Errorf("the gate in the new user namespace did not get ready: %v", err)
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	if err != nil {
		return nil, err
	}
	return ns, nil
}

// idmappedImage returns a detached, read-only mount of the tree (an image
// or a snapshot) whose ids are shifted by the user namespace ns; the
// caller closes it once the overlay that uses it as its lower layer is
// mounted.
func idmappedImage(image string, ns *os.File) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, image, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("clone the tree %s: %w", image, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOSUID,
		Userns_fd: uint64(ns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("idmap the image tree: %w", err)
	}
	return fd, nil
}

// ownMountPoints gives each entry the launch made in the overlay's upper
// layer (the mount points) the owner and permissions of the same path in
// the image, shifted into the container's range, or container root's when
// the image has none: a merged directory takes its attributes from the
// upper layer, and /etc must not turn into nobody's.
func ownMountPoints(upper, image string, m IDMap) error {
	return filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == upper {
			return err
		}
		rel, err := filepath.Rel(upper, p)
		if err != nil {
			return err
		}
		uid, gid := m.HostID, m.HostID
		var st unix.Stat_t
		switch err := unix.Lstat(filepath.Join(image, rel), &st); {
		case err == nil:
			if st.Uid < m.Size && st.Gid < m.Size {
				uid, gid = m.HostID+st.Uid, m.HostID+st.Gid
			}
			if d.IsDir() && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				if err := os.Chmod(p, fs.FileMode(st.Mode&0o777)); err != nil {
					return err
				}
			}
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTDIR):
			return err
		}
		return os.Lchown(p, int(uid), int(gid))
	})
}

// scratchDir is where the writable inputs' tmpfs is mounted.
func (c *Container) scratchDir() string { return filepath.Join(c.dir, "rw") }

// mountWritable gives each writable input of cfg its copy: an overlay whose
// lower layer is the read-only snapshot (never written) and whose upper
// layer is on one tmpfs of the tmp budget, recorded before it is made. The
// snapshot is read-only (files 0444, directories 0555, 0:0); in the copy
// each directory and file belongs to the workload's user and is writable
// by it: the upper layer starts with a metadata-only copy of every entry
// (overlayfs metacopy: the data stays the snapshot's until a write copies
// it up). cfg's inputs then name the overlays.
func (c *Container) mountWritable(ctx context.Context, cfg *Config) error {
	var idx []int
	for i, in := range cfg.Inputs {
		if in.Writable {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	scratch := c.scratchDir()
	intents := []backend.Resource{{Kind: KindScratchMount, Name: scratch}}
	for n := range idx {
		intents = append(intents, backend.Resource{Kind: KindInputMount, Name: filepath.Join(scratch, fmt.Sprintf("m%d", n))})
	}
	if err := c.rec.Intent(intents...); err != nil {
		return fmt.Errorf("journal writable inputs: %w", err)
	}
	c.intendMounts(intents...)
	if err := os.Mkdir(scratch, 0o700); err != nil {
		return fmt.Errorf("writable inputs: %w", err)
	}
	c.mounted = append(c.mounted, scratch)
	if err := unix.Mount("tmpfs", scratch, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOEXEC,
		fmt.Sprintf("size=%d,mode=0700", cfg.TmpBytes)); err != nil {
		return fmt.Errorf("writable inputs tmpfs: %w", err)
	}
	if err := c.identify(KindScratchMount, scratch, mountIdentity); err != nil {
		return err
	}
	// The copy's files belong to the workload's user, as host ids.
	uid, gid := cfg.UID, cfg.GID
	if m := c.b.opts.UserNS; m != nil {
		uid, gid = m.HostID+uid, m.HostID+gid
	}
	for n, i := range idx {
		if err := c.mountCopy(ctx, &cfg.Inputs[i], scratch, n, uid, gid); err != nil {
			return fmt.Errorf("writable copy of input %s: %w", cfg.Inputs[i].Target, err)
		}
	}
	return nil
}

// mountCopy mounts input's overlay at scratch/m<n>.
func (c *Container) mountCopy(ctx context.Context, input *Mount, scratch string, n int, uid, gid uint32) error {
	var st unix.Stat_t
	if err := unix.Stat(input.Source, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is not a directory; only a directory input can be writable", input.Target)
	}
	merged := filepath.Join(scratch, fmt.Sprintf("m%d", n))
	upper, work := filepath.Join(scratch, fmt.Sprintf("u%d", n)), filepath.Join(scratch, fmt.Sprintf("w%d", n))
	for _, d := range []string{merged, upper, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	if err := metacopy(ctx, input.Source, upper, uid, gid); err != nil {
		return err
	}
	lower, err := unix.Open(input.Source, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(lower)
	var fds [2]int
	for i, d := range []string{upper, work} {
		fd, err := unix.Open(d, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		fds[i] = fd
	}
	// By descriptor, as the rootfs: mountinfo shows overlay options.
	opts := fmt.Sprintf("lowerdir=/proc/self/fd/%d,upperdir=/proc/self/fd/%d,workdir=/proc/self/fd/%d,metacopy=on", lower, fds[0], fds[1])
	c.mounted = append(c.mounted, merged)
	if err := unix.Mount("overlay", merged, "overlay", unix.MS_NODEV|unix.MS_NOSUID, opts); err != nil {
		return fmt.Errorf("mount overlay: %w", err)
	}
	if err := c.identify(KindInputMount, merged, mountIdentity); err != nil {
		return err
	}
	input.Source = merged
	return nil
}

// metacopy gives upper a metadata-only copy of the tree lower: each
// directory made, each regular file an empty file of its size marked as
// overlayfs metacopy (its data is read from the lower file of the same
// path), all owned by uid:gid and writable by them (the snapshot's modes
// plus the owner's write bit). Symlinks are left to the lower layer. The
// sparse files take inodes, not pages, of the tmpfs.
func metacopy(ctx context.Context, lower, upper string, uid, gid uint32) error {
	return filepath.WalkDir(lower, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(lower, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(upper, rel)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		mode := uint32(st.Mode&0o777 | 0o200)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if rel != "." {
				if err := unix.Mkdir(dst, 0o700); err != nil {
					return err
				}
			}
		case unix.S_IFREG:
			fd, err := unix.Open(dst, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
			if err != nil {
				return err
			}
			err = unix.Ftruncate(fd, st.Size)
			if err == nil {
				err = unix.Fsetxattr(fd, "trusted.overlay.metacopy", nil, 0)
			}
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("metacopy of %s: %w", rel, err)
			}
		default:
			return nil // symlinks: the lower layer's
		}
		if err := unix.Chmod(dst, mode); err != nil {
			return err
		}
		return unix.Lchown(dst, int(uid), int(gid))
	})
}

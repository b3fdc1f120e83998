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
)

// The image's files keep the image's owners on disk (in the store, which
// only root can enter). With a user namespace, the rootfs overlay's lower
// layer is an idmapped mount of the image that shifts them into the
// container's host range, so container root owns what image root owns and
// uid 1000 owns what uid 1000 owns; without one they are host ids already.

// idmapUserns returns a user namespace whose mapping is the containers',
// for idmapped mounts: made once, then kept open for the backend's life.
func (b *Backend) idmapUserns(ctx context.Context) (*os.File, error) {
	b.usernsMu.Lock()
	defer b.usernsMu.Unlock()
	if b.userns != nil {
		return b.userns, nil
	}
	ns, err := makeUserns(ctx, b.gate, b.filter, *b.opts.UserNS)
	if err != nil {
		return nil, fmt.Errorf("user namespace for the image's idmapped mount: %w", err)
	}
	b.userns = ns
	return ns, nil
}

// makeUserns makes a user namespace mapping 0..m.Size-1 to m.HostID.. and
// returns a descriptor of it. A namespace needs a process to be made in:
// the sealed gate runs there as its mapped root (an unprivileged host id),
// says it is ready, and exits on the EOF that follows once the namespace
// is open, without ever running anything else.
func makeUserns(ctx context.Context, gate, filter *os.File, m IDMap) (*os.File, error) {
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
	idmap := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(m.HostID), Size: int(m.Size)}}
	cmd := &exec.Cmd{
		Path: fmt.Sprintf("/proc/self/fd/%d", GateFD), Args: []string{"custody-gate", "/nonexistent"}, Env: []string{},
		ExtraFiles: []*os.File{theirs, gate, filter},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWUSER, UidMappings: idmap, GidMappings: idmap,
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

// idmappedImage returns a detached, read-only mount of the image tree
// whose ids are shifted by the user namespace ns; the caller closes it
// once the overlay that uses it as its lower layer is mounted.
func idmappedImage(image string, ns *os.File) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, image, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("clone the image tree: %w", err)
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

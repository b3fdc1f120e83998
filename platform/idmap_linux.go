package platform

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// ProbeIdmap proves that the kernel can idmap a mount of dir's filesystem,
// which the oci backend needs to show an image's owners to a container in
// a user namespace: it clones a detached mount of dir and sets
// MOUNT_ATTR_IDMAP on it with the user namespace of a child (mapping 0 to
// this process's ids), then drops both. Nothing is attached anywhere. A
// filesystem that cannot be idmapped (tmpfs before Linux 6.3, for
// instance) fails with the kernel's error.
func ProbeIdmap(ctx context.Context, dir string) Fact {
	how := fmt.Sprintf("cloned a detached mount of %s (open_tree) and set MOUNT_ATTR_IDMAP on it with a child's user namespace (mount_setattr)", dir)
	ns, stop, err := childUserns(ctx)
	if err != nil {
		return Fact{How: how, Detail: err.Error()}
	}
	defer stop()
	if err := idmapTree(dir, ns); err != nil {
		return Fact{How: how, Detail: err.Error()}
	}
	return Fact{OK: true, How: how}
}

// childUserns is the user namespace of a child mapping 0 to this
// process's ids, and stop, which ends the child and closes it.
func childUserns(ctx context.Context) (ns *os.File, stop func(), err error) {
	cat, err := lookCat()
	if err != nil {
		return nil, nil, err
	}
	// The child is cat reading a pipe we hold: it lives, in its namespace,
	// until the pipe closes.
	cmd := exec.CommandContext(ctx, cat)
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("user namespace child: %w", err)
	}
	end := func() {
		stdin.Close()
		_ = cmd.Wait()
	}
	ns, err = os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	if err != nil {
		end()
		return nil, nil, fmt.Errorf("open the child's user namespace: %w", err)
	}
	return ns, func() { ns.Close(); end() }, nil
}

// idmapTree clones a detached mount of dir and idmaps it with ns.
func idmapTree(dir string, ns *os.File) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", dir, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY, Userns_fd: uint64(ns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("mount_setattr MOUNT_ATTR_IDMAP on %s: %w", dir, err)
	}
	return nil
}

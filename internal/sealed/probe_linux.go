//go:build linux

package sealed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrCannotOverlay is returned (wrapped, with the kernel's error) when
// this host cannot do what a launch of a sealed image does.
var ErrCannotOverlay = errors.New("the kernel cannot use a sealed image as a container's lower layer")

// ProbeOverlay does, with a one-file erofs image it makes under dir with
// mkfs.erofs, what a launch of a sealed image does: it mounts the file as
// Mount does (detached); when idmap is not nil, it replaces that mount by
// the one idmap makes of the tree (a launch under a user namespace makes
// an idmapped clone); it mounts an overlay with the result as its lower
// layer, named by descriptor; and it reads a file through the overlay.
// Mounting the erofs alone is not enough: on Linux 6.12 to 6.14, erofs
// mounts from a file, but open_tree or overlayfs may refuse a detached
// mount as a layer, which a launch would find only after its grant was
// spent. An error wraps ErrCannotOverlay when the kernel refused a step.
func ProbeOverlay(ctx context.Context, dir string, idmap func(tree string) (int, error)) error {
	mkfs, err := exec.LookPath("mkfs.erofs")
	if err != nil {
		return fmt.Errorf("no mkfs.erofs (Debian package erofs-utils): %w", err)
	}
	// One left by a crash holds no mount (the overlay is detached): gone.
	if old, _ := filepath.Glob(filepath.Join(dir, ProbePrefix+"*")); len(old) > 0 {
		for _, p := range old {
			_ = os.RemoveAll(p)
		}
	}
	work, err := os.MkdirTemp(dir, ProbePrefix)
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	src, img := filepath.Join(work, "src"), filepath.Join(work, "img.erofs")
	if err := os.Mkdir(src, 0o755); err == nil {
		err = os.WriteFile(filepath.Join(src, "f"), []byte("sealed"), 0o644)
	}
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, mkfs, "--quiet", "-x-1", img, src)
	cmd.Env = []string{}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.erofs: %w: %s", err, strings.TrimSpace(string(out)))
	}
	f, err := os.Open(img)
	if err != nil {
		return err
	}
	defer f.Close()
	mfd, err := Mount(f, nil)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCannotOverlay, err)
	}
	defer unix.Close(mfd)
	lower := mfd
	if idmap != nil {
		fd, err := idmap(fmt.Sprintf("/proc/self/fd/%d", mfd))
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCannotOverlay, err)
		}
		defer unix.Close(fd)
		lower = fd
	}
	upper, wdir := filepath.Join(work, "upper"), filepath.Join(work, "work")
	var fds []int
	for _, d := range []string{upper, wdir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	for _, d := range []string{upper, wdir} {
		fd, err := unix.Open(d, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		fds = append(fds, fd)
	}
	// A detached overlay, read by descriptor: attached nowhere, so a crash
	// in the middle leaves no mount behind.
	ofd, err := detachedOverlay(lower, fds[0], fds[1])
	if err != nil {
		return fmt.Errorf("%w: overlay over the sealed mount: %w", ErrCannotOverlay, err)
	}
	defer unix.Close(ofd)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d/f", ofd)); err != nil || string(b) != "sealed" {
		return fmt.Errorf("%w: read through the overlay: %q, %v", ErrCannotOverlay, b, err)
	}
	return nil
}

// detachedOverlay makes an overlay of the lower, upper and work layers
// (descriptors) as a detached mount, and returns its descriptor.
func detachedOverlay(lower, upper, work int) (int, error) {
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen: %w", err)
	}
	defer unix.Close(fsfd)
	for _, o := range [][2]string{
		{"lowerdir", fmt.Sprintf("/proc/self/fd/%d", lower)},
		{"upperdir", fmt.Sprintf("/proc/self/fd/%d", upper)},
		{"workdir", fmt.Sprintf("/proc/self/fd/%d", work)},
	} {
		if err := unix.FsconfigSetString(fsfd, o[0], o[1]); err != nil {
			return -1, fmt.Errorf("%s: %w", o[0], err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("create: %w", err)
	}
	return unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOSUID)
}

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

// ProbeOverlay does, with two one-file erofs images it makes under dir
// with mkfs.erofs (an image sealed per layer, the upper one hiding the
// lower's file), what a launch of a sealed image does: it mounts each file
// as Mount does (detached); when idmap is not nil, it replaces each mount
// by the one idmap makes of its tree (a launch under a user namespace
// makes idmapped clones); it mounts an overlay with the results as its
// lower layers, named by descriptor; and it reads the file through the
// overlay. A whole-image seal is the one-layer case of the same launch.
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
	var lowers []int
	for _, layer := range []string{"sealed", "lower"} { // top first
		src, img := filepath.Join(work, layer), filepath.Join(work, layer+".erofs")
		if err := os.Mkdir(src, 0o755); err == nil {
			err = os.WriteFile(filepath.Join(src, "f"), []byte(layer), 0o644)
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
		lowers = append(lowers, lower)
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
	ofd, err := detachedOverlay(lowers, fds[0], fds[1])
	if err != nil {
		return fmt.Errorf("%w: overlay over the sealed mount: %w", ErrCannotOverlay, err)
	}
	defer unix.Close(ofd)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d/f", ofd)); err != nil || string(b) != "sealed" {
		return fmt.Errorf("%w: read through the overlay: %q, %v", ErrCannotOverlay, b, err)
	}
	return nil
}

// detachedOverlay makes an overlay of the lower (top first), upper and
// work layers (descriptors) as a detached mount, and returns its
// descriptor.
func detachedOverlay(lowers []int, upper, work int) (int, error) {
	names := make([]string, len(lowers))
	for i, l := range lowers {
		names[i] = fmt.Sprintf("/proc/self/fd/%d", l)
	}
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen: %w", err)
	}
	defer unix.Close(fsfd)
	for _, o := range [][2]string{
		{"lowerdir", strings.Join(names, ":")},
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

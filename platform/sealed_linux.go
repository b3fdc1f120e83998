package platform

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/internal/sealed"
)

// SealedImagesCheck says whether this host can launch from sealed images
// (image/seal.go): mkfs.erofs on PATH and a kernel that does what such a
// launch does (sealed.ProbeOverlay: an overlay over a detached erofs
// mount of a file, cloned idmapped through a child's user namespace).
// Without it, the oci backend launches from, and each launch walks every
// entry of, the image's rootfs directory, so launch cost grows with the
// image's file count: a warning, since nothing is less contained.
func SealedImagesCheck(ctx context.Context) Check {
	c := Check{Name: "images.sealed", Verdict: VerdictOK,
		Detail: "made a one-file erofs image with mkfs.erofs, mounted it from the file, cloned it idmapped and read it back through an overlay over it: launches re-derive images in constant time"}
	warn := func(detail, fix string) Check {
		c.Verdict, c.Detail, c.Fix = VerdictWarn, detail+": launches use the unsealed rootfs directory, and each walks every entry of its image", fix
		return c
	}
	if _, err := exec.LookPath("mkfs.erofs"); err != nil {
		return warn("no mkfs.erofs on PATH", "install erofs-utils (apt-get install erofs-utils)")
	}
	dir, err := os.MkdirTemp("", probePrefix+"erofs-")
	if err != nil {
		return warn(err.Error(), "give custodyd a writable temporary directory")
	}
	defer os.RemoveAll(dir)
	ns, stop, err := childUserns(ctx)
	if err != nil {
		return warn(err.Error(), "allow user namespaces (sysctl kernel.unprivileged_userns_clone=1 where it exists)")
	}
	defer stop()
	idmap := func(tree string) (int, error) {
		fd, err := unix.OpenTree(unix.AT_FDCWD, tree, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return -1, fmt.Errorf("open_tree the sealed mount: %w", err)
		}
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY, Userns_fd: uint64(ns.Fd())}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("idmap the sealed mount: %w", err)
		}
		return fd, nil
	}
	if err := sealed.ProbeOverlay(ctx, dir, idmap); err != nil {
		fix := "reinstall erofs-utils"
		if errors.Is(err, sealed.ErrCannotOverlay) {
			fix = "use a kernel with CONFIG_EROFS_FS and CONFIG_EROFS_FS_BACKED_BY_FILE whose open_tree and overlayfs take a detached (idmapped) erofs mount as a layer; Linux 6.12 to 6.14 may not"
		}
		return warn(err.Error(), fix)
	}
	return c
}

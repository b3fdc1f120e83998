package platform

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// tmpfsSize is the bound the tmpfs probe sets, and tmpfsWrite how much it
// then tries to write: twice the bound, so success would disprove it.
const (
	tmpfsSize  = 1 << 20
	tmpfsWrite = 2 << 20
)

// probeTmpfs proves that a size-bounded tmpfs can be mounted and that the
// kernel enforces the bound, which is what keeps a container's scratch
// space from eating host memory.
func probeTmpfs(scratch string) Fact {
	how := fmt.Sprintf("mounted tmpfs size=1m on a fresh directory under %s, wrote 2 MiB into it expecting ENOSPC, "+
		"unmounted it, checked /proc/self/mountinfo no longer lists it and removed the directory", scratch)
	written, err := tmpfsBounded(scratch)
	if err != nil {
		return Fact{How: how, Detail: err.Error()}
	}
	return Fact{OK: true, How: how + fmt.Sprintf(" (ENOSPC after %d bytes)", written)}
}

// tmpfsBounded does the tmpfs probe and returns how many bytes were
// written before ENOSPC.
func tmpfsBounded(scratch string) (written int64, err error) {
	dir, err := os.MkdirTemp(scratch, probePrefix+"tmpfs-")
	if err != nil {
		return 0, fmt.Errorf("tmpfs: make mount point: %w", err)
	}
	mounted := false
	defer removeScratch(dir, &mounted, &err)

	data := fmt.Sprintf("size=%d,mode=0700", tmpfsSize)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, data); err != nil {
		return 0, fmt.Errorf("tmpfs: mount on %s with %s: %w", dir, data, err)
	}
	mounted = true
	defer unmountScratch(dir, &mounted, &err)

	written, err = fillFile(filepath.Join(dir, "fill"), tmpfsWrite)
	switch {
	case err == nil:
		return written, fmt.Errorf("tmpfs: wrote %d bytes into a tmpfs of size %d without ENOSPC", written, tmpfsSize)
	case !errors.Is(err, unix.ENOSPC):
		return written, fmt.Errorf("tmpfs: %w", err)
	case written > tmpfsSize:
		return written, fmt.Errorf("tmpfs: ENOSPC only after %d bytes, beyond the size of %d", written, tmpfsSize)
	}
	return written, nil
}

// fillFile writes n zero bytes to a new file at path and returns how many
// were written before the first error.
func fillFile(path string, n int) (int64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	var written int64
	for written < int64(n) {
		k, err := f.Write(buf)
		written += int64(k)
		if err != nil {
			return written, err
		}
	}
	return written, f.Close()
}

// probeOverlay proves that an overlay filesystem can be mounted and does
// copy-on-write into its upper layer, which is how a runtime layers a
// writable container root over read-only image layers.
func probeOverlay(scratch string) Fact {
	how := fmt.Sprintf("mounted overlay with lower/upper/work directories under a fresh directory in %s, "+
		"read a lower file and wrote a new file through it, checked the new file landed in upper and not lower, "+
		"unmounted it, checked /proc/self/mountinfo no longer lists it and removed the directories", scratch)
	if err := overlayWorks(scratch); err != nil {
		return Fact{How: how, Detail: err.Error()}
	}
	return Fact{OK: true, How: how}
}

func overlayWorks(scratch string) (err error) {
	base, err := os.MkdirTemp(scratch, probePrefix+"overlay-")
	if err != nil {
		return fmt.Errorf("overlay: make scratch directory: %w", err)
	}
	lower := filepath.Join(base, "lower")
	upper := filepath.Join(base, "upper")
	work := filepath.Join(base, "work")
	merged := filepath.Join(base, "merged")
	mounted := false
	defer removeScratch(base, &mounted, &err)

	for _, d := range []string{lower, upper, work, merged} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fmt.Errorf("overlay: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(lower, "from-lower"), []byte("lower"), 0o600); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	// The option parser splits on ',' and ':' (and treats '\' as an escape).
	if strings.ContainsAny(base, ",:\\") {
		return fmt.Errorf("overlay: scratch path %q contains a character overlay options cannot carry", base)
	}
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	if err := unix.Mount("overlay", merged, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return fmt.Errorf("overlay: mount %s: %w", data, err)
	}
	mounted = true
	defer unmountScratch(merged, &mounted, &err)

	if b, err := os.ReadFile(filepath.Join(merged, "from-lower")); err != nil || string(b) != "lower" {
		return fmt.Errorf("overlay: lower file through the mount: got %q, %v", b, err)
	}
	want := []byte("upper")
	if err := os.WriteFile(filepath.Join(merged, "from-merged"), want, 0o600); err != nil {
		return fmt.Errorf("overlay: write through the mount: %w", err)
	}
	if b, err := os.ReadFile(filepath.Join(upper, "from-merged")); err != nil || !bytes.Equal(b, want) {
		return fmt.Errorf("overlay: file written through the mount is not in upper: got %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(lower, "from-merged")); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("overlay: file written through the mount reached lower (%v)", err)
	}
	return nil
}

// unmountScratch unmounts a mount the probe made at target and confirms
// from the mount table that it is gone, joining any failure into *errp.
// *mounted is cleared only on confirmed success.
func unmountScratch(target string, mounted *bool, errp *error) {
	err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
	if errors.Is(err, unix.EBUSY) {
		// Something (a file scanner, say) has it open. Detach it now; the
		// kernel frees it when the last user lets go.
		err = unix.Unmount(target, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH)
	}
	if err != nil {
		*errp = errors.Join(*errp, fmt.Errorf("unmount %s: %w", target, err))
		return
	}
	still, err := isMounted(procSelfMountInfo, target)
	if err != nil {
		*errp = errors.Join(*errp, fmt.Errorf("verify unmount of %s: %w", target, err))
		return
	}
	if still {
		*errp = errors.Join(*errp, fmt.Errorf("%s is still listed in %s after unmount", target, procSelfMountInfo))
		return
	}
	*mounted = false
}

// removeScratch removes the probe's scratch directory dir, unless a mount
// under it could not be removed: deleting through a live mount would reach
// into the mounted filesystem.
func removeScratch(dir string, mounted *bool, errp *error) {
	if *mounted {
		*errp = errors.Join(*errp, fmt.Errorf("left %s in place because a mount under it could not be removed", dir))
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		*errp = errors.Join(*errp, fmt.Errorf("remove %s: %w", dir, err))
	}
}

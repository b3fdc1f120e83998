package platform

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/internal/sealed"
)

// SealedImagesCheck says whether this host can seal images (image/seal.go):
// mkfs.erofs on PATH and a kernel that mounts erofs straight from a file.
// Without either, every image stays unsealed and each launch re-derives it
// by walking every entry, so launch cost grows with the image's file
// count: a warning, since nothing is less contained.
func SealedImagesCheck(ctx context.Context) Check {
	c := Check{Name: "images.sealed", Verdict: VerdictOK,
		Detail: "made a one-file erofs image with mkfs.erofs, mounted it from the file and read the file back through the mount: launches re-derive images in constant time"}
	warn := func(detail, fix string) Check {
		c.Verdict, c.Detail, c.Fix = VerdictWarn, detail+": images stay unsealed, and each launch walks every entry of its image", fix
		return c
	}
	mkfs, err := exec.LookPath("mkfs.erofs")
	if err != nil {
		return warn("no mkfs.erofs on PATH", "install erofs-utils (apt-get install erofs-utils)")
	}
	dir, err := os.MkdirTemp("", probePrefix+"erofs-")
	if err != nil {
		return warn(err.Error(), "give custodyd a writable temporary directory")
	}
	defer os.RemoveAll(dir)
	src, img := filepath.Join(dir, "src"), filepath.Join(dir, "img.erofs")
	if err := os.Mkdir(src, 0o700); err == nil {
		err = os.WriteFile(filepath.Join(src, "f"), []byte("sealed"), 0o600)
	}
	if err != nil {
		return warn(err.Error(), "give custodyd a writable temporary directory")
	}
	if out, err := exec.CommandContext(ctx, mkfs, "--quiet", "-x-1", img, src).CombinedOutput(); err != nil {
		return warn(fmt.Sprintf("mkfs.erofs: %v: %s", err, strings.TrimSpace(string(out))), "reinstall erofs-utils")
	}
	f, err := os.Open(img)
	if err != nil {
		return warn(err.Error(), "give custodyd a writable temporary directory")
	}
	defer f.Close()
	mfd, err := sealed.Mount(f, nil)
	if err != nil {
		return warn(err.Error(), "use a kernel with CONFIG_EROFS_FS and CONFIG_EROFS_FS_BACKED_BY_FILE (Linux 6.12 or later)")
	}
	defer unix.Close(mfd)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d/f", mfd)); err != nil || string(b) != "sealed" {
		return warn(fmt.Sprintf("reading through the erofs mount: %q, %v", b, err), "use a kernel with CONFIG_EROFS_FS_BACKED_BY_FILE (Linux 6.12 or later)")
	}
	return c
}

package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// The big image of the launch-on-a-real-image rows (issue 19 item 4): the
// busybox test rootfs plus a copy of the host's /usr/lib and /usr/share,
// taken in name order until BigImageFiles files or BigImageBytes bytes,
// so that its size and file count are those of a Debian toolchain image
// (directories and symlinks come along, uncounted). It is made once and reused; its stamp records what it holds.
const (
	BigImageFiles       = 30_000
	BigImageBytes int64 = 1 << 30
	// Files outside bigFileMin..bigFileMax are left out, so that the
	// budgets fill together: about 29k files and 1 GiB from this host.
	bigFileMin = 1536
	bigFileMax = 32 << 20
)

// BigImage describes a made big image.
type BigImage struct {
	Rootfs string `json:"rootfs"`
	Files  int    `json:"files"`
	Bytes  int64  `json:"bytes"`
	// From says what it was made of.
	From string `json:"from"`
}

// MakeBigImage makes the big image under dir (dir/rootfs, dir/stamp.json)
// from the busybox rootfs, or returns the one made before.
func MakeBigImage(dir, busybox string) (*BigImage, error) {
	stamp := filepath.Join(dir, "stamp.json")
	if b, err := os.ReadFile(stamp); err == nil {
		var bi BigImage
		if err := json.Unmarshal(b, &bi); err == nil && bi.Rootfs == filepath.Join(dir, "rootfs") {
			return &bi, nil
		}
	}
	root := filepath.Join(dir, "rootfs")
	if err := os.RemoveAll(root); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := copyTree(busybox, root); err != nil {
		return nil, fmt.Errorf("big image: copy the busybox rootfs: %w", err)
	}
	bi := &BigImage{Rootfs: root, From: "the busybox test rootfs plus the host's /usr/lib and /usr/share in name order, files under 1.5 KiB or over 32 MiB left out"}
	if err := filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			bi.Files++
		}
		return err
	}); err != nil {
		return nil, err
	}
	errFull := errors.New("full")
	for _, src := range []string{"/usr/lib", "/usr/share"} {
		err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // unreadable: left out
			}
			dst := filepath.Join(root, p)
			switch {
			case d.IsDir():
				return os.MkdirAll(dst, 0o755)
			case d.Type()&fs.ModeSymlink != 0:
				t, err := os.Readlink(p)
				if err != nil {
					return nil
				}
				return os.Symlink(t, dst)
			case !d.Type().IsRegular():
				return nil
			}
			fi, err := d.Info()
			if err != nil || fi.Size() < bigFileMin || fi.Size() > bigFileMax {
				return nil
			}
			if bi.Files >= BigImageFiles || bi.Bytes+fi.Size() > BigImageBytes {
				return errFull
			}
			if err := copyFile(p, dst, fi.Mode().Perm()); err != nil {
				return err
			}
			bi.Files++
			bi.Bytes += fi.Size()
			return nil
		})
		if errors.Is(err, errFull) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("big image: %w", err)
		}
	}
	b, err := json.MarshalIndent(bi, "", "  ")
	if err != nil {
		return nil, err
	}
	return bi, os.WriteFile(stamp, append(b, '\n'), 0o644)
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return nil // unreadable: left out
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

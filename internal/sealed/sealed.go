// Package sealed keeps a stored image as one read-only erofs file whose
// identity is checked in constant time, and mounts it.
//
// A sealed file is root's, mode 0400, in a 0700 store. Its Identity is its
// device, inode, inode generation, size, mtime and ctime. While a file's
// Identity is what it was when its bytes were verified, its bytes are the
// verified ones:
//   - every write to it, and every chmod, chown or flag change, moves its
//     ctime, and no caller can set ctime back (utimensat sets mtime and
//     atime only, and stamps ctime with the current time);
//   - a replaced file (a rename over it, or a delete and a new file) is
//     another inode, or the same inode number with another generation and
//     a fresh ctime.
//
// This is the argument image.Store.Verify's metadata walk made per entry,
// made once for the whole tree: the kernel serves the tree from the sealed
// file's bytes (erofs, mounted straight from the file), so one file's
// identity stands for every entry's. What the walk did not cover, neither
// does this: a write to the block device under the filesystem, or a clock
// set back to the nanosecond of a ctime.
//
// The immutable flag (FS_IMMUTABLE_FL) was weighed and left out: it would
// stop a write before it happens, but clearing it moves ctime, so it adds
// no detection, and every removal of a store (an image rm, a test's
// temporary directory) would have to clear it first.
//
// Mount mounts from the very descriptor that Open checked, so a file
// swapped between a check and the mount is refused, not mounted.
package sealed

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrChanged is returned (wrapped, naming what differs) when a sealed file
// is not the file that was sealed.
var ErrChanged = errors.New("sealed image file changed")

// Identity names one sealed file's bytes (see the package comment).
type Identity struct {
	Dev, Ino   uint64
	Generation uint32
	Size       int64
	// Mtime and Ctime are in nanoseconds since the epoch.
	Mtime, Ctime int64
}

// String encodes id as colon-separated decimal fields, the form Parse
// reads: dev:ino:generation:size:mtime:ctime.
func (id Identity) String() string {
	return fmt.Sprintf("%d:%d:%d:%d:%d:%d", id.Dev, id.Ino, id.Generation, id.Size, id.Mtime, id.Ctime)
}

// Parse reads an Identity in the form String writes.
func Parse(s string) (Identity, error) {
	f := strings.Split(s, ":")
	if len(f) != 6 {
		return Identity{}, fmt.Errorf("sealed identity %q: want 6 colon-separated fields, got %d", s, len(f))
	}
	var v [6]uint64
	for i, x := range f {
		bits := 64
		if i == 2 {
			bits = 32
		}
		n, err := strconv.ParseUint(x, 10, bits)
		if err != nil {
			return Identity{}, fmt.Errorf("sealed identity %q: field %d: %w", s, i+1, err)
		}
		if i >= 3 && n > 1<<63-1 {
			return Identity{}, fmt.Errorf("sealed identity %q: field %d out of range", s, i+1)
		}
		v[i] = n
	}
	return Identity{Dev: v[0], Ino: v[1], Generation: uint32(v[2]), Size: int64(v[3]), Mtime: int64(v[4]), Ctime: int64(v[5])}, nil
}

// Seal makes the regular file at path sealed: mode 0400 and its bytes
// synced to disk. It returns the sealed Identity and the hex SHA-256 of
// the file's bytes.
func Seal(path string) (Identity, string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Identity{}, "", fmt.Errorf("seal %s: %w", path, err)
	}
	defer f.Close()
	if err := f.Chmod(0o400); err == nil {
		err = f.Sync() // the bytes, and the ctime the chmod moved
	}
	if err != nil {
		return Identity{}, "", fmt.Errorf("seal %s: %w", path, err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return Identity{}, "", fmt.Errorf("seal %s: %w", path, err)
	}
	id, err := identify(f)
	return id, hex.EncodeToString(h.Sum(nil)), err
}

// Open opens the sealed file at path (never through a symlink) and checks
// that it still is the file want names: root's, not writable, and of the
// same Identity. The caller closes the file.
func Open(path string, want Identity) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open sealed image %s: %w", path, err)
	}
	if err := Check(f, want); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Current is the Identity of the sealed file at path as it is now; it
// refuses a file that is not a regular, root-owned, unwritable one.
func Current(path string) (Identity, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Identity{}, fmt.Errorf("open sealed image %s: %w", path, err)
	}
	defer f.Close()
	return identify(f)
}

// Of is the Identity of the open file f as it is now; it refuses a file
// that is not a regular, root-owned, unwritable one.
func Of(f *os.File) (Identity, error) { return identify(f) }

// Check checks the open file f against want (see Open).
func Check(f *os.File, want Identity) error {
	got, err := identify(f)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%w: identity %s, sealed as %s; fix: remove the image and import it again", ErrChanged, got, want)
	}
	return nil
}

// ProbePrefix starts the name of ProbeOverlay's working directory in the
// directory it is given.
const ProbePrefix = "sealed-probe-"

// Package regfile opens and reads files named by an untrusted or mistaken
// path, accepting only regular files of bounded size. A FIFO would block
// the reader until a writer appears (and hold it past a SIGTERM), /dev/zero
// would flood it, a terminal could become its controlling tty; each is
// refused by type before a byte is read, naming the type and the fix.
package regfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

var (
	// ErrNotRegular: the path names a directory, FIFO, device or socket.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: the file holds more bytes than its format allows.
	ErrTooLarge = errors.New("file too large")
)

// Open opens the regular file at path (following symlinks: the file they
// lead to must be regular) for reading, and refuses, wrapping ErrNotRegular,
// anything else, and, wrapping ErrTooLarge, a file over limit bytes.
//
// The path is stat'ed first, so a device is refused without being opened;
// then it is opened with O_NONBLOCK|O_NOCTTY, so that a FIFO swapped in
// meanwhile cannot block the open and a tty cannot become the controlling
// terminal, and the open fd is checked again. O_NONBLOCK is cleared
// before the file is returned; regular files never block on it anyway.
func Open(path string, limit int64) (*os.File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := check(path, fi, limit); err != nil {
		return nil, err
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	ofi, err := f.Stat()
	if err == nil {
		err = check(path, ofi, limit)
	}
	if err == nil {
		err = unix.SetNonblock(fd, false)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ReadFile returns the contents of the regular file at path, of at most
// limit bytes, with Open's checks. A file that grows past limit while it
// is read is refused too.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := Open(path, limit)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, &refusal{ErrTooLarge, fmt.Sprintf("%s grew past the limit of %d bytes while being read", path, limit)}
	}
	return data, nil
}

func check(path string, fi fs.FileInfo, limit int64) error {
	if !fi.Mode().IsRegular() {
		return &refusal{ErrNotRegular, fmt.Sprintf("%s is not a regular file but %s; fix: pass the path of a regular file (copy the content out of a pipe or device first)",
			path, typeName(fi.Mode()))}
	}
	if fi.Size() > limit {
		return &refusal{ErrTooLarge, fmt.Sprintf("%s is %d bytes; the limit is %d; fix: pass the intended file (no valid one is this large)",
			path, fi.Size(), limit)}
	}
	return nil
}

// refusal is a refused file: a message that names the path, the reason and
// the fix, classed by one of the sentinels.
type refusal struct {
	kind error
	msg  string
}

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return r.kind }

func typeName(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "of mode " + m.String()
}

// ErrNotSecret: a secret file is not root's alone (mode 0600, owner root).
var ErrNotSecret = errors.New("not a root-owned 0600 file")

// ErrLinkInPath: a component of a secret's path, a directory or the file
// itself, is a symbolic link. Errors wrapping it wrap unix.ELOOP too.
var ErrLinkInPath = errors.New("a symbolic link in the path")

// ReadSecret reads an operator's secret file as custodyd must: the whole
// path opened from the root without following a link in any component
// (ErrLinkInPath: a directory on the way replaced by a link would deliver
// another file), non-blocking (a FIFO cannot hold the reader), a regular
// file (ErrNotRegular), mode exactly 0600 and owned by root
// (ErrNotSecret), at most limit bytes (ErrTooLarge). The checks are made on
// the opened descriptor, so the file read is the file checked. Both the
// pack credentials and the phases' brokered credentials are read here.
func ReadSecret(path string, limit int64) ([]byte, error) {
	fd, err := openNoLinks(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, fmt.Errorf("%s: %w", path, ErrNotRegular)
	case st.Mode&0o7777 != 0o600:
		return nil, fmt.Errorf("%s has mode %04o, not 0600: %w", path, st.Mode&0o7777, ErrNotSecret)
	case st.Uid != 0:
		return nil, fmt.Errorf("%s is owned by uid %d, not root: %w", path, st.Uid, ErrNotSecret)
	}
	v, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(v)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes: %w", path, limit, ErrTooLarge)
	}
	return v, nil
}

// openNoLinks opens the absolute path with flags, walking it from "/" one
// component at a time, each directory opened O_PATH|O_DIRECTORY|O_NOFOLLOW
// beneath the one before and the last component opened O_NOFOLLOW: no
// link is followed anywhere, and what a component names cannot change
// between its check and its open, since each step holds the directory it
// came from.
func openNoLinks(path string, flags int) (int, error) {
	if !filepath.IsAbs(path) {
		return -1, fmt.Errorf("%s is not an absolute path; name the file from the root", path)
	}
	clean := filepath.Clean(path)
	dfd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /: %w", err)
	}
	parts := strings.Split(strings.TrimPrefix(clean, "/"), "/")
	at := "/"
	for i, name := range parts {
		last := i == len(parts)-1
		fl := unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if last {
			fl = flags | unix.O_NOFOLLOW
		}
		next, err := unix.Openat(dfd, name, fl, 0)
		if err != nil {
			err = linkRefusal(dfd, filepath.Join(at, name), path, err)
			unix.Close(dfd)
			return -1, err
		}
		unix.Close(dfd)
		dfd, at = next, filepath.Join(at, name)
	}
	return dfd, nil
}

// linkRefusal says why opening the component at (inside dfd) failed: a
// link names the component, the reason and the fix; anything else is the
// open's own error.
func linkRefusal(dfd int, at, path string, err error) error {
	var st unix.Stat_t
	if serr := unix.Fstatat(dfd, filepath.Base(at), &st, unix.AT_SYMLINK_NOFOLLOW); serr != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
		return &fs.PathError{Op: "open", Path: at, Err: err}
	}
	to, _ := os.Readlink(at)
	what := "its directory " + at
	if at == filepath.Clean(path) {
		what = "the file itself"
	}
	return fmt.Errorf("%s: %s is a symbolic link (to %q): %w: %w; custodyd follows no link anywhere in a secret's path, so name the path without links or put the directory itself in place of the link",
		path, what, to, ErrLinkInPath, unix.ELOOP)
}

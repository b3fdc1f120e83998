package procfs

import (
	"errors"
	"fmt"
	"syscall"
)

// maxPseudoFile bounds a pseudo-file read: no /proc or cgroup file custody
// reads comes near it, and a sandboxed process's mount table must not make
// the daemon allocate without bound.
const maxPseudoFile = 4 << 20

// ErrTooLarge is returned for a pseudo-file longer than maxPseudoFile.
var ErrTooLarge = errors.New("pseudo-file larger than the read limit")

// ReadFile reads a /proc or cgroup pseudo-file whole, as os.ReadFile does,
// in fewer system calls: such files report size 0 (so os.ReadFile's fstat
// buys nothing and it starts at 512 bytes, growing read by read), an
// os.File registers with the poller (an epoll_ctl that fails for these
// files) and gets a finalizer. Here the first read gets a buffer of
// sizeHint bytes, which most files fill in one read, and a read of 0 bytes
// ends it. Launches read several such files each.
func ReadFile(path string, sizeHint int) ([]byte, error) {
	return ReadFileAt(unixAtFDCWD, path, sizeHint)
}

// unixAtFDCWD and oPath are AT_FDCWD and O_PATH, which the syscall
// package does not name on every architecture (this package keeps to the
// standard library for the probe).
const (
	unixAtFDCWD = -0x64
	oPath       = 0x200000
)

// OpenDir opens the directory path as an O_PATH descriptor for ReadFileAt;
// close it with syscall.Close.
func OpenDir(path string) (int, error) {
	for {
		fd, err := syscall.Open(path, oPath|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return -1, fmt.Errorf("open %s: %w", path, err)
		}
		return fd, nil
	}
}

// ReadFileAt is ReadFile of name relative to the open directory dir (an
// O_PATH descriptor serves): reading several files of one /proc/<pid>
// walks its path once.
func ReadFileAt(dir int, name string, sizeHint int) ([]byte, error) {
	var fd int
	var err error
	for {
		fd, err = syscall.Openat(dir, name, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOCTTY, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	defer syscall.Close(fd)
	if sizeHint < 64 {
		sizeHint = 64
	}
	buf := make([]byte, 0, sizeHint)
	for {
		if len(buf) > maxPseudoFile {
			return nil, fmt.Errorf("read %s: %w (%d bytes)", name, ErrTooLarge, maxPseudoFile)
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

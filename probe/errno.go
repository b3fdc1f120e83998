package probe

import (
	"errors"
	"fmt"
	"syscall"
)

// errnoNames are the symbolic names of the errnos a probe attempt is likely
// to meet.
var errnoNames = map[syscall.Errno]string{
	syscall.EPERM:           "EPERM",
	syscall.ENOENT:          "ENOENT",
	syscall.ESRCH:           "ESRCH",
	syscall.EINTR:           "EINTR",
	syscall.EIO:             "EIO",
	syscall.EBADF:           "EBADF",
	syscall.ECHILD:          "ECHILD",
	syscall.EAGAIN:          "EAGAIN",
	syscall.ENOMEM:          "ENOMEM",
	syscall.EACCES:          "EACCES",
	syscall.EFAULT:          "EFAULT",
	syscall.EBUSY:           "EBUSY",
	syscall.EEXIST:          "EEXIST",
	syscall.EXDEV:           "EXDEV",
	syscall.ENODEV:          "ENODEV",
	syscall.ENOTDIR:         "ENOTDIR",
	syscall.EISDIR:          "EISDIR",
	syscall.EINVAL:          "EINVAL",
	syscall.EMFILE:          "EMFILE",
	syscall.EFBIG:           "EFBIG",
	syscall.ENOSPC:          "ENOSPC",
	syscall.EROFS:           "EROFS",
	syscall.EPIPE:           "EPIPE",
	syscall.ENOSYS:          "ENOSYS",
	syscall.EDQUOT:          "EDQUOT",
	syscall.ENOKEY:          "ENOKEY",
	syscall.EAFNOSUPPORT:    "EAFNOSUPPORT",
	syscall.EADDRNOTAVAIL:   "EADDRNOTAVAIL",
	syscall.ENETDOWN:        "ENETDOWN",
	syscall.ENETUNREACH:     "ENETUNREACH",
	syscall.ECONNRESET:      "ECONNRESET",
	syscall.ETIMEDOUT:       "ETIMEDOUT",
	syscall.ECONNREFUSED:    "ECONNREFUSED",
	syscall.EHOSTUNREACH:    "EHOSTUNREACH",
	syscall.EOPNOTSUPP:      "EOPNOTSUPP",
	syscall.EPROTONOSUPPORT: "EPROTONOSUPPORT",
}

// ErrnoName returns the symbolic name of the errno err wraps ("EROFS"),
// "ETIMEDOUT" for a timeout, or "" when err carries no errno.
func ErrnoName(err error) string {
	if err == nil {
		return ""
	}
	var no syscall.Errno
	if errors.As(err, &no) {
		if n, ok := errnoNames[no]; ok {
			return n
		}
		return fmt.Sprintf("errno(%d)", int(no))
	}
	var to interface{ Timeout() bool }
	if errors.As(err, &to) && to.Timeout() {
		return "ETIMEDOUT"
	}
	return ""
}

// attempt records the outcome of one operation.
func attempt(name, detail string, err error) Attempt {
	a := Attempt{Name: name, OK: err == nil, Detail: detail}
	if err != nil {
		a.Errno = ErrnoName(err)
		a.Error = err.Error()
	}
	return a
}

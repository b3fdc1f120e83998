package platform

import (
	"errors"

	"golang.org/x/sys/unix"
)

// ProbeOpenat2 proves openat2(2) with RESOLVE_NO_SYMLINKS by opening / with
// it.
func ProbeOpenat2() Fact {
	f := Fact{How: "openat2(\"/\", RESOLVE_NO_SYMLINKS)"}
	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		if errors.Is(err, unix.ENOSYS) {
			f.Detail = "the kernel has no openat2 (Linux < 5.6)"
		} else {
			f.Detail = err.Error()
		}
		return f
	}
	unix.Close(fd)
	f.OK = true
	return f
}

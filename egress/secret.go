package egress

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// ErrSecretFile: a credential's source file is refused.
var ErrSecretFile = errors.New("credential file refused")

// maxSecret bounds a credential file.
const maxSecret = 64 << 10

// ReadSecret reads a credential file as custodyd must: opened without
// following a link, a regular file, mode 0600, owned by root, bounded.
// It is called only when a run that uses the credential is prepared.
func ReadSecret(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: open %s without following links: %w; make it a root-owned 0600 regular file", ErrSecretFile, path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%w: stat %s: %w", ErrSecretFile, path, err)
	}
	var why string
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		why = "is not a regular file"
	case st.Mode&0o7777 != 0o600:
		why = fmt.Sprintf("has mode %04o, not 0600", st.Mode&0o7777)
	case st.Uid != 0:
		why = fmt.Sprintf("is owned by uid %d, not root", st.Uid)
	}
	if why != "" {
		return nil, fmt.Errorf("%w: %s %s; make it a root-owned 0600 regular file", ErrSecretFile, path, why)
	}
	v, err := io.ReadAll(io.LimitReader(f, maxSecret+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", ErrSecretFile, path, err)
	}
	if len(v) > maxSecret {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrSecretFile, path, maxSecret)
	}
	return v, nil
}

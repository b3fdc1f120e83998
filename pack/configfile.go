package pack

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// MaxConfigBytes caps a config file: configs are small settings files,
// and the runner keeps each one's bytes with the grant until up.
const MaxConfigBytes = 1 << 20

// ErrConfigFile: a config file cannot be read as pack content (it is
// missing, passes through a link, is not a regular file, or is too big).
var ErrConfigFile = errors.New("config file not readable as pack content")

// ReadConfig reads a file config's bytes beneath the pack's directory dir
// without following any link (openat2 RESOLVE_BENEATH and
// RESOLVE_NO_SYMLINKS): a link anywhere below dir, even one that stays
// inside, is refused, so what is read is the file the pack names.
func ReadConfig(dir, file string) ([]byte, error) {
	rel, err := filepath.Rel(dir, file)
	if err != nil || !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("%s is not inside the pack's directory %s: %w", file, dir, ErrConfigFile)
	}
	rootFD, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the pack's directory %s: %w (%w)", dir, err, ErrConfigFile)
	}
	defer unix.Close(rootFD)
	// O_NONBLOCK: a fifo put in its place must not hang the runner.
	fd, err := unix.Openat2(rootFD, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return nil, fmt.Errorf("%s passes through a link: %w", file, ErrConfigFile)
	case err != nil:
		return nil, fmt.Errorf("%s: %w (%w)", file, err, ErrConfigFile)
	}
	f := os.NewFile(uintptr(fd), file)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%s: %w (%w)", file, err, ErrConfigFile)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s is not a regular file: %w", file, ErrConfigFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w (%w)", file, err, ErrConfigFile)
	}
	if len(b) > MaxConfigBytes {
		return nil, fmt.Errorf("%s is more than %d bytes: %w", file, MaxConfigBytes, ErrConfigFile)
	}
	return b, nil
}

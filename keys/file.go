package keys

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/internal/randid"
	"github.com/custody-dev/custody/internal/regfile"
)

// maxKeyFile bounds what is read from a key file; a PEM P-256 key is
// a few hundred bytes.
const maxKeyFile = 64 << 10

// LoadOrCreate returns the signing key <dir>/<name>.key, creating it (and
// reporting created) if it does not exist, and makes sure <dir>/<name>.pub
// holds its public key.
//
// dir must already exist, must be a directory and not a symlink, must not be
// writable by group or others, and must be owned by the effective user or
// root; otherwise the error wraps [ErrInsecureDir]. Every file is opened
// relative to the directory, without following symlinks.
//
// A new key file is created with O_CREAT|O_EXCL|O_NOFOLLOW and mode 0600, so
// it is private from its first byte, and is synced with its directory before
// LoadOrCreate returns. An existing key file is refused, wrapping
// [ErrInsecureFile], if it is a symlink, is not a regular file, is not owned
// by the effective user, or has any group or other permission bit set. A key
// that is not P-256 wraps [ErrUnsupportedKey].
//
// The public key file (mode 0644) is written whenever a key is created and
// when it is missing; an existing public key file that does not match the
// private key is refused with [ErrKeyMismatch] rather than overwritten.
func LoadOrCreate(dir, name string) (s *Signer, created bool, err error) {
	if err := checkName(name); err != nil {
		return nil, false, err
	}
	d, err := openDir(dir)
	if err != nil {
		return nil, false, err
	}
	defer d.Close()
	fd := int(d.Fd())

	s, err = loadPrivate(d, name)
	if errors.Is(err, fs.ErrNotExist) {
		s, err = createPrivate(d, name)
		created = err == nil
		if errors.Is(err, fs.ErrExist) {
			// Another process created the key between our open and our
			// create: use its key.
			s, err = loadPrivate(d, name)
		}
	}
	if err != nil {
		return nil, false, err
	}
	if created {
		err = writePublic(d, name, s)
	} else {
		err = ensurePublic(d, name, s)
	}
	if err != nil {
		return nil, false, err
	}
	if err := unix.Fsync(fd); err != nil {
		return nil, false, fmt.Errorf("keys: sync %s: %w", dir, err)
	}
	return s, created, nil
}

// CreatePrivate creates a new signing key <dir>/<name>.key, private from its
// first byte as LoadOrCreate creates one, synced with its directory, and
// writes no public key file: a caller that stages a key in steps (a key
// rotation, which must be resumable after a crash at any point) writes it
// next with LoadOrCreate. An existing key wraps fs.ErrExist.
func CreatePrivate(dir, name string) (*Signer, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	d, err := openDir(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	s, err := createPrivate(d, name)
	if err != nil {
		return nil, err
	}
	if err := unix.Fsync(int(d.Fd())); err != nil {
		return nil, fmt.Errorf("keys: sync %s: %w", dir, err)
	}
	return s, nil
}

// LoadPrivate loads an existing <name>.key from dir with the checks
// LoadOrCreate makes, and writes nothing (no key, no public key file). A
// missing key wraps fs.ErrNotExist.
func LoadPrivate(dir, name string) (*Signer, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	d, err := openDir(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return loadPrivate(d, name)
}

// LoadPublic reads a P-256 public key from a PKIX PEM file, which must be a
// regular file (regfile.Open: a FIFO or device is refused, not read).
func LoadPublic(path string) (*Verifier, error) {
	f, err := regfile.Open(path, maxKeyFile)
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	defer f.Close()
	data, err := readLimited(f)
	if err != nil {
		return nil, fmt.Errorf("keys: read %s: %w", path, err)
	}
	v, err := ParsePublic(data)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return v, nil
}

// checkName refuses key names that are not a single plain path element.
func checkName(name string) error {
	if name == "" || len(name) > 128 || name[0] == '.' {
		return fmt.Errorf("keys: invalid key name %q: want 1-128 of [A-Za-z0-9._-], not starting with '.'", name)
	}
	for _, c := range []byte(name) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("keys: invalid key name %q: want 1-128 of [A-Za-z0-9._-], not starting with '.'", name)
		}
	}
	return nil
}

// openDir opens dir without following a final symlink and checks that it is
// a directory private enough to hold keys.
func openDir(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("keys: %s is a symlink: %w", dir, ErrInsecureDir)
	case errors.Is(err, unix.ENOTDIR):
		return nil, fmt.Errorf("keys: %s is not a directory: %w", dir, ErrInsecureDir)
	case err != nil:
		return nil, fmt.Errorf("keys: open key directory: %w", &fs.PathError{Op: "open", Path: dir, Err: err})
	}
	d := os.NewFile(uintptr(fd), dir)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		d.Close()
		return nil, fmt.Errorf("keys: stat %s: %w", dir, err)
	}
	euid := uint32(unix.Geteuid())
	switch {
	case st.Mode&0o022 != 0:
		err = fmt.Errorf("keys: %s has mode %04o, writable by group or others; fix: chmod go-w %s: %w", dir, st.Mode&0o7777, dir, ErrInsecureDir)
	case st.Uid != euid && st.Uid != 0:
		err = fmt.Errorf("keys: %s is owned by uid %d, not by uid %d or root: %w", dir, st.Uid, euid, ErrInsecureDir)
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// openIn opens name relative to d without following symlinks and without
// blocking on a fifo, and returns it with its stat.
func openIn(d *os.File, name string) (*os.File, *unix.Stat_t, error) {
	path := filepath.Join(d.Name(), name)
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, nil, fmt.Errorf("keys: %s is a symlink: %w", path, ErrInsecureFile)
	case err != nil:
		return nil, nil, fmt.Errorf("keys: %w", &fs.PathError{Op: "open", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(fd), path)
	st := new(unix.Stat_t)
	if err := unix.Fstat(fd, st); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("keys: stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, nil, fmt.Errorf("keys: %s is not a regular file: %w", path, ErrInsecureFile)
	}
	return f, st, nil
}

// loadPrivate loads <name>.key from d. A missing file wraps fs.ErrNotExist.
func loadPrivate(d *os.File, name string) (*Signer, error) {
	f, st, err := openIn(d, name+".key")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	euid := uint32(unix.Geteuid())
	switch {
	case st.Uid != euid:
		return nil, fmt.Errorf("keys: %s is owned by uid %d, not by uid %d: %w", f.Name(), st.Uid, euid, ErrInsecureFile)
	case st.Mode&0o077 != 0:
		return nil, fmt.Errorf("keys: %s has mode %04o, accessible to group or others; fix: chmod 0600 %s, then consider the key exposed and rotate it: %w",
			f.Name(), st.Mode&0o7777, f.Name(), ErrInsecureFile)
	}
	data, err := readLimited(f)
	if err != nil {
		return nil, fmt.Errorf("keys: read %s: %w", f.Name(), err)
	}
	s, err := parsePrivate(data)
	if err != nil {
		return nil, fmt.Errorf("keys: parse %s: %w", f.Name(), err)
	}
	return s, nil
}

// createPrivate generates a key and writes it to a new <name>.key in d. An
// existing file wraps fs.ErrExist.
func createPrivate(d *os.File, name string) (*Signer, error) {
	s, err := Generate()
	if err != nil {
		return nil, err
	}
	data, err := s.privatePEM()
	if err != nil {
		return nil, err
	}
	if err := createFile(d, name+".key", 0o600, data); err != nil {
		return nil, err
	}
	return s, nil
}

// ensurePublic writes <name>.pub if it is missing and otherwise checks that it
// holds the public key of s.
func ensurePublic(d *os.File, name string, s *Signer) error {
	f, _, err := openIn(d, name+".pub")
	if errors.Is(err, fs.ErrNotExist) {
		return writePublic(d, name, s)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := readLimited(f)
	if err != nil {
		return fmt.Errorf("keys: read %s: %w", f.Name(), err)
	}
	v, err := ParsePublic(data)
	if err != nil {
		return fmt.Errorf("%w (%s)", err, f.Name())
	}
	if v.id != s.ver.id {
		return fmt.Errorf("keys: %s holds %s but the private key is %s; fix: remove %s to have it rewritten: %w",
			f.Name(), v.id, s.ver.id, f.Name(), ErrKeyMismatch)
	}
	return nil
}

// writePublic atomically replaces <name>.pub in d with the public key of s.
func writePublic(d *os.File, name string, s *Signer) error {
	tmp := "." + name + ".pub." + randid.New(8) + ".tmp"
	if err := createFile(d, tmp, 0o644, s.PublicPEM()); err != nil {
		return err
	}
	if err := unix.Renameat(int(d.Fd()), tmp, int(d.Fd()), name+".pub"); err != nil {
		_ = unix.Unlinkat(int(d.Fd()), tmp, 0)
		return fmt.Errorf("keys: install %s: %w", filepath.Join(d.Name(), name+".pub"), err)
	}
	return nil
}

// createFile creates name in d with O_CREAT|O_EXCL|O_NOFOLLOW and exactly
// mode perm (whatever the umask), writes data and syncs it. On failure the
// partial file is removed.
func createFile(d *os.File, name string, perm uint32, data []byte) (err error) {
	path := filepath.Join(d.Name(), name)
	dfd := int(d.Fd())
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return fmt.Errorf("keys: %w", &fs.PathError{Op: "create", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(fd), path)
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("keys: close %s: %w", path, cerr)
		}
		if err != nil {
			_ = unix.Unlinkat(dfd, name, 0)
		}
	}()
	if err := unix.Fchmod(fd, perm); err != nil {
		return fmt.Errorf("keys: chmod %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("keys: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("keys: sync %s: %w", path, err)
	}
	return nil
}

func readLimited(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxKeyFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxKeyFile {
		return nil, fmt.Errorf("larger than %d bytes", maxKeyFile)
	}
	return data, nil
}

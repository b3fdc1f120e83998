// Package durable writes files so that a crash leaves either the old
// content or the new, whole, and synced: the one staging-file, fsync,
// rename and directory-fsync sequence custody's state files use.
package durable

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrDirSync reports a file renamed into place whose directory could not be
// synced: the new content is there but may not survive a crash.
var ErrDirSync = errors.New("directory not synced")

// WriteFile replaces path with data (mode perm): written to path.partial,
// synced, renamed over path, then path's directory synced. On any error
// before the rename the staging file is removed and path is untouched; an
// error after it wraps ErrDirSync.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".partial"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return errors.Join(err, os.Remove(tmp))
	}
	if err := SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("%w: %w", ErrDirSync, err)
	}
	return nil
}

// SyncDir fsyncs the directory dir, so renames and creations in it are
// durable.
func SyncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

package snapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/treehash"
)

// StagingPrefix starts the names of staging directories inside a store.
// Entries whose names start with it are work in progress, never results.
const StagingPrefix = ".staging-"

// PrepareStoreDir creates dir (mode 0700, with missing parents) if it is
// absent, and checks that it is fit to hold a content-addressed store: a
// real directory (not a symlink), owned by the effective user, and neither
// group- nor world-writable. It returns the absolute path of dir.
func PrepareStoreDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("store directory %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("creating store directory: %w", err)
	}
	fi, err := os.Lstat(abs)
	if err != nil {
		return "", fmt.Errorf("store directory: %w", err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return "", fmt.Errorf("store directory %s is a symlink", abs)
	case !fi.IsDir():
		return "", fmt.Errorf("store directory %s is not a directory", abs)
	case fi.Mode().Perm()&0o022 != 0:
		return "", fmt.Errorf("store directory %s is group- or world-writable (mode %#o)", abs, fi.Mode().Perm())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", fmt.Errorf("store directory %s: no owner information", abs)
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return "", fmt.Errorf("store directory %s is owned by uid %d, not the effective uid %d", abs, st.Uid, euid)
	}
	return abs, nil
}

// Stage builds a new entry of the content-addressed store directory dir: it
// creates a private (0700) staging directory inside dir, lets fill populate
// it and name its digest, and renames it atomically to dir/<hex of digest>.
// If that entry already exists (identical content, possibly published
// concurrently by another process), Stage reports existed and leaves the
// existing entry alone. The staging directory is discarded whenever it is not
// published, including when fill fails. Stage returns the entry's directory.
func Stage(dir string, fill func(staging string) (digest string, err error)) (final string, existed bool, err error) {
	staging, err := os.MkdirTemp(dir, StagingPrefix+"*")
	if err != nil {
		return "", false, fmt.Errorf("creating staging directory: %w", err)
	}
	defer func() {
		if err != nil || existed {
			_ = discard(staging)
		}
	}()
	digest, err := fill(staging)
	if err != nil {
		return "", false, err
	}
	hex, err := treehash.ParseDigest(digest)
	if err != nil {
		return "", false, err
	}
	final = filepath.Join(dir, hex)
	existed, err = publish(staging, final)
	return final, existed, err
}

// ReadRecord decodes the JSON file name of the entry for digest in the
// store directory dir into v and returns the entry's directory. An absent
// entry yields an error wrapping fs.ErrNotExist.
func ReadRecord(dir, digest, name string, v any) (string, error) {
	hex, err := treehash.ParseDigest(digest)
	if err != nil {
		return "", err
	}
	final := filepath.Join(dir, hex)
	js, err := os.ReadFile(filepath.Join(final, name))
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(js, v); err != nil {
		return "", fmt.Errorf("decoding %s: %w", filepath.Join(final, name), err)
	}
	return final, nil
}

// publish renames the staging directory to final atomically, unless final
// already exists: then it reports existed. Of concurrent publishers of the
// same final name exactly one succeeds and the others see existed.
func publish(staging, final string) (existed bool, err error) {
	err = unix.Renameat2(unix.AT_FDCWD, staging, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// The file system does not know RENAME_NOREPLACE. A plain rename
		// onto a non-empty directory fails with EEXIST or ENOTEMPTY.
		if _, lerr := os.Lstat(final); lerr == nil {
			return true, nil
		}
		err = unix.Rename(staging, final)
	}
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY):
		return true, nil
	default:
		return false, fmt.Errorf("publishing %s: %w", final, &os.LinkError{Op: "rename", Old: staging, New: final, Err: err})
	}
}

// discard removes a staging tree, including read-only directories a
// non-root process could not otherwise empty.
func discard(path string) error {
	if err := os.RemoveAll(path); err == nil {
		return nil
	}
	// Make directories writable (WalkDir never follows symlinks) and retry.
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("discarding %s: %w", path, err)
	}
	return nil
}

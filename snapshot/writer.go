package snapshot

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// ErrUnsafePath is returned when a path to be created is not a clean relative
// path, or when one of its parent components is not a real directory (for
// instance a symlink created earlier in the same tree).
var ErrUnsafePath = errors.New("unsafe path")

// implicitDirMode is the mode of parent directories that a Writer creates
// without being asked to.
const implicitDirMode fs.FileMode = 0o755

// Writer fills a private staging directory with a file tree without ever
// writing through a symlink: every parent component of a path it creates must
// be a real directory (it creates missing ones), new entries are created
// exclusively (an existing name is an error, never overwritten), and all
// access goes through an os.Root so nothing can land outside the directory.
//
// The directory must be private to the Writer while it works: the checks
// assume that nobody else creates entries in it. Entries are owned by 0:0
// when the process runs as root. Directories are created 0700 and get their
// final modes when the Writer is closed, so a read-only directory can still
// be filled. Writer methods are safe for concurrent use.
type Writer struct {
	root  *os.Root
	chown bool

	mu sync.RWMutex
	// dirs maps each directory the Writer created or checked (relative
	// path) to the mode it gets on Close.
	dirs map[string]fs.FileMode
}

// NewWriter returns a Writer that creates entries inside the existing
// directory dir.
func NewWriter(dir string) (*Writer, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot: opening staging directory: %w", err)
	}
	return &Writer{root: root, chown: os.Geteuid() == 0, dirs: map[string]fs.FileMode{}}, nil
}

// Mkdir creates the directory rel with the given permission bits (applied on
// Close). If rel is already a directory this Writer created, only its mode is
// updated.
func (w *Writer) Mkdir(rel string, mode fs.FileMode) error {
	if err := w.ensureParents(rel); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.dirs[rel]; ok {
		w.dirs[rel] = mode.Perm()
		return nil
	}
	if err := w.mkdirLocked(rel, mode.Perm()); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// Create creates the regular file rel, which must not exist. The file gets
// the permission bits mode (and owner 0:0 when running as root) when the
// returned writer is closed; the caller must close it.
func (w *Writer) Create(rel string, mode fs.FileMode) (io.WriteCloser, error) {
	if err := w.ensureParents(rel); err != nil {
		return nil, err
	}
	f, err := w.root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("snapshot: creating %s: %w", rel, err)
	}
	return &fileWriter{f: f, mode: mode.Perm(), chown: w.chown}, nil
}

// Symlink creates rel as a symlink to target. The target is not interpreted.
func (w *Writer) Symlink(rel, target string) error {
	if err := w.ensureParents(rel); err != nil {
		return err
	}
	if err := w.root.Symlink(target, rel); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if w.chown {
		if err := w.root.Lchown(rel, 0, 0); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
	}
	return nil
}

// Link creates rel as a hard link to existing, which must be a regular file
// already inside the tree.
func (w *Writer) Link(rel, existing string) error {
	if err := w.checkParents(existing); err != nil {
		return err
	}
	fi, err := w.root.Lstat(existing)
	if err != nil {
		return fmt.Errorf("snapshot: hard link %s: %w", rel, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("snapshot: hard link %s: target %s is not a regular file: %w", rel, existing, ErrUnsafePath)
	}
	if err := w.ensureParents(rel); err != nil {
		return err
	}
	if err := w.root.Link(existing, rel); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// Close gives every directory its final mode, deepest first, and releases
// the Writer. It must be called even after a failure.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	dirs := make([]string, 0, len(w.dirs))
	for d := range w.dirs {
		dirs = append(dirs, d)
	}
	// Children before parents, so a parent is still writable while its
	// children change (this matters when not running as root).
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	var errs []error
	for _, d := range dirs {
		if err := w.root.Chmod(d, w.dirs[d]); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, w.root.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("snapshot: finishing staging tree: %w", err)
	}
	return nil
}

// ensureParents makes every parent component of rel a real directory,
// creating missing ones.
func (w *Writer) ensureParents(rel string) error {
	return w.parents(rel, true)
}

// checkParents checks that every parent component of rel is a real
// directory.
func (w *Writer) checkParents(rel string) error {
	return w.parents(rel, false)
}

func (w *Writer) parents(rel string, create bool) error {
	if !fs.ValidPath(rel) || rel == "." {
		return fmt.Errorf("snapshot: %q is not a clean relative path: %w", rel, ErrUnsafePath)
	}
	dir := path.Dir(rel)
	if dir == "." {
		return nil
	}
	w.mu.RLock()
	_, ok := w.dirs[dir]
	w.mu.RUnlock()
	if ok {
		return nil
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	// Check each prefix in order, so that each Lstat resolves only
	// components already known to be real directories.
	for i := 0; i <= len(dir); i++ {
		if i < len(dir) && dir[i] != '/' {
			continue
		}
		p := dir[:i]
		if _, ok := w.dirs[p]; ok {
			continue
		}
		fi, err := w.root.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist) && create:
			if err := w.mkdirLocked(p, implicitDirMode); err != nil {
				return fmt.Errorf("snapshot: creating parent of %s: %w", rel, err)
			}
		case err != nil:
			return fmt.Errorf("snapshot: parent of %s: %w", rel, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("snapshot: %s: path component %s is a symlink: %w", rel, p, ErrUnsafePath)
		case !fi.IsDir():
			return fmt.Errorf("snapshot: %s: path component %s is not a directory: %w", rel, p, ErrUnsafePath)
		default:
			w.dirs[p] = fi.Mode().Perm()
		}
	}
	return nil
}

// mkdirLocked creates the directory p (private until Close) and records its
// final mode. w.mu must be held.
func (w *Writer) mkdirLocked(p string, mode fs.FileMode) error {
	if err := w.root.Mkdir(p, 0o700); err != nil {
		return err
	}
	if w.chown {
		if err := w.root.Lchown(p, 0, 0); err != nil {
			return err
		}
	}
	w.dirs[p] = mode
	return nil
}

// fileWriter is a file being written by a Writer.
type fileWriter struct {
	f     *os.File
	mode  fs.FileMode
	chown bool
}

func (fw *fileWriter) Write(p []byte) (int, error) { return fw.f.Write(p) }

// Close sets the owner and mode, then closes the file.
func (fw *fileWriter) Close() error {
	var errs []error
	if fw.chown {
		errs = append(errs, fw.f.Chown(0, 0))
	}
	errs = append(errs, fw.f.Chmod(fw.mode), fw.f.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("snapshot: finishing %s: %w", fw.f.Name(), err)
	}
	return nil
}

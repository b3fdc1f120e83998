package treehash

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
)

// ErrAvoided is returned when a walk meets an object that Options.Avoid
// names, by whatever path it was reached.
var ErrAvoided = errors.New("the tree holds an object it must not")

// Identity is a file system object's device and inode: the same whichever
// path reaches the object, through a bind mount or a hard link.
type Identity struct{ Dev, Ino uint64 }

// Identities maps each identity a walk must avoid to what that object is,
// for the refusal's message.
type Identities map[Identity]string

// maxAvoidEntries bounds IdentitiesOf: the trees it records are acceptance
// material, not whole work trees.
const maxAvoidEntries = 1 << 20

// IdentitiesOf records the identity of every directory, regular file and
// symlink in each of roots, the roots themselves included (a root spelled
// through a symlinked prefix is resolved first). A walk given them as
// Options.Avoid then refuses a tree that reaches any of that material by
// another path: a bind mount of a root, of a directory inside one or of a
// single file, or a hard link. It fails, so that a caller fails closed,
// when a root that exists cannot be read whole or holds more than 2^20 entries.
func IdentitiesOf(ctx context.Context, roots []string) (Identities, error) {
	ids := Identities{}
	for _, root := range roots {
		real, err := filepath.EvalSymlinks(root)
		if errors.Is(err, fs.ErrNotExist) {
			continue // no material there to be reached (a later walk looks again)
		}
		if err != nil {
			return nil, fmt.Errorf("treehash: resolve %s: %w", root, err)
		}
		err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			st, ok := info.Sys().(*syscall.Stat_t)
			if !ok {
				return fmt.Errorf("%s: no device and inode", p)
			}
			if len(ids) >= maxAvoidEntries {
				return fmt.Errorf("more than %d entries: %w", maxAvoidEntries, ErrTooLarge)
			}
			what := root
			if rel, _ := filepath.Rel(real, p); rel != "." {
				what = root + "'s " + rel
			}
			ids[Identity{Dev: uint64(st.Dev), Ino: st.Ino}] = what
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("treehash: record the identities in %s: %w", root, err)
		}
	}
	return ids, nil
}

// AvoidedError is the refusal of an object Options.Avoid names. Its
// message names only the walked path: the refusal goes to the submitter,
// who must not learn the names inside the material avoided. What says
// which, for an operator's log.
type AvoidedError struct {
	Path string
	What string
}

func (e *AvoidedError) Error() string {
	return e.Path + " is material the walk must not read (by device and inode), reached by another path"
}

func (e *AvoidedError) Unwrap() error { return ErrAvoided }

// avoided refuses abs when its identity (as lstat saw it) is one that
// Options.Avoid names.
func (w *walker) avoided(abs string, dev, ino uint64) error {
	if what, ok := w.opts.Avoid[Identity{Dev: dev, Ino: ino}]; ok {
		return &AvoidedError{Path: abs, What: fmt.Sprintf("%s (device %d, inode %d)", what, dev, ino)}
	}
	return nil
}

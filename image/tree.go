package image

import (
	"io/fs"
	"os"

	securejoin "github.com/cyphar/filepath-securejoin"
)

// TreeFS reads a stored rootfs as a container sees it: every symlink,
// absolute ones included, resolves within the tree, never outside it (an
// os.Root refuses an absolute symlink, which images are full of, such as
// /bin/cc -> /usr/bin/gcc). The tree is immutable once stored, so resolving
// a name and then opening it races with nothing custody allows.
func TreeFS(rootfs string) fs.FS { return treeFS(rootfs) }

type treeFS string

func (t treeFS) resolve(op, name string) (string, error) {
	if !fs.ValidPath(name) {
		return "", &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	p, err := securejoin.SecureJoin(string(t), name)
	if err != nil {
		return "", &fs.PathError{Op: op, Path: name, Err: err}
	}
	return p, nil
}

// Open opens name, resolved within the tree.
func (t treeFS) Open(name string) (fs.File, error) {
	p, err := t.resolve("open", name)
	if err != nil {
		return nil, err
	}
	return os.Open(p)
}

// Stat stats name, resolved within the tree.
func (t treeFS) Stat(name string) (fs.FileInfo, error) {
	p, err := t.resolve("stat", name)
	if err != nil {
		return nil, err
	}
	if p == string(t) {
		// The root itself, which may be named by a mount's descriptor
		// (/proc/self/fd/N, a link to it): never a link of the tree.
		return os.Stat(p)
	}
	return os.Lstat(p) // SecureJoin resolved every link: a link left is a loop or dangling
}

package image

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/treehash"
)

// imageDigest is an image's digest: the tree digest when every entry is owned
// by 0:0, and otherwise "sha256:" and the hex SHA-256 of the tree's
// manifest (the treehash format) followed by one line per entry not owned
// by 0:0, sorted by path:
//
//	owner <uid>:<gid> <path>
//
// with path written with strconv.Quote, as in the manifest. So two imports
// of one tree with different owners are two images, and a grant that binds
// the digest binds the owners too, while an image all of whose files are
// root's keeps the digest of its tree (a directory import's).
func imageDigest(tree *treehash.Tree, owners []Owner) string {
	if len(owners) == 0 {
		return tree.Digest
	}
	h := sha256.New()
	h.Write(treehash.Manifest(tree.Entries))
	line := make([]byte, 0, 256)
	for _, o := range sortedOwners(owners) {
		line = append(line[:0], "owner "...)
		line = strconv.AppendInt(line, int64(o.UID), 10)
		line = append(line, ':')
		line = strconv.AppendInt(line, int64(o.GID), 10)
		line = append(line, ' ')
		line = strconv.AppendQuote(line, o.Path)
		line = append(line, '\n')
		h.Write(line)
	}
	return treehash.DigestPrefix + hex.EncodeToString(h.Sum(nil))
}

func sortedOwners(owners []Owner) []Owner {
	if slices.IsSortedFunc(owners, compareOwner) {
		return owners
	}
	owners = slices.Clone(owners)
	slices.SortFunc(owners, compareOwner)
	return owners
}

func compareOwner(x, y Owner) int { return strings.Compare(x.Path, y.Path) }

// ownersOf lists the entries under root not owned by 0:0, as they are on
// disk, sorted by path. Reading them back (rather than trusting the
// headers that set them) gives hard links the owner their shared inode
// really has.
func ownersOf(root string) ([]Owner, error) {
	owners := []Owner{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if st.Uid == 0 && st.Gid == 0 {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		owners = append(owners, Owner{Path: filepath.ToSlash(rel), UID: int(st.Uid), GID: int(st.Gid)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading owners: %w", err)
	}
	slices.SortFunc(owners, compareOwner)
	return owners, nil
}

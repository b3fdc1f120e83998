package image

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/treehash"
)

// verified remembers, per image digest, the metadata fingerprint of the
// rootfs as it was when its content last hashed to the digest.
type verified struct {
	mu sync.Mutex
	fp map[string][sha256.Size]byte
}

// Verify re-derives that the stored rootfs of digest still is that content.
// The first time, and whenever anything in the tree changed, it re-hashes
// every byte. Otherwise a metadata walk suffices: any write to a file, and
// any change of its name, mode or owner, moves its change time (ctime),
// which no caller can set back, and a replaced file has another inode. So
// while every entry's path, type, mode, size, inode and change time are
// what they were when the content last hashed to digest, so is the content.
// The walk costs lstat per entry instead of a read of every byte. The
// record's Config is re-derived from the kept config blob every time
// (ErrConfigChanged when it differs): it is small.
func (s *Store) Verify(ctx context.Context, digest string) (*Image, error) {
	img, err := s.Get(digest)
	if err != nil {
		return nil, err
	}
	if err := s.verifyConfig(img); err != nil {
		return nil, err
	}
	before, err := fingerprint(img.Rootfs)
	if err != nil {
		return nil, fmt.Errorf("verify image %s: %w", digest, err)
	}
	s.seen.mu.Lock()
	known, ok := s.seen.fp[digest]
	s.seen.mu.Unlock()
	if ok && known == before {
		return img, nil
	}
	tree, err := treehash.Dir(ctx, img.Rootfs, treehash.Options{})
	if err != nil {
		return nil, fmt.Errorf("verify image %s: %w", digest, err)
	}
	if err := checkDigest(img, tree); err != nil {
		return nil, fmt.Errorf("image %s: %w", digest, err)
	}
	// Only a fingerprint that held across the hash vouches for it.
	if after, err := fingerprint(img.Rootfs); err == nil && after == before {
		s.seen.mu.Lock()
		if s.seen.fp == nil {
			s.seen.fp = map[string][sha256.Size]byte{}
		}
		s.seen.fp[digest] = before
		s.seen.mu.Unlock()
	}
	return img, nil
}

// fingerprint digests the metadata of every entry under root: directories
// and files by their stat, symlinks by name (see below). Entries are
// stat'ed relative to their open parent directory (no path walk per entry)
// and visited in name order.
func fingerprint(root string) ([sha256.Size]byte, error) {
	h := sha256.New()
	var out [sha256.Size]byte
	var st unix.Stat_t
	if err := unix.Lstat(root, &st); err != nil {
		return out, err
	}
	if err := fingerprintDir(h, root, "", &st); err != nil {
		return out, err
	}
	copy(out[:], h.Sum(nil))
	return out, nil
}

func fingerprintDir(h hash.Hash, path, rel string, st *unix.Stat_t) error {
	record(h, rel, st)
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	defer d.Close()
	ents, err := d.ReadDir(-1)
	if err != nil {
		return err
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	fd := int(d.Fd())
	for _, e := range ents {
		name := e.Name()
		crel := name
		if rel != "" {
			crel = rel + "/" + name
		}
		// A symlink cannot change in place: replacing or retargeting it
		// changes its directory's mtime and ctime, recorded above. So its
		// name and type suffice, and the image's hundreds of applet links
		// cost no stat.
		if e.Type()&fs.ModeSymlink != 0 {
			h.Write([]byte(crel))
			h.Write([]byte{0, 'l'})
			continue
		}
		var cst unix.Stat_t
		if err := unix.Fstatat(fd, name, &cst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(path, name), err)
		}
		if cst.Mode&unix.S_IFMT == unix.S_IFDIR {
			if err := fingerprintDir(h, filepath.Join(path, name), crel, &cst); err != nil {
				return err
			}
			continue
		}
		record(h, crel, &cst)
	}
	return nil
}

// record adds one entry: its path, type and mode, size, inode, device,
// owner and change time (and mtime's nanoseconds).
func record(h hash.Hash, rel string, st *unix.Stat_t) {
	var rec [8 * 8]byte
	h.Write([]byte(rel))
	h.Write([]byte{0})
	for i, v := range []uint64{uint64(st.Mode), uint64(st.Size), st.Ino, st.Dev, uint64(st.Uid)<<32 | uint64(st.Gid),
		uint64(st.Ctim.Sec), uint64(st.Ctim.Nsec), uint64(st.Mtim.Nsec)} {
		binary.LittleEndian.PutUint64(rec[i*8:], v)
	}
	h.Write(rec[:])
}

// checkDigest checks that the rootfs of img, whose tree hashed to tree,
// with its owners on disk, still has the image's digest (imageDigest) and the
// owners its record lists. A record written before the image digest
// covered owners has its tree's digest whatever its owners; its owners
// are checked as they were then (checkOwners).
func checkDigest(img *Image, tree *treehash.Tree) error {
	if img.Digest == tree.Digest && len(img.IDs) > 0 {
		return checkOwners(img)
	}
	owners, err := ownersOf(img.Rootfs)
	if err != nil {
		return err
	}
	if got := imageDigest(tree, owners); got != img.Digest {
		return fmt.Errorf("stored rootfs now hashes to %s with its owners on disk; fix: remove the image and import it again", got)
	}
	if !slices.Equal(owners, sortedOwners(img.IDs)) {
		return fmt.Errorf("the record lists other owners than the rootfs has; fix: remove the image and import it again")
	}
	return nil
}

// checkOwners checks the owners on disk of an image whose digest does not
// cover them: each entry is the owner img.IDs gives it, or 0:0 (the owner
// of every entry of an image imported before owners were applied).
func checkOwners(img *Image) error {
	want := make(map[string]Owner, len(img.IDs))
	for _, o := range img.IDs {
		want[o.Path] = o
	}
	return filepath.WalkDir(img.Rootfs, func(p string, _ fs.DirEntry, err error) error {
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
		rel, err := filepath.Rel(img.Rootfs, p)
		if err != nil {
			return err
		}
		if o, ok := want[filepath.ToSlash(rel)]; !ok || uint32(o.UID) != st.Uid || uint32(o.GID) != st.Gid {
			return fmt.Errorf("%s is owned by %d:%d on disk, which the image does not give it; fix: remove the image and import it again", rel, st.Uid, st.Gid)
		}
		return nil
	})
}

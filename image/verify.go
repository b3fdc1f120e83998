package image

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"syscall"

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
// The walk costs lstat per entry instead of a read of every byte.
func (s *Store) Verify(ctx context.Context, digest string) (*Image, error) {
	img, err := s.Get(digest)
	if err != nil {
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
	if tree.Digest != digest {
		return nil, fmt.Errorf("image %s: stored rootfs now hashes to %s", digest, tree.Digest)
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

// fingerprint digests the metadata of every entry under root.
func fingerprint(root string) ([sha256.Size]byte, error) {
	h := sha256.New()
	var rec [8 * 8]byte
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat data", p)
		}
		rel, _ := filepath.Rel(root, p)
		h.Write([]byte(rel))
		h.Write([]byte{0})
		for i, v := range []uint64{uint64(st.Mode), uint64(st.Size), st.Ino, st.Dev, uint64(st.Uid)<<32 | uint64(st.Gid),
			uint64(st.Ctim.Sec), uint64(st.Ctim.Nsec), uint64(st.Mtim.Nsec)} {
			binary.LittleEndian.PutUint64(rec[i*8:], v)
		}
		h.Write(rec[:])
		return nil
	})
	var out [sha256.Size]byte
	if err != nil {
		return out, err
	}
	copy(out[:], h.Sum(nil))
	return out, nil
}

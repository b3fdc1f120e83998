// Package snapshot keeps immutable, content-addressed copies of input trees.
//
// Take digests a source file or directory, builds its snapshot in a staging
// directory inside the store as hard links to the store's objects (copying
// in, and checking against the digest, only the files whose content the
// store lacks), makes it read-only and publishes it by an atomic rename
// under its digest. The store layout is
//
//	<dir>/<hex>/data       the tree, or the file for a single-file source,
//	                       its files hard links to objects
//	<dir>/<hex>/tree.json  the treehash.Tree of data
//	<dir>/.objects/<sha256>.r|.x  file contents by digest, 0444 or 0555
//
// where <hex> is the hex part of the treehash digest. Files are 0444 (0555 if
// the source had any execute bit), directories 0555, owned by root when the
// store runs as root; the digest records these modes, so Verify can re-hash
// the stored copy and compare. Identical content is stored once: a Take whose
// digest is already present verifies the stored copy and reuses it.
//
// The package also provides the pieces other content-addressed stores share:
// Copy, Writer (safe creation of a tree in a staging directory),
// PrepareStoreDir, Stage and ReadRecord.
package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/treehash"
)

// ErrNotFound is returned by Get for a digest the store does not hold.
var ErrNotFound = errors.New("snapshot not found")

// ErrCorrupt is returned when a stored copy no longer matches its digest.
var ErrCorrupt = errors.New("stored snapshot does not match its digest")

const (
	dataName = "data"
	treeName = "tree.json"
)

// Store is a directory of snapshots. Its methods are safe for concurrent
// use, also by several processes sharing the directory.
type Store struct {
	dir string
	// index, if set, lets walks of a root already walked read only the
	// files that changed since (see Indexes).
	index *Indexes
	// mu is held shared by takes and exclusively by Prune, which must not
	// remove an object a take is linking.
	mu sync.RWMutex
	// holds counts, by hex digest, the takes of each snapshot not yet
	// released: Prune keeps those.
	holdMu sync.Mutex
	holds  map[string]int
	// objects holds each object's identity and change times as this
	// process last wrote, hashed or linked it (checkObjects).
	objMu   sync.Mutex
	objects map[string]objectStat
}

// Snapshot is a stored, read-only copy of an input tree.
type Snapshot struct {
	// Digest is the treehash digest of the stored copy.
	Digest string
	// Path is the stored copy: a directory, or a file for a single-file
	// source.
	Path string
	// Tree describes the stored copy.
	Tree *treehash.Tree
}

// New opens the store in dir, creating dir with mode 0700 if it is absent.
// It refuses a dir that is a symlink, is not owned by the effective user, or
// is group- or world-writable.
func New(dir string) (*Store, error) {
	abs, err := PrepareStoreDir(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return &Store{dir: abs}, nil
}

// UseIndex keeps the digests of the files this store's walks read in the
// index directory dir (see Indexes), for the inputs it digests and for its
// own stored copies: an unchanged tree is then re-derived from its files'
// identities and change times instead of re-read. dir must be the
// runner's own, outside any input.
func (s *Store) UseIndex(dir string) error {
	x, err := OpenIndexes(dir)
	if err != nil {
		return err
	}
	s.index = x
	return nil
}

// Digest is the package's Digest of src through the store's index: the
// tree Take would store for src, reading only the files that changed
// since src was last walked. Grant issue and launch both derive an
// input's digest here.
func (s *Store) Digest(ctx context.Context, src string, limits treehash.Options) (tree *treehash.Tree, err error) {
	name := indexRoot(src, limits.Beneath)
	if limits.IndexName != "" {
		name = limits.IndexName
	}
	err = s.index.walk(name, func(idx treehash.Index) error {
		limits.Index = idx
		tree, err = Digest(ctx, src, limits)
		return err
	})
	return tree, err
}

// indexRoot names the index of a walk of src below beneath.
func indexRoot(src, beneath string) string {
	return filepath.Clean(beneath) + "\x00" + filepath.Clean(src)
}

// Take copies src (a file or a directory) into the store and returns its
// snapshot. Symlinks in src are copied as symlinks and never followed;
// device nodes, fifos and sockets are refused. limits.MaxBytes and
// limits.MaxEntries are enforced during the copy (treehash.ErrTooLarge).
//
// If the store already holds the same content, the stored copy is verified
// and returned instead. A directory holding only the file x and the single
// file x have the same digest but different layouts; Take refuses to reuse
// one for the other.
func (s *Store) Take(ctx context.Context, src string, limits treehash.Options) (*Snapshot, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	// Unchanged content already stored is found from the index alone:
	// nothing is copied, and only what moved is read.
	tree, snap, err := s.reuse(ctx, src, limits)
	if err != nil || snap != nil {
		return snap, err
	}
	return s.copyIn(ctx, src, limits, tree)
}

// TakeTree is Take for a src whose tree the caller has just taken with
// Digest (a launch, right after re-deriving the digests its grant binds):
// when the store holds tree's digest in src's layout, the stored copy is
// verified and returned without walking src again; otherwise the snapshot
// is built from tree, copying in only the files the store lacks, each
// checked against tree (a file of src that changed since fails the take).
//
// ahead, if set, is a verification of the stored copy started before
// tree was taken (VerifyAhead): when it verified tree's digest and the
// stored copy is still the one it walked, the take uses its result
// instead of walking the stored copy again.
func (s *Store) TakeTree(ctx context.Context, src string, tree *treehash.Tree, limits treehash.Options, ahead *Ahead) (*Snapshot, error) {
	if snap := ahead.result(tree.Digest); snap != nil {
		s.mu.RLock()
		defer s.mu.RUnlock()
		if ahead.stillHeld(src) {
			s.used(filepath.Dir(snap.Path))
			return snap, nil
		}
	} else {
		s.mu.RLock()
		defer s.mu.RUnlock()
	}
	snap, err := s.held(ctx, src, tree.Digest)
	if err == nil || !errors.Is(err, ErrNotFound) {
		return snap, err
	}
	return s.copyIn(ctx, src, limits, tree)
}

// held returns the verified stored snapshot of digest, when the store
// holds it in src's layout (file or directory), or an error wrapping
// ErrNotFound.
func (s *Store) held(ctx context.Context, src, digest string) (*Snapshot, error) {
	hex, err := treehash.ParseDigest(digest)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	data := filepath.Join(s.dir, hex, dataName)
	fi, err := os.Lstat(data)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("snapshot %s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", digest, err)
	}
	if fi.Mode().IsRegular() != isRegular(src) {
		return nil, fmt.Errorf("snapshot %s: held in the other layout (file or directory): %w", digest, ErrNotFound)
	}
	snap := &Snapshot{Digest: digest, Path: data}
	if snap.Tree, err = s.verified(ctx, snap); err != nil {
		return nil, err
	}
	s.used(filepath.Dir(data))
	return snap, nil
}

// Ahead is a verification of a stored snapshot that runs while its
// caller does something else: a launch verifies the stored copy of the
// digest its grant binds while it re-derives that digest where the input
// is, so the two walks share the machine instead of following each
// other. Its result is used (TakeTree) only for the digest it verified
// and only while the stored copy is the very directory it walked: one
// removed, or put back by another take, since is verified again.
type Ahead struct {
	digest string
	cancel context.CancelFunc
	done   chan struct{}
	// Set before done closes: the verified snapshot and the identity of
	// its data root as the walk checked it, or the error.
	snap *Snapshot
	id   treehash.Identity
	err  error
}

// VerifyAhead starts verifying the stored copy of digest (as TakeTree
// would) and returns at once. Stop it when its result will not be used.
func (s *Store) VerifyAhead(ctx context.Context, digest string) *Ahead {
	ctx, cancel := context.WithCancel(ctx)
	a := &Ahead{digest: digest, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		s.mu.RLock()
		defer s.mu.RUnlock()
		a.snap, a.id, a.err = s.verifyStored(ctx, digest)
	}()
	return a
}

// Stop cancels the verification if it still runs and waits for it to
// end. It is safe on a nil Ahead and more than once.
func (a *Ahead) Stop() {
	if a == nil {
		return
	}
	a.cancel()
	<-a.done
}

// result waits for the verification and returns its snapshot when it
// verified digest, else nil.
func (a *Ahead) result(digest string) *Snapshot {
	if a == nil || a.digest != digest {
		return nil
	}
	<-a.done
	if a.err != nil {
		return nil
	}
	return a.snap
}

// stillHeld reports whether the verified stored copy is still the one
// the store names, in src's layout (file or directory). The caller holds
// the store's lock shared, so Prune cannot remove it from here on.
func (a *Ahead) stillHeld(src string) bool {
	var st unix.Stat_t
	if unix.Lstat(a.snap.Path, &st) != nil || uint64(st.Dev) != a.id.Dev || st.Ino != a.id.Ino {
		return false
	}
	return (st.Mode&unix.S_IFMT == unix.S_IFREG) == isRegular(src)
}

// verifyStored verifies the stored copy of digest by its path, checking
// that the walk's root is the object lstat saw first, whose identity it
// returns.
func (s *Store) verifyStored(ctx context.Context, digest string) (*Snapshot, treehash.Identity, error) {
	hex, err := treehash.ParseDigest(digest)
	if err != nil {
		return nil, treehash.Identity{}, fmt.Errorf("snapshot: %w", err)
	}
	data := filepath.Join(s.dir, hex, dataName)
	var st unix.Stat_t
	if err := unix.Lstat(data, &st); err != nil {
		return nil, treehash.Identity{}, fmt.Errorf("snapshot %s: %w", digest, &fs.PathError{Op: "lstat", Path: data, Err: err})
	}
	id := treehash.Identity{Dev: uint64(st.Dev), Ino: st.Ino}
	snap := &Snapshot{Digest: digest, Path: data}
	if snap.Tree, err = s.verifiedAt(ctx, snap, &id); err != nil {
		return nil, treehash.Identity{}, err
	}
	return snap, id, nil
}

// copyIn copies src into the store (or finds the copy already there) and
// returns its snapshot.
func (s *Store) copyIn(ctx context.Context, src string, limits treehash.Options, tree *treehash.Tree) (*Snapshot, error) {
	if tree == nil {
		var err error
		if tree, err = s.Digest(ctx, src, limits); err != nil {
			return nil, err
		}
	}
	single := isRegular(src)
	final, existed, err := Stage(s.dir, func(staging string) (string, error) {
		if err := s.linkTree(ctx, src, staging, tree, single); err != nil {
			return "", err
		}
		js, err := json.Marshal(tree)
		if err != nil {
			return "", fmt.Errorf("encoding tree of %s: %w", src, err)
		}
		if err := os.WriteFile(filepath.Join(staging, treeName), js, 0o444); err != nil {
			return "", err
		}
		return tree.Digest, os.Chmod(staging, readOnlyDir)
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if !existed {
		s.used(final)
		return &Snapshot{Digest: tree.Digest, Path: filepath.Join(final, dataName), Tree: tree}, nil
	}

	// Content-addressed reuse: the staging copy was discarded.
	snap, err := s.Get(tree.Digest)
	if err != nil {
		return nil, err
	}
	if single != isRegular(snap.Path) {
		return nil, fmt.Errorf("snapshot %s: %s and the stored copy have the same digest but one is a single file and the other a directory", tree.Digest, src)
	}
	if err := s.Verify(ctx, snap); err != nil {
		return nil, err
	}
	s.used(final)
	return snap, nil
}

// Reuse returns the stored snapshot of src's content without copying
// anything, when the store already holds it: src is digested where it is
// and the stored copy is re-hashed against that digest. ok is false, and
// nothing was written, when the store does not hold the content (or holds
// it in the other layout, file or directory); Take it then. For content
// the store may hold, this reads src once instead of staging a copy; for
// new content, Take after it reads src twice.
func (s *Store) Reuse(ctx context.Context, src string, limits treehash.Options) (snap *Snapshot, ok bool, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, snap, err = s.reuse(ctx, src, limits)
	return snap, snap != nil, err
}

// reuse is Reuse, returning the digest it took of src too.
func (s *Store) reuse(ctx context.Context, src string, limits treehash.Options) (*treehash.Tree, *Snapshot, error) {
	tree, err := s.Digest(ctx, src, limits)
	if err != nil {
		return nil, nil, err
	}
	snap, err := s.held(ctx, src, tree.Digest)
	if errors.Is(err, ErrNotFound) {
		return tree, nil, nil
	}
	return tree, snap, err
}

// Get returns the stored snapshot with the given digest, or an error wrapping
// ErrNotFound. It does not re-hash the copy; see Verify.
func (s *Store) Get(digest string) (*Snapshot, error) {
	var tree treehash.Tree
	final, err := ReadRecord(s.dir, digest, treeName, &tree)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("snapshot %s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", digest, err)
	}
	if tree.Digest != digest {
		return nil, fmt.Errorf("snapshot %s: %s records digest %s: %w", digest, treeName, tree.Digest, ErrCorrupt)
	}
	data := filepath.Join(final, dataName)
	if _, err := os.Lstat(data); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", digest, err)
	}
	return &Snapshot{Digest: digest, Path: data, Tree: &tree}, nil
}

// Verify re-hashes the stored copy of snap (found by its digest, in this
// store) and returns an error wrapping ErrCorrupt if it no longer matches the
// digest, for instance because the store was tampered with.
func (s *Store) Verify(ctx context.Context, snap *Snapshot) error {
	_, err := s.verified(ctx, snap)
	return err
}

// verified is Verify, returning the tree the stored copy hashes to.
func (s *Store) verified(ctx context.Context, snap *Snapshot) (*treehash.Tree, error) {
	return s.verifiedAt(ctx, snap, nil)
}

// verifiedAt is verified, with the walk's root required to be root when
// root is set.
func (s *Store) verifiedAt(ctx context.Context, snap *Snapshot, root *treehash.Identity) (*treehash.Tree, error) {
	hex, err := treehash.ParseDigest(snap.Digest)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	data := filepath.Join(s.dir, hex, dataName)
	var got *treehash.Tree
	err = s.index.walk(indexRoot(data, s.dir), func(idx treehash.Index) error {
		got, err = treehash.Dir(ctx, data, treehash.Options{Index: idx, Root: root})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: verifying: %w", snap.Digest, err)
	}
	if isRegular(data) && len(got.Entries) == 1 {
		// A single file is stored as data but was hashed under its own
		// base name, which the recorded tree keeps. A tampered name
		// changes the digest like any other change.
		tree := snap.Tree
		if tree == nil {
			stored, err := s.Get(snap.Digest)
			if err != nil {
				return nil, err
			}
			tree = stored.Tree
		}
		if len(tree.Entries) != 1 {
			return nil, fmt.Errorf("snapshot %s: stored copy is a single file but its tree has %d entries: %w", snap.Digest, len(tree.Entries), ErrCorrupt)
		}
		got.Entries[0].Path = tree.Entries[0].Path
		got.Digest = treehash.DigestOf(got.Entries)
	}
	if got.Digest != snap.Digest {
		return nil, fmt.Errorf("snapshot %s: stored copy hashes to %s: %w", snap.Digest, got.Digest, ErrCorrupt)
	}
	return got, nil
}

// Has reports whether the store holds a snapshot named digest, without
// reading or verifying it: what a check of the space a Take needs asks.
func (s *Store) Has(digest string) bool {
	hex, err := treehash.ParseDigest(digest)
	if err != nil {
		return false
	}
	_, err = os.Lstat(filepath.Join(s.dir, hex, dataName))
	return err == nil
}

func isRegular(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().IsRegular()
}

package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/treehash"
)

// used records that the snapshot in directory final was taken now, and
// holds it until Release: Prune keeps what was used after its cutoff and
// anything held.
func (s *Store) used(final string) {
	now := time.Now()
	_ = os.Chtimes(final, now, now) // a cache's clock: a failure costs an early prune
	s.holdMu.Lock()
	defer s.holdMu.Unlock()
	if s.holds == nil {
		s.holds = map[string]int{}
	}
	s.holds[filepath.Base(final)]++
}

// Release lets Prune remove the snapshot named digest again once it is
// old: a launch calls it when its run, which mounts the snapshot, has
// finished. Every Take and TakeDigest that returned a snapshot holds it
// once; one never released is kept until the process ends.
func (s *Store) Release(digest string) {
	hex, err := treehash.ParseDigest(digest)
	if err != nil {
		return
	}
	s.holdMu.Lock()
	defer s.holdMu.Unlock()
	if s.holds[hex] <= 1 {
		delete(s.holds, hex)
		return
	}
	s.holds[hex]--
}

// Pruned counts what Prune removed.
type Pruned struct {
	Snapshots, Objects, Indexes int
}

// Prune bounds the store: it removes every snapshot last taken before
// cutoff that no run holds, then every object no snapshot links any more
// (its link count is the store's own name alone), and, when the store
// keeps an index, the index files of roots last walked before cutoff. A
// snapshot goes by one rename out of its name first, so a crash leaves it
// whole or gone (the staging names left are removed at the next start); an
// object goes by one unlink. Staging names a crash left go too. Takes
// wait while it runs. It must be the
// store's only pruner: custodyd calls it under its state lock.
func (s *Store) Prune(cutoff time.Time) (Pruned, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var p Pruned
	var errs []error
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return p, fmt.Errorf("snapshot: prune: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, StagingPrefix) {
			// A crash's leftover: no take is in flight while Prune runs.
			errs = append(errs, discard(filepath.Join(s.dir, name)))
			continue
		}
		if name == objectsName {
			continue
		}
		if _, err := treehash.ParseDigest(treehash.DigestPrefix + name); err != nil {
			continue // not a snapshot: left for an operator
		}
		s.holdMu.Lock()
		held := s.holds[name] > 0
		s.holdMu.Unlock()
		fi, err := os.Lstat(filepath.Join(s.dir, name))
		if held || err != nil || !fi.IsDir() || !fi.ModTime().Before(cutoff) {
			continue
		}
		gone := filepath.Join(s.dir, StagingPrefix+"pruned-"+name)
		if err := os.Rename(filepath.Join(s.dir, name), gone); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := discard(gone); err != nil {
			errs = append(errs, err)
		}
		p.Snapshots++
	}
	n, err := s.pruneObjects()
	p.Objects = n
	errs = append(errs, err)
	if s.index != nil {
		n, err := s.index.prune(cutoff)
		p.Indexes = n
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return p, fmt.Errorf("snapshot: prune: %w", err)
	}
	return p, nil
}

// pruneObjects removes the objects no snapshot links, and staging files
// a crash left (no take runs while Prune holds the store).
func (s *Store) pruneObjects() (int, error) {
	dir := filepath.Join(s.dir, objectsName)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			continue
		}
		if st.Nlink > 1 && !strings.HasPrefix(e.Name(), StagingPrefix) {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		s.forget(e.Name())
		n++
	}
	return n, errors.Join(errs...)
}

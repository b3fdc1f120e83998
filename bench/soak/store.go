package soak

import (
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// StoreStats is the bbolt store file, read while custodyd is stopped.
type StoreStats struct {
	// FileBytes is the file's size. LiveBytes is the size of a compacted
	// copy (bbolt's own compaction, as bbolt compact does): the data the
	// file holds. bbolt reuses freed pages but never shrinks its file, so
	// retention bounds LiveBytes and the file stops growing at its peak.
	FileBytes, LiveBytes int64
	Err                  string
}

// storeStats measures the store; custodyd must be stopped (it holds the
// file's lock). scratch is a path for the compacted copy, removed after.
func storeStats(path, scratch string) StoreStats {
	var s StoreStats
	fi, err := os.Stat(path)
	if err != nil {
		s.Err = err.Error()
		return s
	}
	s.FileBytes = fi.Size()
	s.LiveBytes, s.Err = compactedSize(path, scratch)
	return s
}

// compactedSize copies the store into a fresh file at dst (bbolt's own
// compaction, as `bbolt compact` does) and returns that file's size: what
// the store would be with its free pages given back. The copy is removed.
func compactedSize(src, dst string) (int64, string) {
	defer os.Remove(dst)
	from, err := bolt.Open(src, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return 0, err.Error()
	}
	defer from.Close()
	to, err := bolt.Open(dst, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return 0, err.Error()
	}
	if err := bolt.Compact(to, from, 64<<20); err != nil {
		to.Close()
		return 0, fmt.Sprintf("compact: %v", err)
	}
	if err := to.Close(); err != nil {
		return 0, err.Error()
	}
	fi, err := os.Stat(dst)
	if err != nil {
		return 0, err.Error()
	}
	return fi.Size(), ""
}

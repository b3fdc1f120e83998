package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// ErrNoIndex: the store was opened without a run index.
var ErrNoIndex = errors.New("store: no run index")

var (
	bucketIndex   = []byte("run-index")      // key \x00 run id → value
	bucketIndexBy = []byte("run-index-runs") // run id → indexedRun (JSON)
	keyIndexVer   = []byte("run-index-version")
)

// indexFormat is appended to RunIndex.Version in the stored version: it
// names this layout of the index, in which every record's entry holds the
// record's SHA-256. An index of an earlier layout is rebuilt.
const indexFormat = "+record-sha256/v1"

// indexedRun is what the index holds of one run: the SHA-256 of the record
// it was derived from, and the keys it is found under. The hashes let Open
// check the index against the records, so records written by a process
// that kept no index (an older binary after a downgrade, which leaves the
// version untouched) cannot leave it answering stale.
type indexedRun struct {
	Record []byte   `json:"record"`
	Keys   []string `json:"keys"`
}

// RunIndex derives, from an encoded run record, the keys the run is found
// under (say, the digest of its output) and a small value for each. The
// store keeps the entries in the same transaction as every write of the
// record, so the index never disagrees with the records it was made from.
type RunIndex struct {
	// Version names the derivation: a store last indexed by another
	// version, or by none (it predates the index, or was written by a
	// process that kept none), is re-indexed from its records at Open; so
	// is one whose records no longer hash to what the index recorded of
	// them (written by a binary that knows no index, after a downgrade).
	Version string
	Entries func(raw []byte) []IndexEntry
}

// IndexEntry is one key a run is found under, with its value.
type IndexEntry struct {
	Key   string
	Value []byte
}

// Option configures Open.
type Option func(*DB)

// WithRunIndex keeps ix beside the run records.
func WithRunIndex(ix RunIndex) Option { return func(d *DB) { d.index = &ix } }

// Indexed calls fn with each run found under key and its value, in run id
// order; ErrNoIndex when the store keeps no index.
func (d *DB) Indexed(key string, fn func(id string, value []byte) error) error {
	if d.index == nil {
		return ErrNoIndex
	}
	prefix := append([]byte(key), 0)
	return d.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketV1).Bucket(bucketIndex).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if err := fn(string(k[len(prefix):]), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// openIndex creates the index buckets and rebuilds them from the records
// unless they were last built by this version and still cover exactly the
// records there are.
func (d *DB) openIndex(tx *bolt.Tx) error {
	root := tx.Bucket(bucketV1)
	version := d.index.Version + indexFormat
	if string(root.Bucket(bucketMeta).Get(keyIndexVer)) == version && root.Bucket(bucketIndex) != nil && root.Bucket(bucketIndexBy) != nil {
		if covers(root.Bucket(bucketRuns), root.Bucket(bucketIndexBy)) {
			return nil
		}
	}
	for _, b := range [][]byte{bucketIndex, bucketIndexBy} {
		if root.Bucket(b) != nil {
			if err := root.DeleteBucket(b); err != nil {
				return fmt.Errorf("store: clear run index: %w", err)
			}
		}
		if _, err := root.CreateBucket(b); err != nil {
			return fmt.Errorf("store: create run index: %w", err)
		}
	}
	err := root.Bucket(bucketRuns).ForEach(func(k, v []byte) error { return d.reindex(tx, k, v) })
	if err != nil {
		return fmt.Errorf("store: rebuild run index: %w", err)
	}
	return root.Bucket(bucketMeta).Put(keyIndexVer, []byte(version))
}

// covers reports whether the index's entries (by) are exactly of the
// records in runs: one for each record, holding that record's SHA-256,
// and none for a run that has no record. Both buckets are in run id order.
func covers(runs, by *bolt.Bucket) bool {
	rc, bc := runs.Cursor(), by.Cursor()
	rk, rv := rc.First()
	bk, bv := bc.First()
	for ; rk != nil; rk, rv = rc.Next() {
		if bk == nil || !bytes.Equal(rk, bk) {
			return false
		}
		var ir indexedRun
		sum := sha256.Sum256(rv)
		if json.Unmarshal(bv, &ir) != nil || !bytes.Equal(ir.Record, sum[:]) {
			return false
		}
		bk, bv = bc.Next()
	}
	return bk == nil
}

// putRun stores a run record and its index entries in tx.
func (d *DB) putRun(tx *bolt.Tx, id, v []byte) error {
	if err := tx.Bucket(bucketV1).Bucket(bucketRuns).Put(id, v); err != nil {
		return err
	}
	return d.reindex(tx, id, v)
}

// deleteRun removes a run record and its index entries in tx.
func (d *DB) deleteRun(tx *bolt.Tx, id []byte) error {
	if err := tx.Bucket(bucketV1).Bucket(bucketRuns).Delete(id); err != nil {
		return err
	}
	return d.reindex(tx, id, nil)
}

// reindex replaces run id's index entries with those of v (none when v is
// nil). Without an index, it marks any index the store holds stale, so
// the next Open with one rebuilds it.
func (d *DB) reindex(tx *bolt.Tx, id, v []byte) error {
	root := tx.Bucket(bucketV1)
	if d.index == nil {
		if root.Bucket(bucketMeta).Get(keyIndexVer) == nil {
			return nil
		}
		return root.Bucket(bucketMeta).Delete(keyIndexVer)
	}
	idx, by := root.Bucket(bucketIndex), root.Bucket(bucketIndexBy)
	if old := by.Get(id); old != nil {
		var ir indexedRun
		if err := json.Unmarshal(old, &ir); err != nil {
			return fmt.Errorf("store: run index of %s: %w", id, err)
		}
		for _, k := range ir.Keys {
			if err := idx.Delete(indexKey(k, id)); err != nil {
				return err
			}
		}
		if err := by.Delete(id); err != nil {
			return err
		}
	}
	if v == nil {
		return nil
	}
	entries := d.index.Entries(v)
	sum := sha256.Sum256(v)
	ir := indexedRun{Record: sum[:], Keys: make([]string, 0, len(entries))}
	for _, e := range entries {
		if err := idx.Put(indexKey(e.Key, id), e.Value); err != nil {
			return err
		}
		ir.Keys = append(ir.Keys, e.Key)
	}
	b, err := json.Marshal(ir)
	if err != nil {
		return err
	}
	return by.Put(id, b)
}

func indexKey(key string, id []byte) []byte {
	return append(append([]byte(key), 0), id...)
}

package store

import (
	"errors"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// schemaVersion is the layout this build writes: the last migration's.
var schemaVersion = migrations[len(migrations)-1].to

// ErrNewerSchema reports a store written by a newer build, whose layout
// this one does not know. Open refuses it and changes nothing.
var ErrNewerSchema = errors.New("store written by a newer custodyd")

// migration brings a store from schema version to-1 to to. It runs in the
// transaction that records to as the store's version, so a store is at one
// version or the next, never between. apply gets the root bucket (v1) and
// must be safe on a store that already has what it adds: builds before
// version 2 created buckets without recording a version for them.
type migration struct {
	to    int
	what  string
	apply func(root *bolt.Bucket) error
}

// migrations is every layout change, oldest first; each has a test
// (TestMigrations). Append only: a released migration never changes.
var migrations = []migration{
	{to: 1, what: "the first layout: meta, runner, runs, grants, revoked and journal",
		apply: createBuckets(bucketMeta, bucketRunner, bucketRuns, bucketGrants, bucketRevok, bucketJourn)},
	{to: 2, what: "the pack and issued-grant buckets: pack-journal, workspaces, pack-reservations and issued-grants",
		apply: createBuckets(bucketPackJ, bucketWorksp, bucketPackR, bucketIssued)},
}

func createBuckets(names ...[]byte) func(root *bolt.Bucket) error {
	return func(root *bolt.Bucket) error {
		for _, b := range names {
			if _, err := root.CreateBucketIfNotExists(b); err != nil {
				return fmt.Errorf("create bucket %s: %w", b, err)
			}
		}
		return nil
	}
}

// storedVersion reads the store's schema version: 0 for a store that has
// none yet (a new file).
func storedVersion(tx *bolt.Tx) (int, error) {
	root := tx.Bucket(bucketV1)
	if root == nil || root.Bucket(bucketMeta) == nil {
		return 0, nil
	}
	v := root.Bucket(bucketMeta).Get(keySchema)
	if v == nil {
		return 0, nil
	}
	return parseVersion(v)
}

// parseVersion reads a stored schema version: a decimal number from 1, as
// strconv.Itoa writes it, and nothing else.
func parseVersion(v []byte) (int, error) {
	n, err := strconv.Atoi(string(v))
	if err != nil || n < 1 || strconv.Itoa(n) != string(v) {
		return 0, fmt.Errorf("store schema version %q is not one any custodyd writes; fix: restore the store from a backup", v)
	}
	return n, nil
}

// checkVersion refuses a store of a newer schema than this build's.
func checkVersion(tx *bolt.Tx, path string) (int, error) {
	v, err := storedVersion(tx)
	if err != nil {
		return 0, err
	}
	if v > schemaVersion {
		return 0, fmt.Errorf("%w: %s has schema version %d, this custodyd reads versions up to %d and leaves it unchanged; fix: run the custodyd release that wrote it (or a newer one)",
			ErrNewerSchema, path, v, schemaVersion)
	}
	return v, nil
}

// migrate brings the store from version from to schemaVersion, one
// migration at a time, recording each version it reaches.
func migrate(tx *bolt.Tx, from int) error {
	root, err := tx.CreateBucketIfNotExists(bucketV1)
	if err != nil {
		return err
	}
	for _, m := range migrations {
		if m.to <= from {
			continue
		}
		if err := m.apply(root); err != nil {
			return fmt.Errorf("migrate the store to schema version %d (%s): %w", m.to, m.what, err)
		}
		if err := root.Bucket(bucketMeta).Put(keySchema, []byte(strconv.Itoa(m.to))); err != nil {
			return err
		}
	}
	return checkBuckets(root)
}

// checkBuckets refuses a store that says it is this version but lacks one
// of its buckets: it was damaged, and recreating the bucket empty would
// hide what it lost.
func checkBuckets(root *bolt.Bucket) error {
	for _, b := range schemaBuckets {
		if root.Bucket(b) == nil {
			return fmt.Errorf("store schema version %d has no %s bucket: the store is damaged; fix: restore it from a backup", schemaVersion, b)
		}
	}
	return nil
}

// Package store is the runner's embedded bbolt database. Every update is
// fsync'd before it returns, so a fact that guards a mutation (a quarantine,
// a run record) is durable before the mutation happens.
//
// Schema (version 2; the root bucket keeps the name v1 it had at version 1):
//
//	v1/
//	  meta/        schema → the version, in decimal ("2")
//	               oplog-anchor → JSON OpLogAnchor (absent: never anchored)
//	               run-index-version → the RunIndex version the run index
//	                      was built by (absent: none, or stale: rebuilt)
//	  runner/      quarantine → JSON Quarantine (absent: not quarantined)
//	  runs/<id>    → JSON run record (package runrecord; opaque to the store)
//	  grants/<id>  → JSON GrantUse: the grant was consumed (single use)
//	  revoked/<id> → JSON Revocation
//	  journal/<run id> → JSON attempt record (owned by package journal)
//	  pack-journal/<attempt id> → JSON attempt record of a pack workspace
//	                      (package journal, used by package workspace)
//	  workspaces/<name> → JSON pack workspace record (owned by package
//	                      workspace)
//	  pack-reservations/<grant id> → JSON subnets an issued, unspent pack
//	                      grant chose (owned by package workspace)
//	  issued-grants/<grant id> → JSON of what an issued phase grant binds
//	                      that the image store needs: its image, expiry
//	                      and wall time (owned by package launch)
//	  run-index/<key>\x00<run id> → a RunIndex entry's value (only when
//	                      opened WithRunIndex; derived from runs, rebuilt
//	                      at Open when stale)
//	  run-index-runs/<run id> → JSON indexedRun: the SHA-256 of the record
//	                      the run's entries came from, and their keys
//
// Version 1 had meta, runner, runs, grants, revoked and journal; version
// 2 adds pack-journal, workspaces, pack-reservations and issued-grants,
// which builds before it created without recording a version. The
// migrations (migrate.go) bring an older store to this version at Open;
// a store of a newer version is refused, unchanged. The run index's two
// buckets are not part of the version: they are derived, versioned by
// run-index-version, and rebuilt whenever they do not match the records.
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

var (
	bucketV1     = []byte("v1")
	bucketMeta   = []byte("meta")
	bucketRunner = []byte("runner")
	bucketRuns   = []byte("runs")
	bucketGrants = []byte("grants")
	bucketRevok  = []byte("revoked")
	bucketJourn  = []byte("journal")
	bucketWorksp = []byte("workspaces")
	bucketPackJ  = []byte("pack-journal")
	bucketPackR  = []byte("pack-reservations")
	bucketIssued = []byte(Issued)
	keySchema    = []byte("schema")
	keyOpAnchor  = []byte("oplog-anchor")
	keyQuarant   = []byte("quarantine")
)

// schemaBuckets are the buckets of the current schema version, all under
// v1 (the root bucket's name is fixed: it is not the version).
var schemaBuckets = [][]byte{bucketMeta, bucketRunner, bucketRuns, bucketGrants, bucketRevok, bucketJourn,
	bucketPackJ, bucketWorksp, bucketPackR, bucketIssued}

var (
	// ErrNotFound means the key is absent.
	ErrNotFound = errors.New("not found")
	// ErrConsumed means a single-use grant was already consumed.
	ErrConsumed = errors.New("grant already consumed")
	// ErrRevoked means the grant is on the revocation list.
	ErrRevoked = errors.New("grant revoked")
)

// DB is an open store.
type DB struct {
	db *bolt.DB
	// index, if set, is kept beside the run records (WithRunIndex).
	index *RunIndex
}

// Open opens (creating if needed) the store at path with 0600 permissions
// and brings it to this build's schema version by the migrations it has
// not had (a store of a newer version is refused with ErrNewerSchema,
// unchanged); with a run index, it rebuilds the index from the records
// when it is not this version's.
func Open(path string, opts ...Option) (*DB, error) {
	d := &DB{}
	for _, o := range opts {
		o(d)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store dir: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	// The version is read first, in a read-only transaction: a store
	// from a newer build is refused without a write.
	var from int
	if err := db.View(func(tx *bolt.Tx) (err error) { from, err = checkVersion(tx, path); return err }); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := migrate(tx, from); err != nil {
			return err
		}
		if d.index != nil {
			return d.openIndex(tx)
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init store: %w", err)
	}
	d.db = db
	return d, nil
}

// Close closes the store.
func (d *DB) Close() error { return d.db.Close() }

// Quarantine records why a runner takes no work.
type Quarantine struct {
	Since  time.Time `json:"since"`
	Reason string    `json:"reason"`
	RunID  string    `json:"runId,omitempty"`
}

// Quarantine returns the current quarantine, or nil if there is none.
func (d *DB) Quarantine() (*Quarantine, error) {
	var q *Quarantine
	err := d.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketV1).Bucket(bucketRunner).Get(keyQuarant)
		if v == nil {
			return nil
		}
		q = &Quarantine{}
		return json.Unmarshal(v, q)
	})
	if err != nil {
		return nil, fmt.Errorf("read quarantine: %w", err)
	}
	return q, nil
}

// SetQuarantine quarantines the runner; an existing quarantine is kept (the
// first cause is the one an operator must see).
func (d *DB) SetQuarantine(q Quarantine) error {
	return d.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketV1).Bucket(bucketRunner)
		if b.Get(keyQuarant) != nil {
			return nil
		}
		v, err := json.Marshal(q)
		if err != nil {
			return err
		}
		return b.Put(keyQuarant, v)
	})
}

// targetQuarantinePrefix starts the runner-bucket key of a target's
// quarantine: one cluster of a backend that places work on one, which
// takes no work while the rest of the runner does.
const targetQuarantinePrefix = "quarantine/"

// TargetQuarantine returns target's quarantine, or nil if there is none.
func (d *DB) TargetQuarantine(target string) (*Quarantine, error) {
	var q *Quarantine
	err := d.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketV1).Bucket(bucketRunner).Get([]byte(targetQuarantinePrefix + target))
		if v == nil {
			return nil
		}
		q = &Quarantine{}
		return json.Unmarshal(v, q)
	})
	if err != nil {
		return nil, fmt.Errorf("read quarantine of %s: %w", target, err)
	}
	return q, nil
}

// SetTargetQuarantine quarantines target alone; an existing quarantine of
// it is kept.
func (d *DB) SetTargetQuarantine(target string, q Quarantine) error {
	return d.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketV1).Bucket(bucketRunner)
		k := []byte(targetQuarantinePrefix + target)
		if b.Get(k) != nil {
			return nil
		}
		v, err := json.Marshal(q)
		if err != nil {
			return err
		}
		return b.Put(k, v)
	})
}

// ClearQuarantine lifts the quarantine.
func (d *DB) ClearQuarantine() error {
	return d.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketV1).Bucket(bucketRunner)
		// Every target's quarantine too: the operator's release covers
		// the runner and all it places work on.
		var targets [][]byte
		c := b.Cursor()
		for k, _ := c.Seek([]byte(targetQuarantinePrefix)); k != nil && strings.HasPrefix(string(k), targetQuarantinePrefix); k, _ = c.Next() {
			targets = append(targets, append([]byte(nil), k...))
		}
		for _, k := range targets {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return b.Delete(keyQuarant)
	})
}

// PutRun stores a run record under id.
func (d *DB) PutRun(id string, record any) error {
	v, err := json.Marshal(record)
	if err != nil {
		return fmt.Errorf("encode run %s: %w", id, err)
	}
	return d.db.Update(func(tx *bolt.Tx) error {
		return d.putRun(tx, []byte(id), v)
	})
}

// GetRun decodes the run record for id into out.
func (d *DB) GetRun(id string, out any) error {
	return d.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketV1).Bucket(bucketRuns).Get([]byte(id))
		if v == nil {
			return fmt.Errorf("run %s: %w", id, ErrNotFound)
		}
		return json.Unmarshal(v, out)
	})
}

// GrantUse records the consumption of a grant.
type GrantUse struct {
	At    time.Time `json:"at"`
	RunID string    `json:"runId"`
	Actor string    `json:"actor,omitempty"`
}

// Revocation records that an operator revoked a grant.
type Revocation struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason,omitempty"`
}

// ConsumeGrant marks grant id used, atomically and durably: of any number of
// concurrent calls for one id exactly one succeeds; the others get
// ErrConsumed. A revoked grant is refused with ErrRevoked in the same
// transaction, so a revocation and a consumption cannot both win.
func (d *DB) ConsumeGrant(id string, use GrantUse) error {
	return d.ConsumeGrantWith(id, use, "", nil)
}

// ConsumeGrantWith is ConsumeGrant that also runs fn on a top-level bucket
// (e.g. Journal) in the same transaction: both are durable, or neither.
func (d *DB) ConsumeGrantWith(id string, use GrantUse, bucket string, fn func(b *bolt.Bucket) error) error {
	if id == "" {
		return errors.New("consume grant: empty id")
	}
	v, err := json.Marshal(use)
	if err != nil {
		return err
	}
	return d.db.Update(func(tx *bolt.Tx) error {
		root := tx.Bucket(bucketV1)
		if root.Bucket(bucketRevok).Get([]byte(id)) != nil {
			return fmt.Errorf("grant %s: %w", id, ErrRevoked)
		}
		g := root.Bucket(bucketGrants)
		if prev := g.Get([]byte(id)); prev != nil {
			return fmt.Errorf("grant %s: %w (%s)", id, ErrConsumed, prev)
		}
		if err := g.Put([]byte(id), v); err != nil {
			return err
		}
		if fn == nil {
			return nil
		}
		b := root.Bucket([]byte(bucket))
		if b == nil {
			return fmt.Errorf("store: no bucket %q", bucket)
		}
		return fn(b)
	})
}

// GrantUsed returns the consumption record of grant id, or ErrNotFound.
func (d *DB) GrantUsed(id string) (*GrantUse, error) {
	var u *GrantUse
	err := d.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketV1).Bucket(bucketGrants).Get([]byte(id))
		if v == nil {
			return fmt.Errorf("grant %s: %w", id, ErrNotFound)
		}
		u = &GrantUse{}
		return json.Unmarshal(v, u)
	})
	return u, err
}

// Revoke puts grant id on the revocation list (idempotent).
func (d *DB) Revoke(id string, r Revocation) error {
	if id == "" {
		return errors.New("revoke grant: empty id")
	}
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return d.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketV1).Bucket(bucketRevok)
		if b.Get([]byte(id)) != nil {
			return nil
		}
		return b.Put([]byte(id), v)
	})
}

// Revoked reports whether grant id is revoked.
func (d *DB) Revoked(id string) (bool, error) {
	var revoked bool
	err := d.db.View(func(tx *bolt.Tx) error {
		revoked = tx.Bucket(bucketV1).Bucket(bucketRevok).Get([]byte(id)) != nil
		return nil
	})
	return revoked, err
}

// Journal is the bucket package journal keeps its records in.
const Journal = "journal"

// Workspaces is the bucket package workspace keeps its pack workspace
// records in, keyed by the workspace's name.
const Workspaces = "workspaces"

// PackJournal is the bucket of pack workspaces' journal attempts.
const PackJournal = "pack-journal"

// Issued is the bucket of issued phase grants (id → what the grant binds
// that the image store needs: its image and expiry), so an image a live
// grant binds is never removed.
const Issued = "issued-grants"

// PackReservations is the bucket of the subnets issued pack grants chose,
// keyed by grant id, so that a second grant issued before the first is
// spent chooses others.
const PackReservations = "pack-reservations"

// RunRecord is an encoded run record (a runrecord.Record's JSON, see
// PutRun) for Update to store in the same transaction as its own change.
type RunRecord struct {
	ID    string
	Value []byte
}

// Update runs fn in one durable read-write transaction on a top-level
// bucket of the schema (e.g. Journal), and stores runs with it. The
// transaction is fsync'd before Update returns; if fn fails, nothing is
// stored.
func (d *DB) Update(bucket string, fn func(b *bolt.Bucket) error, runs ...RunRecord) error {
	return d.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketV1).Bucket([]byte(bucket))
		if b == nil {
			return fmt.Errorf("store: no bucket %q", bucket)
		}
		if err := fn(b); err != nil {
			return err
		}
		for _, r := range runs {
			if err := d.putRun(tx, []byte(r.ID), r.Value); err != nil {
				return err
			}
		}
		return nil
	})
}

// View runs fn in a read-only transaction on a top-level bucket.
func (d *DB) View(bucket string, fn func(b *bolt.Bucket) error) error {
	return d.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketV1).Bucket([]byte(bucket))
		if b == nil {
			return fmt.Errorf("store: no bucket %q", bucket)
		}
		return fn(b)
	})
}

// GrantUses returns every consumption record, keyed by grant id.
func (d *DB) GrantUses() (map[string]GrantUse, error) {
	out := map[string]GrantUse{}
	err := d.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketV1).Bucket(bucketGrants).ForEach(func(k, v []byte) error {
			var u GrantUse
			if err := json.Unmarshal(v, &u); err != nil {
				return err
			}
			out[string(k)] = u
			return nil
		})
	})
	return out, err
}

// Runs calls fn with each run id and its record, in id order.
func (d *DB) Runs(fn func(id string, raw []byte) error) error {
	return d.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketV1).Bucket(bucketRuns).ForEach(func(k, v []byte) error {
			return fn(string(k), v)
		})
	})
}

// DeleteRun removes a run record.
func (d *DB) DeleteRun(id string) error {
	return d.db.Update(func(tx *bolt.Tx) error {
		return d.deleteRun(tx, []byte(id))
	})
}

// OpLogAnchor is how far the runner's operations log reached, as the store
// last recorded it: the seq and hex SHA-256 of its last line. It only ever
// moves forward, so a log copied back from before it is told apart from
// the log the runner wrote.
type OpLogAnchor struct {
	Seq  int64  `json:"seq"`
	Last string `json:"last"`
}

// ErrAnchorBack reports an operations-log anchor that would move back.
var ErrAnchorBack = errors.New("operations-log anchor moves back")

// OpLogAnchor returns the recorded anchor (zero if there is none).
func (d *DB) OpLogAnchor() (OpLogAnchor, error) {
	var a OpLogAnchor
	err := d.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketV1).Bucket(bucketMeta).Get(keyOpAnchor)
		if v == nil {
			return nil
		}
		return json.Unmarshal(v, &a)
	})
	if err != nil {
		return OpLogAnchor{}, fmt.Errorf("read the operations-log anchor: %w", err)
	}
	return a, nil
}

// SetOpLogAnchor records a, durably; an anchor behind the recorded one is
// refused (ErrAnchorBack), in the same transaction.
func (d *DB) SetOpLogAnchor(a OpLogAnchor) error {
	v, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return d.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketV1).Bucket(bucketMeta)
		if old := meta.Get(keyOpAnchor); old != nil {
			var prev OpLogAnchor
			if err := json.Unmarshal(old, &prev); err != nil {
				return err
			}
			if a.Seq < prev.Seq {
				return fmt.Errorf("%w: seq %d is before the recorded %d", ErrAnchorBack, a.Seq, prev.Seq)
			}
		}
		return meta.Put(keyOpAnchor, v)
	})
}

// ResetOpLogAnchor records a even behind the recorded anchor: the
// operator's decision (custodyd --adopt-oplog) that the log as it stands
// is the one to go on from.
func (d *DB) ResetOpLogAnchor(a OpLogAnchor) error {
	v, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return d.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketV1).Bucket(bucketMeta).Put(keyOpAnchor, v) })
}

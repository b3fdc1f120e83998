package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestQuarantinePersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "custody.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if q, err := db.Quarantine(); err != nil || q != nil {
		t.Fatalf("fresh store quarantined: %v %v", q, err)
	}
	if err := db.SetQuarantine(Quarantine{Since: time.Now(), Reason: "first", RunID: "r1"}); err != nil {
		t.Fatal(err)
	}
	if err := db.SetQuarantine(Quarantine{Since: time.Now(), Reason: "second"}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	db, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q, err := db.Quarantine()
	if err != nil || q == nil || q.Reason != "first" || q.RunID != "r1" {
		t.Fatalf("quarantine after reopen = %+v, %v; want the first cause", q, err)
	}
	if err := db.ClearQuarantine(); err != nil {
		t.Fatal(err)
	}
	if q, _ := db.Quarantine(); q != nil {
		t.Fatalf("quarantine not cleared: %+v", q)
	}
}

func TestRuns(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "custody.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.PutRun("a", map[string]int{"x": 1}); err != nil {
		t.Fatal(err)
	}
	var got map[string]int
	if err := db.GetRun("a", &got); err != nil || got["x"] != 1 {
		t.Fatalf("GetRun = %v, %v", got, err)
	}
	if err := db.GetRun("missing", &got); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetRun(missing) = %v, want ErrNotFound", err)
	}
}

func TestConsumeGrantExactlyOnce(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "custody.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const n = 50
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- db.ConsumeGrant("g1", GrantUse{At: time.Now(), RunID: fmt.Sprint(i)}) }()
	}
	ok := 0
	for range n {
		err := <-errs
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, ErrConsumed):
			t.Fatalf("unexpected error %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d of %d concurrent consumptions succeeded, want exactly 1", ok, n)
	}
	if _, err := db.GrantUsed("g1"); err != nil {
		t.Fatal(err)
	}
}

func TestRevokedGrantCannotBeConsumed(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "custody.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Revoke("g2", Revocation{At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if r, _ := db.Revoked("g2"); !r {
		t.Fatal("not revoked")
	}
	if err := db.ConsumeGrant("g2", GrantUse{At: time.Now()}); !errors.Is(err, ErrRevoked) {
		t.Fatalf("consume revoked: %v, want ErrRevoked", err)
	}
	if err := db.ConsumeGrant("g3", GrantUse{At: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// TestConsumeGrantWithIsAtomic: when the other half of the transaction
// fails, the grant stays unused; when it succeeds, both are stored.
func TestConsumeGrantWithIsAtomic(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "custody.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	boom := errors.New("journal refused")
	err = db.ConsumeGrantWith("g2", GrantUse{RunID: "r2"}, Journal, func(b *bolt.Bucket) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("ConsumeGrantWith = %v, want the journal's error", err)
	}
	if _, err := db.GrantUsed("g2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("grant used after a failed transaction: %v", err)
	}
	err = db.ConsumeGrantWith("g2", GrantUse{RunID: "r2"}, Journal, func(b *bolt.Bucket) error { return b.Put([]byte("r2"), []byte("{}")) })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.GrantUsed("g2"); err != nil {
		t.Fatal(err)
	}
	if err := db.View(Journal, func(b *bolt.Bucket) error {
		if b.Get([]byte("r2")) == nil {
			return errors.New("the journal half is missing")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A store file written before the pack buckets existed opens and gains
// them (schema version 2: TestMigrations); its records stay as they were.
func TestOlderFileGainsPackBuckets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "custody.db")
	old, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = old.Update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucket([]byte("v1"))
		if err != nil {
			return err
		}
		for _, b := range []string{"meta", "runner", "runs", "grants", "revoked", "journal"} {
			if _, err := root.CreateBucket([]byte(b)); err != nil {
				return err
			}
		}
		if err := root.Bucket([]byte("runs")).Put([]byte("r1"), []byte(`{}`)); err != nil {
			return err
		}
		return root.Bucket([]byte("meta")).Put([]byte("schema"), []byte("1"))
	})
	if err != nil {
		t.Fatal(err)
	}
	old.Close()
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, b := range []string{Workspaces, PackJournal} {
		if err := db.Update(b, func(b *bolt.Bucket) error { return b.Put([]byte("k"), []byte("v")) }); err != nil {
			t.Errorf("bucket %s: %v", b, err)
		}
	}
	var rec map[string]any
	if err := db.GetRun("r1", &rec); err != nil {
		t.Errorf("an older record is lost: %v", err)
	}
}

// TestOpLogAnchor: the anchor starts absent, moves forward, refuses to
// move back (ErrAnchorBack, keeping what it had) unless reset, and
// survives a reopen.
func TestOpLogAnchor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := db.OpLogAnchor(); err != nil || a.Seq != 0 {
		t.Fatalf("a new store's anchor: %+v %v", a, err)
	}
	for _, seq := range []int64{1, 2, 2} {
		if err := db.SetOpLogAnchor(OpLogAnchor{Seq: seq, Last: "x"}); err != nil {
			t.Fatalf("anchor seq %d: %v", seq, err)
		}
	}
	if err := db.SetOpLogAnchor(OpLogAnchor{Seq: 1, Last: "y"}); !errors.Is(err, ErrAnchorBack) {
		t.Fatalf("an anchor moving back: %v", err)
	}
	db.Close()
	if db, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if a, err := db.OpLogAnchor(); err != nil || a.Seq != 2 || a.Last != "x" {
		t.Fatalf("the anchor after a reopen: %+v %v", a, err)
	}
	if err := db.ResetOpLogAnchor(OpLogAnchor{Seq: 1, Last: "y"}); err != nil {
		t.Fatal(err)
	}
	if a, _ := db.OpLogAnchor(); a.Seq != 1 || a.Last != "y" {
		t.Fatalf("the reset anchor: %+v", a)
	}
}

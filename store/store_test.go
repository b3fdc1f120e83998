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

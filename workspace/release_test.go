package workspace

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/store"
)

// A claim whose attempt the journal does not hold is released; one whose
// attempt cannot be read stays, and release says why.
func TestReleaseBranchesOnNotFound(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "custody.db"))
	must(t, err)
	t.Cleanup(func() { db.Close() })
	m := &Manager{cfg: Config{DB: db, Now: time.Now}, journal: journal.NewIn(db, store.PackJournal)}
	stored := func(name string) bool {
		var ok bool
		must(t, db.View(store.Workspaces, func(b *bolt.Bucket) error { ok = b.Get([]byte(name)) != nil; return nil }))
		return ok
	}
	absent := &record{Name: "absent", Attempt: "attempt-absent"}
	unreadable := &record{Name: "unreadable", Attempt: "attempt-unreadable"}
	for _, r := range []*record{absent, unreadable} {
		v, err := json.Marshal(r)
		must(t, err)
		must(t, db.Update(store.Workspaces, func(b *bolt.Bucket) error { return b.Put([]byte(r.Name), v) }))
	}
	must(t, db.Update(store.PackJournal, func(b *bolt.Bucket) error { return b.Put([]byte(unreadable.Attempt), []byte("{not json")) }))

	if err := m.release(absent); err != nil || stored(absent.Name) {
		t.Errorf("release of a never-begun attempt: %v, still stored: %v", err, stored(absent.Name))
	}
	if err := m.release(unreadable); err == nil || !stored(unreadable.Name) {
		t.Errorf("release of an unreadable attempt: %v, still stored: %v", err, stored(unreadable.Name))
	}
}

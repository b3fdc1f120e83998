package journal

import (
	bolt "go.etcd.io/bbolt"

	"errors"
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/store"
)

func open(t *testing.T) (*Journal, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "custody.db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return New(db), path
}

func TestLifecycle(t *testing.T) {
	j, _ := open(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(j.Begin("r1", "g1"))
	if err := j.Begin("r1", "g1"); err == nil {
		t.Fatal("second Begin of one run id accepted")
	}
	must(j.Intent("r1", Resource{Kind: "launch-dir", Name: "/run/x"}))
	if err := j.Created("r1", Resource{Kind: "mount", Name: "/run/x/out"}); err == nil {
		t.Fatal("Created without an intent accepted")
	}
	must(j.Created("r1", Resource{Kind: "launch-dir", Name: "/run/x", Identity: map[string]string{"ino": "42"}}))
	must(j.Intent("r1", Resource{Kind: "mount", Name: "/run/x/out"}))
	// Clean with outstanding resources is refused: unknown cleanup is not success.
	if err := j.Finish("r1", Clean, "", ""); err == nil {
		t.Fatal("Finish(clean) accepted with outstanding resources")
	}
	a, err := j.Get("r1")
	must(err)
	if a.State != Running || len(a.Outstanding()) != 2 || a.Resources[0].Identity["ino"] != "42" {
		t.Fatalf("attempt %+v", a)
	}
	must(j.Removed("r1", Resource{Kind: "mount", Name: "/run/x/out"}))
	// Removals given to Finish count in the same transaction; one left out
	// still refuses clean.
	if err := j.Finish("r1", Clean, "", "", Resource{Kind: "mount", Name: "/run/x/out"}); err == nil {
		t.Fatal("Finish(clean) accepted with the launch dir outstanding")
	}
	must(j.Finish("r1", Clean, "", "", Resource{Kind: "launch-dir", Name: "/run/x"}))
	if un, _ := j.Unfinished(); len(un) != 0 {
		t.Fatalf("unfinished %+v", un)
	}
	if known, _ := j.Known(); !known[Key("launch-dir", "/run/x")] {
		t.Fatal("Known lost a recorded resource")
	}
	if _, err := j.Get("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(nope) = %v", err)
	}
}

func TestDurableAcrossReopen(t *testing.T) {
	j, path := open(t)
	if err := j.Begin("r2", ""); err != nil {
		t.Fatal(err)
	}
	if err := j.Intent("r2", Resource{Kind: "container", Name: "custody-r2"}); err != nil {
		t.Fatal(err)
	}
	// An attempt opened together with its intents, in one transaction.
	if err := j.Begin("r3", "g3", Resource{Kind: "launch-dir", Name: "/run/r3"}); err != nil {
		t.Fatal(err)
	}
	j.db.Close()
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	un, err := New(db).Unfinished()
	if err != nil || len(un) != 2 || un[0].State != Running || un[0].Resources[0].State != Intent ||
		un[1].RunID != "r3" || len(un[1].Resources) != 1 || un[1].Resources[0].State != Intent {
		t.Fatalf("after reopen: %+v %v", un, err)
	}
}

// TestFinishRecording: the run record lands with the attempt's final
// state, and not at all when the journal refuses that state.
func TestFinishRecording(t *testing.T) {
	j, _ := open(t)
	if err := j.Begin("r2", "g2", Resource{Kind: "launch-dir", Name: "/run/y"}); err != nil {
		t.Fatal(err)
	}
	rec := []store.RunRecord{{ID: "r2", Value: []byte(`{"status":"ok"}`)}}
	if err := j.FinishRecording("r2", rec, Clean, "", ""); err == nil {
		t.Fatal("FinishRecording(clean) accepted with the launch dir outstanding")
	}
	var got map[string]string
	if err := j.db.GetRun("r2", &got); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the run record was stored by a refused finish: %v %v", got, err)
	}
	if err := j.FinishRecording("r2", rec, Clean, "", "", Resource{Kind: "launch-dir", Name: "/run/y"}); err != nil {
		t.Fatal(err)
	}
	if err := j.db.GetRun("r2", &got); err != nil || got["status"] != "ok" {
		t.Fatalf("run record %v, %v", got, err)
	}
	if a, err := j.Get("r2"); err != nil || a.State != Clean {
		t.Fatalf("attempt %+v, %v", a, err)
	}
}

// A pack journal lives in its own bucket, apart from the phase runner's;
// an intent recorded with the grant and then again with its nonce is one
// record holding the nonce, not two (one of which would stay outstanding).
func TestPackBucketAndIntentIdentity(t *testing.T) {
	path := filepath.Join(t.TempDir(), "custody.db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	phase, packs := New(db), NewIn(db, store.PackJournal)
	if packs.Bucket() != store.PackJournal || phase.Bucket() != store.Journal {
		t.Fatalf("buckets %s %s", phase.Bucket(), packs.Bucket())
	}
	net := Resource{Kind: "docker-network", Name: "custody-x-back"}
	if err := packs.BeginConsuming("a1", "g1", store.GrantUse{}, net); err != nil {
		t.Fatal(err)
	}
	if un, _ := phase.Unfinished(); len(un) != 0 {
		t.Fatalf("the phase journal sees the pack attempt: %+v", un)
	}
	net.Identity = map[string]string{"dev.custody.intent": "n1"}
	if err := packs.Intent("a1", net); err != nil {
		t.Fatal(err)
	}
	a, err := packs.Get("a1")
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Resources) != 1 || a.Resources[0].Identity["dev.custody.intent"] != "n1" {
		t.Fatalf("resources %+v", a.Resources)
	}
	// An intent that already has an identity is a new intent.
	net.Identity = map[string]string{"dev.custody.intent": "n2"}
	if err := packs.Intent("a1", net); err != nil {
		t.Fatal(err)
	}
	if a, _ := packs.Get("a1"); len(a.Resources) != 2 {
		t.Fatalf("resources %+v", a.Resources)
	}
}

// DeleteClean removes only attempts it finds clean with nothing
// outstanding: running, cleanup-pending and residual ones are kept, and a
// name not found is no error.
func TestDeleteClean(t *testing.T) {
	j, _ := open(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"clean", "running", "pending", "residual"} {
		must(j.Begin(id, "pool:small", Resource{Kind: "launch-dir", Name: "/run/" + id}))
	}
	must(j.Finish("clean", Clean, "destroyed", "", Resource{Kind: "launch-dir", Name: "/run/clean"}))
	must(j.Finish("pending", CleanupPending, "", ""))
	must(j.Finish("residual", Residual, "left", "custody recover"))
	must(j.db.Update(j.Bucket(), func(b *bolt.Bucket) error { return b.Put([]byte("garbled"), []byte("{not json")) }))
	n, err := j.DeleteClean("garbled", "clean", "running", "pending", "residual", "absent")
	if err != nil || n != 1 {
		t.Fatalf("DeleteClean: %d, %v; want 1 deleted", n, err)
	}
	if _, err := j.Get("clean"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the clean attempt: %v; want deleted", err)
	}
	for _, id := range []string{"running", "pending", "residual"} {
		if _, err := j.Get(id); err != nil {
			t.Fatalf("attempt %s: %v; want kept", id, err)
		}
	}
	// An undecodable record is kept, and did not stop the rest.
	if _, err := j.Get("garbled"); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("the undecodable attempt: %v; want kept (and undecodable)", err)
	}
}

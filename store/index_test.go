package store

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// byOutput indexes a record {"out": D, "who": W} under D with value W.
func byOutput(version string) RunIndex {
	return RunIndex{Version: version, Entries: func(raw []byte) []IndexEntry {
		var r struct{ Out, Who string }
		if json.Unmarshal(raw, &r) != nil || r.Out == "" {
			return nil
		}
		return []IndexEntry{{Key: r.Out, Value: []byte(r.Who)}}
	}}
}

func lookup(t *testing.T, d *DB, key string) []string {
	t.Helper()
	var got []string
	if err := d.Indexed(key, func(id string, v []byte) error {
		got = append(got, id+"="+string(v))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestRunIndex: entries follow every write of a record (put, put again
// with another output, a record stored with another bucket's change,
// delete) in the same transaction; a store written by a process without
// the index, or indexed by another version, is rebuilt from its records at
// Open; without an index, Indexed says so.
func TestRunIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "custody.db")
	d, err := Open(path, WithRunIndex(byOutput("v1")))
	if err != nil {
		t.Fatal(err)
	}
	put := func(d *DB, id, out, who string) {
		t.Helper()
		if err := d.PutRun(id, map[string]string{"out": out, "who": who}); err != nil {
			t.Fatal(err)
		}
	}
	put(d, "r1", "sha256:a", "alice/build")
	put(d, "r2", "sha256:a", "bob/test")
	put(d, "r3", "sha256:b", "alice/acquire")
	if got := lookup(t, d, "sha256:a"); !slices.Equal(got, []string{"r1=alice/build", "r2=bob/test"}) {
		t.Fatalf("sha256:a → %q", got)
	}
	put(d, "r2", "sha256:b", "bob/test") // the record changed: its old entry goes
	v, _ := json.Marshal(map[string]string{"out": "sha256:c", "who": "carol/run"})
	if err := d.Update(Journal, func(*bolt.Bucket) error { return nil }, RunRecord{ID: "r4", Value: v}); err != nil {
		t.Fatal(err)
	}
	if got := lookup(t, d, "sha256:c"); !slices.Equal(got, []string{"r4=carol/run"}) {
		t.Fatalf("a record stored with a journal change: sha256:c → %q", got)
	}
	if err := d.DeleteRun("r1"); err != nil {
		t.Fatal(err)
	}
	if got := lookup(t, d, "sha256:a"); len(got) != 0 {
		t.Fatalf("sha256:a after its runs changed → %q", got)
	}
	if got := lookup(t, d, "sha256:b"); !slices.Equal(got, []string{"r2=bob/test", "r3=alice/acquire"}) {
		t.Fatalf("sha256:b → %q", got)
	}
	d.Close()

	// A process without the index writes a record: the index is stale, and
	// the next Open with it rebuilds from the records.
	plain, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Indexed("sha256:b", func(string, []byte) error { return nil }); !errors.Is(err, ErrNoIndex) {
		t.Fatalf("Indexed without an index: %v", err)
	}
	put(plain, "r5", "sha256:b", "dave/build")
	plain.Close()
	d, err = Open(path, WithRunIndex(byOutput("v1")))
	if err != nil {
		t.Fatal(err)
	}
	if got := lookup(t, d, "sha256:b"); !slices.Equal(got, []string{"r2=bob/test", "r3=alice/acquire", "r5=dave/build"}) {
		t.Fatalf("after a write without the index, sha256:b → %q", got)
	}
	d.Close()

	// Another version of the derivation re-indexes everything.
	d, err = Open(path, WithRunIndex(RunIndex{Version: "v2", Entries: func(raw []byte) []IndexEntry {
		return []IndexEntry{{Key: "all", Value: nil}}
	}}))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got := lookup(t, d, "all"); len(got) != 4 {
		t.Fatalf("after a version change, all → %q", got)
	}
	if got := lookup(t, d, "sha256:b"); len(got) != 0 {
		t.Fatalf("the old version's entries survived: %q", got)
	}
}

// TestRunIndexAfterDowngrade: a binary older than the index writes run
// records straight into the runs bucket and leaves the index and its
// version alone. The next Open with the index finds that its records'
// hashes no longer match and rebuilds, so it never answers stale: for a
// record added, one rewritten with another output, and one deleted. An
// index that does cover its records is kept as it is (a marker entry put
// beside it survives that Open).
func TestRunIndexAfterDowngrade(t *testing.T) {
	path := filepath.Join(t.TempDir(), "custody.db")
	open := func() *DB {
		t.Helper()
		d, err := Open(path, WithRunIndex(byOutput("v1")))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	raw := func(fn func(runs, idx *bolt.Bucket) error) {
		t.Helper()
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Update(func(tx *bolt.Tx) error {
			root := tx.Bucket(bucketV1)
			return fn(root.Bucket(bucketRuns), root.Bucket(bucketIndex))
		}); err != nil {
			t.Fatal(err)
		}
	}
	record := func(out, who string) []byte {
		v, _ := json.Marshal(map[string]string{"out": out, "who": who})
		return v
	}
	marker := func(idx *bolt.Bucket) error { return idx.Put(indexKey("marker", []byte("m")), nil) }

	d := open()
	for _, r := range [][3]string{{"r1", "sha256:a", "alice/build"}, {"r2", "sha256:a", "bob/test"}, {"r3", "sha256:b", "carol/run"}} {
		if err := d.PutRun(r[0], map[string]string{"out": r[1], "who": r[2]}); err != nil {
			t.Fatal(err)
		}
	}
	d.Close()

	// Legit: nothing was written behind the index's back, so Open keeps it.
	raw(func(_, idx *bolt.Bucket) error { return marker(idx) })
	d = open()
	if got := lookup(t, d, "marker"); len(got) != 1 {
		t.Fatalf("an index that covers its records was rebuilt: marker → %q", got)
	}
	d.Close()

	for _, tc := range []struct {
		name  string
		write func(runs *bolt.Bucket) error
		key   string
		want  []string
	}{
		{"a record added", func(runs *bolt.Bucket) error { return runs.Put([]byte("r4"), record("sha256:a", "dave/build")) },
			"sha256:a", []string{"r1=alice/build", "r2=bob/test", "r4=dave/build"}},
		{"a record rewritten", func(runs *bolt.Bucket) error { return runs.Put([]byte("r2"), record("sha256:c", "bob/test")) },
			"sha256:a", []string{"r1=alice/build", "r4=dave/build"}},
		{"a record deleted", func(runs *bolt.Bucket) error { return runs.Delete([]byte("r3")) },
			"sha256:b", nil},
	} {
		raw(func(runs, idx *bolt.Bucket) error { return errors.Join(marker(idx), tc.write(runs)) })
		d := open()
		if got := lookup(t, d, tc.key); !slices.Equal(got, tc.want) {
			t.Errorf("after %s by a pre-index binary, %s → %q, want %q", tc.name, tc.key, got, tc.want)
		}
		if got := lookup(t, d, "marker"); len(got) != 0 {
			t.Errorf("after %s by a pre-index binary the index was not rebuilt", tc.name)
		}
		d.Close()
	}
}

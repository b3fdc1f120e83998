package store

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// oldStore writes a store file as an older build left it: the root
// bucket with the given buckets (each holding one key, k → v, besides
// meta), at schema version (none when empty).
func oldStore(t *testing.T, version string, buckets ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "custody.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucket(bucketV1)
		if err != nil {
			return err
		}
		meta, err := root.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		for _, name := range buckets {
			b, err := root.CreateBucket([]byte(name))
			if err != nil {
				return err
			}
			if err := b.Put([]byte("k"), []byte(`{"v":"`+name+`"}`)); err != nil {
				return err
			}
		}
		if version == "" {
			return nil
		}
		return meta.Put(keySchema, []byte(version))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// contents is every bucket and key under the root and what it holds.
func contents(t *testing.T, db *DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := db.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketV1).ForEachBucket(func(name []byte) error {
			out[string(name)+"/"] = ""
			return tx.Bucket(bucketV1).Bucket(name).ForEach(func(k, v []byte) error {
				out[string(name)+"/"+string(k)] = string(v)
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func wantVersion(t *testing.T, got map[string]string) {
	t.Helper()
	if v := got["meta/schema"]; v != strconv.Itoa(schemaVersion) {
		t.Errorf("schema version after Open = %q, want %d", v, schemaVersion)
	}
	for _, b := range schemaBuckets {
		if _, ok := got[string(b)+"/"]; !ok {
			t.Errorf("bucket %s missing after Open", b)
		}
	}
}

// TestMigrations: each migration, from a store at the version before it,
// brings the store to this build's version with what the migration adds
// and nothing of the older store lost. Every migration in the list has a
// case here.
func TestMigrations(t *testing.T) {
	v1 := []string{"runner", "runs", "grants", "revoked", "journal"}
	cases := map[int][]struct {
		name    string
		version string
		buckets []string
	}{
		1: {
			{"a new file", "", nil},
			// An empty root bucket: a file a build stopped writing after
			// it made the root and before it recorded a version.
			{"a root without a version", "", []string{"runs"}},
		},
		2: {
			{"a version 1 store", "1", v1},
			// Builds before version 2 created the pack buckets (and
			// issued-grants) without recording a version: their contents
			// are kept.
			{"a version 1 store with the unversioned buckets", "1",
				append(v1[:len(v1):len(v1)], "pack-journal", "workspaces", "pack-reservations", "issued-grants")},
			{"a version 1 store with some of them", "1", append(v1[:len(v1):len(v1)], "workspaces")},
		},
	}
	for _, m := range migrations {
		if len(cases[m.to]) == 0 {
			t.Errorf("migration to version %d (%s) has no test case", m.to, m.what)
		}
	}
	for to, cs := range cases {
		for _, c := range cs {
			t.Run(strconv.Itoa(to)+"/"+c.name, func(t *testing.T) {
				path := oldStore(t, c.version, c.buckets...)
				db, err := Open(path)
				if err != nil {
					t.Fatalf("Open of %s: %v", c.name, err)
				}
				got := contents(t, db)
				db.Close()
				wantVersion(t, got)
				for _, b := range c.buckets {
					if v := got[b+"/k"]; v != `{"v":"`+b+`"}` {
						t.Errorf("bucket %s lost its contents: k = %q", b, v)
					}
				}
				// The migrated store opens again unchanged.
				db, err = Open(path)
				if err != nil {
					t.Fatalf("reopen: %v", err)
				}
				again := contents(t, db)
				db.Close()
				if len(again) != len(got) {
					t.Errorf("a second Open changed the store: %v, then %v", got, again)
				}
			})
		}
	}
}

// A store of a newer schema version is refused with ErrNewerSchema, a
// message that names both versions and what to do, and not one byte of
// the file changed.
func TestNewerStoreRefusedUnchanged(t *testing.T) {
	newer := strconv.Itoa(schemaVersion + 1)
	path := oldStore(t, newer, "runs", "some-future-bucket")
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(path)
	if err == nil {
		db.Close()
		t.Fatal("a store of a newer schema version opened")
	}
	if !errors.Is(err, ErrNewerSchema) {
		t.Errorf("error %v is not ErrNewerSchema", err)
	}
	for _, want := range []string{"version " + newer, "up to " + strconv.Itoa(schemaVersion), "fix:", path} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(before) != sha256.Sum256(after) {
		t.Error("a refused Open changed the store file")
	}
}

// A version that no build writes, or a store that says it is this
// version but lacks a bucket of it, is refused, not repaired.
func TestDamagedStoreRefused(t *testing.T) {
	for _, c := range []struct {
		name, version, want string
		buckets             []string
	}{
		{"version not a number", "two", `"two" is not one any custodyd writes`, nil},
		{"version zero", "0", `"0" is not one any custodyd writes`, nil},
		{"version with a sign", "+2", `"+2" is not one any custodyd writes`, nil},
		{"a bucket missing", strconv.Itoa(schemaVersion), "has no revoked bucket", []string{"runner", "runs", "grants", "journal", "pack-journal", "workspaces", "pack-reservations", "issued-grants"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := oldStore(t, c.version, c.buckets...)
			before, _ := os.ReadFile(path)
			db, err := Open(path)
			if err == nil {
				db.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "fix:") {
				t.Errorf("error %q, want it to say %q and a fix", err, c.want)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Error("a refused Open changed the store file")
			}
		})
	}
}

// FuzzParseVersion: a stored schema version reads only when it is the
// decimal form of a number from 1 (what Open writes), and then as that
// number; anything else is refused with a fix.
func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"1", "2", "10", "0", "-1", "+2", "02", " 2", "2\n", "two", "", "99999999999999999999"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		n, err := parseVersion(v)
		if err != nil {
			if !strings.Contains(err.Error(), "fix:") {
				t.Fatalf("refusal without a fix: %v", err)
			}
			return
		}
		if n < 1 || strconv.Itoa(n) != string(v) {
			t.Fatalf("%q read as %d", v, n)
		}
	})
}

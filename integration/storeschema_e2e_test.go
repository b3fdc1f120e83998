package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/custody-dev/custody/internal/daemontest"
)

// setStoreSchema rewrites custodyd's store (stopped) as another build
// left it: the schema version, with the named buckets removed.
func setStoreSchema(t *testing.T, path, version string, drop ...string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		root := tx.Bucket([]byte("v1"))
		for _, b := range drop {
			if err := root.DeleteBucket([]byte(b)); err != nil {
				return err
			}
		}
		return root.Bucket([]byte("meta")).Put([]byte("schema"), []byte(version))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// storeSchema reads the store's schema version and which of names it has.
func storeSchema(t *testing.T, path string, names ...string) (string, []string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var version string
	var have []string
	err = db.View(func(tx *bolt.Tx) error {
		root := tx.Bucket([]byte("v1"))
		version = string(root.Bucket([]byte("meta")).Get([]byte("schema")))
		for _, n := range names {
			if root.Bucket([]byte(n)) != nil {
				have = append(have, n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return version, have
}

// TestStoreSchemaMigratesAndRefusesNewer: custodyd brings a store of
// schema version 1 (before the pack and issued-grant buckets were
// versioned) to version 2 at its start and serves; a store a newer
// custodyd wrote makes it exit, saying so and what to do, with the store
// file unchanged.
func TestStoreSchemaMigratesAndRefusesNewer(t *testing.T) {
	d := daemontest.New(t, daemontest.Options{})
	d.Start()
	d.Stop()
	path := filepath.Join(d.Dir, "state", "custody.db")
	added := []string{"pack-journal", "workspaces", "pack-reservations", "issued-grants"}
	if v, have := storeSchema(t, path, added...); v != "2" || len(have) != len(added) {
		t.Fatalf("a new store: schema %q with %v", v, have)
	}

	setStoreSchema(t, path, "1", added...)
	d.Start()
	if _, err := d.Control.Status(context.Background()); err != nil {
		t.Fatalf("status after the migration: %v", err)
	}
	d.Stop()
	if v, have := storeSchema(t, path, added...); v != "2" || len(have) != len(added) {
		t.Fatalf("a version 1 store after a start: schema %q with %v, want 2 with %v", v, have, added)
	}

	setStoreSchema(t, path, "3")
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := d.Command(ctx).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 {
		t.Fatalf("custodyd on a newer store: %v\n%s", err, out)
	}
	for _, want := range []string{"newer custodyd", "schema version 3", "fix:"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("custodyd's message does not say %q:\n%s", want, out)
		}
	}
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(before, after) {
		t.Errorf("the refused start changed the store (%v)", err)
	}
}

package keys

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLoadSet: a key set holds the current key and every key a rotation
// retired, oldest first, each with its verified hand-over; a revocation
// is held by id, and only a retired key is one.
func TestLoadSet(t *testing.T) {
	ctx := context.Background()
	keyDir := filepath.Join(t.TempDir(), "keys")
	if err := os.MkdirAll(keyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	first, _, err := LoadOrCreate(keyDir, "runner")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ids []string
	for i := range 2 {
		rec, err := Rotate(ctx, keyDir, "runner", at.Add(time.Duration(i)*time.Hour), RotateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.Retired)
	}
	current, _, err := LoadOrCreate(keyDir, "runner")
	if err != nil {
		t.Fatal(err)
	}
	set, err := LoadSet(ctx, keyDir, "runner", current)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Retired) != 2 || set.Retired[0].Key.ID() != first.ID() || set.Retired[1].Key.ID() != ids[1] || !set.Retired[0].At.Before(set.Retired[1].At) {
		t.Fatalf("retired keys %+v, want %v oldest first", set.Retired, ids)
	}
	if set.Retired[0].Successor != ids[1] || set.Retired[1].Successor != current.ID() {
		t.Fatalf("successors %s %s", set.Retired[0].Successor, set.Retired[1].Successor)
	}
	if v := set.Verifiers(); len(v) != 3 || v[0].ID() != current.ID() {
		t.Fatalf("verifiers %d, the first %s", len(v), v[0].ID())
	}
	if !set.IsRetired(first.ID()) || set.IsRetired(current.ID()) {
		t.Fatal("IsRetired: the first key is retired, the current one is not")
	}
	if _, ok := set.RevokedAt(first.ID()); ok {
		t.Fatal("a key revoked before any revocation")
	}
	set.Revoke(first.ID(), at)
	if got, ok := set.RevokedAt(first.ID()); !ok || !got.Equal(at) {
		t.Fatalf("revoked at %v %v", got, ok)
	}
	if _, ok := set.RevokedAt(ids[1]); ok {
		t.Fatal("a revocation of one key revoked another")
	}
}

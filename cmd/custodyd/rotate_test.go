package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/runner"
	"github.com/custody-dev/custody/store"
)

// TestRotateKey: rotation on a real state dir makes a new key, keeps the
// old public key and a hand-over record the old key signed (which a
// reviewer verifies with it, and which fails with any other key or once
// altered), and refuses while the store is held (custodyd running) or
// for a key name that is not one.
func TestRotateKey(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := Config{Runner: runner.Config{StateDir: dir}}
	keyDir := filepath.Join(dir, "keys")
	if err := os.MkdirAll(keyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	old, _, err := keys.LoadOrCreate(keyDir, "runner")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rec, err := rotateKey(ctx, cfg, "runner", at)
	if err != nil {
		t.Fatal(err)
	}
	now, created, err := keys.LoadOrCreate(keyDir, "runner")
	if err != nil || created || now.ID() == old.ID() || rec.Successor != now.ID() || rec.Retired != old.ID() || !rec.At.Equal(at) {
		t.Fatalf("after rotation: %v created=%v new %s old %s rec %+v", err, created, now.ID(), old.ID(), rec)
	}
	base := filepath.Join(keyDir, "retired", "runner-"+old.ID())
	pub, err := keys.LoadPublic(base + ".pub")
	if err != nil || pub.ID() != old.ID() {
		t.Fatalf("retired public key: %v", err)
	}
	b, err := os.ReadFile(base + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var onDisk Rotation
	if err := json.Unmarshal(b, &onDisk); err != nil {
		t.Fatal(err)
	}
	if err := VerifyRotation(ctx, onDisk, pub); err != nil {
		t.Fatalf("hand-over does not verify with the retired key: %v", err)
	}
	if err := VerifyRotation(ctx, onDisk, now.Verifier()); err == nil {
		t.Fatal("hand-over verified with the new key")
	}
	forged := onDisk
	forged.Successor = old.ID()
	if err := VerifyRotation(ctx, forged, pub); err == nil {
		t.Fatal("an altered hand-over verified")
	}
	if _, err := os.Stat(filepath.Join(keyDir, "runner-next.key")); !os.IsNotExist(err) {
		t.Fatalf("the staging key is left: %v", err)
	}

	// Refusals: custodyd holds the store; an unknown key.
	db, err := store.Open(runner.StorePath(cfg.Runner))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rotateKey(ctx, cfg, "issuer", at); err == nil {
		t.Fatal("rotated while the store was held")
	}
	db.Close()
	if _, err := rotateKey(ctx, cfg, "root", at); err == nil {
		t.Fatal("rotated a key that is not one")
	}
	if after, _, _ := keys.LoadOrCreate(keyDir, "runner"); after.ID() != now.ID() {
		t.Fatal("a refused rotation changed the key")
	}
}

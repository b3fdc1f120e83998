package keys

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRotateKeyRefusesForeignRecord: a record for the old key that hands
// over to another key than the staged one (files mixed up by hand) stops
// the rotation with the fix, and changes no key.
func TestRotateKeyRefusesForeignRecord(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	keyDir := filepath.Join(dir, "keys")
	if err := os.MkdirAll(filepath.Join(keyDir, "retired"), 0o700); err != nil {
		t.Fatal(err)
	}
	old, _, err := LoadOrCreate(keyDir, "runner")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := Generate()
	rec, err := signRotation(ctx, old, "runner", other.ID(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(rec)
	if err := os.WriteFile(filepath.Join(keyDir, "retired", "runner-"+old.ID()+".json"), body, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Rotate(ctx, keyDir, "runner", time.Now(), RotateOptions{}); err == nil || !strings.Contains(err.Error(), "move the staged") {
		t.Fatalf("a record naming another successor: %v", err)
	}
	if now, _, err := LoadOrCreate(keyDir, "runner"); err != nil || now.ID() != old.ID() {
		t.Fatalf("the refused rotation changed the key: %v", err)
	}
}

// TestRotateKeyResumesPartialStagedKey: a crash while the staged key was
// being made (NAME-next.key written, NAME-next.pub not) after an earlier
// rotation, whose record hands over to the current key, is resumed: the
// rotation goes on with that staged key, nothing having been handed over
// to it. A staged key the crash left unreadable is replaced by a new one.
// Key files changed by hand (NAME.key no longer NAME.pub's) are refused
// and left as they are.
func TestRotateKeyResumesPartialStagedKey(t *testing.T) {
	ctx := context.Background()
	for _, c := range []string{"readable", "unreadable", "mismatched"} {
		t.Run(c, func(t *testing.T) {
			dir := t.TempDir()
			keyDir := filepath.Join(dir, "keys")
			if err := os.MkdirAll(keyDir, 0o700); err != nil {
				t.Fatal(err)
			}
			if _, _, err := LoadOrCreate(keyDir, "issuer"); err != nil {
				t.Fatal(err)
			}
			if _, err := Rotate(ctx, keyDir, "issuer", time.Now(), RotateOptions{}); err != nil {
				t.Fatal(err)
			}
			current, _, err := LoadOrCreate(keyDir, "issuer")
			if err != nil {
				t.Fatal(err)
			}
			staged, err := CreatePrivate(keyDir, "issuer-next")
			if err != nil {
				t.Fatal(err)
			}
			switch c {
			case "unreadable":
				if err := os.Truncate(filepath.Join(keyDir, "issuer-next.key"), 10); err != nil {
					t.Fatal(err)
				}
			case "mismatched":
				other, _ := Generate()
				if err := os.WriteFile(filepath.Join(keyDir, "issuer.pub"), other.PublicPEM(), 0o644); err != nil {
					t.Fatal(err)
				}
				if _, err := Rotate(ctx, keyDir, "issuer", time.Now(), RotateOptions{}); err == nil || !strings.Contains(err.Error(), "changed by hand") {
					t.Fatalf("key files changed by hand: %v", err)
				}
				if !exists(filepath.Join(keyDir, "issuer-next.key")) {
					t.Fatal("the refused rotation removed the staged key")
				}
				return
			}
			rec, err := Rotate(ctx, keyDir, "issuer", time.Now(), RotateOptions{})
			if err != nil || rec.Retired != current.ID() {
				t.Fatalf("the rotation over a partial staged key: %v %+v", err, rec)
			}
			if (c == "readable") != (rec.Successor == staged.ID()) {
				t.Fatalf("%s staged key: the successor is %s, the staged key %s", c, rec.Successor, staged.ID())
			}
			if now, _, err := LoadOrCreate(keyDir, "issuer"); err != nil || now.ID() != rec.Successor {
				t.Fatalf("the installed key: %v", err)
			}
		})
	}
}

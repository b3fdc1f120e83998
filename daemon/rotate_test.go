package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/keys"
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
	cfg := config.Config{Runner: config.Runner{StateDir: dir}}
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
	var onDisk keys.Rotation
	if err := json.Unmarshal(b, &onDisk); err != nil {
		t.Fatal(err)
	}
	if err := keys.VerifyRotation(ctx, onDisk, pub); err != nil {
		t.Fatalf("hand-over does not verify with the retired key: %v", err)
	}
	if err := keys.VerifyRotation(ctx, onDisk, now.Verifier()); err == nil {
		t.Fatal("hand-over verified with the new key")
	}
	forged := onDisk
	forged.Successor = old.ID()
	if err := keys.VerifyRotation(ctx, forged, pub); err == nil {
		t.Fatal("an altered hand-over verified")
	}
	if _, err := os.Stat(filepath.Join(keyDir, "runner-next.key")); !os.IsNotExist(err) {
		t.Fatalf("the staging key is left: %v", err)
	}

	// Refusals: custodyd holds the store; an unknown key.
	db, err := store.Open(host.StorePath(runnerConfig(cfg.Runner)))
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

// errCrash stands for custodyd --rotate-key dying at a step.
var errCrash = errors.New("crashed here")

// TestRotateKeyResumes: a rotation interrupted after each of its steps
// (after the last one it is complete, and a rerun rotates anew) leaves custodyd unable to start on a half-rotated key (the legitimate
// start refuses rather than sign with either key), and running the
// rotation again finishes that same rotation: the successor staged before
// the crash is installed, the record the old key signed hands over to it,
// nothing is staged afterwards, and a further rotation works as usual.
func TestRotateKeyResumes(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, crashAt := range []string{keys.StepNextPrivate, keys.StepNextKey, keys.StepRetiredPublic, keys.StepRecord, keys.StepPublic, keys.StepPrivate} {
		t.Run(crashAt, func(t *testing.T) {
			dir := t.TempDir()
			cfg := config.Config{Runner: config.Runner{StateDir: dir}}
			keyDir := filepath.Join(dir, "keys")
			if err := os.MkdirAll(keyDir, 0o700); err != nil {
				t.Fatal(err)
			}
			old, _, err := keys.LoadOrCreate(keyDir, "issuer")
			if err != nil {
				t.Fatal(err)
			}
			var staged string
			_, err = rotateKeySteps(ctx, cfg, "issuer", at, func(step string) error {
				if step == keys.StepNextPrivate {
					p, err := keys.LoadPrivate(keyDir, "issuer-next")
					if err != nil {
						t.Fatal(err)
					}
					staged = p.ID()
				}
				if step == crashAt {
					return errCrash
				}
				return nil
			})
			if !errors.Is(err, errCrash) {
				t.Fatalf("the rotation did not stop at %s: %v", crashAt, err)
			}
			if crashAt == keys.StepPublic {
				// Half installed: the key files disagree, and custodyd's
				// key loading refuses them.
				if _, _, err := keys.LoadOrCreate(keyDir, "issuer"); !errors.Is(err, keys.ErrKeyMismatch) {
					t.Fatalf("a half-installed key loads: %v", err)
				}
			}
			if crashAt == keys.StepPrivate {
				// Every file was in place: the rotation is complete, and
				// running it again is another rotation (checked below).
				if now, _, err := keys.LoadOrCreate(keyDir, "issuer"); err != nil || now.ID() != staged {
					t.Fatalf("a crash after the last step left key %v: %v", now, err)
				}
			}
			rec, err := rotateKey(ctx, cfg, "issuer", at.Add(time.Minute))
			if crashAt == keys.StepPrivate {
				if err != nil || rec.Retired != staged {
					t.Fatalf("a rotation after a complete one: %v %+v", err, rec)
				}
				return
			}
			if err != nil {
				t.Fatalf("the retry after a crash at %s: %v", crashAt, err)
			}
			now, created, err := keys.LoadOrCreate(keyDir, "issuer")
			if err != nil || created || now.ID() != staged || rec.Successor != staged || rec.Retired != old.ID() {
				t.Fatalf("after the retry: %v created=%v key %s staged %s record %+v", err, created, now.ID(), staged, rec)
			}
			pub, err := keys.LoadPublic(filepath.Join(keyDir, "retired", "issuer-"+old.ID()+".pub"))
			if err != nil {
				t.Fatal(err)
			}
			onDisk, err := keys.ReadRotation(ctx, filepath.Join(keyDir, "retired", "issuer-"+old.ID()+".json"), pub)
			if err != nil || onDisk.Successor != staged {
				t.Fatalf("the record on disk: %v %+v", err, onDisk)
			}
			for _, left := range []string{"issuer-next.key", "issuer-next.pub"} {
				if exists(filepath.Join(keyDir, left)) {
					t.Fatalf("%s is left staged", left)
				}
			}
			if matches, _ := filepath.Glob(filepath.Join(keyDir, "retired", "*.partial")); len(matches) > 0 {
				t.Fatalf("staging files left: %v", matches)
			}
			again, err := rotateKey(ctx, cfg, "issuer", at.Add(time.Hour))
			if err != nil || again.Retired != staged {
				t.Fatalf("the next rotation: %v %+v", err, again)
			}
		})
	}
}

// TestStartRefusesUnfinishedRotation: custodyd does not start on a
// rotation stopped part way (a staged key, or a record retiring the
// current key), naming the fix, and creates no key; a finished rotation
// starts.
func TestStartRefusesUnfinishedRotation(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, crashAt := range []string{keys.StepNextPrivate, keys.StepNextKey, keys.StepRecord, keys.StepHead, keys.StepPublic, "retired-only"} {
		t.Run(crashAt, func(t *testing.T) {
			dir := t.TempDir()
			cfg := config.Config{Runner: config.Runner{StateDir: dir}, MaxGrantTTL: "24h"}
			keyDir := filepath.Join(dir, "keys")
			if err := os.MkdirAll(keyDir, 0o700); err != nil {
				t.Fatal(err)
			}
			if _, _, err := keys.LoadOrCreate(keyDir, "runner"); err != nil {
				t.Fatal(err)
			}
			stop := crashAt
			if crashAt == "retired-only" {
				stop = keys.StepRecord
			}
			_, err := rotateKeySteps(ctx, cfg, "runner", time.Now(), func(step string) error {
				if step == stop {
					return errCrash
				}
				return nil
			})
			if !errors.Is(err, errCrash) {
				t.Fatal(err)
			}
			if crashAt == "retired-only" { // staged files removed by hand
				for _, f := range []string{"runner-next.key", "runner-next.pub"} {
					if err := os.Remove(filepath.Join(keyDir, f)); err != nil {
						t.Fatal(err)
					}
				}
			}
			s, err := newServer(ctx, cfg, quiet, testBackends)
			if err == nil {
				s.close()
			}
			if !errors.Is(err, keys.ErrRotationUnfinished) || !strings.Contains(err.Error(), "finish with custodyd --rotate-key runner") {
				t.Fatalf("start on an unfinished rotation: %v", err)
			}
			if exists(filepath.Join(keyDir, "issuer.key")) {
				t.Fatal("the refused start made a key")
			}
		})
	}
	t.Run("finished", func(t *testing.T) {
		dir := t.TempDir()
		cfg := config.Config{Runner: config.Runner{StateDir: dir}, MaxGrantTTL: "24h"}
		keyDir := filepath.Join(dir, "keys")
		if err := os.MkdirAll(keyDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if _, _, err := keys.LoadOrCreate(keyDir, "runner"); err != nil {
			t.Fatal(err)
		}
		if _, err := rotateKey(ctx, cfg, "runner", time.Now()); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"runner", "issuer"} {
			if err := keys.Unfinished(ctx, keyDir, name); err != nil {
				t.Fatalf("a finished rotation (%s): %v", name, err)
			}
		}
	})
}

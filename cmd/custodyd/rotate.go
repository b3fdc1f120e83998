package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/runner"
	"github.com/custody-dev/custody/store"
)

// Rotation is the record custodyd --rotate-key leaves in keys/retired: the
// key that stopped signing, its successor, when, and the retired key's
// signature over those (canonical JSON of the fields before it), so a
// reviewer can check that the old key handed over to the new one. The
// retired public key sits beside it (NAME-ID.pub); its private key is gone.
type Rotation struct {
	Key       string    `json:"key"` // runner | issuer
	Retired   string    `json:"retired"`
	Successor string    `json:"successor"`
	At        time.Time `json:"at"`
	Signature string    `json:"signature,omitempty"` // base64, by the retired key
}

// rotationPayload is what the retired key signs.
func (r Rotation) payload() ([]byte, error) {
	r.Signature = ""
	return json.Marshal(r)
}

// VerifyRotation checks a rotation record against the retired key.
func VerifyRotation(ctx context.Context, r Rotation, retired *keys.Verifier) error {
	if retired.ID() != r.Retired {
		return fmt.Errorf("rotation: record names %s, the key given is %s", r.Retired, retired.ID())
	}
	sig, err := base64.StdEncoding.DecodeString(r.Signature)
	if err != nil {
		return fmt.Errorf("rotation: signature: %w", err)
	}
	p, err := r.payload()
	if err != nil {
		return err
	}
	return retired.Verify(ctx, p, sig)
}

// rotateKey replaces custodyd's runner or issuer key while custodyd is
// stopped (it refuses while the store is held): a new key is made, the old
// one signs the hand-over record, its public key is kept in keys/retired,
// and the new key takes the old one's file names (the private key last, by
// rename, so the old private bytes are gone). A crash part way leaves a
// public key that does not match the private one, which custodyd refuses
// to start with (keys.ErrKeyMismatch) rather than sign with either.
func rotateKey(ctx context.Context, cfg Config, name string, now time.Time) (*Rotation, error) {
	if name != "runner" && name != "issuer" {
		return nil, fmt.Errorf("--rotate-key %q: the keys are runner and issuer", name)
	}
	// The store's lock says custodyd is not running: it must not sign with
	// a key whose files change under it.
	db, err := store.Open(runner.StorePath(cfg.Runner))
	if err != nil {
		return nil, fmt.Errorf("rotate %s key: custodyd must be stopped first (%w)", name, err)
	}
	defer db.Close()
	keyDir := filepath.Join(cfg.Runner.StateDir, "keys")
	old, created, err := keys.LoadOrCreate(keyDir, name)
	if err != nil {
		return nil, fmt.Errorf("rotate %s key: %w", name, err)
	}
	if created {
		return nil, fmt.Errorf("rotate %s key: there was no %s key to rotate (one was just made; custodyd will use it)", name, name)
	}
	next, _, err := keys.LoadOrCreate(keyDir, name+"-next")
	if err != nil {
		return nil, fmt.Errorf("rotate %s key: %w", name, err)
	}
	rec := Rotation{Key: name, Retired: old.ID(), Successor: next.ID(), At: now.UTC()}
	p, err := rec.payload()
	if err != nil {
		return nil, err
	}
	sig, err := old.Sign(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("rotate %s key: sign the hand-over: %w", name, err)
	}
	rec.Signature = base64.StdEncoding.EncodeToString(sig)
	retired := filepath.Join(keyDir, "retired")
	if err := os.MkdirAll(retired, 0o700); err != nil {
		return nil, err
	}
	body, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return nil, err
	}
	base := filepath.Join(retired, name+"-"+old.ID())
	for _, f := range []struct {
		path string
		data []byte
	}{{base + ".pub", old.PublicPEM()}, {base + ".json", append(body, '\n')}} {
		if err := writeSynced(f.path, f.data); err != nil {
			return nil, fmt.Errorf("rotate %s key: %w", name, err)
		}
	}
	for _, ext := range []string{".pub", ".key"} {
		if err := os.Rename(filepath.Join(keyDir, name+"-next"+ext), filepath.Join(keyDir, name+ext)); err != nil {
			return nil, fmt.Errorf("rotate %s key: install the new key: %w", name, err)
		}
	}
	if err := syncDir(keyDir); err != nil {
		return nil, err
	}
	return &rec, nil
}

// writeSynced creates path new (0644: public material) and syncs it and
// its directory.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errors.Join(err, os.Remove(path))
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// runRotate is custodyd --rotate-key NAME: rotate and print the record.
func runRotate(ctx context.Context, configPath, name string) error {
	cfg, err := loadConfig(configPath)
	if err != nil {
		return err
	}
	rec, err := rotateKey(ctx, *cfg, name, time.Now())
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rec); err != nil {
		return err
	}
	_, err = os.Stdout.Write(buf.Bytes())
	return err
}

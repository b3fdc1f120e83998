package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/store"
)

// rotateKey replaces custodyd's runner or issuer key while custodyd is
// stopped (it refuses while the store is held): see keys.Rotate.
func rotateKey(ctx context.Context, cfg config.Config, name string, now time.Time) (*keys.Rotation, error) {
	return rotateKeySteps(ctx, cfg, name, now, nil)
}

// rotateKeySteps is rotateKey with after called once each step is durable;
// an error from it stops the rotation there (the tests' crash).
func rotateKeySteps(ctx context.Context, cfg config.Config, name string, now time.Time, after func(step string) error) (*keys.Rotation, error) {
	if name != "runner" && name != "issuer" {
		return nil, fmt.Errorf("--rotate-key %q: the keys are runner and issuer", name)
	}
	// The store's lock says custodyd is not running: it must not sign with
	// a key whose files change under it.
	db, err := store.Open(host.StorePath(runnerConfig(cfg.Runner)))
	if err != nil {
		return nil, fmt.Errorf("rotate %s key: custodyd must be stopped first (%w)", name, err)
	}
	defer db.Close()
	o := keys.RotateOptions{After: after}
	if name == "runner" {
		// Every head is signed by the current runner key, so a retired
		// one that leaks cannot sign a head for a log cut back.
		o.ReSignHead = func(ctx context.Context, old *keys.Verifier, next *keys.Signer) error {
			return evidence.ReSignOpLogHead(ctx, opLogPath(cfg.Runner.StateDir), old, next)
		}
	}
	return keys.Rotate(ctx, keyDir(cfg.Runner.StateDir), name, now, o)
}

// keyDir is where custodyd keeps its keys.
func keyDir(stateDir string) string { return filepath.Join(stateDir, "keys") }

// Rotate is custodyd --rotate-key NAME: rotate the key of the
// configuration at configPath and print the record.
func Rotate(ctx context.Context, configPath, name string) error {
	cfg, err := config.Load(configPath)
	if err != nil {
		return err
	}
	// A fault-injection build dies at the step CUSTODY_FAULT names
	// (rotate-STEP), as a crash would; a production build has no hook.
	kill := faultHook()
	rec, err := rotateKeySteps(ctx, *cfg, name, time.Now(), func(step string) error {
		if kill != nil {
			kill("rotate-" + step)
		}
		return nil
	})
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

package keys

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/custody-dev/custody/internal/durable"
	"github.com/custody-dev/custody/internal/regfile"
)

// maxRotationRecord bounds a hand-over record as custodyd reads it back.
const maxRotationRecord = 64 << 10

// RetiredKey is a key a rotation retired, and when.
type RetiredKey struct {
	Key *Verifier
	At  time.Time
	// Successor is the key the rotation handed over to.
	Successor string
}

// RetiredKeys lists name's keys that rotations retired, from
// keyDir/retired, each record verified with the key it retires.
func RetiredKeys(ctx context.Context, keyDir, name string) ([]RetiredKey, error) {
	dir := filepath.Join(keyDir, "retired")
	paths, err := filepath.Glob(filepath.Join(dir, name+"-*.json"))
	if err != nil {
		return nil, err
	}
	var out []RetiredKey
	for _, p := range paths {
		pub, err := LoadPublic(strings.TrimSuffix(p, ".json") + ".pub")
		if err != nil {
			return nil, fmt.Errorf("retired %s key: %w", name, err)
		}
		rec, err := ReadRotation(ctx, p, pub)
		if err != nil {
			return nil, err
		}
		out = append(out, RetiredKey{Key: pub, At: rec.At, Successor: rec.Successor})
	}
	return out, nil
}

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
func VerifyRotation(ctx context.Context, r Rotation, retired *Verifier) error {
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

// Rotation steps, in order, as Rotate reports them to its After hook; a
// rotation interrupted after any of them is finished by running
// custodyd --rotate-key again.
const (
	StepNextPrivate   = "next-private" // NAME-next.key made, its public key not yet
	StepNextKey       = "next-key"     // NAME-next.{key,pub} made
	StepRetiredPublic = "retired-pub"  // retired/NAME-OLD.pub written
	StepRecord        = "record"       // retired/NAME-OLD.json written (signed by the old key)
	StepHead          = "head"         // with a ReSignHead hook (the runner key): the operations log's head re-signed by the successor
	StepPublic        = "public"       // NAME-next.pub renamed over NAME.pub
	StepPrivate       = "private"      // NAME-next.key renamed over NAME.key
)

// RotateOptions are Rotate's hooks.
type RotateOptions struct {
	// ReSignHead, if set, re-signs what the old key signed last with the
	// successor once the hand-over record is written (the runner key: the
	// operations log's head), before the successor is installed.
	ReSignHead func(ctx context.Context, old *Verifier, next *Signer) error
	// After is called once each step is durable; an error from it stops
	// the rotation there (the tests' crash, a fault build's kill).
	After func(step string) error
}

// Rotate replaces key name in keyDir (custodyd's runner or issuer key,
// while custodyd is stopped: the caller holds its store): a new key is
// made, the old one signs the hand-over record, its public key is kept in
// keyDir/retired, and the new key takes the old one's file names (the
// private key last, by rename, so the old private bytes are gone).
//
// It is resumable: every step either finds its result already in place
// (the staged key, the retired public key, a record the old key signed
// naming that successor) and keeps it, or makes it, so running it again
// after a crash at any step finishes that rotation instead of refusing or
// starting another. Until it is finished custodyd refuses to start
// (ErrKeyMismatch, or a staged key it will not sign with: see Unfinished).
func Rotate(ctx context.Context, keyDir, name string, now time.Time, o RotateOptions) (*Rotation, error) {
	step := func(s string) error {
		if o.After == nil {
			return nil
		}
		return o.After(s)
	}
	retired := filepath.Join(keyDir, "retired")
	stagedKey := filepath.Join(keyDir, name+"-next.key")
	stagedPub := filepath.Join(keyDir, name+"-next.pub")
	if exists(stagedKey) && !exists(stagedPub) {
		installing, err := stagedWithoutPublic(keyDir, name)
		if err != nil {
			return nil, err
		}
		if installing {
			// Interrupted between the two renames: NAME.pub is already the
			// successor's and the record is written; install the private key.
			return finishInstall(ctx, keyDir, retired, name, stagedKey, step)
		}
		// Interrupted while the successor was staged: its public key is
		// written below (LoadOrCreate), and the rotation goes on.
	}
	old, created, err := LoadOrCreate(keyDir, name)
	if err != nil {
		return nil, fmt.Errorf("rotate %s key: %w", name, err)
	}
	if created {
		return nil, fmt.Errorf("rotate %s key: there was no %s key to rotate (one was just made; custodyd will use it)", name, name)
	}
	if !exists(stagedKey) {
		if _, err := CreatePrivate(keyDir, name+"-next"); err != nil {
			return nil, fmt.Errorf("rotate %s key: stage the successor: %w", name, err)
		}
	}
	if err := step(StepNextPrivate); err != nil {
		return nil, err
	}
	next, _, err := LoadOrCreate(keyDir, name+"-next")
	if err != nil {
		return nil, fmt.Errorf("rotate %s key: %w", name, err)
	}
	if err := step(StepNextKey); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(retired, 0o700); err != nil {
		return nil, err
	}
	base := filepath.Join(retired, name+"-"+old.ID())
	if err := writeSynced(base+".pub", old.PublicPEM()); err != nil {
		return nil, fmt.Errorf("rotate %s key: %w", name, err)
	}
	if err := step(StepRetiredPublic); err != nil {
		return nil, err
	}
	rec, err := ReadRotation(ctx, base+".json", old.Verifier())
	switch {
	case errors.Is(err, os.ErrNotExist):
		if rec, err = signRotation(ctx, old, name, next.ID(), now); err != nil {
			return nil, err
		}
		body, err := json.MarshalIndent(rec, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := writeSynced(base+".json", append(body, '\n')); err != nil {
			return nil, fmt.Errorf("rotate %s key: %w", name, err)
		}
	case err != nil:
		return nil, fmt.Errorf("rotate %s key: %w", name, err)
	case rec.Successor != next.ID():
		return nil, fmt.Errorf("rotate %s key: %s hands %s over to %s, but the staged key is %s; move the staged %s-next.{key,pub} aside and retry", name, base+".json", old.ID(), rec.Successor, next.ID(), name)
	}
	if err := step(StepRecord); err != nil {
		return nil, err
	}
	if o.ReSignHead != nil {
		if err := o.ReSignHead(ctx, old.Verifier(), next); err != nil {
			return nil, fmt.Errorf("rotate %s key: %w", name, err)
		}
		if err := step(StepHead); err != nil {
			return nil, err
		}
	}
	if err := os.Rename(stagedPub, filepath.Join(keyDir, name+".pub")); err != nil {
		return nil, fmt.Errorf("rotate %s key: install the new public key: %w", name, err)
	}
	if err := durable.SyncDir(keyDir); err != nil {
		return nil, err
	}
	if err := step(StepPublic); err != nil {
		return nil, err
	}
	return finishInstall(ctx, keyDir, retired, name, stagedKey, step)
}

// stagedWithoutPublic tells the two ways a rotation leaves NAME-next.key
// staged without NAME-next.pub. installing: it stopped between its two
// renames, NAME.pub already holds the staged key's public key, and only
// the private key is left to install. Otherwise it stopped while staging
// the successor, before anything was handed over to it (a record names
// its successor only once NAME-next.pub exists), and the current pair
// NAME.{key,pub} is whole: the rotation goes on with the staged key, or,
// when a crash left the staged key unreadable (never used for anything),
// with a new one in its place. Anything else is refused with what holds.
func stagedWithoutPublic(keyDir, name string) (installing bool, err error) {
	stagedKey := filepath.Join(keyDir, name+"-next.key")
	pub, err := LoadPublic(filepath.Join(keyDir, name+".pub"))
	if err != nil {
		return false, fmt.Errorf("rotate %s key: %w", name, err)
	}
	staged, serr := LoadPrivate(keyDir, name+"-next")
	if serr == nil && staged.ID() == pub.ID() {
		return true, nil
	}
	current, err := LoadPrivate(keyDir, name)
	if err != nil || current.ID() != pub.ID() {
		return false, fmt.Errorf("rotate %s key: %s is staged without its public key, and %s.key does not match %s.pub (%v): the key files were changed by hand; restore them from a backup", name, stagedKey, name, name, err)
	}
	if serr != nil {
		slog.Warn("rotation: removing a staged key a crash left unreadable; it was never used, a new one is staged", "path", stagedKey, "err", serr)
		if err := os.Remove(stagedKey); err != nil {
			return false, fmt.Errorf("rotate %s key: remove the unreadable staged key: %w", name, err)
		}
		if err := durable.SyncDir(keyDir); err != nil {
			return false, err
		}
	}
	return false, nil
}

// ErrRotationUnfinished reports a key rotation custodyd --rotate-key began
// and did not finish: custodyd does not start on it.
var ErrRotationUnfinished = errors.New("key rotation unfinished")

// Unfinished refuses to start on a rotation of key name in keyDir that
// stopped part way: a staged NAME-next key (whose files custodyd must not
// sign with or replace), or a hand-over record that retires the current
// key (NAME.pub) while no successor is installed. It only reads, so a
// refused start changes nothing.
func Unfinished(ctx context.Context, keyDir, name string) error {
	for _, f := range []string{name + "-next.key", name + "-next.pub"} {
		if exists(filepath.Join(keyDir, f)) {
			return fmt.Errorf("%w: %s key: %s is staged; fix: finish with custodyd --rotate-key %s", ErrRotationUnfinished, name, f, name)
		}
	}
	current, err := LoadPublic(filepath.Join(keyDir, name+".pub"))
	if errors.Is(err, os.ErrNotExist) {
		return nil // a first start: no key yet
	}
	if err != nil {
		return fmt.Errorf("%s key: %w", name, err)
	}
	retired, err := RetiredKeys(ctx, keyDir, name)
	if err != nil {
		return fmt.Errorf("retired %s keys: %w", name, err)
	}
	for _, r := range retired {
		if r.Key.ID() == current.ID() {
			return fmt.Errorf("%w: %s key %s is the current key, but a rotation record in keys/retired retires it; fix: finish with custodyd --rotate-key %s", ErrRotationUnfinished, name, current.ID(), name)
		}
	}
	return nil
}

// finishInstall renames the staged private key over NAME.key, once NAME.pub
// is already the successor's, and returns the record that hands over to it.
func finishInstall(ctx context.Context, keyDir, retired, name, stagedKey string, step func(string) error) (*Rotation, error) {
	pub, err := LoadPublic(filepath.Join(keyDir, name+".pub"))
	if err != nil {
		return nil, fmt.Errorf("rotate %s key: %w", name, err)
	}
	// The staged private key itself must be the successor NAME.pub and the
	// record name: a crash between writing NAME-next.key and NAME-next.pub
	// also leaves the key staged without its public key, while NAME.pub is
	// still the current key's (which an earlier rotation's record hands
	// over to), and that new key must not replace the current one.
	staged, err := LoadPrivate(keyDir, name+"-next")
	if err != nil || staged.ID() != pub.ID() {
		id := "unreadable"
		if err == nil {
			id = staged.ID()
		}
		return nil, fmt.Errorf("rotate %s key: %s is staged without its public key and is %s, not %s, the key %s.pub holds (%v): it is a staged key that was never finished, nothing was handed over to it; fix: remove the partial staged key %s-next.* and retry", name, stagedKey, id, pub.ID(), name, err, name)
	}
	rec, err := handOverTo(ctx, retired, name, pub.ID())
	if err != nil {
		return nil, fmt.Errorf("rotate %s key: %s is staged and %s.pub is its public key, but %w", name, stagedKey, name, err)
	}
	if err := os.Rename(stagedKey, filepath.Join(keyDir, name+".key")); err != nil {
		return nil, fmt.Errorf("rotate %s key: install the new key: %w", name, err)
	}
	if err := durable.SyncDir(keyDir); err != nil {
		return nil, err
	}
	if err := step(StepPrivate); err != nil {
		return nil, err
	}
	// The installed pair must be the successor's, whole.
	now, _, err := LoadOrCreate(keyDir, name)
	if err != nil || now.ID() != rec.Successor {
		return nil, fmt.Errorf("rotate %s key: the installed key is not the successor %s: %v", name, rec.Successor, err)
	}
	return rec, nil
}

// handOverTo finds the verified record in retired that hands name over to
// the key successor.
func handOverTo(ctx context.Context, retired, name, successor string) (*Rotation, error) {
	paths, err := filepath.Glob(filepath.Join(retired, name+"-*.json"))
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		id := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), name+"-"), ".json")
		pub, err := LoadPublic(filepath.Join(retired, name+"-"+id+".pub"))
		if err != nil {
			continue
		}
		rec, err := ReadRotation(ctx, p, pub)
		if err == nil && rec.Successor == successor {
			return rec, nil
		}
	}
	return nil, fmt.Errorf("no record in %s that a retired key signed hands over to %s", retired, successor)
}

// signRotation is the hand-over record from old to successor, signed by old.
func signRotation(ctx context.Context, old *Signer, name, successor string, now time.Time) (*Rotation, error) {
	rec := &Rotation{Key: name, Retired: old.ID(), Successor: successor, At: now.UTC()}
	p, err := rec.payload()
	if err != nil {
		return nil, err
	}
	sig, err := old.Sign(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("rotate %s key: sign the hand-over: %w", name, err)
	}
	rec.Signature = base64.StdEncoding.EncodeToString(sig)
	return rec, nil
}

// ReadRotation reads a hand-over record and verifies it with the key it
// says it retires.
func ReadRotation(ctx context.Context, path string, retired *Verifier) (*Rotation, error) {
	b, err := regfile.ReadFile(path, maxRotationRecord)
	if err != nil {
		return nil, err
	}
	var r Rotation
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("rotation record %s: %w", path, err)
	}
	if err := VerifyRotation(ctx, r, retired); err != nil {
		return nil, fmt.Errorf("rotation record %s: %w", path, err)
	}
	return &r, nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// writeSynced writes path (0644: public material) whole or not at all: a
// staging file, synced, renamed over path, and the directory synced. A
// path already holding exactly data is left as it is (a retried step); one
// holding anything else is refused.
func writeSynced(path string, data []byte) error {
	if have, err := regfile.ReadFile(path, int64(len(data))+1); err == nil {
		if bytes.Equal(have, data) {
			return nil
		}
		return fmt.Errorf("%s exists and holds something else; move it aside", path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return durable.WriteFile(path, data, 0o644)
}

package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/treehash"
)

// ErrConfigChanged means a stored image's record no longer agrees with the
// config blob its digest names: the blob is missing or altered, or the
// record's run defaults are not the blob's.
var ErrConfigChanged = errors.New("the image's stored config does not match its config digest")

const (
	configsName    = "configs"     // config blobs by digest
	configBlobName = "config.json" // the blob inside its entry
)

// keepConfig stores the config blob raw under its digest (already verified
// against it). Every import does, so an image imported before blobs were
// kept gets its blob by being imported again.
func (s *Store) keepConfig(digest string, raw []byte) error {
	dir := filepath.Join(s.dir, configsName)
	if _, err := snapshot.PrepareStoreDir(dir); err != nil {
		return err
	}
	_, _, err := snapshot.Stage(dir, func(staging string) (string, error) {
		return digest, os.WriteFile(filepath.Join(staging, configBlobName), raw, 0o644)
	})
	return err
}

// verifyConfig re-derives img's Config from the kept blob its ConfigDigest
// names: the blob must hash to the digest and give exactly the recorded
// Config. A record without a config digest (a rootfs import) must have no
// Config either.
func (s *Store) verifyConfig(img *Image) error {
	if img.ConfigDigest == "" {
		if img.Config != nil {
			return fmt.Errorf("image %s: the record has a config but no config digest: %w", img.Digest, ErrConfigChanged)
		}
		return nil
	}
	hx, err := treehash.ParseDigest(img.ConfigDigest)
	if err != nil {
		return fmt.Errorf("image %s: config digest: %w", img.Digest, err)
	}
	root, err := os.OpenRoot(filepath.Join(s.dir, configsName, hx))
	if err != nil {
		return fmt.Errorf("image %s: config %s is not kept (%v); fix: import the image again: %w", img.Digest, img.ConfigDigest, err, ErrConfigChanged)
	}
	defer root.Close()
	raw, err := readDocument(root, configBlobName)
	if err != nil {
		return fmt.Errorf("image %s: config %s: %v; fix: import the image again: %w", img.Digest, img.ConfigDigest, err, ErrConfigChanged)
	}
	sum := sha256.Sum256(raw)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != img.ConfigDigest {
		return fmt.Errorf("image %s: config %s now hashes to %s; fix: import the image again: %w", img.Digest, img.ConfigDigest, got, ErrConfigChanged)
	}
	cf, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("image %s: config %s: %v: %w", img.Digest, img.ConfigDigest, err, ErrConfigChanged)
	}
	want, err := json.Marshal(configOf(cf))
	if err != nil {
		return err
	}
	got, err := json.Marshal(img.Config)
	if err != nil {
		return err
	}
	if !bytes.Equal(want, got) {
		return fmt.Errorf("image %s: the record's run defaults %s are not those of config %s (%s): %w", img.Digest, got, img.ConfigDigest, want, ErrConfigChanged)
	}
	return nil
}

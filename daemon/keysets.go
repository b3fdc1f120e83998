package daemon

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/keys"
)

// maxRotationRecord bounds a hand-over record as custodyd reads it back.
const maxRotationRecord = 64 << 10

// retiredKey is a key a rotation retired, and when.
type retiredKey struct {
	key *keys.Verifier
	at  time.Time
	// successor is the key the rotation handed over to.
	successor string
	// revokedAt, once the key is revoked: nothing it signed from then on
	// is trusted.
	revokedAt time.Time
}

// retiredKeys lists name's keys that rotations retired, from
// stateDir/keys/retired, each record verified with the key it retires.
func retiredKeys(ctx context.Context, stateDir, name string) ([]retiredKey, error) {
	dir := filepath.Join(stateDir, "keys", "retired")
	paths, err := filepath.Glob(filepath.Join(dir, name+"-*.json"))
	if err != nil {
		return nil, err
	}
	var out []retiredKey
	for _, p := range paths {
		pub, err := keys.LoadPublic(strings.TrimSuffix(p, ".json") + ".pub")
		if err != nil {
			return nil, fmt.Errorf("retired %s key: %w", name, err)
		}
		rec, err := readRotation(ctx, p, pub)
		if err != nil {
			return nil, err
		}
		out = append(out, retiredKey{key: pub, at: rec.At, successor: rec.Successor})
	}
	return out, nil
}

// keySet lists key name's current key and the keys rotations retired,
// each with its window, from the hand-over records in stateDir/keys/retired
// (read and verified by the one reader, retiredKeys).
func (s *server) keySet(ctx context.Context, name string, current *keys.Signer) ([]api.PublicKey, error) {
	revoked, err := s.revokedAt()
	if err != nil {
		return nil, err
	}
	recs, err := retiredKeys(ctx, s.cfg.Runner.StateDir, name)
	if err != nil {
		return nil, err
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].at.Before(recs[j].at) })
	// A key's window opens at the rotation that made it and closes at the
	// one that retired it.
	from := map[string]time.Time{}
	for _, r := range recs {
		from[r.successor] = r.at
	}
	window := func(k *api.PublicKey, until time.Time) {
		if t, ok := from[k.ID]; ok {
			k.NotBefore = &t
		}
		if !until.IsZero() {
			k.NotAfter = &until
		}
	}
	var out []api.PublicKey
	for _, r := range recs {
		k := api.PublicKey{ID: r.key.ID(), PEM: string(r.key.PublicPEM())}
		window(&k, r.at)
		if at, ok := revoked[k.ID]; ok {
			k.RevokedAt = &at
		}
		out = append(out, k)
	}
	cur := api.PublicKey{ID: current.ID(), PEM: string(current.PublicPEM()), Current: true}
	window(&cur, time.Time{})
	return append(out, cur), nil
}

// handleKeys serves the runner's public keys and their windows (custody
// trust export).
func (s *server) handleKeys(w http.ResponseWriter, r *http.Request) {
	var ks api.Keys
	var err error
	if ks.Runners, err = s.keySet(r.Context(), "runner", s.runnerID); err == nil {
		ks.Issuers, err = s.keySet(r.Context(), "issuer", s.issuer)
	}
	if err != nil {
		writeError(w, &api.Error{Code: api.CodeInternal, Message: strings.TrimSpace(err.Error())})
		return
	}
	writeJSON(w, ks)
}

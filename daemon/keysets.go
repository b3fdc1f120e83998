package daemon

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/keys"
)

// keySet lists key name's current key and the keys rotations retired,
// each with its window, from the hand-over records in stateDir/keys/retired
// as they are now (read and verified by the one reader, keys.RetiredKeys).
func (s *server) keySet(ctx context.Context, name string, current *keys.Signer) ([]api.PublicKey, error) {
	revoked, err := s.revokedAt()
	if err != nil {
		return nil, err
	}
	recs, err := keys.RetiredKeys(ctx, keyDir(s.cfg.Runner.StateDir), name)
	if err != nil {
		return nil, err
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].At.Before(recs[j].At) })
	// A key's window opens at the rotation that made it and closes at the
	// one that retired it.
	from := map[string]time.Time{}
	for _, r := range recs {
		from[r.Successor] = r.At
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
		k := api.PublicKey{ID: r.Key.ID(), PEM: string(r.Key.PublicPEM())}
		window(&k, r.At)
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
	if ks.Runners, err = s.keySet(r.Context(), "runner", s.runnerKeys.Current); err == nil {
		ks.Issuers, err = s.keySet(r.Context(), "issuer", s.issuerKeys.Current)
	}
	if err != nil {
		writeError(w, &api.Error{Code: api.CodeInternal, Message: strings.TrimSpace(err.Error())})
		return
	}
	writeJSON(w, ks)
}

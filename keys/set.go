package keys

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Set is one key name's keys as custodyd holds them: the current key, the
// keys rotations retired (each with when, and its successor: the overlap
// windows) and when any of them was revoked. It is built once at start, as
// rotations happen only while custodyd is stopped, and shared by what
// checks a signature against these keys: the grant verifier's overlap,
// receipt ownership checks and revocation.
type Set struct {
	// Name is the key's name: runner or issuer.
	Name string
	// Current signs from now on.
	Current *Signer
	// Retired are the keys rotations retired, oldest first.
	Retired []RetiredKey

	mu      sync.Mutex
	revoked map[string]time.Time
}

// LoadSet is name's key set in keyDir, current its current key: the
// retired keys come from the hand-over records in keyDir/retired, each
// verified with the key it retires (RetiredKeys).
func LoadSet(ctx context.Context, keyDir, name string, current *Signer) (*Set, error) {
	retired, err := RetiredKeys(ctx, keyDir, name)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(retired, func(a, b RetiredKey) int { return a.At.Compare(b.At) })
	return &Set{Name: name, Current: current, Retired: retired, revoked: map[string]time.Time{}}, nil
}

// Verifiers are the current key's verifier and the retired keys'.
func (s *Set) Verifiers() []*Verifier {
	out := []*Verifier{s.Current.Verifier()}
	for _, r := range s.Retired {
		out = append(out, r.Key)
	}
	return out
}

// IsRetired says whether id is one of the retired keys.
func (s *Set) IsRetired(id string) bool {
	return slices.ContainsFunc(s.Retired, func(r RetiredKey) bool { return r.Key.ID() == id })
}

// Revoke records that key id is revoked from at: nothing it signed from
// then on is trusted.
func (s *Set) Revoke(id string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revoked[id] = at
}

// RevokedAt is when key id was revoked, if it was.
func (s *Set) RevokedAt(id string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.revoked[id]
	return at, ok
}

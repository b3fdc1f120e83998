package request

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// Canonical returns the canonical encoding of the phase: encoding/json of the
// Phase struct, fields in declaration order, map keys sorted, optional fields
// left out when empty. The same phase always encodes to the same bytes, so
// grants bind a request by the digest of this encoding (see Digest), never
// by the YAML text, whose spelling may vary.
//
// It encodes the phase as it stands. After Load, relative input sources are
// already resolved, so the encoding names the host paths that will be
// snapshotted. Spellings that differ only in an optional default (tier left
// out versus "tier: production") encode differently; a grant bound to one
// then does not match the other, which refuses rather than widens.
func (p *Phase) Canonical() ([]byte, error) {
	if p == nil {
		return nil, errors.New("request: canonical encoding of a nil phase")
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("request: canonical encoding: %w", err)
	}
	return b, nil
}

// Digest returns "sha256:<64 lowercase hex>" of Canonical: the identity of
// the phase that grants bind.
func (p *Phase) Digest() (string, error) {
	b, err := p.Canonical()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// DecodeCanonical decodes a phase from its canonical encoding, as a grant
// carries it: strict JSON (unknown fields refused), then Validate. It is
// the one reader of that encoding, for the launch and for a reviewer.
func DecodeCanonical(b []byte) (*Phase, error) {
	var p Phase
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("request: canonical phase: %w", err)
	}
	if dec.More() {
		return nil, errors.New("request: canonical phase: data after the object")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

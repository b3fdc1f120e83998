package evidence

import (
	"context"
	"encoding/json"
	"fmt"

	cdsse "github.com/custody-dev/custody/internal/dsse"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/predicate"
)

const (
	// MaxEnvelopeSize is the largest receipt envelope Verify reads, in
	// bytes.
	MaxEnvelopeSize = 4 << 20
	// MaxSignatures is the most signatures a receipt envelope may carry.
	MaxSignatures = 4
	// maxSignatureSize bounds one decoded signature; an ASN.1 DER P-256
	// signature is at most 72 bytes.
	maxSignatureSize = 256
	// maxPayloadSize is the largest statement whose envelope fits in
	// MaxEnvelopeSize: base64 grows it by 4/3, and the rest of the
	// envelope takes well under 4 KiB.
	maxPayloadSize = (MaxEnvelopeSize - 4096) / 4 * 3
)

// envelopeLimits are what decodeEnvelope requires of a custody envelope.
var envelopeLimits = cdsse.Limits{
	PayloadType:      predicate.PayloadType,
	MaxSignatures:    MaxSignatures,
	MaxSignatureSize: maxSignatureSize,
}

// decodeEnvelope decodes a DSSE envelope strictly: a JSON object with
// exactly the members payloadType, payload and signatures, each once, in any
// order, and nothing after it; payload and sig in standard padded base64; 1
// to MaxSignatures signatures, each with exactly keyid and sig, non-empty and
// distinct keyids. The payload type must be predicate.PayloadType.
func decodeEnvelope(data []byte) (*cdsse.Envelope, error) {
	if len(data) > MaxEnvelopeSize {
		return nil, fmt.Errorf("envelope is %d bytes, more than the limit of %d", len(data), MaxEnvelopeSize)
	}
	return cdsse.DecodeEnvelope(data, envelopeLimits)
}

// Subject is an in-toto resource descriptor as custody statements use it:
// a name and its digests.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// statement is the wire form of an in-toto Statement v1 with a raw
// predicate.
type statement = cdsse.Statement[json.RawMessage]

// encodeStatement returns the canonical statement of pred (any value that
// encodes as a JSON object) with the given type and subjects.
func encodeStatement(predicateType string, subjects []Subject, pred any) ([]byte, error) {
	p, err := cdsse.CanonicalJSON(pred)
	if err != nil {
		return nil, fmt.Errorf("encode predicate: %w", err)
	}
	subs := make([]cdsse.Subject, len(subjects))
	for i, sub := range subjects {
		subs[i] = cdsse.Subject(sub)
	}
	out, err := cdsse.CanonicalJSON(&statement{
		Type:          cdsse.StatementType,
		Subject:       subs,
		PredicateType: predicateType,
		Predicate:     p,
	})
	if err != nil {
		return nil, fmt.Errorf("encode statement: %w", err)
	}
	return out, nil
}

// signStatement DSSE-signs payload with s and returns the envelope JSON,
// after checking that the signature verifies and that the envelope decodes
// as Verify decodes it.
func signStatement(ctx context.Context, s *keys.Signer, payload []byte) ([]byte, error) {
	if len(payload) > maxPayloadSize {
		return nil, fmt.Errorf("statement is %d bytes; an envelope must fit in %d bytes", len(payload), MaxEnvelopeSize)
	}
	out, err := cdsse.Sign(ctx, s, predicate.PayloadType, payload)
	if err != nil {
		return nil, err
	}
	return out, nil
}

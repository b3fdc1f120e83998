package grant

import (
	"context"
	"errors"
	"fmt"

	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"

	cdsse "github.com/custody-dev/custody/internal/dsse"
	"github.com/custody-dev/custody/predicate"
)

// Mint validates p, wraps it in a grant statement whose subject is p.Phase,
// signs it with issuer and returns the DSSE envelope as JSON.
//
// Mint fills nothing in: every field of p must already be set and
// consistent (see the field documentation of [Predicate]); a missing or
// inconsistent field is an error naming it. The issuer must report a
// non-empty key ID (a *keys.Signer reports its keys.KeyID). Mint checks the
// statement it produced with in-toto's parser and the signature it produced
// with issuer before returning the envelope.
func Mint(ctx context.Context, issuer cdsse.Signer, p Predicate) ([]byte, error) {
	if err := checkIssuer(ctx, issuer); err != nil {
		return nil, err
	}
	name, err := validate(&p)
	if err != nil {
		return nil, fmt.Errorf("grant: mint: invalid predicate: %w", err)
	}
	payload, frame, err := encodeStatement(&p, name)
	if err != nil {
		return nil, fmt.Errorf("grant: mint: %w", err)
	}
	return signStatement(ctx, issuer, payload, frame, func(b []byte) error {
		_, _, err := decodeStatement(b)
		return err
	})
}

// checkIssuer checks what every mint needs before it validates anything:
// a live ctx and an issuer that names its key.
func checkIssuer(ctx context.Context, issuer cdsse.Signer) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("grant: mint: %w", err)
	}
	if issuer == nil {
		return errors.New("grant: mint: nil issuer")
	}
	keyID, err := issuer.KeyID()
	if err != nil || keyID == "" {
		return fmt.Errorf("grant: mint: issuer has no key ID (%v)", err)
	}
	return nil
}

// signStatement checks the canonical statement payload (its size, that
// decode, the statement's own decoder, accepts it, and in-toto's parser
// accepts its frame) and signs it with issuer.
func signStatement(ctx context.Context, issuer cdsse.Signer, payload, frame []byte, decode func([]byte) error) ([]byte, error) {
	if len(payload) > maxPayloadSize {
		return nil, fmt.Errorf("grant: mint: statement is %d bytes; an envelope must fit in %d bytes", len(payload), MaxEnvelopeSize)
	}

	// What we emit must be exactly what Verify accepts, and a valid in-toto
	// statement by in-toto's own parser.
	if err := decode(payload); err != nil {
		return nil, fmt.Errorf("grant: mint: statement does not decode: %w", err)
	}
	// in-toto's parser checks the statement's frame (type, subjects,
	// predicateType); the predicate is any JSON object to it, and decode
	// has just read it as the predicate it is, so the frame is checked
	// around an empty one: parsing the whole grant into a protobuf Struct
	// was most of minting's CPU after the signature (evidence.SignReceipt
	// does the same).
	var st intoto.Statement
	if err := protojson.Unmarshal(frame, &st); err != nil {
		return nil, fmt.Errorf("grant: mint: in-toto parser refuses the statement: %w", err)
	}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("grant: mint: in-toto refuses the statement: %w", err)
	}

	out, err := cdsse.Sign(ctx, issuer, predicate.PayloadType, payload)
	if err != nil {
		return nil, fmt.Errorf("grant: mint: %w", err)
	}
	return out, nil
}

// maxPayloadSize is the largest statement whose envelope can fit in
// MaxEnvelopeSize: base64 grows it by 4/3, and the rest of the envelope
// takes well under 4 KiB.
const maxPayloadSize = (MaxEnvelopeSize - 4096) / 4 * 3

package evidence

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"

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

	statementType = "https://in-toto.io/Statement/v1"
)

// envelope is a strictly decoded DSSE envelope.
type envelope struct {
	payloadType string
	payloadB64  string
	payload     []byte
	signatures  []signature
}

type signature struct {
	keyID  string
	sigB64 string
	sig    []byte
}

// decodeEnvelope decodes a DSSE envelope strictly: a JSON object with
// exactly the members payloadType, payload and signatures, each once, in any
// order, and nothing after it; payload and sig in standard padded base64; 1
// to MaxSignatures signatures, each with exactly keyid and sig, non-empty and
// distinct keyids. The payload type must be predicate.PayloadType.
func decodeEnvelope(data []byte) (*envelope, error) {
	if len(data) > MaxEnvelopeSize {
		return nil, fmt.Errorf("envelope is %d bytes, more than the limit of %d", len(data), MaxEnvelopeSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var env envelope
	err := readObject(dec, []string{"payloadType", "payload", "signatures"}, func(key string) error {
		switch key {
		case "payloadType":
			return readString(dec, &env.payloadType)
		case "payload":
			return readString(dec, &env.payloadB64)
		default: // "signatures"
			return readSignatures(dec, &env.signatures)
		}
	})
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
	}
	if env.payloadType != predicate.PayloadType {
		return nil, fmt.Errorf("payloadType %q is not %q", clip(env.payloadType), predicate.PayloadType)
	}
	strictB64 := base64.StdEncoding.Strict()
	env.payload, err = strictB64.DecodeString(env.payloadB64)
	if err != nil {
		return nil, fmt.Errorf("payload is not standard padded base64: %v", err)
	}
	if len(env.payload) == 0 {
		return nil, errors.New("empty payload")
	}
	if n := len(env.signatures); n == 0 || n > MaxSignatures {
		return nil, fmt.Errorf("%d signatures, want 1 to %d", n, MaxSignatures)
	}
	seen := make(map[string]bool, len(env.signatures))
	for i := range env.signatures {
		s := &env.signatures[i]
		if s.keyID == "" {
			return nil, fmt.Errorf("signatures[%d]: empty keyid", i)
		}
		if seen[s.keyID] {
			return nil, fmt.Errorf("signatures[%d]: keyid %q appears twice", i, clip(s.keyID))
		}
		seen[s.keyID] = true
		s.sig, err = strictB64.DecodeString(s.sigB64)
		if err != nil {
			return nil, fmt.Errorf("signatures[%d]: sig is not standard padded base64: %v", i, err)
		}
		if len(s.sig) == 0 || len(s.sig) > maxSignatureSize {
			return nil, fmt.Errorf("signatures[%d]: sig is %d bytes, want 1 to %d", i, len(s.sig), maxSignatureSize)
		}
	}
	return &env, nil
}

func readSignatures(dec *json.Decoder, out *[]signature) error {
	tok, err := token(dec)
	if err != nil {
		return err
	}
	if tok != json.Delim('[') {
		return errors.New("signatures is not an array")
	}
	for dec.More() {
		if len(*out) == MaxSignatures {
			return fmt.Errorf("more than %d signatures", MaxSignatures)
		}
		var s signature
		err := readObject(dec, []string{"keyid", "sig"}, func(key string) error {
			if key == "keyid" {
				return readString(dec, &s.keyID)
			}
			return readString(dec, &s.sigB64)
		})
		if err != nil {
			return fmt.Errorf("signatures[%d]: %w", len(*out), err)
		}
		*out = append(*out, s)
	}
	_, err = token(dec) // ']'
	return err
}

// token is dec.Token with a premature end of input reported as such.
func token(dec *json.Decoder) (json.Token, error) {
	tok, err := dec.Token()
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return tok, err
}

// readObject reads a JSON object whose members are exactly fields, each
// once, compared case-sensitively, calling member to read each value.
func readObject(dec *json.Decoder, fields []string, member func(key string) error) error {
	tok, err := token(dec)
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		return errors.New("not a JSON object")
	}
	seen := make([]bool, len(fields))
	for dec.More() {
		tok, err := token(dec)
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return errors.New("object key is not a string")
		}
		i := -1
		for j, f := range fields {
			if f == key {
				i = j
			}
		}
		switch {
		case i < 0:
			return fmt.Errorf("unknown member %q", clip(key))
		case seen[i]:
			return fmt.Errorf("member %q appears twice", key)
		}
		seen[i] = true
		if err := member(key); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	if _, err := token(dec); err != nil { // '}'
		return err
	}
	for i, ok := range seen {
		if !ok {
			return fmt.Errorf("missing member %q", fields[i])
		}
	}
	return nil
}

// readString reads a JSON string (not null, not any other type).
func readString(dec *json.Decoder, out *string) error {
	tok, err := token(dec)
	if err != nil {
		return err
	}
	s, ok := tok.(string)
	if !ok {
		return fmt.Errorf("%s is not a string", clip(fmt.Sprint(tok)))
	}
	*out = s
	return nil
}

// Subject is an in-toto resource descriptor as custody statements use it:
// a name and its digests.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// statement is the wire form of an in-toto Statement v1 with a raw
// predicate.
type statement struct {
	Type          string          `json:"_type"`
	Subject       []Subject       `json:"subject"`
	PredicateType string          `json:"predicateType"`
	Predicate     json.RawMessage `json:"predicate"`
}

// canonicalJSON encodes v as custody statements are signed: encoding/json
// with struct fields in declaration order, map keys sorted, no
// insignificant whitespace and no HTML escaping.
func canonicalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'}), nil
}

// encodeStatement returns the canonical statement of pred (any value that
// encodes as a JSON object) with the given type and subjects.
func encodeStatement(predicateType string, subjects []Subject, pred any) ([]byte, error) {
	p, err := canonicalJSON(pred)
	if err != nil {
		return nil, fmt.Errorf("encode predicate: %w", err)
	}
	out, err := canonicalJSON(&statement{
		Type:          statementType,
		Subject:       subjects,
		PredicateType: predicateType,
		Predicate:     p,
	})
	if err != nil {
		return nil, fmt.Errorf("encode statement: %w", err)
	}
	return out, nil
}

// strictUnmarshal decodes a single JSON value into v, refusing unknown
// fields and trailing data.
func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}

// signStatement DSSE-signs payload with s and returns the envelope JSON,
// after checking that the signature verifies and that the envelope decodes
// as Verify decodes it.
func signStatement(ctx context.Context, s *keys.Signer, payload []byte) ([]byte, error) {
	if len(payload) > maxPayloadSize {
		return nil, fmt.Errorf("statement is %d bytes; an envelope must fit in %d bytes", len(payload), MaxEnvelopeSize)
	}
	es, err := dsse.NewEnvelopeSigner(s)
	if err != nil {
		return nil, err
	}
	env, err := es.SignPayload(ctx, predicate.PayloadType, payload)
	if err != nil {
		return nil, fmt.Errorf("sign with %s: %w", s.ID(), err)
	}
	out, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	dec, err := decodeEnvelope(out)
	if err != nil {
		return nil, fmt.Errorf("envelope does not decode: %w", err)
	}
	if len(dec.signatures) != 1 || dec.signatures[0].keyID != s.ID() {
		return nil, fmt.Errorf("envelope does not carry exactly one signature by %s", s.ID())
	}
	if err := s.Verify(ctx, dsse.PAE(predicate.PayloadType, payload), dec.signatures[0].sig); err != nil {
		return nil, fmt.Errorf("signature by %s does not verify: %w", s.ID(), err)
	}
	return out, nil
}

// clip shortens untrusted text quoted in reasons.
func clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

package grant

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	intoto "github.com/in-toto/attestation/go/v1"

	"github.com/custody-dev/custody/predicate"
)

const (
	// MaxEnvelopeSize is the largest envelope Verify reads, in bytes.
	MaxEnvelopeSize = 1 << 20
	// MaxSignatures is the most signatures an envelope may carry.
	MaxSignatures = 4
	// maxSignatureSize bounds one decoded signature; an ASN.1 DER P-256
	// signature is at most 72 bytes.
	maxSignatureSize = 256
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

// decodeEnvelope decodes a DSSE envelope strictly: a JSON object with exactly
// the members payloadType, payload and signatures, each once, in any order,
// and nothing after it. Every problem is CodeMalformed.
func decodeEnvelope(data []byte) (*envelope, error) {
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
		return nil, Refuse(CodeMalformed, "envelope: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, Refuse(CodeMalformed, "envelope: data after the JSON object")
	}
	if env.payloadType != predicate.PayloadType {
		return nil, Refuse(CodeMalformed, "envelope: payloadType %q is not %q", clip(env.payloadType), predicate.PayloadType)
	}
	strictB64 := base64.StdEncoding.Strict()
	env.payload, err = strictB64.DecodeString(env.payloadB64)
	if err != nil {
		return nil, Refuse(CodeMalformed, "envelope: payload is not standard padded base64: %v", err)
	}
	if len(env.payload) == 0 {
		return nil, Refuse(CodeMalformed, "envelope: empty payload")
	}
	if n := len(env.signatures); n == 0 || n > MaxSignatures {
		return nil, Refuse(CodeMalformed, "envelope: %d signatures, want 1 to %d", n, MaxSignatures)
	}
	seen := make(map[string]bool, len(env.signatures))
	for i := range env.signatures {
		s := &env.signatures[i]
		if s.keyID == "" {
			return nil, Refuse(CodeMalformed, "envelope: signatures[%d]: empty keyid", i)
		}
		if seen[s.keyID] {
			return nil, Refuse(CodeMalformed, "envelope: signatures[%d]: keyid %q appears twice", i, clip(s.keyID))
		}
		seen[s.keyID] = true
		s.sig, err = strictB64.DecodeString(s.sigB64)
		if err != nil {
			return nil, Refuse(CodeMalformed, "envelope: signatures[%d]: sig is not standard padded base64: %v", i, err)
		}
		if len(s.sig) == 0 || len(s.sig) > maxSignatureSize {
			return nil, Refuse(CodeMalformed, "envelope: signatures[%d]: sig is %d bytes, want 1 to %d", i, len(s.sig), maxSignatureSize)
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
		key := tok.(string)
		i := indexOf(fields, key)
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

func indexOf(fields []string, key string) int {
	for i, f := range fields {
		if f == key {
			return i
		}
	}
	return -1
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

// statement is the wire form of an in-toto Statement v1 with a raw predicate.
type statement struct {
	Type          string          `json:"_type"`
	Subject       []subject       `json:"subject"`
	PredicateType string          `json:"predicateType"`
	Predicate     json.RawMessage `json:"predicate"`
}

type subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// canonicalJSON encodes v as custody grants are signed: encoding/json with
// struct fields in declaration order, map keys sorted, no insignificant
// whitespace and no HTML escaping.
func canonicalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'}), nil
}

// encodeStatement returns the canonical statement of p about the phase
// named name.
func encodeStatement(p *Predicate, name string) ([]byte, error) {
	pred, err := canonicalJSON(p)
	if err != nil {
		return nil, fmt.Errorf("encode predicate: %w", err)
	}
	sum := sha256.Sum256(p.Phase)
	st := statement{
		Type: intoto.StatementTypeUri,
		Subject: []subject{{
			Name:   "phase/" + name,
			Digest: map[string]string{"sha256": hex.EncodeToString(sum[:])},
		}},
		PredicateType: predicate.Grant,
		Predicate:     pred,
	}
	out, err := canonicalJSON(&st)
	if err != nil {
		return nil, fmt.Errorf("encode statement: %w", err)
	}
	return out, nil
}

// decodeStatement decodes a grant statement strictly and checks that its
// subject is the phase it carries. It does not validate the predicate.
func decodeStatement(payload []byte) (*Predicate, *subject, error) {
	var st statement
	if err := strictUnmarshal(payload, &st); err != nil {
		return nil, nil, Refuse(CodeMalformed, "statement: %v", err)
	}
	if st.Type != intoto.StatementTypeUri {
		return nil, nil, Refuse(CodeMalformed, "statement: _type %q is not %q", clip(st.Type), intoto.StatementTypeUri)
	}
	if st.PredicateType != predicate.Grant {
		return nil, nil, Refuse(CodeMalformed, "statement: predicateType %q is not %q", clip(st.PredicateType), predicate.Grant)
	}
	if len(st.Subject) != 1 {
		return nil, nil, Refuse(CodeMalformed, "statement: %d subjects, want exactly 1", len(st.Subject))
	}
	var p Predicate
	if err := strictUnmarshal(st.Predicate, &p); err != nil {
		return nil, nil, Refuse(CodeMalformed, "statement: predicate: %v", err)
	}

	// Byte-for-byte canonical form: this refuses duplicate or differently
	// cased members, null for non-nullable values, escapes and number
	// spellings that decode to the same value, and trailing data, none of
	// which the decoder above reports.
	pred, err := canonicalJSON(&p)
	if err != nil {
		return nil, nil, Refuse(CodeMalformed, "statement: predicate: %v", err)
	}
	st.Predicate = pred
	again, err := canonicalJSON(&st)
	if err != nil || !bytes.Equal(again, payload) {
		return nil, nil, Refuse(CodeMalformed, "statement is not in canonical form")
	}

	sub := &st.Subject[0]
	rd := intoto.ResourceDescriptor{Name: sub.Name, Digest: sub.Digest}
	if err := rd.Validate(); err != nil {
		return nil, nil, Refuse(CodeMalformed, "statement: subject: %v", err)
	}
	h, ok := sub.Digest["sha256"]
	if len(sub.Digest) != 1 || !ok || len(h) != 64 || !isLowerHex(h) {
		return nil, nil, Refuse(CodeMalformed, "statement: subject digest must be exactly one sha256 of 64 lowercase hex digits")
	}
	sum := sha256.Sum256(p.Phase)
	if got := hex.EncodeToString(sum[:]); got != h {
		return nil, nil, Refuse(CodeTampered, "subject digest sha256:%s is not the digest of the phase (sha256:%s)", h, got)
	}
	return &p, sub, nil
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

// clip shortens untrusted text quoted in refusals.
func clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

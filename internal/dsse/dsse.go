// Package dsse decodes DSSE envelopes and the in-toto statements inside them
// strictly: exactly the fields the spec names, no duplicates, bounded sizes,
// canonical JSON where custody requires it.
package dsse

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// StatementType is the in-toto Statement v1 type.
const StatementType = "https://in-toto.io/Statement/v1"

// Limits are what DecodeEnvelope requires of an envelope.
type Limits struct {
	// PayloadType is the only payload type accepted.
	PayloadType string
	// MaxSignatures is the most signatures an envelope may carry.
	MaxSignatures int
	// MaxSignatureSize bounds one decoded signature, in bytes.
	MaxSignatureSize int
}

// Envelope is a strictly decoded DSSE envelope.
type Envelope struct {
	PayloadType string
	Payload     []byte
	Signatures  []Signature
	// payloadB64 is the payload as the envelope carries it, until
	// checkEnvelope decodes it into Payload.
	payloadB64 []byte
}

// Signature is one signature of an Envelope.
type Signature struct {
	KeyID string
	Sig   []byte
	// sigB64 is the signature as the envelope carries it, until
	// checkEnvelope decodes it into Sig.
	sigB64 []byte
}

// DecodeEnvelope decodes a DSSE envelope strictly: a JSON object with
// exactly the members payloadType, payload and signatures, each once, in any
// order, and nothing after it; payload and sig in standard padded base64; 1
// to l.MaxSignatures signatures, each with exactly keyid and sig, non-empty
// and distinct keyids, and sigs of 1 to l.MaxSignatureSize bytes. The
// payload type must be l.PayloadType. It does not bound len(data).
func DecodeEnvelope(data []byte, l Limits) (*Envelope, error) {
	// Fast path for an envelope in the exact form json.Marshal writes (the
	// form custody signs): a typed decode, then the same value encoded
	// again must give the input byte for byte - so every member is there
	// once, spelled and cased exactly, with nothing unknown. It then passes
	// the same checks as below. Anything else, or any refusal, takes the
	// member-by-member path, which says what is wrong.
	if env, ok := decodeCanonicalEnvelope(data); ok {
		if checkEnvelope(env, l) == nil {
			return env, nil
		}
	}
	return decodeEnvelopeStrict(data, l)
}

// decodeEnvelopeStrict reads the envelope member by member.
func decodeEnvelopeStrict(data []byte, l Limits) (*Envelope, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var env Envelope
	err := ReadObject(dec, []string{"payloadType", "payload", "signatures"}, func(key string) error {
		switch key {
		case "payloadType":
			return ReadString(dec, &env.PayloadType)
		case "payload":
			return readBytes(dec, &env.payloadB64)
		default: // "signatures"
			return readSignatures(dec, &env.Signatures, l.MaxSignatures)
		}
	})
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
	}
	if err := checkEnvelope(&env, l); err != nil {
		return nil, err
	}
	return &env, nil
}

// decodeCanonicalEnvelope reads data if it is exactly what json.Marshal
// writes for an envelope (trailing JSON whitespace aside, which the strict
// path allows too): the three members in order, then each signature's
// keyid and sig. It scans for quotes instead of running a JSON decoder
// over the payload; that is sound because nothing it accepts could read
// differently as JSON: a keyid must be plain (valid UTF-8, no control
// character, no backslash), and payload and sig must decode as strict
// base64 afterwards, whose alphabet holds no backslash or quote (CR and
// LF, which base64 skips but JSON strings may not hold raw, are refused
// here).
func decodeCanonicalEnvelope(data []byte) (*Envelope, bool) {
	c := &cursor{rest: bytes.TrimRight(data, " \t\r\n"), ok: true}
	var env Envelope
	c.lit(`{"payloadType":"`)
	env.PayloadType = c.str(plainString)
	c.lit(`,"payload":"`)
	env.payloadB64 = c.base64()
	c.lit(`,"signatures":[`)
	for c.ok {
		var sig Signature
		c.lit(`{"keyid":"`)
		sig.KeyID = c.str(plainString)
		c.lit(`,"sig":"`)
		sig.sigB64 = c.base64()
		c.lit(`}`)
		env.Signatures = append(env.Signatures, sig)
		if !c.more() {
			break
		}
	}
	c.lit(`]}`)
	if !c.ok || len(c.rest) > 0 {
		return nil, false
	}
	return &env, true
}

// cursor reads one fixed layout; once a step fails, every later one is a
// no-op and ok stays false.
type cursor struct {
	rest []byte
	ok   bool
}

// lit consumes the literal s.
func (c *cursor) lit(s string) {
	if c.ok {
		c.rest, c.ok = bytes.CutPrefix(c.rest, []byte(s))
	}
}

// str consumes a string body and its closing quote with read.
func (c *cursor) str(read func([]byte) (string, []byte, bool)) string {
	if !c.ok {
		return ""
	}
	var v string
	v, c.rest, c.ok = read(c.rest)
	return v
}

// base64 consumes a string body that holds base64 and its closing quote,
// returning the body without copying it (see base64Text).
func (c *cursor) base64() []byte {
	if !c.ok {
		return nil
	}
	var v []byte
	v, c.rest, c.ok = base64Text(c.rest)
	return v
}

// more consumes a comma, if one comes next.
func (c *cursor) more() bool {
	if !c.ok {
		return false
	}
	var comma bool
	c.rest, comma = bytes.CutPrefix(c.rest, []byte(","))
	return comma
}

// plainString reads a JSON string body up to its closing quote, if it
// holds nothing JSON would read differently: no escape, no control
// character, only valid UTF-8.
func plainString(b []byte) (string, []byte, bool) {
	i := bytes.IndexByte(b, '"')
	if i < 0 {
		return "", nil, false
	}
	s := b[:i]
	if bytes.IndexByte(s, '\\') >= 0 || !utf8.Valid(s) {
		return "", nil, false
	}
	for _, c := range s {
		if c < 0x20 {
			return "", nil, false
		}
	}
	return string(s), b[i+1:], true
}

// base64Text reads a JSON string body up to its closing quote for a
// caller that decodes it as strict base64, which refuses every byte but
// its alphabet except CR and LF; those are refused here. The body is a
// slice of b, not a copy: checkEnvelope decodes it before the envelope is
// returned, and copying the payload's text cost as much as decoding it.
func base64Text(b []byte) ([]byte, []byte, bool) {
	i := bytes.IndexByte(b, '"')
	if i < 0 {
		return nil, nil, false
	}
	s := b[:i]
	if bytes.IndexByte(s, '\n') >= 0 || bytes.IndexByte(s, '\r') >= 0 {
		return nil, nil, false
	}
	return s, b[i+1:], true
}

// checkEnvelope checks a parsed envelope against l and decodes its
// payload and signatures; the envelope keeps no reference to the text it
// was read from.
func checkEnvelope(env *Envelope, l Limits) error {
	var err error
	if env.PayloadType != l.PayloadType {
		return fmt.Errorf("payloadType %q is not %q", Clip(env.PayloadType), l.PayloadType)
	}
	env.Payload, err = decodeBase64(env.payloadB64)
	env.payloadB64 = nil
	if err != nil {
		return fmt.Errorf("payload is not standard padded base64: %v", err)
	}
	if len(env.Payload) == 0 {
		return errors.New("empty payload")
	}
	if n := len(env.Signatures); n == 0 || n > l.MaxSignatures {
		return fmt.Errorf("%d signatures, want 1 to %d", n, l.MaxSignatures)
	}
	seen := make(map[string]bool, len(env.Signatures))
	for i := range env.Signatures {
		s := &env.Signatures[i]
		if s.KeyID == "" {
			return fmt.Errorf("signatures[%d]: empty keyid", i)
		}
		if seen[s.KeyID] {
			return fmt.Errorf("signatures[%d]: keyid %q appears twice", i, Clip(s.KeyID))
		}
		seen[s.KeyID] = true
		s.Sig, err = decodeBase64(s.sigB64)
		s.sigB64 = nil
		if err != nil {
			return fmt.Errorf("signatures[%d]: sig is not standard padded base64: %v", i, err)
		}
		if len(s.Sig) == 0 || len(s.Sig) > l.MaxSignatureSize {
			return fmt.Errorf("signatures[%d]: sig is %d bytes, want 1 to %d", i, len(s.Sig), l.MaxSignatureSize)
		}
	}
	return nil
}

// decodeBase64 decodes standard padded base64 strictly.
func decodeBase64(text []byte) ([]byte, error) {
	enc := base64.StdEncoding.Strict()
	out := make([]byte, enc.DecodedLen(len(text)))
	n, err := enc.Decode(out, text)
	return out[:n], err
}

func readSignatures(dec *json.Decoder, out *[]Signature, max int) error {
	tok, err := Token(dec)
	if err != nil {
		return err
	}
	if tok != json.Delim('[') {
		return errors.New("signatures is not an array")
	}
	for dec.More() {
		if len(*out) == max {
			return fmt.Errorf("more than %d signatures", max)
		}
		var s Signature
		err := ReadObject(dec, []string{"keyid", "sig"}, func(key string) error {
			if key == "keyid" {
				return ReadString(dec, &s.KeyID)
			}
			return readBytes(dec, &s.sigB64)
		})
		if err != nil {
			return fmt.Errorf("signatures[%d]: %w", len(*out), err)
		}
		*out = append(*out, s)
	}
	_, err = Token(dec) // ']'
	return err
}

// Token is dec.Token with a premature end of input reported as
// io.ErrUnexpectedEOF.
func Token(dec *json.Decoder) (json.Token, error) {
	tok, err := dec.Token()
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return tok, err
}

// ReadObject reads a JSON object whose members are exactly fields, each
// once, compared case-sensitively, calling member to read each value.
func ReadObject(dec *json.Decoder, fields []string, member func(key string) error) error {
	tok, err := Token(dec)
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		return errors.New("not a JSON object")
	}
	seen := make([]bool, len(fields))
	for dec.More() {
		tok, err := Token(dec)
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return errors.New("object key is not a string")
		}
		i := indexOf(fields, key)
		switch {
		case i < 0:
			return fmt.Errorf("unknown member %q", Clip(key))
		case seen[i]:
			return fmt.Errorf("member %q appears twice", key)
		}
		seen[i] = true
		if err := member(key); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	if _, err := Token(dec); err != nil { // '}'
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

// readBytes reads a JSON string (not null, not any other type) as bytes.
func readBytes(dec *json.Decoder, out *[]byte) error {
	var s string
	if err := ReadString(dec, &s); err != nil {
		return err
	}
	*out = []byte(s)
	return nil
}

// ReadString reads a JSON string (not null, not any other type).
func ReadString(dec *json.Decoder, out *string) error {
	tok, err := Token(dec)
	if err != nil {
		return err
	}
	s, ok := tok.(string)
	if !ok {
		return fmt.Errorf("%s is not a string", Clip(fmt.Sprint(tok)))
	}
	*out = s
	return nil
}

// Statement is the wire form of an in-toto Statement v1 whose predicate
// decodes as P (json.RawMessage for a raw predicate).
type Statement[P any] struct {
	Type          string    `json:"_type"`
	Subject       []Subject `json:"subject"`
	PredicateType string    `json:"predicateType"`
	Predicate     P         `json:"predicate"`
}

// Subject is an in-toto resource descriptor as custody statements use it:
// a name and its digests.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// CanonicalJSON encodes v as custody statements are signed: encoding/json
// with struct fields in declaration order, map keys sorted, no
// insignificant whitespace and no HTML escaping.
func CanonicalJSON(v any) ([]byte, error) { return canonicalJSON(v, 0) }

// canonicalJSON is CanonicalJSON into a buffer that starts with room for
// size bytes, so that encoding a value of known size copies it once.
func canonicalJSON(v any, size int) ([]byte, error) {
	b := bytes.NewBuffer(make([]byte, 0, size+1)) // +1: the Encoder's newline
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'}), nil
}

// DecodeCanonical decodes data into v and reports whether data is exactly
// CanonicalJSON(v). That equality is stricter than StrictUnmarshal: an
// unknown, duplicate or differently cased member, or trailing data, would
// not survive the re-encoding; so a plain decoder suffices. A false answer
// says nothing about why; callers then take a strict path.
//
// The decoder is encoding/json/v2 (the go-json-experiment mirror of what Go
// 1.27 ships as encoding/json/v2): it decodes a receipt 2.7 times faster
// than encoding/json, whose decoding was the largest part of a
// verification after the two signatures. The re-encoding stays
// encoding/json's, since that defines the canonical form. What v2 refuses
// that encoding/json accepts (names that differ in case, duplicate names,
// invalid UTF-8) is never canonical and goes the strict path as before;
// what it accepts must still re-encode to data byte for byte, and a value
// whose encoding is data decodes to itself under either decoder
// (FuzzDecodeCanonical holds that).
func DecodeCanonical(data []byte, v any) bool {
	if jsonv2.Unmarshal(data, v) != nil {
		return false
	}
	again, err := canonicalJSON(v, len(data))
	return err == nil && bytes.Equal(again, data)
}

// rawStandIn takes the place of the raw value while DecodeCanonicalRaw
// re-encodes: a JSON string that encoding/json never writes of itself (it
// writes "/" unescaped), so that it is found where it was put and nowhere
// else; that it is found exactly once is checked all the same.
const rawStandIn = `"\/"`

// DecodeCanonicalRaw is DecodeCanonical for a value whose encoding holds a
// large raw JSON value, *raw(v), a json.RawMessage without omitempty, such
// as the grant envelope a receipt embeds. encoding/json re-encodes a
// RawMessage by compacting it with its scanner, the slowest part of
// re-encoding a receipt. Here the raw value must be compact already
// (IsCompactJSON), so that encoding/json would write it unchanged; v is
// re-encoded with rawStandIn in its place, and data must be that encoding
// with the stand-in replaced by the raw value: the same bytes
// DecodeCanonical compares, without compacting what is compact.
// FuzzDecodeCanonicalRaw holds it to DecodeCanonical.
func DecodeCanonicalRaw[T any](data []byte, v *T, raw func(*T) *json.RawMessage) bool {
	if jsonv2.Unmarshal(data, v) != nil {
		return false
	}
	r := raw(v)
	value := *r
	if len(value) == 0 || !IsCompactJSON(value) {
		return false // encoding/json would not write it as it is
	}
	*r = json.RawMessage(rawStandIn)
	again, err := canonicalJSON(v, len(data)-len(value)+len(rawStandIn))
	*r = value
	if err != nil {
		return false
	}
	i := bytes.Index(again, []byte(rawStandIn))
	if i < 0 {
		return false
	}
	before, after := again[:i], again[i+len(rawStandIn):]
	return !bytes.Contains(after, []byte(rawStandIn)) && len(data) == len(before)+len(value)+len(after) &&
		bytes.Equal(data[:i], before) && bytes.Equal(data[i:i+len(value)], value) && bytes.Equal(data[i+len(value):], after)
}

// IsCompactJSON reports whether b is one valid JSON value without
// insignificant whitespace: exactly what json.Compact leaves unchanged. It
// validates with encoding/json/v2's jsontext, allowing what json.Compact
// allows (duplicate names, invalid UTF-8), over ten times faster than
// json.Compact and without its copy; FuzzIsCompactJSON holds the two to
// the same answer.
func IsCompactJSON(b []byte) bool {
	for rest := b; len(rest) > 0; {
		// Up to the next string: no whitespace there.
		i := bytes.IndexByte(rest, '"')
		if i < 0 {
			i = len(rest)
		}
		if bytes.ContainsAny(rest[:i], " \t\n\r") {
			return false
		}
		rest = rest[min(i+1, len(rest)):]
		// Past the string's closing quote: the first one after an even
		// run of backslashes.
		for len(rest) > 0 {
			j := bytes.IndexByte(rest, '"')
			if j < 0 {
				rest = nil // unterminated: not valid
				break
			}
			k := j
			for k > 0 && rest[k-1] == '\\' {
				k--
			}
			rest = rest[j+1:]
			if (j-k)%2 == 0 {
				break
			}
		}
	}
	return jsontext.Value(b).IsValid(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
}

// StrictUnmarshal decodes a single JSON value into v, refusing unknown
// fields and trailing data.
func StrictUnmarshal(data []byte, v any) error {
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

// Clip shortens untrusted text quoted in refusals to 80 bytes and "...".
func Clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// CheckText refuses empty text, text longer than maxLen bytes, invalid
// UTF-8 and control characters. With clipQuoted, the text quoted in the
// control-character error is clipped (see Clip).
func CheckText(s string, maxLen int, clipQuoted bool) error {
	switch {
	case s == "":
		return errors.New("missing")
	case len(s) > maxLen:
		return fmt.Errorf("longer than %d bytes", maxLen)
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		if clipQuoted {
			s = Clip(s)
		}
		return fmt.Errorf("%q contains a control character", s)
	}
	return nil
}

// IsLowerHex reports whether s holds only lowercase hex digits.
func IsLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// IsHex64 reports whether s is 64 lowercase hex digits (a sha256).
func IsHex64(s string) bool { return len(s) == 64 && IsLowerHex(s) }

// IsDigest reports whether s is "sha256:" and 64 lowercase hex digits.
func IsDigest(s string) bool {
	h, ok := strings.CutPrefix(s, "sha256:")
	return ok && IsHex64(h)
}

package grant

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	intoto "github.com/in-toto/attestation/go/v1"

	cdsse "github.com/custody-dev/custody/internal/dsse"
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

// envelopeLimits are what decodeEnvelope requires of a grant envelope.
var envelopeLimits = cdsse.Limits{
	PayloadType:      predicate.PayloadType,
	MaxSignatures:    MaxSignatures,
	MaxSignatureSize: maxSignatureSize,
}

// decodeEnvelope decodes a DSSE envelope strictly: a JSON object with exactly
// the members payloadType, payload and signatures, each once, in any order,
// and nothing after it. Every problem is CodeMalformed.
func decodeEnvelope(data []byte) (*cdsse.Envelope, error) {
	env, err := cdsse.DecodeEnvelope(data, envelopeLimits)
	if err != nil {
		return nil, Refuse(CodeMalformed, "envelope: %v", err)
	}
	return env, nil
}

// statement is the wire form of an in-toto Statement v1 with a raw predicate.
type statement = cdsse.Statement[json.RawMessage]

type subject = cdsse.Subject

// encodeStatement returns the canonical statement of p about the phase
// named name, and its frame (see encodeStatementOf).
func encodeStatement(p *Predicate, name string) (payload, frame []byte, err error) {
	return encodeStatementOf(p, predicate.Grant, "phase/"+name, p.Phase)
}

// encodeStatementOf returns the canonical statement of type predicateType
// of pred with one subject: subjectName and the SHA-256 of content; and
// the same statement around an empty predicate, its frame, which is what
// in-toto's parser checks (see signStatement).
func encodeStatementOf(pred any, predicateType, subjectName string, content []byte) (payload, frame []byte, err error) {
	raw, err := cdsse.CanonicalJSON(pred)
	if err != nil {
		return nil, nil, fmt.Errorf("encode predicate: %w", err)
	}
	sum := sha256.Sum256(content)
	st := statement{
		Type: intoto.StatementTypeUri,
		Subject: []subject{{
			Name:   subjectName,
			Digest: map[string]string{"sha256": hex.EncodeToString(sum[:])},
		}},
		PredicateType: predicateType,
		Predicate:     raw,
	}
	out, err := cdsse.CanonicalJSON(&st)
	if err != nil {
		return nil, nil, fmt.Errorf("encode statement: %w", err)
	}
	st.Predicate = json.RawMessage(`{}`)
	if frame, err = cdsse.CanonicalJSON(&st); err != nil {
		return nil, nil, fmt.Errorf("encode statement: %w", err)
	}
	return out, frame, nil
}

// decodeStatement decodes a grant statement strictly and checks that its
// subject is the phase it carries. It does not validate the predicate.
func decodeStatement(payload []byte) (*Predicate, *subject, error) {
	return withSubject(decodeStatementOf[Predicate], payload, predicate.Grant, "phase", phaseOf)
}

func decodeStatementExplained(payload []byte) (*Predicate, *subject, error) {
	return withSubject(decodeStatementExplainedOf[Predicate], payload, predicate.Grant, "phase", phaseOf)
}

func phaseOf(p *Predicate) []byte { return p.Phase }

// withSubject decodes payload as a statement of predicateType with decode
// and checks that its one subject is the SHA-256 of the document, named
// what, that content returns of its predicate.
func withSubject[P any](decode func([]byte, string) (*P, *subject, error), payload []byte, predicateType, what string, content func(*P) []byte) (*P, *subject, error) {
	p, sub, err := decode(payload, predicateType)
	if err != nil {
		return nil, nil, err
	}
	if err := checkSubject(sub, content(p), what); err != nil {
		return nil, nil, err
	}
	return p, sub, nil
}

// decodeStatementOf decodes a statement of predicateType with exactly one
// subject and a predicate P, in the canonical form only. It checks neither
// the subject nor the predicate.
func decodeStatementOf[P any](payload []byte, predicateType string) (*P, *subject, error) {
	// Fast path for a well-formed grant: one strict decode with the
	// predicate typed and one canonical encode, where the explained path
	// decodes and re-encodes the predicate separately. Both accept exactly
	// the same payloads; anything else goes the explained way, which says
	// what is wrong.
	var typed cdsse.Statement[P]
	if cdsse.DecodeCanonical(payload, &typed) && typed.Type == intoto.StatementTypeUri &&
		typed.PredicateType == predicateType && len(typed.Subject) == 1 {
		return &typed.Predicate, &typed.Subject[0], nil
	}
	return decodeStatementExplainedOf[P](payload, predicateType)
}

func decodeStatementExplainedOf[P any](payload []byte, predicateType string) (*P, *subject, error) {
	var st statement
	if err := cdsse.StrictUnmarshal(payload, &st); err != nil {
		return nil, nil, Refuse(CodeMalformed, "statement: %v", err)
	}
	if st.Type != intoto.StatementTypeUri {
		return nil, nil, Refuse(CodeMalformed, "statement: _type %q is not %q", cdsse.Clip(st.Type), intoto.StatementTypeUri)
	}
	if st.PredicateType != predicateType {
		return nil, nil, Refuse(CodeMalformed, "statement: predicateType %q is not %q", cdsse.Clip(st.PredicateType), predicateType)
	}
	if len(st.Subject) != 1 {
		return nil, nil, Refuse(CodeMalformed, "statement: %d subjects, want exactly 1", len(st.Subject))
	}
	var p P
	if err := cdsse.StrictUnmarshal(st.Predicate, &p); err != nil {
		return nil, nil, Refuse(CodeMalformed, "statement: predicate: %v", err)
	}

	// Byte-for-byte canonical form: this refuses duplicate or differently
	// cased members, null for non-nullable values, escapes and number
	// spellings that decode to the same value, and trailing data, none of
	// which the decoder above reports.
	pred, err := cdsse.CanonicalJSON(&p)
	if err != nil {
		return nil, nil, Refuse(CodeMalformed, "statement: predicate: %v", err)
	}
	st.Predicate = pred
	again, err := cdsse.CanonicalJSON(&st)
	if err != nil || !bytes.Equal(again, payload) {
		return nil, nil, Refuse(CodeMalformed, "statement is not in canonical form")
	}
	return &p, &st.Subject[0], nil
}

// checkSubject checks a canonical grant's one subject: the sha256 of
// content, the embedded document named what.
func checkSubject(sub *subject, content []byte, what string) error {
	rd := intoto.ResourceDescriptor{Name: sub.Name, Digest: sub.Digest}
	if err := rd.Validate(); err != nil {
		return Refuse(CodeMalformed, "statement: subject: %v", err)
	}
	h, ok := sub.Digest["sha256"]
	if len(sub.Digest) != 1 || !ok || !cdsse.IsHex64(h) {
		return Refuse(CodeMalformed, "statement: subject digest must be exactly one sha256 of 64 lowercase hex digits")
	}
	sum := sha256.Sum256(content)
	if got := hex.EncodeToString(sum[:]); got != h {
		return Refuse(CodeTampered, "subject digest sha256:%s is not the digest of the %s (sha256:%s)", h, what, got)
	}
	return nil
}

package dsse

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	ssl "github.com/secure-systems-lab/go-securesystemslib/dsse"
)

// Key is a public key that checks DSSE signatures: keys.Verifier and
// keys.Signer both are.
type Key interface {
	ID() string
	Verify(ctx context.Context, data, sig []byte) error
}

// Signer is a key that signs: keys.Signer is one.
type Signer interface {
	ssl.SignerVerifier
}

// Sign DSSE-signs payload of payloadType with s and returns the envelope in
// the form json.Marshal writes (the form DecodeEnvelope reads fastest).
// The one signature is verified before it leaves, so a faulty signer is
// caught here, not by the envelope's reader. Every custody envelope is
// made here.
func Sign(ctx context.Context, s Signer, payloadType string, payload []byte) ([]byte, error) {
	id, err := s.KeyID()
	if err != nil {
		return nil, err
	}
	es, err := ssl.NewEnvelopeSigner(s)
	if err != nil {
		return nil, err
	}
	env, err := es.SignPayload(ctx, payloadType, payload)
	if err != nil {
		return nil, fmt.Errorf("sign with %s: %w", id, err)
	}
	if len(env.Signatures) != 1 || env.Signatures[0].KeyID != id {
		return nil, fmt.Errorf("envelope does not carry exactly one signature by %s", id)
	}
	sig, err := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	if err != nil {
		return nil, fmt.Errorf("signature by %s: %w", id, err)
	}
	if err := s.Verify(ctx, PAE(payloadType, payload), sig); err != nil {
		return nil, fmt.Errorf("signature by %s does not verify: %w", id, err)
	}
	out, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	return out, nil
}

// PAE is DSSE's pre-authentication encoding of a payload: what is signed.
func PAE(payloadType string, payload []byte) []byte { return ssl.PAE(payloadType, payload) }

// ErrUntrusted means no signature of an envelope is by a trusted key.
var ErrUntrusted = errors.New("not signed by a trusted key")

// ErrBadSignature means a signature that names a trusted key does not
// verify; the error is a *SignatureError naming the key.
var ErrBadSignature = errors.New("a signature by a trusted key does not verify")

// SignatureError is a signature by trusted key KeyID that does not verify.
type SignatureError struct {
	KeyID string
	Err   error
}

func (e *SignatureError) Error() string {
	return fmt.Sprintf("%v: %s: %v", ErrBadSignature, e.KeyID, e.Err)
}

// Is makes a SignatureError match ErrBadSignature.
func (e *SignatureError) Is(target error) bool { return target == ErrBadSignature }

func (e *SignatureError) Unwrap() error { return e.Err }

// VerifySignatures checks env's signatures against the keys trusted
// returns: every signature whose keyid names a trusted key must verify,
// and at least one must. Signatures by other keys are ignored and their
// keyids returned in others. It returns the trusted keys that signed, in
// signature order, or a *SignatureError or an error wrapping ErrUntrusted.
func VerifySignatures(ctx context.Context, env *Envelope, trusted func(keyID string) (Key, bool)) (signed []Key, others []string, err error) {
	pae := PAE(env.PayloadType, env.Payload)
	for _, s := range env.Signatures {
		k, ok := trusted(s.KeyID)
		if !ok {
			others = append(others, s.KeyID)
			continue
		}
		if err := k.Verify(ctx, pae, s.Sig); err != nil {
			return nil, others, &SignatureError{KeyID: k.ID(), Err: err}
		}
		signed = append(signed, k)
	}
	if len(signed) == 0 {
		quoted := make([]string, len(others))
		for i, o := range others {
			quoted[i] = fmt.Sprintf("%q", Clip(o))
		}
		return nil, others, fmt.Errorf("%w: signed by %s", ErrUntrusted, strings.Join(quoted, ", "))
	}
	return signed, others, nil
}

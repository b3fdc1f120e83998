// Package keys holds custody's signing keys: ECDSA P-256 keys whose
// signatures are ASN.1 DER ECDSA signatures over the SHA-256 of the signed
// bytes. [Signer] and [Verifier] implement the DSSE interfaces of
// github.com/secure-systems-lab/go-securesystemslib/dsse, so they sign and
// verify DSSE envelopes directly.
//
// A key's identity everywhere in custody is its [KeyID]: "sha256:" followed by
// the lowercase hex SHA-256 of the key's PKIX (SubjectPublicKeyInfo) DER
// encoding. The same string is used as the DSSE signature keyid.
//
// Only P-256 is accepted, on disk and in memory; any other key (P-384, RSA,
// Ed25519, ...) is refused with [ErrUnsupportedKey].
//
// # Files
//
// [LoadOrCreate] keeps a key pair as two files in an operator-owned
// directory: <name>.key holds the private key as a PKCS#8 PEM block
// ("PRIVATE KEY") with mode 0600, and <name>.pub holds the public key as a
// PKIX PEM block ("PUBLIC KEY") with mode 0644.
package keys

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
)

const (
	// KeyIDPrefix starts every key ID.
	KeyIDPrefix = "sha256:"

	pemPublic  = "PUBLIC KEY"
	pemPrivate = "PRIVATE KEY"
)

var (
	// ErrUnsupportedKey reports a key that is not ECDSA P-256.
	ErrUnsupportedKey = errors.New("unsupported key: custody requires ECDSA P-256")
	// ErrBadSignature reports a signature that does not verify under the key.
	ErrBadSignature = errors.New("signature does not verify")
	// ErrInsecureFile reports a key file that is a symlink, not a regular
	// file, not owned by the effective user, or accessible to group or others.
	ErrInsecureFile = errors.New("insecure key file")
	// ErrInsecureDir reports a key directory that is a symlink, not a
	// directory, writable by group or others, or owned by another user.
	ErrInsecureDir = errors.New("insecure key directory")
	// ErrKeyMismatch reports a public key file that does not belong to the
	// private key next to it.
	ErrKeyMismatch = errors.New("public key does not match private key")
)

// KeyID returns the identity of pub: "sha256:" followed by the lowercase hex
// SHA-256 of its PKIX DER encoding. It returns "" if pub is nil or cannot be
// encoded.
func KeyID(pub *ecdsa.PublicKey) string {
	if pub == nil {
		return ""
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(der)
	return KeyIDPrefix + hex.EncodeToString(sum[:])
}

// Signer is an ECDSA P-256 private key. It implements dsse.SignerVerifier.
// A Signer is safe for concurrent use.
type Signer struct {
	priv *ecdsa.PrivateKey
	ver  *Verifier
}

// Generate returns a new random P-256 signing key.
func Generate() (*Signer, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("keys: generate P-256 key: %w", err)
	}
	return newSigner(priv)
}

func newSigner(priv *ecdsa.PrivateKey) (*Signer, error) {
	v, err := NewVerifier(&priv.PublicKey)
	if err != nil {
		return nil, err
	}
	return &Signer{priv: priv, ver: v}, nil
}

// Sign returns the ASN.1 DER ECDSA signature of SHA-256(data).
func (s *Signer) Sign(ctx context.Context, data []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("keys: sign: %w", err)
	}
	digest := sha256.Sum256(data)
	sig, err := ecdsa.SignASN1(rand.Reader, s.priv, digest[:])
	if err != nil {
		return nil, fmt.Errorf("keys: sign with %s: %w", s.ver.id, err)
	}
	return sig, nil
}

// Verify checks that sig is a signature of data by this key.
func (s *Signer) Verify(ctx context.Context, data, sig []byte) error {
	return s.ver.Verify(ctx, data, sig)
}

// KeyID returns the key's [KeyID]. The error is always nil; it exists to
// satisfy dsse.Signer.
func (s *Signer) KeyID() (string, error) { return s.ver.id, nil }

// ID returns the key's [KeyID].
func (s *Signer) ID() string { return s.ver.id }

// Public returns the *ecdsa.PublicKey of the key.
func (s *Signer) Public() crypto.PublicKey { return s.ver.pub }

// Verifier returns the verifier of the key's public half.
func (s *Signer) Verifier() *Verifier { return s.ver }

// PublicPEM returns the public key as a PKIX PEM block ("PUBLIC KEY").
func (s *Signer) PublicPEM() []byte { return s.ver.PublicPEM() }

// privatePEM returns the private key as a PKCS#8 PEM block ("PRIVATE KEY").
func (s *Signer) privatePEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(s.priv)
	if err != nil {
		return nil, fmt.Errorf("keys: encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPrivate, Bytes: der}), nil
}

// Verifier is an ECDSA P-256 public key. It implements dsse.Verifier.
// A Verifier is safe for concurrent use.
type Verifier struct {
	pub *ecdsa.PublicKey
	der []byte // PKIX DER
	id  string
}

// NewVerifier returns the verifier of pub, which must be a P-256 key.
func NewVerifier(pub *ecdsa.PublicKey) (*Verifier, error) {
	if pub == nil {
		return nil, errors.New("keys: nil public key")
	}
	if pub.Curve != elliptic.P256() {
		name := "unknown curve"
		if pub.Curve != nil {
			name = pub.Curve.Params().Name
		}
		return nil, fmt.Errorf("keys: ECDSA %s key: %w", name, ErrUnsupportedKey)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("keys: encode public key: %w", err)
	}
	sum := sha256.Sum256(der)
	return &Verifier{pub: pub, der: der, id: KeyIDPrefix + hex.EncodeToString(sum[:])}, nil
}

// ParsePublic parses a single PKIX PEM block ("PUBLIC KEY") holding a P-256
// public key. Anything but surrounding whitespace after the block is refused.
func ParsePublic(pemBytes []byte) (*Verifier, error) {
	der, err := decodePEM(pemBytes, pemPublic)
	if err != nil {
		return nil, fmt.Errorf("keys: parse public key: %w", err)
	}
	pub, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("keys: parse public key: %w", err)
	}
	ec, err := asECDSA(pub)
	if err != nil {
		return nil, fmt.Errorf("keys: parse public key: %w", err)
	}
	return NewVerifier(ec)
}

// parsePrivate parses a single PKCS#8 PEM block holding a P-256 private key.
func parsePrivate(pemBytes []byte) (*Signer, error) {
	der, err := decodePEM(pemBytes, pemPrivate)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, err
	}
	priv, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		_, err := asECDSA(publicOf(k))
		return nil, err
	}
	if _, err := asECDSA(&priv.PublicKey); err != nil {
		return nil, err
	}
	return newSigner(priv)
}

func publicOf(k any) crypto.PublicKey {
	if p, ok := k.(interface{ Public() crypto.PublicKey }); ok {
		return p.Public()
	}
	return nil
}

// asECDSA returns pub as a P-256 key or an error naming what it is instead.
func asECDSA(pub crypto.PublicKey) (*ecdsa.PublicKey, error) {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("ECDSA %s key: %w", k.Curve.Params().Name, ErrUnsupportedKey)
		}
		return k, nil
	case ed25519.PublicKey:
		return nil, fmt.Errorf("Ed25519 key: %w", ErrUnsupportedKey)
	case *rsa.PublicKey:
		return nil, fmt.Errorf("RSA key: %w", ErrUnsupportedKey)
	default:
		return nil, fmt.Errorf("%T key: %w", pub, ErrUnsupportedKey)
	}
}

// decodePEM returns the bytes of the only PEM block in data, which must have
// type typ and no headers.
func decodePEM(data []byte, typ string) ([]byte, error) {
	block, rest := pem.Decode(data)
	switch {
	case block == nil:
		return nil, fmt.Errorf("no PEM block")
	case block.Type != typ:
		return nil, fmt.Errorf("PEM block is %q, want %q", block.Type, typ)
	case len(block.Headers) != 0:
		return nil, fmt.Errorf("PEM block has headers")
	case len(bytes.TrimSpace(rest)) != 0:
		return nil, fmt.Errorf("data after the PEM block")
	}
	return block.Bytes, nil
}

// Verify checks that sig is an ASN.1 DER ECDSA signature of SHA-256(data)
// by this key. A failure wraps [ErrBadSignature].
func (v *Verifier) Verify(_ context.Context, data, sig []byte) error {
	digest := sha256.Sum256(data)
	if !ecdsa.VerifyASN1(v.pub, digest[:], sig) {
		return fmt.Errorf("keys: %s: %w", v.id, ErrBadSignature)
	}
	return nil
}

// KeyID returns the key's [KeyID]. The error is always nil; it exists to
// satisfy dsse.Verifier.
func (v *Verifier) KeyID() (string, error) { return v.id, nil }

// ID returns the key's [KeyID].
func (v *Verifier) ID() string { return v.id }

// Public returns the *ecdsa.PublicKey of the key.
func (v *Verifier) Public() crypto.PublicKey { return v.pub }

// PublicPEM returns the public key as a PKIX PEM block ("PUBLIC KEY").
func (v *Verifier) PublicPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: pemPublic, Bytes: v.der})
}

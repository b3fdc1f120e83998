package dsse

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"
)

// testKey is a P-256 key (internal/dsse imports no custody package, so
// not keys.Signer).
type testKey struct {
	k  *ecdsa.PrivateKey
	id string
}

func (k *testKey) ID() string               { return k.id }
func (k *testKey) KeyID() (string, error)   { return k.id, nil }
func (k *testKey) Public() crypto.PublicKey { return &k.k.PublicKey }
func (k *testKey) Sign(_ context.Context, data []byte) ([]byte, error) {
	sum := sha256.Sum256(data)
	return ecdsa.SignASN1(rand.Reader, k.k, sum[:])
}
func (k *testKey) Verify(_ context.Context, data, sig []byte) error {
	sum := sha256.Sum256(data)
	if !ecdsa.VerifyASN1(&k.k.PublicKey, sum[:], sig) {
		return errors.New("bad signature")
	}
	return nil
}

func TestSignAndVerifySignatures(t *testing.T) {
	ctx := context.Background()
	a, b := mustKey(t), mustKey(t)
	env, err := Sign(ctx, a, "application/vnd.in-toto+json", []byte(`{"x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	lim := Limits{PayloadType: "application/vnd.in-toto+json", MaxSignatures: 4, MaxSignatureSize: 256}
	e, err := DecodeEnvelope(env, lim)
	if err != nil {
		t.Fatal(err)
	}
	only := func(ks ...*testKey) func(string) (Key, bool) {
		return func(id string) (Key, bool) {
			for _, k := range ks {
				if k.ID() == id {
					return k, true
				}
			}
			return nil, false
		}
	}
	if signed, _, err := VerifySignatures(ctx, e, only(a, b)); err != nil || len(signed) != 1 || signed[0].ID() != a.ID() {
		t.Fatalf("genuine: %v %v", signed, err)
	}
	if _, others, err := VerifySignatures(ctx, e, only(b)); !errors.Is(err, ErrUntrusted) || len(others) != 1 || others[0] != a.ID() {
		t.Fatalf("untrusted signer: %v %v", others, err)
	}
	e.Payload = []byte(`{"x":2}`)
	var se *SignatureError
	if _, _, err := VerifySignatures(ctx, e, only(a)); !errors.As(err, &se) || se.KeyID != a.ID() || !errors.Is(err, ErrBadSignature) {
		t.Fatalf("changed payload: %v", err)
	}
}

var keyCount int

func mustKey(t *testing.T) *testKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keyCount++
	return &testKey{k: k, id: fmt.Sprintf("test-key-%d", keyCount)}
}

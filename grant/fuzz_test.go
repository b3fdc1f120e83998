package grant_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"

	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/predicate"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the seed corpus in testdata/fuzz")

// testRunnerID is the runner of the seed grants; any well-formed key ID does.
const testRunnerID = "sha256:2222222222222222222222222222222222222222222222222222222222222222"

// seedEnvelopes returns the seed envelopes of FuzzVerify, all signed (where
// signed) by the fixed test issuer: one valid grant and broken variants.
func seedEnvelopes(t testing.TB, issuer *keys.Signer) map[string][]byte {
	t.Helper()
	valid, err := grant.Mint(context.Background(), issuer, testPredicate(testRunnerID))
	if err != nil {
		t.Fatal(err)
	}
	payload := payloadOf(t, valid)
	other, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	e := decodeEnvelope(t, valid)
	return map[string][]byte{
		"valid":              valid,
		"tampered-payload":   withPayload(t, valid, bytes.Replace(payload, []byte("alice"), []byte("mlice"), 1)),
		"wrong-issuer":       sign(t, payload, other),
		"unknown-field":      bytes.Replace(valid, []byte(`{"payloadType"`), []byte(`{"x":0,"payloadType"`), 1),
		"truncated":          valid[:len(valid)/2],
		"receipt-type":       sign(t, bytes.Replace(payload, []byte(predicate.Grant), []byte(predicate.Receipt), 1), issuer),
		"non-canonical":      sign(t, bytes.Replace(payload, []byte(`"actor":`), []byte(`"actor" :`), 1), issuer),
		"two-signatures":     sign(t, payload, other, issuer),
		"subject-mismatch":   sign(t, bytes.Replace(payload, []byte(`"name":"build-hello"`), []byte(`"name":"build-hellp"`), 1), issuer),
		"reordered-envelope": []byte(fmt.Sprintf(`{"signatures":[{"sig":%q,"keyid":%q}],"payload":%q,"payloadType":%q}`, e.Signatures[0].Sig, e.Signatures[0].KeyID, e.Payload, e.PayloadType)),
	}
}

// TestFuzzCorpus keeps the committed seed corpus honest: the valid seed
// must still verify, so that fuzzing starts from an accepted grant. Run
// with -update-corpus to rewrite the corpus.
func TestFuzzCorpus(t *testing.T) {
	issuer := loadTestIssuer(t)
	env := validSeed(t, filepath.Join("testdata", "fuzz", "FuzzVerify"), seedEnvelopes(t, issuer))
	v, err := grant.NewVerifier([]*keys.Verifier{issuer.Verifier()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), env, validNow); err != nil {
		t.Fatalf("valid seed does not verify (rewrite with -update-corpus): %v", err)
	}
}

// validSeed rewrites the seed corpus in dir with seeds under
// -update-corpus, and returns the committed seed named "valid".
func validSeed(t *testing.T, dir string, seeds map[string][]byte) []byte {
	t.Helper()
	if *updateCorpus {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, env := range seeds {
			data := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", env)
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "valid"))
	if err != nil {
		t.Fatal(err)
	}
	const header = "go test fuzz v1\n[]byte("
	s := strings.TrimSuffix(strings.TrimPrefix(string(data), header), ")\n")
	env, err := strconv.Unquote(s)
	if err != nil {
		t.Fatalf("cannot read seed: %v", err)
	}
	return []byte(env)
}

// seedPayloads returns the payloads of the seed envelopes that have one,
// for the fuzzers that sign what they fuzz.
func seedPayloads(envs map[string][]byte) [][]byte {
	var out [][]byte
	for _, env := range envs {
		var e dsse.Envelope
		if json.Unmarshal(env, &e) != nil {
			continue
		}
		if p, err := base64.StdEncoding.DecodeString(e.Payload); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// FuzzVerify checks that Verify never panics, refuses only with *grant.Error,
// and accepts only envelopes signed by the trusted key whose statement is
// exactly what Mint produces for the returned predicate.
func FuzzVerify(f *testing.F) {
	issuer := loadTestIssuer(f)
	for _, env := range seedEnvelopes(f, issuer) {
		f.Add(env)
	}
	v, err := grant.NewVerifier([]*keys.Verifier{issuer.Verifier()})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkVerify(t, v, issuer, data)
	})
}

// FuzzVerifyStatement signs arbitrary statements with the trusted key, so
// that fuzzing reaches the statement decoder and predicate validation
// behind the signature check.
func FuzzVerifyStatement(f *testing.F) {
	issuer := loadTestIssuer(f)
	for _, p := range seedPayloads(seedEnvelopes(f, issuer)) {
		f.Add(p)
	}
	v, err := grant.NewVerifier([]*keys.Verifier{issuer.Verifier()})
	if err != nil {
		f.Fatal(err)
	}
	es, err := dsse.NewEnvelopeSigner(issuer)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		if err := grant.DecodePathsAgree(payload); err != nil {
			t.Fatal(err)
		}
		e, err := es.SignPayload(context.Background(), predicate.PayloadType, payload)
		if err != nil {
			t.Fatal(err)
		}
		env, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		checkVerify(t, v, issuer, env)
	})
}

func checkVerify(t *testing.T, v *grant.Verifier, issuer *keys.Signer, data []byte) {
	ctx := context.Background()
	g, err := v.Verify(ctx, data, validNow)
	if err != nil {
		var ge *grant.Error
		if !errors.As(err, &ge) {
			t.Fatalf("refusal is not a *grant.Error: %v", err)
		}
		return
	}
	id := issuer.Verifier().ID()
	if g.IssuerKeyID != id {
		t.Fatalf("accepted with issuer %s, want %s", g.IssuerKeyID, id)
	}
	// Independently of the grant package: some signature by the trusted
	// key verifies over PAE(payloadType, payload).
	var e dsse.Envelope
	if err := json.Unmarshal(data, &e); err != nil {
		t.Fatalf("accepted an envelope encoding/json cannot decode: %v", err)
	}
	payload, err := base64.StdEncoding.DecodeString(e.Payload)
	if err != nil {
		t.Fatalf("accepted an undecodable payload: %v", err)
	}
	signed := false
	for _, s := range e.Signatures {
		sig, err := base64.StdEncoding.DecodeString(s.Sig)
		if err == nil && s.KeyID == id && issuer.Verifier().Verify(ctx, dsse.PAE(e.PayloadType, payload), sig) == nil {
			signed = true
		}
	}
	if !signed || e.PayloadType != predicate.PayloadType {
		t.Fatal("accepted an envelope not signed by the trusted key")
	}
	// The statement is exactly what Mint makes of the returned predicate.
	again, err := grant.Mint(ctx, issuer, g.Predicate)
	if err != nil {
		t.Fatalf("accepted a predicate Mint refuses: %v", err)
	}
	if !bytes.Equal(payloadOf(t, again), payload) {
		t.Fatalf("accepted statement differs from Mint's:\n%s\n%s", payload, payloadOf(t, again))
	}
}

package grant_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"

	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/grant/granttest"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/predicate"
)

// phaseJSON is a compact phase request as the request package would
// canonicalize it.
const phaseJSON = `{"apiVersion":"custody.dev/v1alpha1","kind":"Phase","name":"build-hello","stage":"build",` +
	`"image":"sha256:1111111111111111111111111111111111111111111111111111111111111111",` +
	`"command":["/bin/sh","-c","echo <hello> & bye > /out/x"],"output":{"path":"/out"},` +
	`"resources":{"memory":268435456,"pids":64,"wallTime":"5m"}}`

var (
	notBefore = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	expires   = notBefore.Add(15 * time.Minute)
	validNow  = notBefore.Add(5 * time.Minute)
)

var digestOf = granttest.DigestOf

// testPredicate returns a valid predicate whose runner is runner: the
// fixture's, with the image's manifest and config and the process bound.
func testPredicate(runner string) grant.Predicate {
	p := granttest.Predicate(runner, json.RawMessage(phaseJSON), notBefore, expires)
	p.ImageRef = &grant.ImageRef{Manifest: digestOf("manifest"), Config: digestOf("config")}
	p.Process = &grant.Process{Command: []string{"/bin/sh", "-c", "make\ntest"}, Env: map[string]string{"PATH": "/bin"}, Workdir: "/src", UID: 1000, GID: 1000}
	return p
}

type fixture struct {
	issuer   *keys.Signer
	verifier *grant.Verifier
	pred     grant.Predicate
	envelope []byte
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	issuer, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return fixtureFor(t, issuer)
}

func fixtureFor(t testing.TB, issuer *keys.Signer) *fixture {
	t.Helper()
	runner, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	v, err := grant.NewVerifier([]*keys.Verifier{issuer.Verifier()})
	if err != nil {
		t.Fatal(err)
	}
	p := testPredicate(runner.Verifier().ID())
	env, err := grant.Mint(context.Background(), issuer, p)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{issuer: issuer, verifier: v, pred: p, envelope: env}
}

// loadTestIssuer loads the fixed test key in testdata (a private copy, since
// keys refuses a key file readable by others and git does not keep 0600).
func loadTestIssuer(t testing.TB) *keys.Signer {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "test-issuer.key"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "issuer.key"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	s, created, err := keys.LoadOrCreate(dir, "issuer")
	if err != nil || created {
		t.Fatalf("load test issuer: created=%v err=%v", created, err)
	}
	return s
}

func decodeEnvelope(t testing.TB, env []byte) *dsse.Envelope {
	t.Helper()
	var e dsse.Envelope
	if err := json.Unmarshal(env, &e); err != nil {
		t.Fatal(err)
	}
	return &e
}

func encodeEnvelope(t testing.TB, e *dsse.Envelope) []byte {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func payloadOf(t testing.TB, env []byte) []byte {
	t.Helper()
	p, err := base64.StdEncoding.DecodeString(decodeEnvelope(t, env).Payload)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// withPayload replaces the payload of env without re-signing.
func withPayload(t testing.TB, env, payload []byte) []byte {
	t.Helper()
	e := decodeEnvelope(t, env)
	e.Payload = base64.StdEncoding.EncodeToString(payload)
	return encodeEnvelope(t, e)
}

// sign signs payload as a grant envelope with every signer.
func sign(t testing.TB, payload []byte, signers ...dsse.Signer) []byte {
	t.Helper()
	es, err := dsse.NewEnvelopeSigner(signers...)
	if err != nil {
		t.Fatal(err)
	}
	e, err := es.SignPayload(context.Background(), predicate.PayloadType, payload)
	if err != nil {
		t.Fatal(err)
	}
	return encodeEnvelope(t, e)
}

// wantCode fails unless err is a *grant.Error with code want.
func wantCode(t testing.TB, err error, want grant.Code) {
	t.Helper()
	var ge *grant.Error
	if !errors.As(err, &ge) {
		t.Fatalf("err = %v, want a *grant.Error with code %s", err, want)
	}
	if ge.Code != want {
		t.Fatalf("code = %s (%v), want %s", ge.Code, err, want)
	}
}

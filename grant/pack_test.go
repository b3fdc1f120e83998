package grant_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"

	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/grant/granttest"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/predicate"
)

// planJSON stands in for an admitted plan's canonical JSON: to the grant it
// is any compact JSON object.
const planJSON = `{"project":"range","services":[{"name":"web","image":"sha256:1111111111111111111111111111111111111111111111111111111111111111",` +
	`"ports":[{"container":"80/tcp","hostIp":"127.0.0.1","hostPort":49153}],"privileged":false}],"networks":[{"name":"range-net","internal":true}]}`

const composeFile = "services:\n  web:\n    image: web\n"

func testPackPredicate(runner string) grant.PackPredicate {
	return granttest.PackPredicate(runner, notBefore, expires, composeFile, planJSON)
}

type packFixture struct {
	issuer   *keys.Signer
	verifier *grant.Verifier
	pred     grant.PackPredicate
	envelope []byte
}

func newPackFixture(t testing.TB) *packFixture {
	t.Helper()
	issuer, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	v, err := grant.NewVerifier([]*keys.Verifier{issuer.Verifier()})
	if err != nil {
		t.Fatal(err)
	}
	p := testPackPredicate(testRunnerID)
	env, err := grant.MintPack(context.Background(), issuer, p)
	if err != nil {
		t.Fatal(err)
	}
	return &packFixture{issuer: issuer, verifier: v, pred: p, envelope: env}
}

func TestPackMintVerifyRoundTrip(t *testing.T) {
	f := newPackFixture(t)
	g, err := f.verifier.VerifyPack(context.Background(), f.envelope, validNow)
	if err != nil {
		t.Fatal(err)
	}
	if g.SubjectName != "pack/range" || g.SubjectDigest != digestOf(planJSON) {
		t.Fatalf("subject %s %s, want pack/range %s", g.SubjectName, g.SubjectDigest, digestOf(planJSON))
	}
	if g.IssuerKeyID != f.issuer.Verifier().ID() || g.EnvelopeDigest != digestOf(string(f.envelope)) {
		t.Fatalf("issuer %s envelope %s", g.IssuerKeyID, g.EnvelopeDigest)
	}
	if string(g.Predicate.Plan) != planJSON {
		t.Fatalf("plan not kept verbatim: %s", g.Predicate.Plan)
	}
	g.Predicate.Plan = f.pred.Plan // compared above, bytes
	got, _ := json.Marshal(g.Predicate)
	want, _ := json.Marshal(f.pred)
	if !bytes.Equal(got, want) {
		t.Fatalf("predicate\n%s\nwant\n%s", got, want)
	}
	payload := payloadOf(t, f.envelope)
	for _, s := range []string{`"predicateType":"` + predicate.PackGrant + `"`, `"name":"pack/range"`, `"plan":` + planJSON} {
		if !bytes.Contains(payload, []byte(s)) {
			t.Fatalf("statement lacks %s:\n%s", s, payload)
		}
	}
	if err := grant.PackDecodePathsAgree(payload); err != nil {
		t.Fatal(err)
	}
}

// TestPackVerifyRefusals: every way a pack grant can be wrong is refused
// with its code, beside the genuine grant that verifies.
func TestPackVerifyRefusals(t *testing.T) {
	f := newPackFixture(t)
	ctx := context.Background()
	if _, err := f.verifier.VerifyPack(ctx, f.envelope, validNow); err != nil {
		t.Fatalf("genuine pack grant refused: %v", err)
	}
	payload := payloadOf(t, f.envelope)
	other, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	resign := func(old, new string) []byte {
		t.Helper()
		if !bytes.Contains(payload, []byte(old)) {
			t.Fatalf("payload lacks %s", old)
		}
		return sign(t, bytes.Replace(payload, []byte(old), []byte(new), 1), f.issuer)
	}
	// withPlan re-signs the statement with another plan and the subject
	// digest of that plan, so only the plan's own checks can refuse it.
	withPlan := func(plan string) []byte {
		t.Helper()
		p := bytes.Replace(payload, []byte(`"plan":`+planJSON), []byte(`"plan":`+plan), 1)
		p = bytes.Replace(p, []byte(digestOf(planJSON)[len("sha256:"):]), []byte(digestOf(plan)[len("sha256:"):]), 1)
		return sign(t, p, f.issuer)
	}
	phase, err := grant.Mint(ctx, f.issuer, testPredicate(testRunnerID))
	if err != nil {
		t.Fatal(err)
	}
	e := decodeEnvelope(t, f.envelope)
	sig, _ := base64.StdEncoding.DecodeString(e.Signatures[0].Sig)
	sig[len(sig)/2] ^= 0x40
	e.Signatures[0].Sig = base64.StdEncoding.EncodeToString(sig)
	badSig := encodeEnvelope(t, e)

	cases := []struct {
		name string
		env  []byte
		now  time.Time
		code grant.Code
	}{
		{"signature", badSig, validNow, grant.CodeTampered},
		{"unsigned change", withPayload(t, f.envelope, bytes.Replace(payload, []byte("range-op"), []byte("range-oq"), 1)), validNow, grant.CodeTampered},
		{"wrong key", sign(t, payload, other), validNow, grant.CodeWrongIssuer},
		{"expired", f.envelope, expires, grant.CodeExpired},
		{"not yet valid", f.envelope, notBefore.Add(-time.Second), grant.CodeNotYetValid},
		{"plan mismatch", resign(`"privileged":false`, `"privileged":true`), validNow, grant.CodeTampered},
		{"subject name", resign(`"name":"pack/range"`, `"name":"pack/other"`), validNow, grant.CodeMalformed},
		{"unknown field", resign(`"actor":`, `"stage":"build","actor":`), validNow, grant.CodeMalformed},
		{"duplicate field", resign(`"actor":"range-op"`, `"actor":"range-op","actor":"range-op"`), validNow, grant.CodeMalformed},
		{"non-canonical", resign(`"actor":`, `"actor": `), validNow, grant.CodeMalformed},
		{"escaped", resign(`"actor":"range-op"`, `"actor":"range\u002dop"`), validNow, grant.CodeMalformed},
		{"plan not compact", resign(`"plan":{"project":"range",`, `"plan":{"project": "range",`), validNow, grant.CodeMalformed},
		{"plan not an object", withPlan(`[1]`), validNow, grant.CodeMalformed},
		{"plan duplicate member", withPlan(`{"project":"range","project":"range"}`), validNow, grant.CodeMalformed},
		{"another compact plan", withPlan(`{"project":"range"}`), validNow, ""},
		{"bad project", resign(`"project":"range","digest"`, `"project":"Range","digest"`), validNow, grant.CodeMalformed},
		{"phase grant type", resign(predicate.PackGrant, predicate.Grant), validNow, grant.CodeMalformed},
		{"a phase grant", phase, validNow, grant.CodeMalformed},
		{"trailing data", append(append([]byte{}, f.envelope...), []byte(" {}")...), validNow, grant.CodeMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := f.verifier.VerifyPack(ctx, c.env, c.now)
			if c.code == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			wantCode(t, err, c.code)
		})
	}
	// A pack grant is never a phase grant.
	_, err = f.verifier.Verify(ctx, f.envelope, validNow)
	wantCode(t, err, grant.CodeMalformed)
}

// TestPackVerifyIssued: a teardown record may carry a grant whose window
// has passed; VerifyPackIssued checks everything else.
func TestPackVerifyIssued(t *testing.T) {
	f := newPackFixture(t)
	ctx := context.Background()
	if _, err := f.verifier.VerifyPack(ctx, f.envelope, expires.Add(time.Hour)); err == nil {
		t.Fatal("VerifyPack accepted an expired grant")
	}
	if _, err := f.verifier.VerifyPackIssued(ctx, f.envelope); err != nil {
		t.Fatalf("VerifyPackIssued refused a genuine expired grant: %v", err)
	}
	other, _ := keys.Generate()
	_, err := f.verifier.VerifyPackIssued(ctx, sign(t, payloadOf(t, f.envelope), other))
	wantCode(t, err, grant.CodeWrongIssuer)
}

func TestPackVerifyArguments(t *testing.T) {
	f := newPackFixture(t)
	if _, err := f.verifier.VerifyPack(context.Background(), f.envelope, time.Time{}); err == nil {
		t.Fatal("zero time accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := f.verifier.VerifyPack(ctx, f.envelope, validNow)
	var ge *grant.Error
	if !errors.Is(err, context.Canceled) || errors.As(err, &ge) {
		t.Fatalf("cancelled verify: %v", err)
	}
}

func TestMintPackValidates(t *testing.T) {
	issuer, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(*grant.PackPredicate){
		"id":                func(p *grant.PackPredicate) { p.ID = "XYZ" },
		"actor":             func(p *grant.PackPredicate) { p.Actor = "" },
		"notBefore":         func(p *grant.PackPredicate) { p.NotBefore = time.Time{} },
		"expires":           func(p *grant.PackPredicate) { p.Expires = p.NotBefore },
		"policyDigest":      func(p *grant.PackPredicate) { p.PolicyDigest = "sha256:abc" },
		"runner.id":         func(p *grant.PackPredicate) { p.Runner.ID = "runner" },
		"engine.name":       func(p *grant.PackPredicate) { p.Engine.Name = "" },
		"engine.version":    func(p *grant.PackPredicate) { p.Engine.Version = "26\n" },
		"engine.apiVersion": func(p *grant.PackPredicate) { p.Engine.APIVersion = "" },
		"pack.project":      func(p *grant.PackPredicate) { p.Pack.Project = "-range" },
		"pack.digest":       func(p *grant.PackPredicate) { p.Pack.Digest = "" },
		"plan":              func(p *grant.PackPredicate) { p.Plan = json.RawMessage(`{"a": 1}`) },
	}
	for field, mutate := range cases {
		t.Run(field, func(t *testing.T) {
			p := testPackPredicate(testRunnerID)
			mutate(&p)
			_, err := grant.MintPack(context.Background(), issuer, p)
			if err == nil || !strings.Contains(err.Error(), field+":") {
				t.Fatalf("MintPack with a bad %s: %v", field, err)
			}
		})
	}
	if _, err := grant.MintPack(context.Background(), nil, testPackPredicate(testRunnerID)); err == nil {
		t.Fatal("MintPack with a nil issuer")
	}
	if _, err := grant.MintPack(context.Background(), issuer, testPackPredicate(testRunnerID)); err != nil {
		t.Fatalf("MintPack refuses a valid predicate: %v", err)
	}
}

// seedPackEnvelopes returns the seeds of FuzzVerifyPack, signed (where
// signed) by the fixed test issuer.
func seedPackEnvelopes(t testing.TB, issuer *keys.Signer) map[string][]byte {
	t.Helper()
	valid, err := grant.MintPack(context.Background(), issuer, testPackPredicate(testRunnerID))
	if err != nil {
		t.Fatal(err)
	}
	payload := payloadOf(t, valid)
	other, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	resign := func(old, new string) []byte {
		return sign(t, bytes.Replace(payload, []byte(old), []byte(new), 1), issuer)
	}
	return map[string][]byte{
		"valid":           valid,
		"wrong-issuer":    sign(t, payload, other),
		"plan-mismatch":   resign(`"privileged":false`, `"privileged":true`),
		"unknown-field":   resign(`"actor":`, `"x":1,"actor":`),
		"duplicate-field": resign(`"actor":"range-op"`, `"actor":"range-op","actor":"x"`),
		"non-canonical":   resign(`"actor":`, `"actor" :`),
		"phase-type":      resign(predicate.PackGrant, predicate.Grant),
		"truncated":       valid[:len(valid)/2],
	}
}

// TestPackFuzzCorpus keeps the committed FuzzVerifyPack seeds honest: the
// valid one verifies. -update-corpus rewrites them.
func TestPackFuzzCorpus(t *testing.T) {
	issuer := loadTestIssuer(t)
	env := validSeed(t, filepath.Join("testdata", "fuzz", "FuzzVerifyPack"), seedPackEnvelopes(t, issuer))
	v, err := grant.NewVerifier([]*keys.Verifier{issuer.Verifier()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.VerifyPack(context.Background(), env, validNow); err != nil {
		t.Fatalf("valid seed does not verify (rewrite with -update-corpus): %v", err)
	}
}

// FuzzVerifyPack checks that VerifyPack never panics, refuses only with
// *grant.Error, and accepts only envelopes signed by the trusted key whose
// statement is exactly what MintPack makes of the returned predicate.
func FuzzVerifyPack(f *testing.F) {
	issuer := loadTestIssuer(f)
	for _, env := range seedPackEnvelopes(f, issuer) {
		f.Add(env)
	}
	v, err := grant.NewVerifier([]*keys.Verifier{issuer.Verifier()})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkVerifyPack(t, v, issuer, data)
	})
}

// FuzzVerifyPackStatement signs arbitrary statements with the trusted key,
// so that fuzzing reaches the pack statement decoder and validation.
func FuzzVerifyPackStatement(f *testing.F) {
	issuer := loadTestIssuer(f)
	for _, p := range seedPayloads(seedPackEnvelopes(f, issuer)) {
		f.Add(p)
	}
	v, err := grant.NewVerifier([]*keys.Verifier{issuer.Verifier()})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		if err := grant.PackDecodePathsAgree(payload); err != nil {
			t.Fatal(err)
		}
		checkVerifyPack(t, v, issuer, sign(t, payload, issuer))
	})
}

func checkVerifyPack(t *testing.T, v *grant.Verifier, issuer *keys.Signer, data []byte) {
	ctx := context.Background()
	g, err := v.VerifyPack(ctx, data, validNow)
	if err != nil {
		var ge *grant.Error
		if !errors.As(err, &ge) {
			t.Fatalf("refusal is not a *grant.Error: %v", err)
		}
		return
	}
	if g.IssuerKeyID != issuer.Verifier().ID() {
		t.Fatalf("accepted with issuer %s", g.IssuerKeyID)
	}
	var e dsse.Envelope
	if err := json.Unmarshal(data, &e); err != nil {
		t.Fatalf("accepted an envelope encoding/json cannot decode: %v", err)
	}
	payload, err := base64.StdEncoding.DecodeString(e.Payload)
	if err != nil {
		t.Fatalf("accepted an undecodable payload: %v", err)
	}
	again, err := grant.MintPack(ctx, issuer, g.Predicate)
	if err != nil {
		t.Fatalf("accepted a predicate MintPack refuses: %v", err)
	}
	if !bytes.Equal(payloadOf(t, again), payload) {
		t.Fatalf("accepted statement differs from MintPack's:\n%s\n%s", payload, payloadOf(t, again))
	}
}

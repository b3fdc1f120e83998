package grant_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/predicate"
)

func TestMintVerifyRoundTrip(t *testing.T) {
	f := newFixture(t)
	g, err := f.verifier.Verify(context.Background(), f.envelope, validNow)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g.Predicate, f.pred) {
		t.Fatalf("predicate changed in the round trip:\n got %+v\nwant %+v", g.Predicate, f.pred)
	}
	if g.SubjectName != "phase/build-hello" {
		t.Errorf("SubjectName = %q", g.SubjectName)
	}
	if want := digestOf(phaseJSON); g.SubjectDigest != want {
		t.Errorf("SubjectDigest = %s, want %s", g.SubjectDigest, want)
	}
	if want := f.issuer.Verifier().ID(); g.IssuerKeyID != want {
		t.Errorf("IssuerKeyID = %s, want %s", g.IssuerKeyID, want)
	}
	if want := digestOf(string(f.envelope)); g.EnvelopeDigest != want {
		t.Errorf("EnvelopeDigest = %s, want %s", g.EnvelopeDigest, want)
	}
}

// TestWireFormat checks the envelope and statement against the DSSE and
// in-toto Statement v1 formats, independently of the grant package.
func TestWireFormat(t *testing.T) {
	f := newFixture(t)
	var env map[string]any
	if err := json.Unmarshal(f.envelope, &env); err != nil {
		t.Fatal(err)
	}
	if len(env) != 3 || env["payloadType"] != predicate.PayloadType {
		t.Fatalf("envelope = %v", env)
	}
	sigs := env["signatures"].([]any)
	if len(sigs) != 1 || sigs[0].(map[string]any)["keyid"] != f.issuer.Verifier().ID() {
		t.Fatalf("signatures = %v", sigs)
	}

	payload := payloadOf(t, f.envelope)
	var st struct {
		Type          string `json:"_type"`
		Subject       []map[string]any
		PredicateType string
		Predicate     map[string]json.RawMessage
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != "https://in-toto.io/Statement/v1" || st.PredicateType != "https://custody.dev/attestation/grant/v1" {
		t.Fatalf("_type %q, predicateType %q", st.Type, st.PredicateType)
	}
	wantSubject := []map[string]any{{
		"name":   "phase/build-hello",
		"digest": map[string]any{"sha256": digestOf(phaseJSON)[len("sha256:"):]},
	}}
	if !reflect.DeepEqual(st.Subject, wantSubject) {
		t.Fatalf("subject = %v, want %v", st.Subject, wantSubject)
	}
	if got := string(st.Predicate["phase"]); got != phaseJSON {
		t.Fatalf("phase not embedded verbatim:\n got %s\nwant %s", got, phaseJSON)
	}
	for _, k := range []string{"id", "actor", "stage", "notBefore", "expires", "policyDigest", "runner", "runtime",
		"image", "target", "toolchain", "inputs", "output", "resources", "egress", "credentials", "phase"} {
		if _, ok := st.Predicate[k]; !ok {
			t.Errorf("predicate has no %q", k)
		}
	}
	if got := string(st.Predicate["notBefore"]); got != `"2026-03-01T10:00:00Z"` {
		t.Errorf("notBefore = %s", got)
	}

	var s intoto.Statement
	if err := protojson.Unmarshal(payload, &s); err != nil {
		t.Fatalf("in-toto parser: %v", err)
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("in-toto Validate: %v", err)
	}
}

func TestValidityWindow(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, tc := range []struct {
		now  time.Time
		want grant.Code // "" = valid
	}{
		{notBefore.Add(-time.Nanosecond), grant.CodeNotYetValid},
		{notBefore.Add(-time.Hour), grant.CodeNotYetValid},
		{notBefore, ""},
		{expires.Add(-time.Nanosecond), ""},
		{expires, grant.CodeExpired},
		{expires.Add(time.Hour), grant.CodeExpired},
		{validNow.In(time.FixedZone("X", 5*3600)), ""},
	} {
		_, err := f.verifier.Verify(ctx, f.envelope, tc.now)
		if tc.want == "" {
			if err != nil {
				t.Errorf("now %s: %v", tc.now, err)
			}
			continue
		}
		wantCode(t, err, tc.want)
	}
}

func TestClockSkew(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	v, err := grant.NewVerifier([]*keys.Verifier{f.issuer.Verifier()}, grant.WithClockSkew(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, now := range []time.Time{notBefore.Add(-time.Minute), expires.Add(time.Minute - time.Nanosecond)} {
		if _, err := v.Verify(ctx, f.envelope, now); err != nil {
			t.Errorf("now %s with 1m skew: %v", now, err)
		}
	}
	_, err = v.Verify(ctx, f.envelope, notBefore.Add(-time.Minute-time.Nanosecond))
	wantCode(t, err, grant.CodeNotYetValid)
	_, err = v.Verify(ctx, f.envelope, expires.Add(time.Minute))
	wantCode(t, err, grant.CodeExpired)

	if _, err := grant.NewVerifier([]*keys.Verifier{f.issuer.Verifier()}, grant.WithClockSkew(-time.Second)); err == nil {
		t.Error("negative clock skew accepted")
	}
}

func TestWrongIssuer(t *testing.T) {
	f := newFixture(t)
	other := newFixture(t) // signed by a different, untrusted key
	_, err := f.verifier.Verify(context.Background(), other.envelope, validNow)
	wantCode(t, err, grant.CodeWrongIssuer)
	if !strings.Contains(err.Error(), other.issuer.Verifier().ID()) {
		t.Errorf("error %q does not name the signing key", err)
	}
}

func TestTamperedPayload(t *testing.T) {
	f := newFixture(t)
	payload := payloadOf(t, f.envelope)
	i := bytes.Index(payload, []byte("alice"))
	payload[i] = 'm' // "mlice": still a canonical, valid statement
	_, err := f.verifier.Verify(context.Background(), withPayload(t, f.envelope, payload), validNow)
	wantCode(t, err, grant.CodeTampered)
}

func TestTamperedSignature(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	e := decodeEnvelope(t, f.envelope)
	sig, err := base64.StdEncoding.DecodeString(e.Signatures[0].Sig)
	if err != nil {
		t.Fatal(err)
	}
	sig[len(sig)-1] ^= 0x01
	e.Signatures[0].Sig = base64.StdEncoding.EncodeToString(sig)
	_, err = f.verifier.Verify(ctx, encodeEnvelope(t, e), validNow)
	wantCode(t, err, grant.CodeTampered)

	// A valid signature by another key, claiming to be by the trusted key.
	other := newFixture(t)
	e = decodeEnvelope(t, other.envelope)
	e.Signatures[0].KeyID = f.issuer.Verifier().ID()
	_, err = f.verifier.Verify(ctx, encodeEnvelope(t, e), validNow)
	wantCode(t, err, grant.CodeTampered)
}

func TestSubjectDigestMismatch(t *testing.T) {
	f := newFixture(t)
	payload := payloadOf(t, f.envelope)
	subject := digestOf(phaseJSON)[len("sha256:"):]
	forged := bytes.Replace(payload, []byte(subject), []byte(digestOf("another phase")[len("sha256:"):]), 1)
	if bytes.Equal(forged, payload) {
		t.Fatal("subject digest not found in payload")
	}
	// Signed by the trusted issuer: the signature is fine, the statement
	// contradicts itself.
	_, err := f.verifier.Verify(context.Background(), sign(t, forged, f.issuer), validNow)
	wantCode(t, err, grant.CodeTampered)
}

func TestMultipleSignatures(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	payload := payloadOf(t, f.envelope)
	untrusted, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	// A co-signature by an untrusted key is ignored.
	for _, env := range [][]byte{sign(t, payload, f.issuer, untrusted), sign(t, payload, untrusted, f.issuer)} {
		g, err := f.verifier.Verify(ctx, env, validNow)
		if err != nil {
			t.Fatal(err)
		}
		if g.IssuerKeyID != f.issuer.Verifier().ID() {
			t.Errorf("IssuerKeyID = %s", g.IssuerKeyID)
		}
	}
	// Every signature naming a trusted key must verify.
	second, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	v2, err := grant.NewVerifier([]*keys.Verifier{f.issuer.Verifier(), second.Verifier()})
	if err != nil {
		t.Fatal(err)
	}
	e := decodeEnvelope(t, sign(t, payload, f.issuer, second))
	e.Signatures[1].Sig = e.Signatures[0].Sig
	_, err = v2.Verify(ctx, encodeEnvelope(t, e), validNow)
	wantCode(t, err, grant.CodeTampered)
	// Only untrusted signatures: wrong issuer.
	_, err = f.verifier.Verify(ctx, sign(t, payload, untrusted, second), validNow)
	wantCode(t, err, grant.CodeWrongIssuer)
}

func TestMalformedEnvelope(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	env := string(f.envelope)
	e := decodeEnvelope(t, f.envelope)
	sig := e.Signatures[0]
	sigJSON := fmt.Sprintf(`{"keyid":%q,"sig":%q}`, sig.KeyID, sig.Sig)
	urlPayload := base64.URLEncoding.EncodeToString(payloadOf(t, f.envelope))
	unpadded := base64.RawStdEncoding.EncodeToString(payloadOf(t, f.envelope))

	cases := map[string]string{
		"unknown field":           strings.Replace(env, `{"payloadType"`, `{"extra":1,"payloadType"`, 1),
		"unknown signature field": strings.Replace(env, `"keyid"`, `"x":"","keyid"`, 1),
		"duplicate payloadType":   strings.Replace(env, `{"payloadType"`, `{"payloadType":"text/plain","payloadType"`, 1),
		"duplicate payload":       strings.Replace(env, `,"payload":`, `,"payload":"e30=","payload":`, 1),
		"case-folded field":       strings.Replace(env, `"payloadType"`, `"PayloadType"`, 1),
		"wrong payloadType":       strings.Replace(env, predicate.PayloadType, "application/json", 1),
		"null payloadType":        strings.Replace(env, `"`+predicate.PayloadType+`"`, `null`, 1),
		"missing payloadType":     strings.Replace(env, `"payloadType":"`+predicate.PayloadType+`",`, ``, 1),
		"no signatures":           fmt.Sprintf(`{"payloadType":%q,"payload":%q,"signatures":[]}`, e.PayloadType, e.Payload),
		"null signatures":         fmt.Sprintf(`{"payloadType":%q,"payload":%q,"signatures":null}`, e.PayloadType, e.Payload),
		"five signatures": fmt.Sprintf(`{"payloadType":%q,"payload":%q,"signatures":[%s,%s,%s,%s,%s]}`,
			e.PayloadType, e.Payload, sigJSON, sigJSON, sigJSON, sigJSON, sigJSON),
		"duplicate keyid": fmt.Sprintf(`{"payloadType":%q,"payload":%q,"signatures":[%s,%s]}`,
			e.PayloadType, e.Payload, sigJSON, sigJSON),
		"empty keyid":            strings.Replace(env, sig.KeyID, "", 1),
		"missing keyid":          strings.Replace(env, `"keyid":"`+sig.KeyID+`",`, ``, 1),
		"url-safe payload":       strings.Replace(env, e.Payload, urlPayload, 1),
		"unpadded payload":       strings.Replace(env, e.Payload, unpadded, 1),
		"empty payload":          strings.Replace(env, e.Payload, "", 1),
		"empty sig":              strings.Replace(env, sig.Sig, "", 1),
		"trailing data":          env + "{}",
		"array":                  "[" + env + "]",
		"empty":                  "",
		"not JSON":               "grant",
		"statement not envelope": string(payloadOf(t, f.envelope)),
	}
	if urlPayload == e.Payload {
		delete(cases, "url-safe payload")
	}
	if unpadded == e.Payload {
		delete(cases, "unpadded payload")
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if c == env {
				t.Fatal("test case did not change the envelope")
			}
			_, err := f.verifier.Verify(ctx, []byte(c), validNow)
			t.Log(err)
			wantCode(t, err, grant.CodeMalformed)
		})
	}

	// Whitespace and member order do not matter in the (unsigned) envelope.
	reordered := fmt.Sprintf("{\n  \"signatures\": [ {\"sig\": %q, \"keyid\": %q} ],\n  \"payload\": %q,\n  \"payloadType\": %q\n}\n",
		sig.Sig, sig.KeyID, e.Payload, e.PayloadType)
	if _, err := f.verifier.Verify(ctx, []byte(reordered), validNow); err != nil {
		t.Errorf("reformatted envelope: %v", err)
	}
}

func TestOversize(t *testing.T) {
	f := newFixture(t)
	big := append(bytes.Repeat([]byte(" "), grant.MaxEnvelopeSize), f.envelope...)
	_, err := f.verifier.Verify(context.Background(), big, validNow)
	wantCode(t, err, grant.CodeMalformed)
}

// TestMalformedStatement signs, with the trusted key, statements that are
// not canonical custody grants: each must be refused as malformed.
func TestMalformedStatement(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	payload := string(payloadOf(t, f.envelope))
	replace := func(old, new string) string {
		t.Helper()
		if !strings.Contains(payload, old) {
			t.Fatalf("%q not in payload", old)
		}
		return strings.Replace(payload, old, new, 1)
	}
	subj := payload[strings.Index(payload, `{"name":"phase/`):strings.Index(payload, `],"predicateType"`)]
	cases := map[string]string{
		"wrong predicateType":   replace(predicate.Grant, predicate.Receipt),
		"qualification type":    replace(predicate.Grant, predicate.Qualification),
		"wrong _type":           replace(intoto.StatementTypeUri, "https://in-toto.io/Statement/v0.1"),
		"two subjects":          replace(subj, subj+","+subj),
		"no subject":            replace(subj, ""),
		"extra subject digest":  replace(`{"sha256":`, `{"sha512":"00","sha256":`),
		"uppercase digest":      replace(digestOf(phaseJSON)[7:], strings.ToUpper(digestOf(phaseJSON)[7:])),
		"subject name":          replace(`"phase/build-hello"`, `"phase/other"`),
		"unknown statement key": replace(`{"_type"`, `{"x":1,"_type"`),
		"unknown predicate key": replace(`{"id"`, `{"x":1,"id"`),
		"duplicate predicate key": replace(`"actor":"alice@example.com"`,
			`"actor":"mallory","actor":"alice@example.com"`),
		"case-folded key":      replace(`"actor"`, `"Actor"`),
		"null value":           replace(`"toolchain":"go1.26"`, `"toolchain":null`),
		"escaped string":       replace(`"alice@example.com"`, `"\u0061lice@example.com"`),
		"number spelling":      replace(`"pids":64`, `"pids":64.0`),
		"whitespace":           replace(`"actor":`, `"actor": `),
		"trailing data":        payload + "\n",
		"phase whitespace":     replace(`"kind":"Phase"`, `"kind": "Phase"`),
		"invalid predicate":    replace(`"mode":"deny"`, `"mode":"allow"`),
		"empty actor":          replace(`"alice@example.com"`, `""`),
		"bad closure digest":   replace(f.pred.Inputs.ClosureDigest, digestOf("x")),
		"predicate not object": payload[:strings.Index(payload, `"predicate":`)] + `"predicate":"x"}`,
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := f.verifier.Verify(ctx, sign(t, []byte(c), f.issuer), validNow)
			t.Log(err)
			wantCode(t, err, grant.CodeMalformed)
		})
	}
	// The unmodified payload, re-signed, verifies: the cases above fail for
	// their edit alone.
	if _, err := f.verifier.Verify(ctx, sign(t, []byte(payload), f.issuer), validNow); err != nil {
		t.Fatal(err)
	}
}

func TestNewVerifierRefusesEmptyTrust(t *testing.T) {
	if _, err := grant.NewVerifier(nil); err == nil {
		t.Error("nil trust list accepted")
	}
	if _, err := grant.NewVerifier([]*keys.Verifier{}); err == nil {
		t.Error("empty trust list accepted")
	}
	if _, err := grant.NewVerifier([]*keys.Verifier{nil}); err == nil {
		t.Error("nil key accepted")
	}
	// A key listed twice is fine.
	s, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	v, err := grant.NewVerifier([]*keys.Verifier{s.Verifier(), s.Verifier()})
	if err != nil {
		t.Fatal(err)
	}
	f := fixtureFor(t, s)
	if _, err := v.Verify(context.Background(), f.envelope, validNow); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyHonoursContext(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := f.verifier.Verify(ctx, f.envelope, validNow)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	var ge *grant.Error
	if errors.As(err, &ge) {
		t.Fatal("a cancelled context is reported as a grant refusal")
	}
	if _, err := f.verifier.Verify(context.Background(), f.envelope, time.Time{}); err == nil {
		t.Fatal("zero time accepted")
	}
}

func TestMintValidates(t *testing.T) {
	issuer, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	runner := issuer.Verifier().ID()
	ctx := context.Background()
	if _, err := grant.Mint(ctx, issuer, testPredicate(runner)); err != nil {
		t.Fatalf("valid predicate: %v", err)
	}
	cases := map[string]func(p *grant.Predicate){
		"id":                   func(p *grant.Predicate) { p.ID = "" },
		"id ":                  func(p *grant.Predicate) { p.ID = strings.ToUpper(p.ID) },
		"actor":                func(p *grant.Predicate) { p.Actor = "" },
		"actor\x00":            func(p *grant.Predicate) { p.Actor = "a\nb" },
		"stage":                func(p *grant.Predicate) { p.Stage = "" },
		"notBefore":            func(p *grant.Predicate) { p.NotBefore = time.Time{} },
		"expires":              func(p *grant.Predicate) { p.Expires = p.NotBefore },
		"expires ":             func(p *grant.Predicate) { p.Expires = time.Time{} },
		"policyDigest":         func(p *grant.Predicate) { p.PolicyDigest = "sha256:abc" },
		"runner.id":            func(p *grant.Predicate) { p.Runner.ID = "" },
		"runtime.version":      func(p *grant.Predicate) { p.Runtime.Version = "" },
		"runtime.sha256":       func(p *grant.Predicate) { p.Runtime.SHA256 = "sha256:" + p.Runtime.SHA256 },
		"image":                func(p *grant.Predicate) { p.Image = "busybox:latest" },
		"target.os":            func(p *grant.Predicate) { p.Target.OS = "" },
		"target.arch":          func(p *grant.Predicate) { p.Target.Arch = "" },
		"inputs.closureDigest": func(p *grant.Predicate) { p.Inputs.Entries = p.Inputs.Entries[:1] },
		"inputs.entries[1].target": func(p *grant.Predicate) {
			p.Inputs.Entries[1].Target = p.Inputs.Entries[0].Target
			p.Inputs.ClosureDigest = grant.ClosureDigest(p.Inputs.Entries)
		},
		"inputs.entries[0].digest": func(p *grant.Predicate) {
			p.Inputs.Entries[0].Digest = "md5:x"
			p.Inputs.ClosureDigest = grant.ClosureDigest(p.Inputs.Entries)
		},
		"output.path":              func(p *grant.Predicate) { p.Output.Path = "out" },
		"output.maxBytes":          func(p *grant.Predicate) { p.Output.MaxBytes = 0 },
		"resources.memory":         func(p *grant.Predicate) { p.Resources.Memory = 0 },
		"resources.pids":           func(p *grant.Predicate) { p.Resources.Pids = -1 },
		"resources.cpu":            func(p *grant.Predicate) { p.Resources.CPU = -0.5 },
		"resources.wallTimeMillis": func(p *grant.Predicate) { p.Resources.WallTimeMillis = 0 },
		"resources.tmpBytes":       func(p *grant.Predicate) { p.Resources.TmpBytes = -1 },
		"egress.mode":              func(p *grant.Predicate) { p.Egress.Mode = "" },
		"egress.destinations":      func(p *grant.Predicate) { p.Egress.Destinations = []string{"example.com:443"} },
		"credentials[1]":           func(p *grant.Predicate) { p.Credentials = []string{"a", "a"} },
		"phase":                    func(p *grant.Predicate) { p.Phase = nil },
		"phase ":                   func(p *grant.Predicate) { p.Phase = json.RawMessage(`{"name": "x"}`) },
		"phase  ":                  func(p *grant.Predicate) { p.Phase = json.RawMessage(`{"kind":"Phase"}`) },
		"phase   ":                 func(p *grant.Predicate) { p.Phase = json.RawMessage(`{"name":"Bad Name"}`) },
		"phase    ":                func(p *grant.Predicate) { p.Phase = json.RawMessage(`["name"]`) },
		"phase     ":               func(p *grant.Predicate) { p.Phase = json.RawMessage(`{"name":"a","name":"b"}`) },
		"phase      ":              func(p *grant.Predicate) { p.Phase = json.RawMessage(`{"name":"a"`) },
		"imageRef.config":          func(p *grant.Predicate) { p.ImageRef = &grant.ImageRef{Manifest: p.Image} },
		"imageRef.manifest":        func(p *grant.Predicate) { p.ImageRef = &grant.ImageRef{Manifest: "latest", Config: p.Image} },
		"process.command":          func(p *grant.Predicate) { p.Process = &grant.Process{Workdir: "/"} },
		"process.workdir":          func(p *grant.Predicate) { p.Process = &grant.Process{Command: []string{"/bin/true"}, Workdir: "src"} },
		"process.env": func(p *grant.Predicate) {
			p.Process = &grant.Process{Command: []string{"/bin/true"}, Workdir: "/", Env: map[string]string{"A=B": "c"}}
		},
		"egress.destinations ": func(p *grant.Predicate) {
			p.Egress = grant.Egress{Mode: grant.EgressRestricted, Destinations: []string{}}
		},
		"egress.destinations[0]": func(p *grant.Predicate) {
			p.Egress = grant.Egress{Mode: grant.EgressRestricted, Destinations: []string{"*.example.com:443"}}
		},
		"egress.destinations[1]": func(p *grant.Predicate) {
			p.Egress = grant.Egress{Mode: grant.EgressRestricted, Destinations: []string{"a.example:1", "a.example:1"}}
		},
		"brokered": func(p *grant.Predicate) {
			p.Credentials = []string{"a", "b"}
			p.Brokered = []grant.Brokered{{Name: "a", Destination: "a.example:443"}}
		},
		"brokered[0].destination": func(p *grant.Predicate) {
			p.Credentials = []string{"a"}
			p.Brokered = []grant.Brokered{{Name: "a", Destination: "10.0.0.1:443"}}
		},
		"brokered[0].form": func(p *grant.Predicate) {
			p.Credentials = []string{"a"}
			p.Brokered = []grant.Brokered{{Name: "a", Destination: "a.example:443", Form: "gateway"}}
		},
		"brokered[0].requests[1]": func(p *grant.Predicate) {
			p.Credentials = []string{"a"}
			p.Brokered = []grant.Brokered{{Name: "a", Destination: "a.example:443", Requests: []string{"POST /v1", "TRACE /"}}}
		},
		"egress.inspect[0]": func(p *grant.Predicate) {
			p.Egress = grant.Egress{Mode: grant.EgressRestricted, Destinations: []string{"a.example:443"}, Inspect: []string{"b.example:443"}}
		},
		"egress.destinations  ": func(p *grant.Predicate) {
			p.Egress = grant.Egress{Mode: grant.EgressDeny, Destinations: []string{}, Inspect: []string{"b.example:443"}}
		},
	}
	for field, mutate := range cases {
		field := strings.TrimRight(field, " \x00")
		p := testPredicate(runner)
		mutate(&p)
		_, err := grant.Mint(ctx, issuer, p)
		if err == nil {
			t.Errorf("%s: invalid predicate minted", field)
			continue
		}
		if !strings.Contains(err.Error(), field+":") {
			t.Errorf("%s: error %q does not name the field", field, err)
		}
	}
	restricted := testPredicate(runner)
	restricted.Egress = grant.Egress{Mode: grant.EgressRestricted, Destinations: []string{"proxy.golang.org:443"}}
	restricted.Credentials = []string{"provider"}
	restricted.Brokered = []grant.Brokered{{Name: "provider", Destination: "api.provider.example:443"}}
	if _, err := grant.Mint(ctx, issuer, restricted); err != nil {
		t.Errorf("restricted egress with a brokered credential: %v", err)
	}
	restricted.Brokered[0].Form = "intercept"
	if _, err := grant.Mint(ctx, issuer, restricted); err != nil {
		t.Errorf("restricted egress with an intercepted credential: %v", err)
	}
	// A grant of today binds the requests and the inspected destinations;
	// one without them (above) is the shape of a grant issued before.
	restricted.Brokered[0].Requests = []string{"POST /v1/messages", "GET /v1/models"}
	restricted.Egress.Inspect = []string{"proxy.golang.org:443"}
	if _, err := grant.Mint(ctx, issuer, restricted); err != nil {
		t.Errorf("restricted egress with requests and an inspected destination: %v", err)
	}
	if _, err := grant.Mint(ctx, nil, testPredicate(runner)); err == nil {
		t.Error("nil issuer accepted")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := grant.Mint(cctx, issuer, testPredicate(runner)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: err = %v", err)
	}
}

// TestMintIsCanonical checks that equal predicates give equal statements
// (signatures differ: ECDSA is randomized).
func TestMintIsCanonical(t *testing.T) {
	f := newFixture(t)
	again, err := grant.Mint(context.Background(), f.issuer, f.pred)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(payloadOf(t, again), payloadOf(t, f.envelope)) {
		t.Fatal("minting the same predicate twice gave different statements")
	}
}

func TestClosureDigest(t *testing.T) {
	sum := sha256.Sum256([]byte("3:/in,4:/src,9:sha256:ab,\n"))
	want := "sha256:" + hex.EncodeToString(sum[:])
	if got := grant.ClosureDigest([]grant.Input{{Source: "/src", Target: "/in", Digest: "sha256:ab"}}); got != want {
		t.Errorf("documented example: got %s, want %s", got, want)
	}
	empty := sha256.Sum256(nil)
	if got := grant.ClosureDigest(nil); got != "sha256:"+hex.EncodeToString(empty[:]) {
		t.Errorf("no entries: %s", got)
	}
	a := grant.Input{Source: "/a", Target: "/x", Digest: digestOf("a")}
	b := grant.Input{Source: "/b", Target: "/y", Digest: digestOf("b")}
	c := grant.Input{Source: "/a", Target: "/y", Digest: digestOf("b")}
	in := []grant.Input{b, a, c}
	if grant.ClosureDigest(in) != grant.ClosureDigest([]grant.Input{a, c, b}) {
		t.Error("closure digest depends on entry order")
	}
	if in[0] != b {
		t.Error("ClosureDigest reordered its argument")
	}
	// Field boundaries are unambiguous.
	d1 := grant.ClosureDigest([]grant.Input{{Source: "ab", Target: "/c", Digest: "d"}})
	d2 := grant.ClosureDigest([]grant.Input{{Source: "a", Target: "/c", Digest: "bd"}})
	if d1 == d2 {
		t.Error("field boundaries are ambiguous")
	}
}

func TestNewIDUnique(t *testing.T) {
	seen := make(map[string]bool)
	for range 100 {
		id := grant.NewID()
		if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
			t.Fatalf("NewID = %q", id)
		}
		if seen[id] {
			t.Fatalf("NewID repeated %q", id)
		}
		seen[id] = true
	}
}

func TestErrorFormat(t *testing.T) {
	err := fmt.Errorf("launch: %w", grant.Refuse(grant.CodeReplayed, "grant %s already used", "abc"))
	var ge *grant.Error
	if !errors.As(err, &ge) {
		t.Fatal("errors.As failed through wrapping")
	}
	if ge.Code != grant.CodeReplayed || ge.Error() != "grant refused (replayed): grant abc already used" {
		t.Fatalf("got %q / %q", ge.Code, ge.Error())
	}
	for code, want := range map[grant.Code]string{
		grant.CodeMalformed: "malformed", grant.CodeTampered: "tampered", grant.CodeWrongIssuer: "wrong-issuer",
		grant.CodeNotYetValid: "not-yet-valid", grant.CodeExpired: "expired", grant.CodeRevoked: "revoked",
		grant.CodeReplayed: "replayed", grant.CodeWrongRunner: "wrong-runner", grant.CodePolicyChanged: "policy-changed",
		grant.CodeRuntimeChanged: "runtime-changed", grant.CodeImageChanged: "image-changed",
		grant.CodeInputsChanged: "inputs-changed", grant.CodeTargetMismatch: "target-mismatch",
		grant.CodeNotAdmitted: "not-admitted", grant.CodeActorNotAllowed: "actor-not-allowed",
		grant.CodeSubmitterNotAllowed: "submitter-not-allowed",
	} {
		if string(code) != want {
			t.Errorf("code %q, want %q", code, want)
		}
	}
}

// TestByteFlips flips every byte of a valid envelope, and every byte of its
// payload (re-encoded without re-signing), in several ways. No flip may
// yield a grant that differs from the original.
func TestByteFlips(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	issuer := f.issuer.Verifier().ID()
	check := func(what string, env []byte) {
		t.Helper()
		g, err := f.verifier.Verify(ctx, env, validNow)
		if err != nil {
			var ge *grant.Error
			if !errors.As(err, &ge) {
				t.Fatalf("%s: untyped error %v", what, err)
			}
			return
		}
		if !reflect.DeepEqual(g.Predicate, f.pred) || g.IssuerKeyID != issuer {
			t.Fatalf("%s verified with a different grant", what)
		}
	}
	masks := []byte{0x01, 0x02, 0x20, 0x80, 0xff}
	positions := make([]int, len(f.envelope))
	for i := range positions {
		positions[i] = i
	}
	if testing.Short() {
		// A deterministic sample of 500 positions, always including both ends.
		r := rand.New(rand.NewPCG(1, 2))
		r.Shuffle(len(positions), func(i, j int) { positions[i], positions[j] = positions[j], positions[i] })
		positions = append(positions[:498], 0, len(f.envelope)-1)
	}
	buf := make([]byte, len(f.envelope))
	for _, i := range positions {
		for _, m := range masks {
			copy(buf, f.envelope)
			buf[i] ^= m
			check(fmt.Sprintf("envelope byte %d ^ %#x", i, m), buf)
		}
	}
	payload := payloadOf(t, f.envelope)
	p := make([]byte, len(payload))
	tampered := 0
	for i := range payload {
		copy(p, payload)
		p[i] ^= 0x01
		env := withPayload(t, f.envelope, p)
		_, err := f.verifier.Verify(ctx, env, validNow)
		var ge *grant.Error
		if !errors.As(err, &ge) || ge.Code != grant.CodeTampered {
			t.Fatalf("payload byte %d flipped: err = %v, want tampered", i, err)
		}
		tampered++
	}
	t.Logf("%d envelope flips and %d payload flips refused", len(positions)*len(masks), tampered)
}

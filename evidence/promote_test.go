package evidence_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	vsa "github.com/in-toto/attestation/go/predicates/vsa/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/predicate"
)

func TestPromote(t *testing.T) {
	f := newFixture(t)
	tr := f.trust(t, "", "")
	res := f.verify(t, tr, f.env)
	verifier := newKey(t)
	when := verifyNow.Add(time.Second)
	out, err := evidence.Promote(context.Background(), verifier, res, f.env, evidence.PromoteOptions{Now: when})
	if err != nil {
		t.Fatal(err)
	}

	// The envelope is signed by the verifier key.
	var e dsse.Envelope
	if err := json.Unmarshal(out, &e); err != nil {
		t.Fatal(err)
	}
	ev, err := dsse.NewEnvelopeVerifier(verifier.Verifier())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ev.Verify(context.Background(), &e); err != nil {
		t.Fatalf("VSA signature: %v", err)
	}
	if e.PayloadType != predicate.PayloadType || len(e.Signatures) != 1 || e.Signatures[0].KeyID != verifier.ID() {
		t.Fatalf("envelope %+v", e)
	}

	payload, _ := base64.StdEncoding.DecodeString(e.Payload)
	var st intoto.Statement
	if err := protojson.Unmarshal(payload, &st); err != nil {
		t.Fatal(err)
	}
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}
	if st.GetPredicateType() != "https://slsa.dev/verification_summary/v1" {
		t.Fatalf("predicateType %s", st.GetPredicateType())
	}
	var gotSubjects []evidence.Subject
	for _, s := range st.GetSubject() {
		gotSubjects = append(gotSubjects, evidence.Subject{Name: s.GetName(), Digest: s.GetDigest()})
	}
	if !reflect.DeepEqual(gotSubjects, res.Subjects) {
		t.Fatalf("VSA subjects %v, receipt subjects %v", gotSubjects, res.Subjects)
	}

	pj, _ := protojson.Marshal(st.GetPredicate())
	var v vsa.VerificationSummary
	if err := protojson.Unmarshal(pj, &v); err != nil {
		t.Fatal(err)
	}
	if got, want := v.GetVerifier().GetId(), "https://custody.dev/verifier/"+verifier.ID(); got != want {
		t.Errorf("verifier.id %s, want %s", got, want)
	}
	if !v.GetTimeVerified().AsTime().Equal(when) {
		t.Errorf("timeVerified %v", v.GetTimeVerified().AsTime())
	}
	if v.GetResourceUri() != "custody:run/"+f.receipt.RunID {
		t.Errorf("resourceUri %s", v.GetResourceUri())
	}
	if v.GetPolicy().GetUri() != "custody:trust" || "sha256:"+v.GetPolicy().GetDigest()["sha256"] != tr.Digest {
		t.Errorf("policy %v, trust digest %s", v.GetPolicy(), tr.Digest)
	}
	ia := v.GetInputAttestations()
	if len(ia) != 1 || ia[0].GetUri() != "custody:receipt/"+f.receipt.RunID || ia[0].GetDigest()["sha256"] != hexOf(f.env) {
		t.Errorf("inputAttestations %v", ia)
	}
	if v.GetVerificationResult() != "PASSED" || !reflect.DeepEqual(v.GetVerifiedLevels(), []string{"CUSTODY_TIER_PRODUCTION"}) || v.GetSlsaVersion() != "1.0" {
		t.Errorf("result %s levels %v slsa %s", v.GetVerificationResult(), v.GetVerifiedLevels(), v.GetSlsaVersion())
	}

	// Options override the defaults.
	out, err = evidence.Promote(context.Background(), verifier, res, f.env, evidence.PromoteOptions{
		VerifierID: "https://ci.example.com/verifier", ResourceURI: "oci://example/app", PolicyURI: "https://example.com/trust.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"https://ci.example.com/verifier", "oci://example/app", "https://example.com/trust.yaml"} {
		if !bytes.Contains(payloadOf(t, out), []byte(s)) {
			t.Errorf("VSA lacks %s", s)
		}
	}
}

func TestPromoteRefuses(t *testing.T) {
	f := newFixture(t)
	res := f.verify(t, f.trust(t, "", ""), f.env)
	ctx := context.Background()
	k := newKey(t)

	// Another envelope than the one verified.
	other := sign(t, f.runner, f.receipt) // same receipt, new signature
	if _, err := evidence.Promote(ctx, k, res, other, evidence.PromoteOptions{}); err == nil || !strings.Contains(err.Error(), "not the envelope") {
		t.Fatalf("Promote with another envelope: %v", err)
	}
	// A Result that Verify did not make, even one claiming everything.
	forged := *res
	forged = evidence.Result{Checks: forged.Checks, Receipt: forged.Receipt, Subjects: forged.Subjects,
		EnvelopeSHA256: forged.EnvelopeSHA256, TrustDigest: forged.TrustDigest, OK: true, Promotable: true}
	if _, err := evidence.Promote(ctx, k, &forged, f.env, evidence.PromoteOptions{}); err == nil || !strings.Contains(err.Error(), "not produced by Verifier.Verify") {
		t.Fatalf("Promote with a forged result: %v", err)
	}
	// A verified, not promotable result whose Promotable was flipped.
	stale := f.verify(t, f.trust(t, "", ""), f.env, evidence.WithNow(finished.Add(48*time.Hour)))
	stale.Promotable = true
	if _, err := evidence.Promote(ctx, k, stale, f.env, evidence.PromoteOptions{}); err == nil || !strings.Contains(err.Error(), "freshness") {
		t.Fatalf("Promote of a stale receipt: %v", err)
	}
	if _, err := evidence.Promote(ctx, nil, res, f.env, evidence.PromoteOptions{}); err == nil {
		t.Fatal("Promote with a nil key")
	}
}

func TestPromoteDevelopment(t *testing.T) {
	f := newFixture(t)
	r := f.receipt
	r.Profile.Tier, r.Profile.Unqualified = evidence.TierDevelopment, true
	env := sign(t, f.runner, r)
	res := f.verify(t, f.trust(t, "", "tiers: [development]\n"), env)
	out, err := evidence.Promote(context.Background(), newKey(t), res, env, evidence.PromoteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(payloadOf(t, out), []byte(`"verifiedLevels":["CUSTODY_TIER_DEVELOPMENT"]`)) {
		t.Fatalf("VSA: %s", payloadOf(t, out))
	}
}

func TestBundle(t *testing.T) {
	f := newFixture(t)
	b, err := evidence.Bundle(f.env, "")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		MediaType            string `json:"mediaType"`
		VerificationMaterial struct {
			PublicKey struct {
				Hint string `json:"hint"`
			} `json:"publicKey"`
		} `json:"verificationMaterial"`
		DsseEnvelope struct {
			Payload     string `json:"payload"`
			PayloadType string `json:"payloadType"`
			Signatures  []struct {
				Sig   string `json:"sig"`
				Keyid string `json:"keyid"`
			} `json:"signatures"`
		} `json:"dsseEnvelope"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	e := decodeEnv(t, f.env)
	if got.MediaType != "application/vnd.dev.sigstore.bundle.v0.3+json" ||
		got.VerificationMaterial.PublicKey.Hint != f.runner.ID() ||
		got.DsseEnvelope.Payload != e.Payload || got.DsseEnvelope.PayloadType != predicate.PayloadType ||
		len(got.DsseEnvelope.Signatures) != 1 || got.DsseEnvelope.Signatures[0].Sig != e.Signatures[0].Sig ||
		got.DsseEnvelope.Signatures[0].Keyid != "" {
		t.Fatalf("bundle:\n%s", b)
	}
	if b, err := evidence.Bundle(f.env, "ci-runner-1"); err != nil || !bytes.Contains(b, []byte(`"hint": "ci-runner-1"`)) {
		t.Fatalf("explicit hint: %v\n%s", err, b)
	}
	if again, _ := evidence.Bundle(f.env, ""); !bytes.Equal(again, b) {
		t.Fatal("Bundle is not deterministic")
	}
	if _, err := evidence.Bundle(signPayload(t, payloadOf(t, f.env), f.runner, newKey(t)), ""); err == nil {
		t.Fatal("Bundle accepted two signatures")
	}
	if _, err := evidence.Bundle([]byte(`{}`), ""); err == nil {
		t.Fatal("Bundle accepted a non-envelope")
	}
}

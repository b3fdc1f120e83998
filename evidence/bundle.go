package evidence

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	bundlepb "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	commonpb "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	dssepb "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	rekorpb "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"google.golang.org/protobuf/encoding/protojson"

	cdsse "github.com/custody-dev/custody/internal/dsse"
)

// BundleMediaType is the media type of the bundles Bundle writes.
const BundleMediaType = "application/vnd.dev.sigstore.bundle.v0.3+json"

// Bundle returns the Sigstore bundle v0.3 JSON of the DSSE envelope env
// (a receipt or any custody statement envelope): public-key verification
// material whose hint is keyHint, no transparency log entries and no
// timestamps, and the envelope's payload, payload type and signature,
// unchanged.
//
// A Sigstore bundle carries exactly one signature, so env must have one. An
// empty keyHint means the signature's keyid (the signing key's keys.KeyID).
//
// The bundle's DSSE signature has no keyid: custody's keyid ("sha256:" and
// the hex SHA-256 of the PKIX key) is not the SSH-style fingerprint that
// sigstore-go computes for a public key, and sigstore-go (so cosign) skips
// any signature whose keyid differs from its own, so the bundle would never
// verify. A DSSE keyid is an unsigned hint outside the pre-authentication
// encoding, so leaving it out changes nothing that is verified; the key is
// named by the verification material's hint instead, as in the bundles that
// cosign itself writes for key-based signatures. The envelope is decoded as
// strictly as Verify decodes it; its signature is not checked here.
//
// Verify the bundle with the runner's public key, e.g.
//
//	cosign verify-blob-attestation --key runner.pub --bundle receipt.sigstore.json \
//	  --type https://custody.dev/attestation/receipt/v3 --insecure-ignore-tlog <output file>
func Bundle(env []byte, keyHint string) ([]byte, error) {
	pj, err := bundleJSON(env, keyHint)
	if err != nil {
		return nil, err
	}
	// protojson's output is deliberately unstable; re-indent it so the
	// same envelope always gives the same bytes. json.Indent drops the
	// whitespace between tokens and writes its own, so it needs no
	// compaction first.
	var out bytes.Buffer
	if err := json.Indent(&out, pj, "", "  "); err != nil {
		return nil, fmt.Errorf("evidence: bundle: %w", err)
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// BundleCompact is Bundle's bundle compacted: the bytes a JSON document
// that embeds the bundle (a run record, a stream event) carries, made once
// here so the embedding need not re-format them.
func BundleCompact(env []byte, keyHint string) ([]byte, error) {
	pj, err := bundleJSON(env, keyHint)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, pj); err != nil {
		return nil, fmt.Errorf("evidence: bundle: %w", err)
	}
	return out.Bytes(), nil
}

// bundleJSON is the bundle of env as protojson writes it.
func bundleJSON(env []byte, keyHint string) ([]byte, error) {
	e, err := decodeEnvelope(env)
	if err != nil {
		return nil, fmt.Errorf("evidence: bundle: envelope: %w", err)
	}
	if len(e.Signatures) != 1 {
		return nil, fmt.Errorf("evidence: bundle: the envelope has %d signatures; a Sigstore bundle carries exactly one", len(e.Signatures))
	}
	sig := e.Signatures[0]
	if keyHint == "" {
		keyHint = sig.KeyID
	}
	b := &bundlepb.Bundle{
		MediaType: BundleMediaType,
		VerificationMaterial: &bundlepb.VerificationMaterial{
			Content: &bundlepb.VerificationMaterial_PublicKey{
				PublicKey: &commonpb.PublicKeyIdentifier{Hint: keyHint},
			},
			TlogEntries: []*rekorpb.TransparencyLogEntry{},
		},
		Content: &bundlepb.Bundle_DsseEnvelope{
			DsseEnvelope: &dssepb.Envelope{
				Payload:     e.Payload,
				PayloadType: e.PayloadType,
				Signatures:  []*dssepb.Signature{{Sig: sig.Sig}},
			},
		},
	}
	pj, err := protojson.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("evidence: bundle: %w", err)
	}
	return pj, nil
}

// ErrBundleMismatch is returned when a Sigstore bundle does not hold the
// envelope it is checked against.
var ErrBundleMismatch = errors.New("the Sigstore bundle does not hold this envelope")

// IsBundle says whether data looks like a Sigstore bundle (a JSON object
// with a mediaType member) rather than a DSSE envelope. It decides which
// reader to use, never whether anything verifies.
func IsBundle(data []byte) bool {
	var probe struct {
		MediaType *string `json:"mediaType"`
	}
	return json.Unmarshal(data, &probe) == nil && probe.MediaType != nil
}

// EnvelopeOfBundle returns the DSSE envelope a bundle written by Bundle
// holds, in the canonical form custody writes envelopes in, with the
// signature's keyid taken from the verification material's hint (Bundle
// moves it there). The bundle is decoded strictly: media type v0.3, a DSSE
// envelope with one signature, a public-key hint, no other content. The
// envelope's signature is not checked here; Verify checks it.
func EnvelopeOfBundle(bundle []byte) ([]byte, error) {
	if len(bundle) > MaxEnvelopeSize+bundleSlack {
		return nil, fmt.Errorf("evidence: bundle is %d bytes, more than the limit of %d", len(bundle), MaxEnvelopeSize+bundleSlack)
	}
	var b bundlepb.Bundle
	if err := (protojson.UnmarshalOptions{}).Unmarshal(bundle, &b); err != nil {
		return nil, fmt.Errorf("evidence: bundle: %w", err)
	}
	if b.GetMediaType() != BundleMediaType {
		return nil, fmt.Errorf("evidence: bundle: media type %q is not %q", cdsse.Clip(b.GetMediaType()), BundleMediaType)
	}
	hint := b.GetVerificationMaterial().GetPublicKey().GetHint()
	d := b.GetDsseEnvelope()
	switch {
	case hint == "":
		return nil, errors.New("evidence: bundle: no public-key hint names the signing key")
	case d == nil:
		return nil, errors.New("evidence: bundle: it holds no DSSE envelope")
	case len(d.GetSignatures()) != 1:
		return nil, fmt.Errorf("evidence: bundle: %d signatures; a bundle carries exactly one", len(d.GetSignatures()))
	}
	env := struct {
		PayloadType string `json:"payloadType"`
		Payload     []byte `json:"payload"`
		Signatures  []struct {
			KeyID string `json:"keyid"`
			Sig   []byte `json:"sig"`
		} `json:"signatures"`
	}{PayloadType: d.GetPayloadType(), Payload: d.GetPayload()}
	env.Signatures = append(env.Signatures, struct {
		KeyID string `json:"keyid"`
		Sig   []byte `json:"sig"`
	}{hint, d.GetSignatures()[0].GetSig()})
	out, err := json.Marshal(&env)
	if err != nil {
		return nil, fmt.Errorf("evidence: bundle: %w", err)
	}
	if _, err := decodeEnvelope(out); err != nil {
		return nil, fmt.Errorf("evidence: bundle: envelope: %w", err)
	}
	return out, nil
}

// MatchBundle checks that bundle holds exactly the envelope env: the same
// payload type, payload and signature, and the signature's keyid as the
// key hint. It returns an error wrapping ErrBundleMismatch naming the
// first part that differs.
func MatchBundle(env, bundle []byte) error {
	got, err := EnvelopeOfBundle(bundle)
	if err != nil {
		return err
	}
	a, err := decodeEnvelope(env)
	if err != nil {
		return fmt.Errorf("evidence: envelope: %w", err)
	}
	b, err := decodeEnvelope(got)
	if err != nil {
		return fmt.Errorf("evidence: bundle: envelope: %w", err)
	}
	switch {
	case a.PayloadType != b.PayloadType:
		return fmt.Errorf("%w: payload type %q, the envelope's is %q", ErrBundleMismatch, cdsse.Clip(b.PayloadType), cdsse.Clip(a.PayloadType))
	case !bytes.Equal(a.Payload, b.Payload):
		return fmt.Errorf("%w: its payload (the signed statement) differs", ErrBundleMismatch)
	case len(a.Signatures) != 1:
		return fmt.Errorf("%w: the envelope has %d signatures, a bundle one", ErrBundleMismatch, len(a.Signatures))
	case !bytes.Equal(a.Signatures[0].Sig, b.Signatures[0].Sig):
		return fmt.Errorf("%w: its signature differs", ErrBundleMismatch)
	case a.Signatures[0].KeyID != b.Signatures[0].KeyID:
		return fmt.Errorf("%w: its key hint %q is not the envelope's keyid %q", ErrBundleMismatch, cdsse.Clip(b.Signatures[0].KeyID), cdsse.Clip(a.Signatures[0].KeyID))
	}
	return nil
}

// bundleSlack is what a bundle adds around an envelope's bytes.
const bundleSlack = 64 << 10

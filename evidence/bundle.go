package evidence

import (
	"bytes"
	"encoding/json"
	"fmt"

	bundlepb "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	commonpb "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	dssepb "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	rekorpb "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"google.golang.org/protobuf/encoding/protojson"
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
	// protojson's output is deliberately unstable; re-indent it so the
	// same envelope always gives the same bytes.
	var compact, out bytes.Buffer
	if err := json.Compact(&compact, pj); err != nil {
		return nil, fmt.Errorf("evidence: bundle: %w", err)
	}
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		return nil, fmt.Errorf("evidence: bundle: %w", err)
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

package evidence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	vsa "github.com/in-toto/attestation/go/predicates/vsa/v1"
	"google.golang.org/protobuf/encoding/protojson"

	cdsse "github.com/custody-dev/custody/internal/dsse"
	"github.com/custody-dev/custody/keys"
)

// VSAPredicateType is the predicate type of a SLSA Verification Summary
// Attestation v1.
const VSAPredicateType = "https://slsa.dev/verification_summary/v1"

// VerifierIDPrefix starts the default verifier ID of a promotion; the
// verifier key's keys.KeyID follows it.
const VerifierIDPrefix = "https://custody.dev/verifier/"

// Verified levels a promotion states, by the receipt's effective tier.
const (
	LevelProduction  = "CUSTODY_TIER_PRODUCTION"
	LevelDevelopment = "CUSTODY_TIER_DEVELOPMENT"
)

// PromoteOptions tune Promote. The zero value is valid.
type PromoteOptions struct {
	// VerifierID identifies the verifier; default
	// "https://custody.dev/verifier/<key ID of the promoting key>".
	VerifierID string
	// ResourceURI names what was verified; default "custody:run/<runId>".
	ResourceURI string
	// PolicyURI names the trust file; default "file://<path>" when the
	// trust was loaded from a file, else "custody:trust".
	PolicyURI string
	// Now is the verification time recorded; default the current time.
	Now time.Time
}

// VerificationSummary is a SLSA VSA v1 predicate as Promote writes it.
type VerificationSummary struct {
	Verifier           VSAVerifier `json:"verifier"`
	TimeVerified       time.Time   `json:"timeVerified"`
	ResourceURI        string      `json:"resourceUri"`
	Policy             VSARef      `json:"policy"`
	InputAttestations  []VSARef    `json:"inputAttestations"`
	VerificationResult string      `json:"verificationResult"`
	VerifiedLevels     []string    `json:"verifiedLevels"`
	SlsaVersion        string      `json:"slsaVersion"`
}

// VSAVerifier identifies the verifier of a VSA.
type VSAVerifier struct {
	ID string `json:"id"`
}

// VSARef is a resource reference of a VSA: a URI and its digests.
type VSARef struct {
	URI    string            `json:"uri"`
	Digest map[string]string `json:"digest"`
}

// Promote emits a SLSA Verification Summary Attestation for the receipt
// envelope env that Verify judged promotable in res: an in-toto Statement v1
// over the receipt's subjects with predicate type VSAPredicateType, signed
// by verifier and returned as DSSE envelope JSON.
//
// It refuses unless res came from Verifier.Verify, is Promotable, and is
// the result of verifying exactly env. The VSA records the trust file as its
// policy (uri and sha256), the receipt envelope as its only input
// attestation ("custody:receipt/<runId>" with the envelope's sha256),
// verificationResult "PASSED", the receipt's tier as verifiedLevels and
// slsaVersion "1.0".
func Promote(ctx context.Context, verifier *keys.Signer, res *Result, env []byte, opts PromoteOptions) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("evidence: promote: %w", err)
	}
	if verifier == nil {
		return nil, errors.New("evidence: promote: nil verifier key")
	}
	if res == nil {
		return nil, errors.New("evidence: promote: nil result")
	}
	if res.seal == nil {
		return nil, errors.New("evidence: promote: the result was not produced by Verifier.Verify")
	}
	if !res.Promotable || !res.seal.promotable || res.Receipt == nil {
		var why []string
		for _, c := range res.Failed() {
			if c.Name == CheckOutputs && !res.OutputsChecked {
				continue
			}
			why = append(why, c.Name+": "+c.Reason)
		}
		return nil, fmt.Errorf("evidence: promote: the receipt is not promotable: %s", strings.Join(why, "; "))
	}
	sum := sha256.Sum256(env)
	envSHA := hex.EncodeToString(sum[:])
	if envSHA != res.seal.envelopeSHA256 || envSHA != res.EnvelopeSHA256 {
		return nil, errors.New("evidence: promote: env is not the envelope the result verified")
	}
	r := res.Receipt

	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	vs := VerificationSummary{
		Verifier:     VSAVerifier{ID: opts.VerifierID},
		TimeVerified: now.UTC(),
		ResourceURI:  opts.ResourceURI,
		Policy:       VSARef{URI: opts.PolicyURI, Digest: map[string]string{"sha256": strings.TrimPrefix(res.TrustDigest, "sha256:")}},
		InputAttestations: []VSARef{{
			URI:    "custody:receipt/" + r.RunID,
			Digest: map[string]string{"sha256": envSHA},
		}},
		VerificationResult: "PASSED",
		VerifiedLevels:     []string{LevelProduction},
		SlsaVersion:        "1.0",
	}
	if vs.Verifier.ID == "" {
		vs.Verifier.ID = VerifierIDPrefix + verifier.ID()
	}
	if vs.ResourceURI == "" {
		vs.ResourceURI = "custody:run/" + r.RunID
	}
	if vs.Policy.URI == "" {
		vs.Policy.URI = "custody:trust"
		if res.TrustPath != "" {
			vs.Policy.URI = "file://" + res.TrustPath
		}
	}
	if r.EffectiveTier() == TierDevelopment {
		vs.VerifiedLevels = []string{LevelDevelopment}
	}
	if !cdsse.IsHex64(vs.Policy.Digest["sha256"]) {
		return nil, fmt.Errorf("evidence: promote: the result's trust digest %q is not a sha256 digest", res.TrustDigest)
	}

	payload, err := encodeStatement(VSAPredicateType, res.Subjects, &vs)
	if err != nil {
		return nil, fmt.Errorf("evidence: promote: %w", err)
	}
	if err := checkInToto(payload); err != nil {
		return nil, fmt.Errorf("evidence: promote: %w", err)
	}
	if err := checkVSA(payload); err != nil {
		return nil, fmt.Errorf("evidence: promote: %w", err)
	}
	out, err := signStatement(ctx, verifier, payload)
	if err != nil {
		return nil, fmt.Errorf("evidence: promote: %w", err)
	}
	return out, nil
}

// checkVSA parses the predicate of payload with in-toto's own SLSA VSA v1
// type, refusing unknown fields.
func checkVSA(payload []byte) error {
	var st statement
	if err := cdsse.StrictUnmarshal(payload, &st); err != nil {
		return err
	}
	var pb vsa.VerificationSummary
	if err := protojson.Unmarshal(st.Predicate, &pb); err != nil {
		return fmt.Errorf("in-toto's VSA v1 parser refuses the predicate: %w", err)
	}
	if pb.GetVerificationResult() != "PASSED" || pb.GetVerifier().GetId() == "" || pb.GetTimeVerified() == nil {
		return errors.New("the VSA predicate lost a required field in parsing")
	}
	return nil
}

package policy

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"

	"github.com/custody-dev/custody/internal/strictyaml"
	"github.com/custody-dev/custody/quantity"
)

// MaxSize is the largest policy file accepted, in bytes.
const MaxSize = 1 << 20

//go:embed policy.schema.json
var schemaJSON []byte

// Schema returns the JSON Schema (draft 2020-12) that every policy must
// satisfy. The caller owns the returned slice.
func Schema() []byte { return bytes.Clone(schemaJSON) }

// parser holds the embedded schema, compiled on first use, and the words
// that explain its failures.
var parser = strictyaml.New(strictyaml.Format{
	Subject:    "policy",
	MaxSize:    MaxSize,
	SchemaURL:  "https://custody.dev/schemas/v1alpha1/policy.schema.json",
	Schema:     schemaJSON,
	SchemaName: "policy schema",
	Patterns: map[string]string{
		"^sha256:[0-9a-f]{64}$":     "use the sha256:<64 lowercase hex> digest of an imported image",
		quantity.DurationPattern:    "write a positive duration such as 30s, 5m or 1h30m",
		quantity.BytesPattern:       "write a positive byte count such as 64Mi, 1Gi or a plain integer; decimal and bare suffixes (1G, 64MB, 64m) are ambiguous",
		"^/":                        inputRootFix,
		actorPattern.String():       actorFix,
		credentialPattern.String():  credentialFix,
		destinationPattern.String(): destinationFix,
		ServicePattern.String():     serviceFix,
		referencePattern.String():   referenceFix,
		sysctlPattern.String():      sysctlFix,
		devicePattern.String():      deviceFix,
	},
})

// Parse parses and validates a policy. It refuses anything it does not
// understand: YAML anchors and aliases, more than one document, unknown
// fields, schema violations and semantically invalid values. Problems with
// the content are returned together as a *ValidationError.
func Parse(data []byte) (*Policy, error) {
	var p Policy
	if err := parser.Decode(data, &p); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Load reads and parses the policy in the file at path. Callers that must
// bind the exact policy bytes should read the file once, then call Digest and
// Parse on the same bytes.
func Load(path string) (*Policy, error) {
	data, err := parser.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Digest returns "sha256:<hex>" of the raw policy bytes, so that results can
// name exactly the policy that admitted them.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

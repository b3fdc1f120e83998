package request

import (
	"bytes"
	_ "embed"
	"fmt"
	"path/filepath"

	"github.com/custody-dev/custody/internal/strictyaml"
	"github.com/custody-dev/custody/quantity"
)

// MaxSize is the largest phase request accepted, in bytes. Requests are
// written by untrusted work, so even reading one is bounded.
const MaxSize = 1 << 20

//go:embed phase.schema.json
var schemaJSON []byte

// Schema returns the JSON Schema (draft 2020-12) that every phase request
// must satisfy. The caller owns the returned slice.
func Schema() []byte { return bytes.Clone(schemaJSON) }

// parser holds the embedded schema, compiled on first use, and the words
// that explain its failures.
var parser = strictyaml.New(strictyaml.Format{
	Subject:    "request",
	MaxSize:    MaxSize,
	SchemaURL:  "https://custody.dev/schemas/v1alpha1/phase.schema.json",
	Schema:     schemaJSON,
	SchemaName: "phase request schema",
	Patterns: map[string]string{
		"^/":                          "use an absolute path",
		"^sha256:[0-9a-f]{64}$":       "use the sha256:<64 lowercase hex> digest of an imported image",
		"^[a-z0-9][a-z0-9._-]{0,62}$": "use 1 to 63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit",
		toolchainPattern.String():     toolchainFix,
		credentialPattern.String():    credentialFix,
		quantity.DurationPattern:      "write a positive duration such as 30s, 5m or 1h30m",
		quantity.BytesPattern:         "write a positive byte count such as 64Mi, 1Gi or a plain integer; decimal and bare suffixes (1G, 64MB, 64m) are ambiguous",
	},
	Keys: map[string]strictyaml.Key{
		// env's keys are free but patterned.
		"/env": {Noun: "variable name", Fix: "use letters, digits and '_', not starting with a digit"},
	},
})

// Parse parses and validates one phase request. It refuses anything it does
// not understand: YAML anchors and aliases, more than one document, unknown
// fields, schema violations and semantically invalid values. Problems with
// the content are returned together as a *ValidationError.
func Parse(data []byte) (*Phase, error) {
	var p Phase
	if err := parser.Decode(data, &p); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Load reads and parses the phase request in the file at path. Relative
// input sources are resolved against the directory holding the file, so a
// request means the same thing wherever it is run from.
func Load(path string) (*Phase, error) {
	data, err := parser.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	dir := filepath.Dir(abs)
	for i := range p.Inputs {
		src := p.Inputs[i].Source
		if _, ok := p.Inputs[i].OutputDigest(); ok {
			continue // the runner's own store, never a host path
		}
		if !filepath.IsAbs(src) {
			src = filepath.Join(dir, src)
		}
		p.Inputs[i].Source = filepath.Clean(src)
	}
	return p, nil
}

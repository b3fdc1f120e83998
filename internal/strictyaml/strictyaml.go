// Package strictyaml decodes untrusted YAML documents strictly: one document,
// no anchors, aliases, merge keys, custom tags or duplicate keys, checked
// against a JSON Schema, then decoded with unknown fields refused.
package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/custody-dev/custody/internal/regfile"
)

// A Format describes one kind of document: what to call it, how large it may
// be, the schema it must satisfy and the words that explain the schema's
// failures to a person.
type Format struct {
	// Subject names the document kind; it starts every error ("request").
	Subject string
	// MaxSize is the largest document accepted, in bytes.
	MaxSize int
	// SchemaURL identifies Schema, the JSON Schema (draft 2020-12) text
	// every document must satisfy.
	SchemaURL string
	Schema    []byte
	// SchemaName names the schema in the last-resort fix: "see the
	// <SchemaName>".
	SchemaName string
	// Patterns explains the schema's regular expressions: each pattern maps
	// to the fix for a value that does not match it.
	Patterns map[string]string
	// Keys explains refused keys of the objects, named by JSON pointer,
	// whose keys are free but must match a pattern.
	Keys map[string]Key
}

// Key explains the keys one object accepts.
type Key struct {
	// Noun names a key: a refused key is "not a valid <Noun>".
	Noun string
	// Fix says how to write a valid key.
	Fix string
}

// A Parser decodes documents of one Format. It is safe for concurrent use.
type Parser struct {
	format Format
	schema func() (*jsonschema.Schema, error)
}

// New returns a Parser for f. The schema is compiled on first use.
func New(f Format) *Parser {
	return &Parser{
		format: f,
		schema: sync.OnceValues(func() (*jsonschema.Schema, error) {
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(f.Schema))
			if err != nil {
				return nil, err
			}
			c := jsonschema.NewCompiler()
			c.DefaultDraft(jsonschema.Draft2020)
			if err := c.AddResource(f.SchemaURL, doc); err != nil {
				return nil, err
			}
			return c.Compile(f.SchemaURL)
		}),
	}
}

// Decode parses data as exactly one YAML document, checks it against the
// schema and decodes it into v, refusing fields v does not have. Schema
// violations are returned together as a *ValidationError; every other error
// is the YAML refused outright.
func (p *Parser) Decode(data []byte, v any) error {
	doc, err := decodeValue(data, p.format.MaxSize)
	if err != nil {
		return p.wrap(err)
	}
	sch, err := p.schema()
	if err != nil {
		return p.wrap(fmt.Errorf("compile embedded schema: %w", err))
	}
	if err := sch.Validate(doc); err != nil {
		var verr *jsonschema.ValidationError
		if !errors.As(err, &verr) {
			return p.wrap(fmt.Errorf("schema: %w", err))
		}
		return &ValidationError{Subject: p.format.Subject, Problems: p.schemaProblems(verr)}
	}
	if err := DecodeStrict(data, v); err != nil {
		return p.wrap(err)
	}
	return nil
}

// ReadFile reads a regular file of at most MaxSize bytes (regfile.ReadFile):
// a FIFO or device neither blocks nor floods the reader.
func (p *Parser) ReadFile(path string) ([]byte, error) {
	data, err := regfile.ReadFile(path, int64(p.format.MaxSize))
	if err != nil {
		return nil, p.wrap(err)
	}
	return data, nil
}

// wrap prefixes err with the subject.
func (p *Parser) wrap(err error) error {
	if p.format.Subject == "" {
		return err
	}
	return fmt.Errorf("%s: %w", p.format.Subject, err)
}

// DecodeStrict decodes data into v, refusing fields v does not have. Decode
// checks the schema first, which refuses them already; this keeps the typed
// decode strict on its own, should the two ever drift apart.
func DecodeStrict(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	return dec.Decode(v)
}

package strictyaml_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/custody-dev/custody/internal/strictyaml"
)

const schema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "required": ["name"],
  "properties": {
    "name": { "type": "string", "pattern": "^[a-z]+$" },
    "size": { "type": "integer", "minimum": 1 },
    "tags": { "type": "array", "items": { "type": "string" } },
    "labels": {
      "type": "object",
      "patternProperties": { "^[a-z]+$": { "type": "string" } },
      "additionalProperties": false
    }
  }
}`

type doc struct {
	Name   string            `yaml:"name"`
	Size   int               `yaml:"size"`
	Tags   []string          `yaml:"tags"`
	Labels map[string]string `yaml:"labels"`
}

const maxSize = 256

var parser = strictyaml.New(strictyaml.Format{
	Subject:    "thing",
	MaxSize:    maxSize,
	SchemaURL:  "https://example.test/thing.schema.json",
	Schema:     []byte(schema),
	SchemaName: "thing schema",
	Patterns:   map[string]string{"^[a-z]+$": "use lowercase letters"},
	Keys:       map[string]strictyaml.Key{"/labels": {Noun: "label", Fix: "use lowercase letters"}},
})

func TestDecodeValid(t *testing.T) {
	var d doc
	y := "name: abc\nsize: 3\ntags: [x, 2001-12-14]\nlabels: {a: b}\n"
	if err := parser.Decode([]byte(y), &d); err != nil {
		t.Fatal(err)
	}
	if d.Name != "abc" || d.Size != 3 || !slices.Equal(d.Tags, []string{"x", "2001-12-14"}) || d.Labels["a"] != "b" {
		t.Errorf("decoded %+v", d)
	}
}

// The YAML itself is refused with a plain error naming the subject.
func TestDecodeRefused(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"alias", "name: &n abc\ntags: [*n]\n", "line 1: anchor &n is not allowed"},
		{"alias without anchor", "name: abc\ntags: [*n]\n", "yaml"},
		{"billion laughs", "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n", "anchor &a"},
		{"duplicate key", "name: abc\nsize: 1\nname: def\n", `line 3: key "name" appears twice`},
		{"multi-document", "name: abc\n---\nname: def\n", "line 2: a second YAML document"},
		{"empty second document", "name: abc\n---\n", "a second YAML document"},
		{"oversize", "name: abc\n# " + strings.Repeat("x", maxSize) + "\n", "the limit is 256"},
		{"empty", "", "empty document"},
		{"merge key", "name: abc\nlabels:\n  <<: {a: b}\n", "merge key << is not allowed"},
		{"non-string key", "name: abc\nlabels: {1: b}\n", "is not a string"},
		{"custom tag", "name: !secret abc\n", "tag !secret is not allowed"},
		{"infinity", "name: abc\nsize: .inf\n", "not a finite number"},
		{"syntax error", "name: [\n", "yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d doc
			err := parser.Decode([]byte(tt.yaml), &d)
			if err == nil {
				t.Fatalf("Decode succeeded: %+v", d)
			}
			var verr *strictyaml.ValidationError
			if errors.As(err, &verr) {
				t.Fatalf("got problems, want a refusal: %v", err)
			}
			if !strings.HasPrefix(err.Error(), "thing: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not start with %q and mention %q", err, "thing: ", tt.want)
			}
		})
	}
}

// Schema violations come back together, one Problem per failure, sorted by
// field and explained in the Format's words.
func TestDecodeSchemaProblems(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []strictyaml.Problem
	}{
		{"unknown field", "name: abc\ncolour: red\n", []strictyaml.Problem{
			{Field: "/colour", Reason: `unknown field "colour"`, Fix: "remove it or correct its spelling"}}},
		{"unknown nested field", "name: abc\nlabels: {Bad: x}\nsize: 1\nx/y: 1\n", []strictyaml.Problem{
			{Field: "/labels/Bad", Reason: `"Bad" is not a valid label`, Fix: "use lowercase letters"},
			{Field: "/x~1y", Reason: `unknown field "x/y"`, Fix: "remove it or correct its spelling"}}},
		{"missing field", "size: 1\n", []strictyaml.Problem{
			{Field: "/name", Reason: "required field is missing", Fix: `add "name"`}}},
		{"pattern", "name: ABC\n", []strictyaml.Problem{
			{Field: "/name", Reason: "'ABC' does not match pattern '^[a-z]+$'", Fix: "use lowercase letters"}}},
		{"minimum", "name: abc\nsize: 0\n", []strictyaml.Problem{
			{Field: "/size", Reason: "minimum: got 0, want 1", Fix: "use a value of at least 1"}}},
		{"not an object", "[1]\n", []strictyaml.Problem{
			{Field: "", Reason: "got array, want object", Fix: "write a value of type object"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d doc
			err := parser.Decode([]byte(tt.yaml), &d)
			var verr *strictyaml.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("error %v (%T) is not a *ValidationError", err, err)
			}
			if verr.Subject != "thing" || !slices.Equal(verr.Problems, tt.want) {
				t.Errorf("got %q %+v\nwant %q %+v", verr.Subject, verr.Problems, "thing", tt.want)
			}
		})
	}
}

// DecodeStrict refuses unknown fields without the schema's help.
func TestDecodeStrictUnknownField(t *testing.T) {
	var d doc
	err := strictyaml.DecodeStrict([]byte("name: abc\ncolour: red\n"), &d)
	if err == nil || !strings.Contains(err.Error(), "colour") {
		t.Errorf("DecodeStrict = %v, want an error naming colour", err)
	}
}

func TestValidationErrorMessage(t *testing.T) {
	e := &strictyaml.ValidationError{Subject: "thing", Problems: []strictyaml.Problem{
		{Field: "a.b", Reason: "is wrong", Fix: "fix it"},
		{Field: "", Reason: "is empty", Fix: "fill it"},
	}}
	if got, want := e.Error(), "thing: a.b: is wrong; fix: fix it\nthing: (document): is empty; fix: fill it"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got := (&strictyaml.ValidationError{Subject: "thing"}).Error(); got != "thing: invalid" {
		t.Errorf("Error() without problems = %q", got)
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.yaml")
	if err := os.WriteFile(ok, []byte("name: abc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte(strings.Repeat("x", maxSize+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := parser.ReadFile(ok); err != nil || string(data) != "name: abc\n" {
		t.Errorf("ReadFile(ok) = %q, %v", data, err)
	}
	for _, tt := range []struct{ name, path, want string }{
		{"directory", dir, "is not a regular file"},
		{"missing", filepath.Join(dir, "missing.yaml"), "no such file"},
		{"oversize", big, "is 257 bytes; the limit is 256"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parser.ReadFile(tt.path)
			if err == nil || !strings.HasPrefix(err.Error(), "thing: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ReadFile(%s) = %v, want a thing: error mentioning %q", tt.path, err, tt.want)
			}
		})
	}
}

func TestBrokenSchema(t *testing.T) {
	p := strictyaml.New(strictyaml.Format{Subject: "thing", MaxSize: maxSize, SchemaURL: "https://example.test/x.json", Schema: []byte("{")})
	var d doc
	if err := p.Decode([]byte("name: abc\n"), &d); err == nil || !strings.HasPrefix(err.Error(), "thing: compile embedded schema: ") {
		t.Errorf("Decode with a broken schema = %v", err)
	}
}

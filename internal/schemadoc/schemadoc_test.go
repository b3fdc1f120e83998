package schemadoc

import (
	"strings"
	"testing"
)

const sample = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "description": "A sample.",
  "type": "object",
  "required": ["name", "size"],
  "properties": {
    "name": {"$ref": "#/$defs/name"},
    "size": {"description": "How big.", "$ref": "#/$defs/bytes"},
    "kind": false,
    "mode": {"enum": ["a", "b"]},
    "network": {"oneOf": [{"const": "deny"}, {"type": "object", "required": ["egress"], "properties": {"egress": {"type": "array", "items": {"type": "string"}, "minItems": 1}}}]},
    "env": {"type": "object", "patternProperties": {"^[A-Z]+$": {"type": "string"}}},
    "stages": {"type": "array", "items": {"description": "One stage.", "type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}}
  },
  "$defs": {
    "name": {"description": "A name.", "type": "string", "pattern": "^[a-z]+$"},
    "bytes": {"description": "A byte count.", "type": ["integer", "string"]}
  }
}`

func TestMarkdown(t *testing.T) {
	b, err := Markdown("Sample fields", "custody schema sample", []byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, want := range []string{
		"# Sample fields\n",
		"A sample.\n",
		"`custody schema sample`",
		"| `name` | string | yes | A name. Matches `^[a-z]+$`. |",
		"| `size` | integer or string | yes | How big. |",
		"| `mode` | one of `\"a\"`, `\"b\"` | no |  |",
		"| `network` | `\"deny\"` or object | no |  |",
		"| `network.egress` | array of string | yes | At least 1 item(s). |",
		"| `env.<name>` | string | no | Names match `^[A-Z]+$`. |",
		"| `stages[]` | object |  | One stage. |",
		"| `stages[].n` | integer | no | At least 1. |",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	// A property the schema forbids is no field; required fields come first.
	if strings.Contains(page, "`kind`") {
		t.Errorf("a property whose schema is false is listed:\n%s", page)
	}
	if strings.Index(page, "`size`") > strings.Index(page, "`env`") {
		t.Errorf("required fields are not listed first:\n%s", page)
	}
}

func TestMarkdownRefusesWhatItCannotRender(t *testing.T) {
	for name, schema := range map[string]string{
		"remote ref":  `{"properties": {"a": {"$ref": "https://example.com/x.json"}}}`,
		"missing def": `{"properties": {"a": {"$ref": "#/$defs/none"}}}`,
		"not json":    `{"properties": `,
	} {
		if _, err := Markdown("x", "x", []byte(schema)); err == nil {
			t.Errorf("%s: rendered", name)
		}
	}
}

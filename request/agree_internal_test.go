package request

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/internal/strictyaml"
	"github.com/custody-dev/custody/quantity"
)

// The schema and the parser agree on every quantity field of a request:
// zero, ambiguous suffixes and fractions are refused by both.
func TestSchemaAndParserAgreeOnQuantities(t *testing.T) {
	strictyaml.SchemaUses(t, schemaJSON, quantity.BytesPattern, quantity.DurationPattern)
	doc, err := os.ReadFile(filepath.Join("testdata", "example-phase.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	parser.Agreement(t, string(doc), map[string][]string{
		"resources.memory":   {"memory: 64Mi"},
		"resources.cpu":      {"cpu: 0.5"},
		"resources.wallTime": {"wallTime: 30s"},
		"output.maxBytes":    {"maxBytes: 16Mi"},
		"tmp.maxBytes":       {"maxBytes: 8Mi"},
	}, func(b []byte) error { _, err := Parse(b); return err },
		func(err error) bool { return errors.Is(err, quantity.ErrRange) })
}

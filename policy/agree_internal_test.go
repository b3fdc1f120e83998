package policy

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/internal/strictyaml"
	"github.com/custody-dev/custody/quantity"
)

// The schema and the parser agree on every quantity field of a policy.
func TestSchemaAndParserAgreeOnQuantities(t *testing.T) {
	strictyaml.SchemaUses(t, schemaJSON, quantity.BytesPattern, quantity.DurationPattern)
	doc, err := os.ReadFile(filepath.Join("testdata", "example-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// A default may not exceed its ceiling: both get the same sample, so
	// only the value itself is judged.
	parser.Agreement(t, string(doc), map[string][]string{
		"ceilings.memory":     {"memory: 512Mi"},
		"cpu":                 {"  cpu: 2", "  cpu: 1"},
		"ceilings.wallTime":   {"wallTime: 10m"},
		"outputBytes":         {"outputBytes: 256Mi", "outputBytes: 32Mi"},
		"tmpBytes":            {"tmpBytes: 128Mi", "tmpBytes: 16Mi"},
		"ceilings.inputBytes": {"inputBytes: 1Gi"},
	}, func(b []byte) error { _, err := Parse(b); return err },
		func(err error) bool { return errors.Is(err, quantity.ErrRange) })
}

package request

import (
	"strings"
	"testing"

	"github.com/custody-dev/custody/internal/strictyaml"
)

// The schema refuses unknown fields before the typed decode sees them; the
// typed decode must still refuse them on its own and name them.
func TestDecodeStrictNamesUnknownField(t *testing.T) {
	tests := []struct{ name, yaml, field string }{
		{"top level", "name: x\nfrobnicate: 1\n", "frobnicate"},
		{"nested", "resources:\n  pids: 1\n  foo: 1\n", "foo"},
		{"in a list", "inputs:\n  - source: a\n    mode: rw\n", "mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Phase
			err := strictyaml.DecodeStrict([]byte(tt.yaml), &p)
			if err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("DecodeStrict = %v, want an error naming %q", err, tt.field)
			}
		})
	}
}

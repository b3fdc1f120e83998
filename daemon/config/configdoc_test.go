package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/custody-dev/custody/internal/testenv"
)

// TestConfigReferenceCoversEveryField walks custodyd's configuration type
// and fails for each YAML field the configuration reference does not name:
// custodyd.yaml has no JSON Schema to generate that page from, so the page
// is checked against the type instead.
func TestConfigReferenceCoversEveryField(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "docs", "reference", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths := yamlPaths("", reflect.TypeOf(Config{}))
	if len(paths) < 30 {
		t.Fatalf("found only %d fields: %v", len(paths), paths)
	}
	for _, p := range paths {
		// The tests' own upstream table is named, and marked as such,
		// as a whole.
		if strings.HasPrefix(p, "egress.testUpstreams.") {
			continue
		}
		if !strings.Contains(string(page), "`"+p+"`") {
			t.Errorf("docs/reference/config.md does not document %s", p)
		}
	}
}

// yamlPaths lists the dotted YAML paths of t's fields, structs and their
// fields alike.
func yamlPaths(prefix string, t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "-" || !f.IsExported() {
			continue
		}
		if strings.Contains(f.Tag.Get("yaml"), "inline") {
			out = append(out, yamlPaths(prefix, f.Type)...)
			continue
		}
		p := tag
		if prefix != "" {
			p = prefix + "." + tag
		}
		out = append(out, p)
		if f.Type.Kind() == reflect.Struct || f.Type.Kind() == reflect.Pointer {
			out = append(out, yamlPaths(p, f.Type)...)
		}
	}
	return out
}

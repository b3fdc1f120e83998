package strictyaml

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// TB is the part of testing.TB the test helpers below use. It keeps this
// package from importing testing.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Edit is a test helper: it returns doc with each old, new pair replaced in
// turn, failing the test unless old occurs.
func Edit(t TB, doc string, oldNew ...string) string {
	t.Helper()
	for i := 0; i+1 < len(oldNew); i += 2 {
		if !strings.Contains(doc, oldNew[i]) {
			t.Fatalf("edit: %q not in the document", oldNew[i])
		}
		doc = strings.Replace(doc, oldNew[i], oldNew[i+1], 1)
	}
	return doc
}

// Fields is a test helper: it returns the Field of every problem in err,
// failing the test unless err is a *ValidationError about subject whose
// problems all give a reason and a fix.
func Fields(t TB, subject string, err error) []string {
	t.Helper()
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("error %v (%T) is not a *%s.ValidationError", err, err, subject)
		return nil
	}
	if verr.Subject != subject {
		t.Errorf("ValidationError subject is %q, want %q", verr.Subject, subject)
	}
	var fs []string
	for _, p := range verr.Problems {
		if p.Reason == "" || p.Fix == "" {
			t.Errorf("problem %+v lacks a reason or a fix", p)
		}
		fs = append(fs, p.Field)
	}
	return fs
}

// Agreement is a test helper: it puts each of QuantitySamples into each
// quantity field of doc (fields maps a name to the lines "key: value" that
// hold it, all set to the same sample) and checks that what schema accepts, parse accepts too, and the
// other way round. The one allowed gap is an error excused says the schema
// cannot measure, such as a value too large to hold. The published schema
// is what editors and CI check documents with: a disagreement is a document
// that passes review and is then refused, or a zero that silently means a
// default.
func (p *Parser) Agreement(t TB, doc string, fields map[string][]string, parse func([]byte) error, excused func(error) bool) {
	t.Helper()
	for field, lines := range fields {
		for _, v := range QuantitySamples() {
			var edits []string
			for _, line := range lines {
				key, _, _ := strings.Cut(line, ":")
				edits = append(edits, line, key+": "+v)
			}
			data := []byte(Edit(t, doc, edits...))
			var sink any
			var verr *ValidationError
			schemaOK := !errors.As(p.Decode(data, &sink), &verr)
			err := parse(data)
			switch {
			case schemaOK && err != nil && !excused(err):
				t.Errorf("%s: %s: the schema accepts it, the parser refuses: %v", field, v, err)
			case !schemaOK && err == nil:
				t.Errorf("%s: %s: the parser accepts it, the schema refuses it", field, v)
			}
		}
	}
}

// SchemaUses is a test helper: it fails unless schema carries each pattern
// verbatim, so that the schema and the Go parser it documents share one
// grammar.
func SchemaUses(t TB, schema []byte, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		quoted, _ := json.Marshal(p)
		if !bytes.Contains(schema, quoted) {
			t.Errorf("the schema lacks the pattern %s", quoted)
		}
	}
}

// QuantitySamples are byte sizes, durations and core counts, valid and
// not, that schema/parser agreement tests put into a fixture's quantity
// fields: zero, negative, ambiguous suffixes, fractions, overflow, spaces.
func QuantitySamples() []string {
	return []string{
		"0", "1", "64", "-1", "0.5", "1.5", "1e3", "0.0", "2.5e-1", "-0.5",
		`"0"`, `"64Mi"`, `"0Mi"`, `"00Mi"`, `"64MiB"`, `"1Gi"`, `"1G"`, `"1GB"`, `"64m"`, `"64M"`, `"1k"`,
		`"1.5Gi"`, `"1 Mi"`, `" 1Mi"`, `"1mi"`, `"1B"`, `"8Ei"`, `"7Ei"`, `"9223372036854775808"`, `"99999999999999999999Ki"`,
		`"30s"`, `"0s"`, `"0.0s"`, `"0.5m"`, `"1h30m"`, `"-1s"`, `"30"`, `"1d"`, `"9999999999h"`, `"0h0m1s"`, `"0ms0s"`,
		`""`, `"x"`, "null", "true", "[]", "{}",
	}
}

package strictyaml

import (
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

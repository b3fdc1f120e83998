package partial_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
)

// TestStepDetailIsOneLine: a step's detail goes into the signed receipt,
// which refuses control characters; errors.Join separates with newlines.
// A failed step leaves the report unverified; an OK one has no detail.
func TestStepDetailIsOneLine(t *testing.T) {
	r := &backend.CleanupReport{}
	partial.Step(r, "unmounted", errors.Join(errors.New("unmount /a: device or resource busy"), errors.New("unmount /b:\tbusy")))
	d := r.Steps[0].Detail
	if strings.ContainsFunc(d, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		t.Fatalf("detail has a control character: %q", d)
	}
	if want := "unmount /a: device or resource busy; unmount /b: busy"; d != want {
		t.Fatalf("detail %q, want %q", d, want)
	}
	if r.Verified || r.Steps[0].OK {
		t.Fatalf("a failed step left %+v", r)
	}
	ok := &backend.CleanupReport{Verified: true}
	partial.Step(ok, "unmounted", nil)
	if !ok.Verified || !ok.Steps[0].OK || ok.Steps[0].Detail != "" {
		t.Fatalf("an OK step left %+v", ok)
	}
}

// TestStepDetailIsBounded: a detail naming many paths still fits a
// receipt's text field.
func TestStepDetailIsBounded(t *testing.T) {
	r := &backend.CleanupReport{}
	partial.Step(r, "unmounted", errors.New(strings.Repeat("unmount /a/very/long/path: busy; ", 500)))
	if d := r.Steps[0].Detail; len(d) > 4096 || !strings.HasSuffix(d, "...") {
		t.Fatalf("detail of %d bytes, ending %q", len(d), d[len(d)-10:])
	}
}

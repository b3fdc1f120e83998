package oci

import (
	"errors"
	"strings"
	"testing"

	"github.com/custody-dev/custody/backend"
)

// TestStepDetailIsOneLine: a step's detail goes into the signed receipt,
// which refuses control characters; errors.Join separates with newlines.
func TestStepDetailIsOneLine(t *testing.T) {
	r := &backend.CleanupReport{}
	step(r, "unmounted", errors.Join(errors.New("unmount /a: device or resource busy"), errors.New("unmount /b:\tbusy")))
	d := r.Steps[0].Detail
	if strings.ContainsFunc(d, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		t.Fatalf("detail has a control character: %q", d)
	}
	if want := "unmount /a: device or resource busy; unmount /b: busy"; d != want {
		t.Fatalf("detail %q, want %q", d, want)
	}
}

// TestStepDetailIsBounded: a detail naming many paths still fits a
// receipt's text field.
func TestStepDetailIsBounded(t *testing.T) {
	r := &backend.CleanupReport{}
	step(r, "unmounted", errors.New(strings.Repeat("unmount /a/very/long/path: busy; ", 500)))
	if d := r.Steps[0].Detail; len(d) > 4096 || !strings.HasSuffix(d, "...") {
		t.Fatalf("detail of %d bytes, ending %q", len(d), d[len(d)-10:])
	}
}

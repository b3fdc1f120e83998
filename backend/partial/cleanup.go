package partial

import (
	"strings"

	"github.com/custody-dev/custody/backend"
)

// MaxDetail keeps a cleanup step's detail within what a receipt's text
// fields may hold (4,096 bytes), with room for the "..." that says it was
// clipped.
const MaxDetail = 4000

// Step appends the cleanup step name to r: OK when err is nil; otherwise
// r is not verified and the step's detail is err as a receipt carries it
// (Detail).
func Step(r *backend.CleanupReport, name string, err error) {
	s := backend.CleanupStep{Name: name, OK: err == nil}
	if err != nil {
		s.Detail = Detail(err.Error())
		r.Verified = false
	}
	r.Steps = append(r.Steps, s)
}

// Detail is s as a cleanup step's detail: a step goes into the signed
// receipt, which refuses control characters and text over 4,096 bytes,
// so errors.Join's newlines become "; ", other control characters
// spaces, and the rest is clipped to MaxDetail bytes of valid UTF-8.
func Detail(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ReplaceAll(s, "\n", "; "))
	if len(s) > MaxDetail {
		s = strings.ToValidUTF8(s[:MaxDetail], "") + "..."
	}
	return s
}

// Nop is a Recorder that records nothing: a backend used without a
// journal (a probe, a test, a launch whose caller keeps no records).
type Nop struct{}

// Intent records nothing.
func (Nop) Intent(...backend.Resource) error { return nil }

// Created records nothing.
func (Nop) Created(...backend.Resource) error { return nil }

// Removed records nothing.
func (Nop) Removed(...backend.Resource) error { return nil }

var _ backend.Recorder = Nop{}

package admission

import (
	"errors"
	"fmt"

	"github.com/custody-dev/custody/pack"
)

// PackFileRefusal turns the loader's refusal of a pack file into an
// admission refusal: one check per refused requirement, in the order the
// file wrote them, so the operator gets every refused key in one answer
// (exit 2 and the usual --json checks), never an internal error naming
// the first. Any other error (a cancelled context) is returned as it is.
func PackFileRefusal(err error) error {
	var re *pack.RefusedError
	if !errors.As(err, &re) {
		return err
	}
	rs := re.Refusals()
	checks := make([]Check, 0, len(rs))
	for _, r := range rs {
		req := r.Path
		if req == "" {
			req = "pack"
		}
		detail := r.Reason
		if r.Value != "" {
			detail = fmt.Sprintf("%q: %s", r.Value, r.Reason)
		}
		checks = append(checks, Check{Requirement: req, Verdict: Unsupported, Code: r.Code, Detail: detail, Fix: r.Fix})
	}
	return &RefusedError{Checks: checks}
}

// Package partial holds what every backend would otherwise write for
// itself, in the spirit of go-containerregistry's partial: the gaps a
// backend reports from the platform's facts, the cleanup report's steps
// as a receipt can carry them, and a recorder that records nothing.
// Backends import it; it imports only the contract and the platform facts.
package partial

import (
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/platform"
)

// Gaps are the platform's shortfalls as a backend's gaps: a backend that
// stands on those facts cannot prove what they would have given it.
func Gaps(s []platform.Shortfall) []backend.Gap {
	if s == nil {
		return nil
	}
	gaps := make([]backend.Gap, len(s))
	for i, f := range s {
		gaps[i] = backend.Gap(f)
	}
	return gaps
}

//go:build !linux

package probe

import (
	"context"
	"errors"
)

// Collect is only implemented on Linux, where custody runs phases.
func Collect(ctx context.Context, opts Options) (*Report, error) {
	return nil, errors.New("probe: only Linux is supported")
}

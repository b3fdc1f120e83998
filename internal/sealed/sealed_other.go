//go:build !linux

package sealed

import (
	"context"
	"errors"
	"os"
)

// errNotLinux: sealed images need Linux (erofs, mounted from a file).
var errNotLinux = errors.New("sealed images need Linux")

func identify(*os.File) (Identity, error) { return Identity{}, errNotLinux }

// Mount fails: erofs is a Linux filesystem.
func Mount(*os.File, *os.File) (int, error) { return -1, errNotLinux }

// ProbeOverlay fails: erofs is a Linux filesystem.
func ProbeOverlay(context.Context, string, func(string) (int, error)) error { return errNotLinux }

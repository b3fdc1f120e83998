package egress

import (
	"errors"
	"fmt"

	"github.com/custody-dev/custody/internal/regfile"
)

// ErrSecretFile: a credential's source file is refused.
var ErrSecretFile = errors.New("credential file refused")

// maxSecret bounds a credential file.
const maxSecret = 64 << 10

// ReadSecret reads a credential file as custodyd must: opened without
// following a link, a regular file, mode 0600, owned by root, bounded.
// It is called only when a run that uses the credential is prepared.
func ReadSecret(path string) ([]byte, error) {
	v, err := regfile.ReadSecret(path, maxSecret)
	if err != nil {
		return nil, fmt.Errorf("%w: %w; make it a root-owned 0600 regular file", ErrSecretFile, err)
	}
	return v, nil
}

package evidence

import (
	"errors"
	"fmt"
	"time"

	"github.com/custody-dev/custody/keys"
)

// ErrRunnerKeyNotValid reports a runner key that may not have signed at
// the time checked: outside its window, or revoked.
var ErrRunnerKeyNotValid = errors.New("runner key not valid at that time")

// RunnerKeys lists the trust file's runner keys, for checking signatures;
// RunnerSignedAt then judges the signer's window and revocation.
func (t *Trust) RunnerKeys() []*keys.Verifier {
	out := make([]*keys.Verifier, 0, len(t.Runners))
	for _, k := range t.Runners {
		out = append(out, k.Key)
	}
	return out
}

// RunnerSignedAt says why the runner key id may not have signed at at, by
// the rules receipts are verified with: its notBefore/notAfter window
// (notAfter is when a rotation retired it), its revocation, and
// revocation.acceptBefore. Nil when it may; an id the file does not list
// is refused too.
func (t *Trust) RunnerSignedAt(id string, at time.Time) error {
	for i := range t.Runners {
		k := &t.Runners[i]
		if k.ID() != id {
			continue
		}
		if why := k.validAt(at); why != "" {
			return fmt.Errorf("%w: %s", ErrRunnerKeyNotValid, why)
		}
		if why := k.revokedAt(at, t.AcceptBeforeRevocation); why != "" {
			return fmt.Errorf("%w: %s", ErrRunnerKeyNotValid, why)
		}
		return nil
	}
	return fmt.Errorf("%w: key %s is not a runner key of the trust file", ErrRunnerKeyNotValid, id)
}

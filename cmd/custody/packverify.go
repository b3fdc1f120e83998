package main

import (
	"context"
	"errors"

	"github.com/custody-dev/custody/evidence"
)

// maxComposeSize bounds the compose file custody verify --compose reads.
const maxComposeSize = 8 << 20

// verifyPack is custody verify of a pack receipt (an up or a down), under
// the same trust file and exit codes as a phase receipt's: 0 authentic and
// acceptable (fresh; teardown verified where the trust requires it), 1
// authentic but not acceptable, 2 not authentic.
func (a *app) verifyPack(ctx context.Context, env []byte, trustPath, outputs, composePath string, asJSON bool) error {
	if outputs != "" {
		// A check the user asked for must not silently not happen.
		return &exitError{verifyUnauthentic, errors.New("this is a pack receipt: it vouches for no output files, so --outputs does not apply; fix: pass --compose FILE to check the compose file it vouches for")}
	}
	v, err := loadVerifier(trustPath)
	if err != nil {
		return err
	}
	compose := evidence.WithoutCompose()
	if composePath != "" {
		file, err := readFile("compose file", composePath, maxComposeSize)
		if err != nil {
			return err
		}
		compose = evidence.WithCompose(file) // an empty file is still checked
	}
	pol, err := evidence.NewPackPolicy(compose)
	if err != nil {
		return &exitError{verifyUnauthentic, err}
	}
	res, err := v.VerifyPack(ctx, env, pol)
	if err != nil {
		return &exitError{verifyUnauthentic, err}
	}
	return a.verdict(res, asJSON, res.Checks, "pack receipt", res.OK, "acceptable", res.Acceptable)
}

package main

import (
	"context"
	"errors"
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
	var compose []byte
	if composePath != "" {
		if compose, err = readFile("compose file", composePath, maxComposeSize); err != nil {
			return err
		}
		if compose == nil {
			compose = []byte{} // an empty file is still checked
		}
	}
	res, err := v.VerifyPack(ctx, env, compose)
	if err != nil {
		return &exitError{verifyUnauthentic, err}
	}
	return a.verdict(res, asJSON, res.Checks, "pack receipt", res.OK, "acceptable", res.Acceptable)
}

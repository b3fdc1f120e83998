package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/internal/clitest"
)

// The exit codes the CLI documents (docs/reference/exit-codes.md): the
// tests hold the built binary to them.
const (
	exitOK       = 0
	exitFailed   = 1  // the workload ran and failed, timed out, was OOM-killed or cancelled
	exitRefused  = 2  // refused before anything ran
	exitInternal = 3  // the runner could not run or clean up, or is quarantined
	exitUsage    = 64 // the command line is wrong (sysexits EX_USAGE); nothing was asked

	verifyPromotable  = 0 // authentic and acceptable: may be promoted
	verifyAuthentic   = 1 // authentic, but policy says no (failed run, stale, wrong tier, ...)
	verifyUnauthentic = 2 // not authentic: signature, trust, grant or bytes do not hold
)

// custody runs the built CLI with args and returns its exit code, stdout
// and stderr.
func custody(t testing.TB, args ...string) (int, string, string) {
	t.Helper()
	return clitest.Exec(t, args...)
}

// bundlePath is where custody run writes the Sigstore bundle beside a
// receipt.
func bundlePath(receipt string) string {
	return strings.TrimSuffix(receipt, filepath.Ext(receipt)) + ".sigstore.json"
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

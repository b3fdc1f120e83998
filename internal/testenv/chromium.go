package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Chromium is Debian's headless-capable browser (`make browser-deps`),
// which the HTML reports' screenshot tests drive; CUSTODY_CHROMIUM names
// another binary.
func Chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CUSTODY_CHROMIUM"); p != "" {
		return p
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		Missing(t, "chromium (Debian's chromium package, `make browser-deps`)")
	}
	return p
}

package daemon

import (
	"os"
	"testing"
)

// TestMain lets this test binary serve as custodyd's import helper: the
// in-process server re-executes /proc/self/exe, which is this binary.
func TestMain(m *testing.M) {
	ServeHelper()
	os.Exit(m.Run())
}

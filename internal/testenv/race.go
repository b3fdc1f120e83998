package testenv

import (
	"errors"
	"os/exec"
	"testing"
)

// RaceExitCode is how a -race binary exits when it finds a data race
// (GORACE's exitcode, 66 unless set); with halt_on_error=1 it does so at
// the first one.
const RaceExitCode = 66

// NoRace fails t if err, from waiting on a child process, says the child
// exited on a data race; its output (with the race report) is logged.
// Without it a race found while a daemon shuts down would go unnoticed:
// tests ignore how a daemon they stop exits.
func NoRace(t testing.TB, what string, err error, output string) {
	t.Helper()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == RaceExitCode {
		t.Errorf("%s exited %d: a data race (-race build):\n%s", what, RaceExitCode, output)
	}
}

package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/custody-dev/custody/api"
)

// A run whose sandbox failed before its workload started prints its
// status and the error naming the stage, never an exit code the workload
// did not have; a failed workload's exit code is printed as before.
func TestPrintFailedToStart(t *testing.T) {
	var b bytes.Buffer
	printResult(&b, &api.Result{RunID: "r1", Name: "p", Status: api.StatusFailedToStart, ExitCode: -1,
		Error: "failed to start (stage container-setup): runc run: chdir: not a directory"})
	out := b.String()
	if strings.Contains(out, "exit") || !strings.Contains(out, "failed-to-start") || !strings.Contains(out, "stage container-setup") {
		t.Fatalf("failed-to-start printed as:\n%s", out)
	}
	b.Reset()
	printResult(&b, &api.Result{RunID: "r2", Name: "p", Status: api.StatusFailed, ExitCode: 2})
	if !strings.Contains(b.String(), "failed") || !strings.Contains(b.String(), "exit 2") {
		t.Fatalf("failed printed as:\n%s", b.String())
	}
}

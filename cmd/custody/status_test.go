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

// A vm run is printed with its runtime, QEMU, never as runc; a record
// that lacks the runtime, tier or actor (a run recovered after the runner
// died) says unknown, not ""; an exit code and usage nobody observed
// (-1) print as unknown.
func TestPrintVMAndUnknownFields(t *testing.T) {
	var b bytes.Buffer
	printResult(&b, &api.Result{RunID: "r3", Name: "p", Status: api.StatusFailed, ExitCode: 9, Tier: "development",
		GrantID: "g", Actor: "ci", Stage: "build",
		Runtime: api.Runtime{Path: "/usr/bin/qemu-system-x86_64", Version: "qemu 7.2; microvm", SHA256: "ab"}})
	if out := b.String(); strings.Contains(out, "runc") || !strings.Contains(out, "runtime  qemu-system-x86_64 qemu 7.2; microvm sha256:ab") {
		t.Fatalf("a vm run printed as:\n%s", out)
	}
	b.Reset()
	printResult(&b, &api.Result{RunID: "r4", Name: "p", Status: api.StatusFailed, ExitCode: -1, GrantID: "g",
		Usage: api.Usage{PeakMemoryBytes: -1, CPUTimeMillis: -1, WallMillis: 1200}})
	out := b.String()
	for _, want := range []string{"exit unknown", "actor unknown", "tier     unknown", "runtime  unknown",
		"peak memory unknown bytes, cpu unknown ms, wall 1200 ms"} {
		if !strings.Contains(out, want) {
			t.Errorf("a recovered record printed without %q:\n%s", want, out)
		}
	}
}

package oci

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/internal/testenv"
)

// TestGateHoldsTheWorkload runs the real custody-gate as runc does (control
// socket on descriptor 3, itself on 4, the compiled filter on 5): the
// workload runs under the filter only after the go-ahead; never when the
// runner goes away instead, and never without a filter to install.
func TestGateHoldsTheWorkload(t *testing.T) {
	gate := testenv.Gate(t)
	compiled, err := CompileFilter()
	if err != nil {
		t.Fatal(err)
	}
	filter, err := sealedBytes("test-filter", compiled.Program)
	if err != nil {
		t.Fatal(err)
	}
	defer filter.Close()
	type outcome struct {
		ready  bool
		ran    bool
		code   int
		status string // the workload's Seccomp line
	}
	run := func(t *testing.T, goAhead bool, filter *os.File) outcome {
		marker := filepath.Join(t.TempDir(), "ran")
		cmd, ours := startGate(t, gate, filter, nil, "/bin/sh", "-c", "grep ^Seccomp: /proc/self/status > "+marker)
		var o outcome
		var b [1]byte
		n, _ := ours.Read(b[:])
		o.ready = n == 1 && b[0] == 'r'
		if o.ready && goAhead {
			if _, err := ours.Write([]byte{'g'}); err != nil {
				t.Fatal(err)
			}
		}
		ours.Close()
		_ = cmd.Wait() // the exit code is judged below
		o.code = cmd.ProcessState.ExitCode()
		if got, err := os.ReadFile(marker); err == nil {
			o.ran, o.status = true, strings.TrimSpace(string(got))
		}
		return o
	}
	t.Run("go-ahead", func(t *testing.T) {
		o := run(t, true, filter)
		if !o.ready || !o.ran || o.code != 0 || o.status != "Seccomp:\t2" {
			t.Fatalf("after the go-ahead: %+v, want ready, run under a filter (Seccomp: 2), exit 0", o)
		}
	})
	t.Run("runner-gone", func(t *testing.T) {
		if o := run(t, false, filter); !o.ready || o.ran || o.code != 125 {
			t.Fatalf("without a go-ahead: %+v, want ready, not run, exit 125", o)
		}
	})
	t.Run("no-filter", func(t *testing.T) {
		if o := run(t, true, nil); o.ready || o.ran || o.code != 125 {
			t.Fatalf("without a filter: %+v, want never ready, not run, exit 125", o)
		}
	})
	t.Run("torn-filter", func(t *testing.T) {
		torn, err := sealedBytes("torn-filter", compiled.Program[:len(compiled.Program)-3])
		if err != nil {
			t.Fatal(err)
		}
		defer torn.Close()
		if o := run(t, true, torn); o.ready || o.ran || o.code != 125 {
			t.Fatalf("with a torn filter: %+v, want never ready, not run, exit 125", o)
		}
	})
}

package oci

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/internal/testenv"
)

// TestGateHoldsTheWorkload runs the real custody-gate as runc does (control
// socket on descriptor 3, itself on 4): the workload runs only after the
// go-ahead, and never when the runner goes away instead.
func TestGateHoldsTheWorkload(t *testing.T) {
	gate := testenv.Gate(t)
	run := func(t *testing.T, goAhead bool) (ran bool, code int) {
		marker := filepath.Join(t.TempDir(), "ran")
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		ours, theirs := os.NewFile(uintptr(pair[0]), "ours"), os.NewFile(uintptr(pair[1]), "theirs")
		self, err := os.Open(gate)
		if err != nil {
			t.Fatal(err)
		}
		defer self.Close()
		cmd := exec.Command(gate, "/bin/sh", "-c", "touch "+marker)
		cmd.ExtraFiles = []*os.File{theirs, self}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		theirs.Close()
		var b [1]byte
		if n, err := ours.Read(b[:]); n != 1 || b[0] != 'r' {
			t.Fatalf("gate did not report ready: %q %v", b[:n], err)
		}
		if goAhead {
			if _, err := ours.Write([]byte{'g'}); err != nil {
				t.Fatal(err)
			}
		}
		ours.Close()
		_ = cmd.Wait() // the exit code is judged below
		_, serr := os.Stat(marker)
		return serr == nil, cmd.ProcessState.ExitCode()
	}
	t.Run("go-ahead", func(t *testing.T) {
		if ran, code := run(t, true); !ran || code != 0 {
			t.Fatalf("workload ran=%v exit=%d after the go-ahead, want it run with exit 0", ran, code)
		}
	})
	t.Run("runner-gone", func(t *testing.T) {
		if ran, code := run(t, false); ran || code != 125 {
			t.Fatalf("workload ran=%v exit=%d without a go-ahead, want not run and exit 125", ran, code)
		}
	})
}

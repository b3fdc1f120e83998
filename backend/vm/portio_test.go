package vm_test

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend/vm/guest"
	"github.com/custody-dev/custody/internal/testenv"
)

// TestWorkloadHasNoPortAccess: the streams' early channel is an I/O port
// that only the init's writer thread may use. The workload can neither get
// access to it (ioperm, iopl) nor use it without (its OUTB is a general
// protection fault: SIGSEGV), with the seccomp filter and without, and its
// attempt leaves the launch's streams whole: the same channel carried its
// stdout, the legitimate use.
func TestWorkloadHasNoPortAccess(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		testenv.Missing(t, "gcc (apt-get install gcc), to build the port I/O workload")
	}
	rootfs := testenv.BusyboxRootfs(t)
	if out, err := exec.Command(gcc, "-static", "-O2", "-o", filepath.Join(rootfs, "bin", "portio"), "testdata/portio.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
	opts := pins(t)
	for _, filtered := range []bool{true, false} {
		o := opts
		if !filtered {
			o.SeccompFilter = nil
		}
		b := newBackend(t, o)
		ex, stdout, stderr, _ := run(t, b, spec(t, rootfs, "/bin/portio", strconv.Itoa(guest.EarlyIOPort)), 2*time.Minute)
		if ex.Code != 0 {
			t.Fatalf("seccomp %v: exit %+v: %s", filtered, ex, stderr)
		}
		got := lines([]byte(stdout))
		if !strings.HasPrefix(stdout, "ioperm=") || got["ioperm"] == "granted" || got["iopl"] == "granted" || got["outb"] != "Segmentation fault" {
			t.Errorf("seccomp %v: the workload at the streams' port: %q", filtered, stdout)
		}
	}
}

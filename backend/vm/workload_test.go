package vm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/backend/vm/guest"
	"github.com/custody-dev/custody/internal/testenv"
)

// Only the final exec's failure is the workload's exit 127. Legit: a
// command that does not exist exits 127. Refusal: a containment setup
// step failing (here the chdir to a missing cwd, after proc and before
// the chroot's credentials) fails the launch instead of passing for the
// workload's own exit.
func TestWorkloadSetupFailureIsNotExit127(t *testing.T) {
	b := newBackend(t, pins(t))
	rootfs := testenv.BusyboxRootfs(t)
	ctx := context.Background()
	run := func(t *testing.T, id string, s backend.Spec) (*backend.Exit, error) {
		t.Helper()
		sb, err := b.Prepare(ctx, id, s, partial.Nop{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if rep := sb.Cleanup(ctx); !rep.Verified {
				t.Errorf("cleanup: %+v", rep.Steps)
			}
		}()
		return sb.Run(ctx, time.Minute, backend.IO{})
	}
	t.Run("exec", func(t *testing.T) {
		ex, err := run(t, "t-exec-missing", spec(t, rootfs, "/bin/no-such-command"))
		if err != nil || ex == nil || ex.Code != 127 {
			t.Fatalf("missing command: %+v %v, want exit 127", ex, err)
		}
	})
	t.Run("setup", func(t *testing.T) {
		s := spec(t, rootfs, "/bin/true")
		s.Cwd = "/no/such/dir"
		ex, err := run(t, "t-setup-fails", s)
		if err == nil || !strings.Contains(err.Error(), "setup") {
			t.Fatalf("missing cwd: %+v %v, want the launch failed as a setup failure", ex, err)
		}
	})
}

// TestStreamsShareOnePort: stdout, stderr and the output tree share the
// guest's channels as frames; each arrives whole and apart, stdout larger
// than several frames, interleaved with stderr and with a background
// writer that outlives the workload's first process (the cgroup's kill
// ends it, and its stream ends with it). Past guest.EarlyBytes the frames
// moved to the port; a phase that writes little never loads its modules.
func TestStreamsShareOnePort(t *testing.T) {
	b := newBackend(t, pins(t))
	rootfs := testenv.BusyboxRootfs(t)
	_, small, _, _, tm := runTimed(t, b, spec(t, rootfs, "/bin/echo", "small"), 2*time.Minute)
	if small != "small\n" || tm.PortBytes != 0 {
		t.Errorf("a small phase: stdout %q, %d bytes on the port, want none", small, tm.PortBytes)
	}
	script := `i=0; while [ $i -lt 40 ]; do head -c 8192 /dev/zero | tr '\0' o; echo "e$i" >&2; i=$((i+1)); done; ` +
		`echo data > /out/f; sleep 30 &`
	ex, stdout, stderr, files, tm := runTimed(t, b, spec(t, rootfs, "/bin/sh", "-c", script), 2*time.Minute)
	if ex.Code != 0 {
		t.Fatalf("exit %+v stderr %s", ex, stderr)
	}
	if tm.PortBytes < 40*8192-guest.EarlyBytes {
		t.Errorf("%d bytes on the port, want the streams past the first %d there", tm.PortBytes, guest.EarlyBytes)
	}
	if want := strings.Repeat("o", 40*8192); stdout != want {
		t.Errorf("stdout: %d bytes, want %d of 'o'", len(stdout), len(want))
	}
	var want strings.Builder
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&want, "e%d\n", i)
	}
	if stderr != want.String() {
		t.Errorf("stderr %q, want %q", stderr, want.String())
	}
	if string(files["f"]) != "data\n" || len(files) != 1 {
		t.Errorf("output files %q", files)
	}
}

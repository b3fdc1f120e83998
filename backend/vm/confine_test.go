package vm_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/probe"
)

// TestWorkloadConfinedInGuest: inside a real guest the workload is PID 1
// of its own pid namespace (its /proc holds no process of the init's),
// and it runs under the oci profile's seccomp filter with no_new_privs:
// ptrace, mount, keyctl and a new user namespace are refused, while the
// ordinary operations a build needs (fork and exec, pipes, temp files,
// randomness) still work.
func TestWorkloadConfinedInGuest(t *testing.T) {
	probeBin := os.Getenv("CUSTODY_PROBE")
	if probeBin == "" {
		testenv.Missing(t, "CUSTODY_PROBE (make bin/custody-probe)")
	}
	b := newBackend(t, pins(t))
	rootfs := testenv.BusyboxRootfs(t)
	data, err := os.ReadFile(probeBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "custody-probe"), data, 0o755); err != nil {
		t.Fatal(err)
	}

	t.Run("pid-namespace", func(t *testing.T) {
		ex, stdout, stderr, _ := run(t, b, spec(t, rootfs, "/bin/sh", "-c",
			`echo "self $$"; for p in /proc/[0-9]*; do echo "$p $(tr '\0' ' ' < $p/cmdline)"; done`), 2*time.Minute)
		if ex.Code != 0 {
			t.Fatalf("exit %d: %s", ex.Code, stderr)
		}
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if lines[0] != "self 1" {
			t.Errorf("the workload's shell is not PID 1 of its namespace: %q", lines[0])
		}
		for _, l := range lines[1:] {
			if strings.Contains(l, "/init") || strings.Contains(l, "custody-workload") {
				t.Errorf("the workload sees the init: %q", l)
			}
		}
		if !strings.Contains(stdout, "/proc/1 /bin/sh -c") {
			t.Errorf("the workload does not see itself as /proc/1:\n%s", stdout)
		}
	})

	t.Run("seccomp", func(t *testing.T) {
		ex, stdout, stderr, _ := run(t, b, spec(t, rootfs, "/bin/custody-probe", "-syscalls", "-ordinary"), 2*time.Minute)
		if ex.Code != 0 {
			t.Fatalf("probe exit %d: %s", ex.Code, stderr)
		}
		if ex.Observation == nil || ex.Observation.Seccomp != "filter" || !ex.Observation.NoNewPrivs {
			t.Errorf("observation: %+v, want seccomp filter and no_new_privs", ex.Observation)
		}
		var rep probe.Report
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("probe report: %v\n%s", err, stdout)
		}
		if rep.Status.Seccomp != 2 {
			t.Errorf("the probe's own seccomp mode is %d, want 2 (filter)", rep.Status.Seccomp)
		}
		refused := map[string]bool{"ptrace(PTRACE_SEIZE, 1)": false, "mount(tmpfs)": false,
			"keyctl(KEYCTL_GET_KEYRING_ID)": false, "unshare(CLONE_NEWUSER)": false}
		for _, a := range rep.Syscalls {
			if _, ok := refused[a.Name]; ok {
				if a.OK {
					t.Errorf("%s succeeded in the guest's workload", a.Name)
				}
				refused[a.Name] = true
			}
		}
		for name, seen := range refused {
			if !seen {
				t.Errorf("the probe did not try %s", name)
			}
		}
		if len(rep.Ordinary) == 0 {
			t.Fatal("the probe tried no ordinary operation")
		}
		for _, a := range rep.Ordinary {
			if !a.OK {
				t.Errorf("ordinary %s refused: %s %s", a.Name, a.Errno, a.Error)
			}
		}
	})
}

package vm_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/vm"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/probe"
)

// TestWorkloadConfinedInGuest: inside a real guest the workload is PID 1
// of its own pid namespace (its /proc holds no process of the init's),
// and it runs under the oci profile's seccomp filter with no_new_privs:
// ptrace of another workload process, keyctl, the memory policy calls and
// the vsock and AF_ALG families are refused, where the same guest without
// the filter runs them (so the refusal is the filter's), and mount and a
// new user namespace are refused too; the ordinary operations a build
// needs (fork and exec, pipes, temp files, randomness) still work.
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

	// The probe runs under a shell, so that pid 1 is the shell and not
	// the probe: ptrace(PTRACE_SEIZE, 1) then asks for another process
	// of the workload's, which only the filter refuses.
	probeCmd := []string{"/bin/sh", "-c", "/bin/custody-probe -syscalls -ordinary; exit $?"}
	syscalls := func(t *testing.T, b *vm.Backend) (*backend.Exit, map[string]probe.Attempt, []probe.Attempt) {
		t.Helper()
		ex, stdout, stderr, _ := run(t, b, spec(t, rootfs, probeCmd...), 2*time.Minute)
		if ex.Code != 0 {
			t.Fatalf("probe exit %d: %s", ex.Code, stderr)
		}
		var rep probe.Report
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("probe report: %v\n%s", err, stdout)
		}
		got := map[string]probe.Attempt{}
		for _, a := range rep.Syscalls {
			got[a.Name] = a
			t.Logf("%s: ok %v errno %q", a.Name, a.OK, a.Errno)
		}
		return ex, got, rep.Ordinary
	}
	// filterOnly are the probe's calls that only the filter refuses: the
	// same guest without the filter (unfiltered, below) runs them, or the
	// kernel answers them with something other than a refusal. The
	// probe's mount, mknod, AF_PACKET and new-user-namespace calls are
	// refused without the filter too (no capabilities; a chrooted process
	// cannot make a user namespace), so they prove nothing of it.
	filterOnly := []string{"ptrace(PTRACE_SEIZE, 1)", "keyctl(KEYCTL_GET_KEYRING_ID)",
		"set_mempolicy(MPOL_DEFAULT)", "get_mempolicy", "socket(AF_VSOCK)", "socket(AF_ALG)", "socket(1<<32|AF_VSOCK)"}
	refusal := func(a probe.Attempt) bool { return !a.OK && (a.Errno == "EPERM" || a.Errno == "ENOSYS") }

	t.Run("seccomp", func(t *testing.T) {
		ex, got, ordinary := syscalls(t, b)
		if ex.Observation == nil || ex.Observation.Seccomp != "filter" || !ex.Observation.NoNewPrivs {
			t.Errorf("observation: %+v, want seccomp filter and no_new_privs", ex.Observation)
		}
		for _, name := range append([]string{"mount(tmpfs)", "unshare(CLONE_NEWUSER)"}, filterOnly...) {
			a, ok := got[name]
			switch {
			case !ok:
				t.Errorf("the probe did not try %s", name)
			case !refusal(a):
				t.Errorf("%s in the guest's workload: ok %v errno %q, want refused (EPERM)", name, a.OK, a.Errno)
			}
		}
		if len(ordinary) == 0 {
			t.Fatal("the probe tried no ordinary operation")
		}
		for _, a := range ordinary {
			if !a.OK {
				t.Errorf("ordinary %s refused: %s %s", a.Name, a.Errno, a.Error)
			}
		}
	})

	// The legitimate case beside it: the same guest and workload without
	// the filter. ptrace of the workload's other process, keyctl and the
	// memory policy work, and the kernel answers the socket families
	// itself (EAFNOSUPPORT: this guest has no vsock or AF_ALG), so their
	// refusal above is the filter's.
	t.Run("unfiltered", func(t *testing.T) {
		opts := pins(t)
		opts.SeccompFilter = nil
		ex, got, _ := syscalls(t, newBackend(t, opts))
		if ex.Observation == nil || ex.Observation.Seccomp != "disabled" {
			t.Errorf("observation: %+v, want seccomp disabled", ex.Observation)
		}
		for _, name := range filterOnly {
			a, ok := got[name]
			if !ok || refusal(a) {
				t.Errorf("%s without the filter: ok %v errno %q, want it to reach the kernel", name, a.OK, a.Errno)
			}
		}
		for _, name := range []string{"ptrace(PTRACE_SEIZE, 1)", "keyctl(KEYCTL_GET_KEYRING_ID)"} {
			if !got[name].OK {
				t.Errorf("%s without the filter: %s, want it to work", name, got[name].Errno)
			}
		}
	})
}

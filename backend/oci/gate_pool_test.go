package oci

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/internal/testenv"
)

// TestGatePooledGoAhead runs the real custody-gate as a pooled container's
// init ("--pooled"): the workload it execs is the one the go-ahead
// carries, with exactly its environment and working directory; a plain
// go-ahead, a malformed one or none at all ends it without running
// anything.
// gateFilter is the compiled filter as a sealed memfd, as the backend
// passes it to every gate.
func gateFilter(t *testing.T) *os.File {
	t.Helper()
	compiled, err := CompileFilter()
	if err != nil {
		t.Fatal(err)
	}
	filter, err := sealedBytes("test-filter", compiled.Program)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { filter.Close() })
	return filter
}

// startGate starts the real gate as runc does: its control socket on
// descriptor 3, itself on 4 and filter (if any) on 5. It returns the gate
// and this end of its control socket.
func startGate(t *testing.T, gate string, filter *os.File, env []string, args ...string) (*exec.Cmd, *os.File) {
	t.Helper()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "ours"), os.NewFile(uintptr(pair[1]), "theirs")
	defer theirs.Close()
	self, err := os.Open(gate)
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	cmd := exec.Command(gate, args...)
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{theirs, self}
	if filter != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, filter)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, ours
}

// TestGatePooledGoAhead runs the real custody-gate as a pooled container's
// init ("--pooled"): the workload it execs is the one the go-ahead
// carries, with exactly its environment and working directory; a plain
// go-ahead, a malformed one or none at all ends it without running
// anything.
func TestGatePooledGoAhead(t *testing.T) {
	gate, filter := testenv.Gate(t), gateFilter(t)
	// run sends msg after the gate is ready and returns what the workload
	// wrote to ran in dir, and the gate's exit code.
	run := func(t *testing.T, msg []byte, dir string) (string, int) {
		cmd, ours := startGate(t, gate, filter, []string{"AMBIENT=leak"}, "--pooled")
		var b [1]byte
		if n, _ := ours.Read(b[:]); n != 1 || b[0] != 'r' {
			t.Fatalf("gate not ready: %q", b[:n])
		}
		if msg != nil {
			if _, err := ours.Write(msg); err != nil {
				t.Fatal(err)
			}
		}
		ours.Close()
		_ = cmd.Wait() // judged by the code and the marker
		got, _ := os.ReadFile(filepath.Join(dir, "ran"))
		return strings.TrimSpace(string(got)), cmd.ProcessState.ExitCode()
	}
	t.Run("pooled go-ahead", func(t *testing.T) {
		dir := t.TempDir()
		// The marker is relative: it lands in the go-ahead's directory.
		msg, err := encodeGoAhead(backend.Attachment{Args: []string{"/bin/sh", "-c", `echo "$PWD $A ${AMBIENT:-none}" > ran`},
			Env: []string{"A=given", "PATH=/bin:/usr/bin"}, Cwd: dir})
		if err != nil {
			t.Fatal(err)
		}
		if got, code := run(t, msg, dir); code != 0 || got != dir+" given none" {
			t.Fatalf("workload wrote %q, exit %d; want %q, 0", got, code, dir+" given none")
		}
	})
	for name, msg := range map[string][]byte{
		"plain go-ahead": {'g'},
		"no go-ahead":    nil,
		"empty":          {'p', 0, 0, 0, 0},
		"torn":           {'p', 9, 0, 0, 0, '/', 0},
		"relative argv":  append([]byte{'p', 10, 0, 0, 0}, "/\x00sh\x00\x00X=1\x00"...),
	} {
		t.Run(name, func(t *testing.T) {
			if got, code := run(t, msg, t.TempDir()); got != "" || code != 125 {
				t.Fatalf("ran %q with exit %d, want nothing run and 125", got, code)
			}
		})
	}
}

// The go-ahead is refused before it is sent past the gate's slot limit
// (POOLED_SLOTS), which the gate would answer with exit 125.
func TestGoAheadSlotLimit(t *testing.T) {
	args := func(n int) []string {
		out := []string{"/bin/true"}
		for len(out) < n {
			out = append(out, "a")
		}
		return out
	}
	if _, err := encodeGoAhead(backend.Attachment{Args: args(maxPooledSlots), Env: []string{"A=1"}, Cwd: "/"}); err != nil {
		t.Fatalf("%d arguments refused: %v", maxPooledSlots, err)
	}
	if _, err := encodeGoAhead(backend.Attachment{Args: args(9000), Cwd: "/"}); err == nil {
		t.Fatal("9000 arguments accepted")
	}
	env := make([]string, 9000)
	for i := range env {
		env[i] = "A=1"
	}
	if _, err := encodeGoAhead(backend.Attachment{Args: args(1), Env: env, Cwd: "/"}); err == nil {
		t.Fatal("9000 variables accepted")
	}
}

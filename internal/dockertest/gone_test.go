package dockertest

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/procfs"
)

// TestGoneCountsZombies: a killed child that nobody has reaped yet still
// answers kill(pid, 0), yet it is gone; a running one is not, and neither
// is a pid whose start time matches.
func TestGoneCountsZombies(t *testing.T) {
	self, err := startTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if gone(os.Getpid(), self) {
		t.Fatal("this process reported gone")
	}
	if !gone(os.Getpid(), self+"0") {
		t.Fatal("a different start time (a reused pid) not reported gone")
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	start, err := startTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	if gone(pid, start) {
		t.Fatal("a running child reported gone")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Not waited for: it stays a zombie until cmd.Wait below.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := procfs.ReadStat(pid)
		if err != nil {
			t.Fatalf("child %d reaped before the check: %v", pid, err)
		}
		if st.State == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d never became a zombie (state %c)", pid, st.State)
		}
	}
	if !gone(pid, start) {
		t.Fatal("a zombie child reported alive: " + strconv.Itoa(pid))
	}
	_ = cmd.Wait()
	if !gone(pid, start) {
		t.Fatal("a reaped child reported alive")
	}
}

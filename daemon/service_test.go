package daemon

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/testenv"
)

// TestNotifyReadyAndStopping: the real custodyd, started with
// NOTIFY_SOCKET as systemd's Type=notify does, sends READY=1 once it
// serves (after recovery and the policy load) and STOPPING=1 on SIGTERM;
// without the variable it runs as before. A --cgroup-leaf it does not
// know, or on where this (hybrid) host has no unified hierarchy to use,
// stops it before it serves.
func TestNotifyReadyAndStopping(t *testing.T) {
	d := daemontest.New(t, daemontest.Options{})
	sock := filepath.Join(d.Dir, "notify.sock")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d.Start("NOTIFY_SOCKET=" + sock)
	read := func() string {
		t.Helper()
		_ = l.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 4096)
		n, err := l.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v\n%s", err, d.Logs.String())
		}
		return string(buf[:n])
	}
	if got := read(); !strings.HasPrefix(got, "READY=1\n") || !strings.Contains(got, "MAINPID=") {
		t.Fatalf("first notification %q", got)
	}
	d.Stop()
	if got := read(); got != "STOPPING=1" {
		t.Fatalf("second notification %q", got)
	}

	bin := os.Getenv("CUSTODYD_BIN")
	for _, mode := range []string{"bogus", "on"} {
		out, err := exec.Command(bin, "--config", d.Config, "--cgroup-leaf", mode).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "cgroup-leaf") {
			t.Fatalf("--cgroup-leaf=%s: %v %s", mode, err, out)
		}
	}
}

// TestMoveToLeaf moves a real process into a leaf of its cgroup on a real
// cgroup2 mount (this hybrid host's unified hierarchy), and refuses the
// root cgroup and a directory that is no cgroup2 mount.
func TestMoveToLeaf(t *testing.T) {
	testenv.Root(t)
	mount := ""
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 8 && strings.Contains(line, " - cgroup2 ") {
			mount = f[4]
			break
		}
	}
	if mount == "" {
		testenv.Missing(t, "a cgroup2 mount")
	}
	rel := fmt.Sprintf("/custody-leaf-test-%d", os.Getpid())
	svc := filepath.Join(mount, rel)
	if err := os.Mkdir(svc, 0o755); err != nil {
		t.Fatal(err)
	}
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sleep.Process.Kill()
		sleep.Wait()
		os.Remove(filepath.Join(svc, leafName))
		os.Remove(svc)
	})
	if err := os.WriteFile(filepath.Join(svc, "cgroup.procs"), []byte(fmt.Sprint(sleep.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	dir, err := moveToLeaf(mount, rel, sleep.Process.Pid, leafName)
	if err != nil || dir != filepath.Join(svc, leafName) {
		t.Fatalf("moveToLeaf: %q %v", dir, err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", sleep.Process.Pid))
	if err != nil || !strings.Contains(string(b), "0::"+rel+"/"+leafName+"\n") {
		t.Fatalf("after the move: %q %v", b, err)
	}
	if procs, _ := os.ReadFile(filepath.Join(svc, "cgroup.procs")); len(strings.TrimSpace(string(procs))) != 0 {
		t.Fatalf("the service cgroup still holds %q", procs)
	}
	// Again: already in its leaf, nothing changes.
	if again, err := moveToLeaf(mount, rel+"/"+leafName, sleep.Process.Pid, leafName); err != nil || again != dir {
		t.Fatalf("second move: %q %v", again, err)
	}
	if _, err := moveToLeaf(mount, "/", sleep.Process.Pid, leafName); err == nil {
		t.Fatal("moved a process of the root cgroup")
	}
	if _, err := moveToLeaf(t.TempDir(), rel, sleep.Process.Pid, leafName); err == nil {
		t.Fatal("moved into a directory that is no cgroup2 mount")
	}
	if rel, ok := unifiedOnly([]byte("0::/system.slice/custodyd.service\n")); !ok || rel != "/system.slice/custodyd.service" {
		t.Fatalf("unifiedOnly v2: %q %v", rel, ok)
	}
	if _, ok := unifiedOnly([]byte("12:pids:/x\n0::/x\n")); ok {
		t.Fatal("a hybrid host read as unified")
	}
}

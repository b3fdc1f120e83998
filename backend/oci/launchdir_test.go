package oci_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/oci"
)

// asUser runs script under the host's /bin/sh as uid:gid, with no
// supplementary groups, and returns its combined output.
func asUser(t *testing.T, uid, gid uint32, script string) string {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as %d:%d: %v: %s", uid, gid, err, out)
	}
	return string(out)
}

// While a container runs, its launch dir (the merged rootfs, the overlay's
// upper layer, the output) is closed to every host user but root and, with
// a user namespace, the host id container root maps to: a host uid 1000
// can neither stat the rootfs nor plant a file in a world-writable
// directory of it. The container itself starts and reads its files.
func TestLaunchDirClosedToOtherHostUsers(t *testing.T) {
	for _, userns := range []bool{true, false} {
		t.Run(map[bool]string{false: "no-userns", true: "userns"}[userns], func(t *testing.T) {
			h := newHarness(t, userns)
			// A world-writable directory of the image, as images have.
			drop := filepath.Join(h.rootfs, "drop")
			if err := os.Mkdir(drop, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(drop, 0o1777); err != nil {
				t.Fatal(err)
			}
			id := "closed-" + map[bool]string{false: "a", true: "b"}[userns]
			rootfs := ""
			intents, err := h.b.Intents(id)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range intents {
				if r.Kind == oci.KindRootfsMount {
					rootfs = r.Name
				}
			}
			s := h.spec("/bin/sh", "-c", "cat /bin/sh >/dev/null && ls /etc /drop >/dev/null && echo ok > /out/started; sleep 30")
			c := h.prepare(t, id, s, nil)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := c.Run(ctx, 60*time.Second, backend.IO{Stdout: &strings.Builder{}, Stderr: &strings.Builder{}})
				done <- err
			}()
			defer func() {
				cancel()
				<-done
				if rep := c.Cleanup(context.Background()); !rep.Verified {
					t.Errorf("cleanup: %+v", rep)
				}
			}()
			started := filepath.Join(c.Output().Dir(), "started")
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if b, err := os.ReadFile(started); err == nil && string(b) == "ok\n" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the container did not start and read its files")
				}
			}
			// Root sees the running rootfs: the path is the right one.
			if _, err := os.Stat(filepath.Join(rootfs, "bin", "sh")); err != nil {
				t.Fatalf("root cannot stat the rootfs: %v", err)
			}
			probe := `test -e ` + rootfs + `/bin/sh && echo stat-ok || echo stat-refused
(echo x > ` + rootfs + `/drop/planted) 2>/dev/null && echo write-ok || echo write-refused
test -e ` + c.Output().Dir() + `/started && echo out-ok || echo out-refused`
			if out := asUser(t, 1000, 1000, probe); !strings.Contains(out, "stat-refused") ||
				!strings.Contains(out, "write-refused") || !strings.Contains(out, "out-refused") {
				t.Fatalf("host uid 1000 reached the running container's launch dir:\n%s", out)
			}
			if _, err := os.Lstat(filepath.Join(rootfs, "drop", "planted")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a file was planted: %v", err)
			}
			if userns {
				// Container root's host id traverses the launch dir (runc's
				// setup inside the namespace needs it).
				const hostRoot = 1_000_000_000
				if out := asUser(t, hostRoot, hostRoot, `test -e `+rootfs+`/bin/sh && echo stat-ok`); !strings.Contains(out, "stat-ok") {
					t.Fatalf("container root's host id cannot reach the rootfs: %s", out)
				}
			}
		})
	}
}

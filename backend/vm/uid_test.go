package vm_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/backend/vm"
	"github.com/custody-dev/custody/internal/testenv"
)

// qemuOf waits for the QEMU of launch id to run as its dropped uid and
// returns its pid and uid.
func qemuOf(t *testing.T, id string) (int, uint32) {
	t.Helper()
	name := []byte("\x00custody-vm-" + id + "\x00")
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err != nil || !bytes.Contains(cmdline, name) {
				continue
			}
			status, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
			for _, line := range strings.Split(string(status), "\n") {
				if f := strings.Fields(line); len(f) >= 2 && f[0] == "Uid:" && f[1] != "0" {
					uid, _ := strconv.ParseUint(f[1], 10, 32)
					return pid, uint32(uid)
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no QEMU of %s dropped to its uid", id)
	return 0, 0
}

// signalAs sends signal 0 to pid from a process running as uid:gid: what
// one guest's QEMU could do to another's.
func signalAs(t *testing.T, uid, gid uint32, pid int) error {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		testenv.Missing(t, "busybox on the host (busybox-static)")
	}
	cmd := exec.Command(bb, "kill", "-0", strconv.Itoa(pid))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	if out, err := cmd.CombinedOutput(); err != nil {
		return errors.New(strings.TrimSpace(string(out)))
	}
	return nil
}

// TestPerLaunchUIDs: two live guests' QEMUs run as different uids of the
// configured range, so one's uid can signal its own QEMU but not the
// other's; with the range (two) held, a third launch is refused before
// anything is made; once both are cleaned up their uids are free again.
func TestPerLaunchUIDs(t *testing.T) {
	opts := pins(t)
	opts.UID, opts.GID, opts.UIDs = vm.DefaultUID+7000, vm.DefaultUID+7000, 2
	b := newBackend(t, opts)
	rootfs := testenv.BusyboxRootfs(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	ids := []string{"t-uid-a", "t-uid-b"}
	var sbs []backend.Sandbox
	for _, id := range ids {
		sb, err := b.Prepare(ctx, id, spec(t, rootfs, "/bin/sleep", "120"), partial.Nop{})
		if sb != nil {
			sbs = append(sbs, sb)
		}
		if err != nil {
			for _, sb := range sbs {
				sb.Cleanup(ctx)
			}
			t.Fatal(err)
		}
	}
	defer func() {
		for _, sb := range sbs {
			if rep := sb.Cleanup(context.Background()); !rep.Verified {
				t.Errorf("cleanup: %+v", rep.Steps)
			}
		}
	}()

	// Refused: the range is held by the two prepared launches.
	third, err := b.Prepare(ctx, "t-uid-c", spec(t, rootfs, "/bin/true"), partial.Nop{})
	if !errors.Is(err, vm.ErrNoUID) {
		t.Fatalf("a third launch with a range of two: %v, want ErrNoUID", err)
	}
	if third != nil {
		third.Cleanup(ctx)
	}
	rs, err := b.Intents("t-uid-c")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if _, err := os.Lstat(r.Name); r.Kind == vm.KindBundle && err == nil {
			t.Fatal("the refused launch made its bundle")
		}
	}

	done := make(chan error, len(sbs))
	for _, sb := range sbs {
		go func() {
			ex, err := sb.Run(ctx, 5*time.Minute, backend.IO{})
			if err == nil && !ex.Cancelled {
				err = errors.New("the guest ended before it was cancelled")
			}
			done <- err
		}()
	}
	pidA, uidA := qemuOf(t, ids[0])
	pidB, uidB := qemuOf(t, ids[1])
	if uidA == uidB {
		t.Fatalf("both QEMUs run as uid %d", uidA)
	}
	for _, u := range []uint32{uidA, uidB} {
		if u < opts.UID || u >= opts.UID+opts.UIDs {
			t.Fatalf("QEMU uid %d is outside the range %d+%d", u, opts.UID, opts.UIDs)
		}
	}
	gidA := opts.GID + (uidA - opts.UID)
	if err := signalAs(t, uidA, gidA, pidA); err != nil {
		t.Fatalf("uid %d cannot signal its own QEMU %d: %v", uidA, pidA, err)
	}
	if err := signalAs(t, uidA, gidA, pidB); err == nil {
		t.Fatalf("uid %d (guest a) signals guest b's QEMU %d", uidA, pidB)
	}
	cancel()
	for range sbs {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	for _, sb := range sbs {
		if rep := sb.Cleanup(context.Background()); !rep.Verified {
			t.Fatalf("cleanup: %+v", rep.Steps)
		}
	}
	sbs = nil

	// Legit: both uids are free again, so a launch gets one.
	sb, err := b.Prepare(context.Background(), "t-uid-d", spec(t, rootfs, "/bin/true"), partial.Nop{})
	if err != nil {
		t.Fatalf("a launch after both ended: %v", err)
	}
	if rep := sb.Cleanup(context.Background()); !rep.Verified {
		t.Errorf("cleanup: %+v", rep.Steps)
	}
}

// TestUIDWithoutGIDRefused: an operator-set uid without a gid would run
// QEMU in root's group: New refuses it with a config error naming the fix.
func TestUIDWithoutGIDRefused(t *testing.T) {
	opts := pins(t)
	opts.UID, opts.GID = vm.DefaultUID+9000, 0
	opts.RuntimeDir = filepath.Join(t.TempDir(), "vm")
	opts.Accel = "tcg"
	_, err := vm.New(context.Background(), opts)
	if !errors.Is(err, vm.ErrConfig) || !strings.Contains(err.Error(), "vm.gid") {
		t.Fatalf("uid without gid: %v, want ErrConfig naming vm.gid", err)
	}
	if _, err := os.Stat(opts.RuntimeDir); err == nil {
		t.Error("the refused backend made its runtime dir")
	}
	opts.GID = opts.UID
	if _, err := vm.New(context.Background(), opts); err != nil {
		t.Fatalf("uid with its gid: %v", err)
	}
	if err := (vm.Config{UID: 5000}).CheckIDs(); !errors.Is(err, vm.ErrConfig) {
		t.Errorf("Config.CheckIDs of a uid without gid: %v", err)
	}
}

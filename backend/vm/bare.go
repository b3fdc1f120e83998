package vm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"syscall"
	"time"

	"github.com/custody-dev/custody/backend/vm/guest"
)

// BareBoot is the bench's baseline: the pinned kernel booted by the same
// QEMU with the same machine, jail and sandbox flags, and an initramfs of
// the same init, stage and modules but no launch config and no devices, so the
// init resets the machine at once. The guest has memBytes of RAM (0: the
// guest overhead alone), so that it is the same machine as the phase it is
// set beside: the kernel's boot work grows with its memory. It returns
// QEMU's wall time, start to
// exit, and the CPU time QEMU used (user and system, all its threads):
// under TCG that is the guest's work, which other load on a shared host
// stretches far less than the wall time.
func (b *Backend) BareBoot(ctx context.Context, dir string, memBytes int64) (wall, cpu time.Duration, err error) {
	if memBytes <= 0 {
		memBytes = GuestOverheadBytes
	}
	files, err := b.checkPins()
	if err != nil {
		return 0, 0, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "jail"), 0o755); err != nil {
		return 0, 0, err
	}
	var buf bytes.Buffer
	cw := newCpio(&buf)
	for _, d := range []string{"dev", "proc", "sys", "custody", "custody/modules"} {
		cw.dir(d)
	}
	cw.char("dev/console", 5, 1)
	cw.file("init", 0o755, files.init)
	cw.file(guest.StagePath[1:], 0o755, files.stage)
	for i, mod := range Modules {
		cw.file(path.Join("custody/modules", path.Base(mod)), 0o644, files.modules[i])
	}
	if err := cw.close(); err != nil {
		return 0, 0, err
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := os.WriteFile(initrd, buf.Bytes(), 0o600); err != nil {
		return 0, 0, err
	}
	kernel, err := os.Open(b.opts.Kernel.Path)
	if err != nil {
		return 0, 0, err
	}
	defer kernel.Close()
	console, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return 0, 0, err
	}
	defer console.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	uid, gid, err := b.allocateUID("bare")
	if err != nil {
		return 0, 0, err
	}
	defer b.releaseUID(uid)
	cmd := exec.CommandContext(ctx, b.opts.QEMU.Path, b.baseArgs(b.accel, memBytes, dir, "custody-vm-bare", initrd, uid, gid)...)
	cmd.ExtraFiles = []*os.File{console, kernel}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Setsid: true, Pdeathsig: syscall.SIGKILL}
	var out tailBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("bare boot: %w: %s", err, out.String())
	}
	return time.Since(start), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

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

// BareInitrd is what a bare boot's initrd holds.
type BareInitrd int

const (
	// PhaseInitrd is the phase's own initrd, byte for byte: its config,
	// its modules and, for a small image, its root. The bench's baseline.
	PhaseInitrd BareInitrd = iota
	// GuestBinaries is an initrd of the init, the stage and every module
	// alone: a boot without the phase's root (which the kernel unpacks
	// entry by entry), for information beside the baseline.
	GuestBinaries
)

// BareBoot is the bench's baseline: the same kernel as this prepared
// machine's phase and the initrd that which names, booted by the same
// QEMU with the same machine, RAM, jail and sandbox flags but no devices,
// and told on its command line (guest.BareCmdline) to reset at once. The
// RAM matters: the kernel's boot work
// grows with it. dir holds the bare boot's own jail and initrd. It returns
// QEMU's wall time, start to exit, and the CPU time QEMU used (user and
// system, all its threads): under TCG that is the guest's work, which
// other load on a shared host stretches far less than the wall time. The
// machine itself is untouched: it can still Run.
func (m *Machine) BareBoot(ctx context.Context, dir string, which BareInitrd) (wall, cpu time.Duration, err error) {
	if m.life.State() != statePrepared {
		return 0, 0, fmt.Errorf("vm %s: a bare boot of a machine that is not prepared", m.id)
	}
	b := m.b
	if err := os.MkdirAll(filepath.Join(dir, "jail"), 0o755); err != nil {
		return 0, 0, err
	}
	initrd := filepath.Join(m.dir, "initrd.cpio")
	if which == GuestBinaries {
		initrd = filepath.Join(dir, "initrd.cpio")
		if err := b.writeGuestBinaries(initrd); err != nil {
			return 0, 0, err
		}
	}
	kernel, err := b.openKernel()
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
	cmd := exec.CommandContext(ctx, b.opts.QEMU.Path,
		b.baseArgs(b.accel, m.spec.Memory+GuestOverheadBytes, dir, "custody-vm-bare", initrd, guest.BareCmdline, uid, gid)...)
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

// writeGuestBinaries writes an initrd of the pinned init, stage and
// modules alone (GuestBinaries).
func (b *Backend) writeGuestBinaries(p string) error {
	files, err := b.checkPins()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	cw := newCpio(&buf)
	cw.guestBase(files)
	for i, mod := range Modules {
		cw.file(path.Join(guest.ModulesDir[1:], path.Base(mod)), 0o644, files.modules[i])
	}
	if err := cw.close(); err != nil {
		return err
	}
	return os.WriteFile(p, buf.Bytes(), 0o600)
}

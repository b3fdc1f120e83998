package vm

import "time"

// SetHostMemoryLimit makes QEMU's host cgroup limit limit(memory) instead
// of the guest's RAM and QEMU's overhead: a test's way to have the host
// OOM-kill QEMU while a guest runs.
func SetHostMemoryLimit(b *Backend, limit func(memory int64) int64) { b.hostLimit = limit }

// BaseArgs are the QEMU flags every guest gets under accel.
func BaseArgs(b *Backend, accel string) []string {
	return b.baseArgs(accel, 64<<20, "/nonexistent", "custody-vm-test", "initrd", "", 1, 1)
}

// SetBootTimeout replaces BootTimeout for b: a test run where guests boot
// slowly (nested under TCG) says how long it gives them.
func SetBootTimeout(b *Backend, d time.Duration) { b.boot = d }

// HeldPid is a warm guest's QEMU pid (the bench reads its RSS and CPU).
func HeldPid(h any) int {
	if hd, ok := h.(*held); ok && hd.m.qemu != nil {
		return hd.m.qemu.pid
	}
	return 0
}

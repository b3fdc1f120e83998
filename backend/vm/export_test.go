package vm

// SetHostMemoryLimit makes QEMU's host cgroup limit limit(memory) instead
// of the guest's RAM and QEMU's overhead: a test's way to have the host
// OOM-kill QEMU while a guest runs.
func SetHostMemoryLimit(b *Backend, limit func(memory int64) int64) { b.hostLimit = limit }

// BaseArgs are the QEMU flags every guest gets under accel.
func BaseArgs(b *Backend, accel string) []string {
	return b.baseArgs(accel, 64<<20, "/nonexistent", "custody-vm-test", "initrd", "", 1, 1)
}

package oci

import (
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

// filterVM runs the compiled program the way the kernel does, over a
// struct seccomp_data. The bpf VM loads words big-endian, so each word is
// stored big-endian at the offset the program reads it from: for a 64-bit
// argument on a little-endian host the low half at +0, the high at +4.
type filterVM struct {
	t  *testing.T
	vm *bpf.VM
}

func newFilterVM(t *testing.T) *filterVM {
	t.Helper()
	f, err := CompileFilter()
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Program)%8 != 0 || len(f.SHA256) != 64 {
		t.Fatalf("program of %d bytes, digest %q", len(f.Program), f.SHA256)
	}
	// Decode what the gate will install, not the instructions it came from.
	var raw []bpf.RawInstruction
	for p := f.Program; len(p) > 0; p = p[8:] {
		raw = append(raw, bpf.RawInstruction{Op: binary.NativeEndian.Uint16(p), Jt: p[2], Jf: p[3], K: binary.NativeEndian.Uint32(p[4:])})
	}
	insns, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("the compiled program does not disassemble")
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		t.Fatal(err)
	}
	return &filterVM{t: t, vm: vm}
}

func (f *filterVM) eval(auditArch arch.AuditArch, nr uint32, args ...uint64) uint32 {
	f.t.Helper()
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[0:], nr)
	binary.BigEndian.PutUint32(data[4:], uint32(auditArch))
	for i, a := range args {
		lo, hi := 16+8*i, 16+8*i+4
		if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 { // big-endian host
			lo, hi = hi, lo
		}
		binary.BigEndian.PutUint32(data[lo:], uint32(a))
		binary.BigEndian.PutUint32(data[hi:], uint32(a>>32))
	}
	ret, err := f.vm.Run(data)
	if err != nil {
		f.t.Fatalf("run filter: %v", err)
	}
	return uint32(ret)
}

func nativeArch(t *testing.T) *arch.Info {
	t.Helper()
	a, err := arch.GetInfo("")
	if err != nil {
		t.Skipf("no syscall table for %s: the compiled filter is not made here", runtime.GOARCH)
	}
	return a
}

// TestFilterAllowsTheAllowlist: every allowlisted syscall of the native ABI
// is allowed, and every other syscall the native table knows is refused
// with EPERM, save those with their own rule.
func TestFilterAllowsTheAllowlist(t *testing.T) {
	native := nativeArch(t)
	f := newFilterVM(t)
	allowed := map[string]bool{}
	for _, n := range allowedSyscalls() {
		allowed[n] = true
	}
	ruled := map[string]bool{"clone": true, "clone3": true, "socket": true, "personality": true}
	var nAllowed, nRefused int
	for nr, name := range native.SyscallNumbers {
		got := f.eval(native.ID, uint32(nr))
		switch {
		case ruled[name]:
		case allowed[name]:
			nAllowed++
			if got != retAllow {
				t.Errorf("%s (%d): %#x, want allow", name, nr, got)
			}
		default:
			nRefused++
			if got != retEPERM {
				t.Errorf("%s (%d): %#x, want EPERM", name, nr, got)
			}
		}
	}
	for _, name := range []string{"mount", "umount2", "unshare", "setns", "keyctl", "add_key", "bpf",
		"ptrace", "perf_event_open", "init_module", "kexec_load", "reboot", "swapon", "userfaultfd",
		"open_by_handle_at", "io_uring_setup", "pivot_root", "chroot", "fsopen", "move_mount"} {
		if nr, ok := native.SyscallNames[name]; ok && f.eval(native.ID, uint32(nr)) != retEPERM {
			t.Errorf("%s is not refused", name)
		}
	}
	if f.eval(native.ID, 4000) != retEPERM {
		t.Error("a syscall number beyond the table is not refused")
	}
	if nAllowed < 200 || nRefused < 50 {
		t.Errorf("only %d allowed and %d refused: the table or the allowlist is not what it should be", nAllowed, nRefused)
	}
}

// TestFilterArgumentRules: clone only without namespace flags, clone3
// ENOSYS, socket only in the listed families (high bits refused, not
// truncated), personality only with the listed values.
func TestFilterArgumentRules(t *testing.T) {
	native := nativeArch(t)
	f := newFilterVM(t)
	nr := func(name string) uint32 {
		n, ok := native.SyscallNames[name]
		if !ok {
			t.Fatalf("%s not in the native table", name)
		}
		return uint32(n)
	}
	cases := []struct {
		what string
		name string
		arg0 uint64
		want uint32
	}{
		{"fork-like clone", "clone", uint64(unix.SIGCHLD), retAllow},
		{"thread clone", "clone", unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD, retAllow},
		{"clone3", "clone3", 0, retENOSYS},
		{"unix socket", "socket", unix.AF_UNIX, retAllow},
		{"inet socket", "socket", unix.AF_INET, retAllow},
		{"inet6 socket", "socket", unix.AF_INET6, retAllow},
		{"netlink socket", "socket", unix.AF_NETLINK, retAllow},
		{"vsock socket", "socket", unix.AF_VSOCK, retEPERM},
		{"packet socket", "socket", unix.AF_PACKET, retEPERM},
		{"alg socket", "socket", unix.AF_ALG, retEPERM},
		{"vsock with high bits the kernel truncates", "socket", 1<<32 | unix.AF_VSOCK, retEPERM},
		{"inet with high bits", "socket", 1<<32 | unix.AF_INET, retEPERM},
		{"personality linux", "personality", 0, retAllow},
		{"personality query", "personality", 0xffffffff, retAllow},
		{"personality read-implies-exec", "personality", 0x0400000, retEPERM},
	}
	for _, flag := range []uint64{unix.CLONE_NEWNS, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWUSER,
		unix.CLONE_NEWPID, unix.CLONE_NEWNET, unix.CLONE_NEWCGROUP, unix.CLONE_NEWTIME} {
		cases = append(cases, struct {
			what string
			name string
			arg0 uint64
			want uint32
		}{"clone with namespace flag", "clone", uint64(unix.SIGCHLD) | flag, retEPERM})
	}
	for _, c := range cases {
		if got := f.eval(native.ID, nr(c.name), c.arg0); got != c.want {
			t.Errorf("%s: %s(%#x) = %#x, want %#x", c.what, c.name, c.arg0, got, c.want)
		}
	}
}

// TestFilterRefusesOtherABIs: on amd64 an i386 (int 0x80) or x32 syscall
// is refused, even for a syscall the native ABI allows.
func TestFilterRefusesOtherABIs(t *testing.T) {
	native := nativeArch(t)
	if native != arch.X86_64 {
		t.Skipf("the compat ABIs checked here are amd64's; this is %s", native.Name)
	}
	f := newFilterVM(t)
	getpid386 := uint32(arch.I386.SyscallNames["getpid"])
	if got := f.eval(arch.I386.ID, getpid386); got != retEPERM {
		t.Errorf("i386 getpid: %#x, want EPERM", got)
	}
	getpidX32 := uint32(arch.X32.SyscallNames["getpid"]) | 0x40000000
	if got := f.eval(arch.X32.ID, getpidX32); got == retAllow {
		t.Errorf("x32 getpid allowed")
	}
	if got := f.eval(native.ID, uint32(native.SyscallNames["getpid"])); got != retAllow {
		t.Errorf("native getpid: %#x, want allow", got)
	}
}

// TestSeccompRulesAreKnown: a name no table knows is a typo, which both
// libseccomp and the compiler would leave out of the filter unseen; and a
// name under two actions would make the order of rules matter.
func TestSeccompRulesAreKnown(t *testing.T) {
	tables := []*arch.Info{arch.X86_64, arch.I386, arch.X32, arch.AARCH64, arch.ARM}
	action := map[string]string{}
	for _, r := range seccompRules() {
		a := string(r.Action)
		if r.ErrnoRet != nil {
			a += "/" + unix.ErrnoName(unix.Errno(*r.ErrnoRet))
		}
		for _, n := range r.Names {
			known := false
			for _, tb := range tables {
				if _, ok := tb.SyscallNames[n]; ok {
					known = true
				}
			}
			if !known {
				t.Errorf("%q is in no syscall table", n)
			}
			if prev, ok := action[n]; ok && prev != a {
				t.Errorf("%q is under two actions: %s and %s", n, prev, a)
			}
			action[n] = a
		}
	}
}

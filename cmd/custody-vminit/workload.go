package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend/vm/guest"
)

// workloadArg makes this binary the workload stage instead of the init.
const workloadArg = "custody-workload"

// entered is the guest's uptime when the workload stage's main began: the
// breakdown tells the stage's start from its setup.
var entered float64

// workload is the workload stage: PID 1 of the workload's pid namespace,
// still the guest's root with every capability, in a mount namespace of
// its own. It never returns: it execs the workload, or reports why not on
// fd 3 and exits 127 (the init tells a setup failure, reported before the
// status line, from the exec's, reported after it).
func workload() {
	entered = uptime()
	// The filter and the credentials must be this thread's when it execs.
	runtime.LockOSThread()
	status := os.NewFile(3, "status")
	err := enterWorkload(status)
	fmt.Fprintf(status, "error %v\n", err)
	os.Exit(127)
}

func enterWorkload(status *os.File) error {
	unix.CloseOnExec(3)
	data, err := os.ReadFile(guest.ConfigPath)
	if err != nil {
		return err
	}
	var cfg guest.Config
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	// Mounts made here stay in this namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("private mounts: %w", err)
	}
	proc := filepath.Join(newRoot, "proc")
	if err := unix.Mount("proc", proc, "proc", unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("proc: %w", err)
	}
	if err := guardProc(proc); err != nil {
		return err
	}
	mounts := rootMounts()
	var filter []byte
	if cfg.Seccomp {
		if filter, err = os.ReadFile(guest.SeccompPath); err != nil {
			return fmt.Errorf("seccomp filter: %w", err)
		}
	}
	if err := unix.Chroot(newRoot); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	cwd := cfg.Cwd
	if cwd == "" {
		cwd = "/"
	}
	if err := unix.Chdir(cwd); err != nil {
		return fmt.Errorf("cwd %s: %w", cwd, err)
	}
	// Nothing the workload execs gets a capability back, whatever its uid:
	// it cannot escape the chroot, mount, or make device nodes.
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := unix.Setgroups([]int{}); err != nil {
		return fmt.Errorf("groups: %w", err)
	}
	if err := unix.Setresgid(int(cfg.GID), int(cfg.GID), int(cfg.GID)); err != nil {
		return fmt.Errorf("gid %d: %w", cfg.GID, err)
	}
	if err := unix.Setresuid(int(cfg.UID), int(cfg.UID), int(cfg.UID)); err != nil {
		return fmt.Errorf("uid %d: %w", cfg.UID, err)
	}
	if filter != nil {
		if err := installFilter(filter); err != nil {
			return err
		}
	}
	self, _ := os.ReadFile("/proc/self/status")
	st, err := json.Marshal(stageStatus{Seccomp: keyedIn(self, "Seccomp:"), NoNewPrivs: keyedIn(self, "NoNewPrivs:"), Mounts: mounts,
		Entered: entered, Ready: uptime()})
	if err != nil {
		return err
	}
	if _, err := status.Write(append(st, '\n')); err != nil {
		return err
	}
	return fmt.Errorf("exec %s: %w", cfg.Args[0], unix.Exec(cfg.Args[0], cfg.Args, cfg.Env))
}

// installFilter installs a classic BPF program (struct sock_filter
// entries, host byte order) as this thread's seccomp filter; exec keeps
// it. Nothing else of the runtime's runs after it but the exec.
func installFilter(raw []byte) error {
	const size = 8 // struct sock_filter
	if len(raw) == 0 || len(raw)%size != 0 || len(raw)/size > 4096 {
		return fmt.Errorf("seccomp filter: %d bytes is not a program", len(raw))
	}
	prog := make([]unix.SockFilter, len(raw)/size)
	for i := range prog {
		b := raw[i*size:]
		prog[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.NativeEndian.Uint32(b[4:])}
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("seccomp filter: %w", err)
	}
	runtime.KeepAlive(prog)
	return nil
}

// keyedIn is the number after key on its line of a /proc status file, or
// -1.
func keyedIn(data []byte, key string) int64 {
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == key {
			var n int64
			if _, err := fmt.Sscan(f[1], &n); err == nil {
				return n
			}
		}
	}
	return -1
}

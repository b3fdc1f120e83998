package oci

import (
	"runtime"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// allowedSyscalls is the default-deny allowlist: what ordinary build, test
// and application workloads need, without the syscalls that widen kernel
// attack surface or reach outside the sandbox (mount, namespaces, keyrings,
// bpf, ptrace, perf, module loading, kexec, clock setting, swap, reboot,
// userfaultfd, open_by_handle_at, ...). It follows the shape of the moby
// default profile minus everything that profile only allows with a
// capability, since the workload holds none (so no set_mempolicy,
// get_mempolicy, mbind or move_pages: moby gates them on CAP_SYS_NICE).
// TestAllowlistWithinMobyDefault checks this against moby's own file.
func allowedSyscalls() []string {
	return []string{
		"accept", "accept4", "access", "alarm", "arch_prctl", "bind", "brk",
		"cachestat", "capget", "chdir", "chmod", "chown", "chown32", "clock_getres",
		"clock_getres_time64", "clock_gettime", "clock_gettime64", "clock_nanosleep",
		"clock_nanosleep_time64", "close", "close_range", "connect", "copy_file_range",
		"creat", "dup", "dup2", "dup3", "epoll_create", "epoll_create1", "epoll_ctl",
		"epoll_ctl_old", "epoll_pwait", "epoll_pwait2", "epoll_wait", "epoll_wait_old",
		"eventfd", "eventfd2", "execve", "execveat", "exit", "exit_group", "faccessat",
		"faccessat2", "fadvise64", "fadvise64_64", "fallocate", "fanotify_mark",
		"fchdir", "fchmod", "fchmodat", "fchmodat2", "fchown", "fchown32", "fchownat",
		"fcntl", "fcntl64", "fdatasync", "fgetxattr", "flistxattr", "flock", "fork",
		"fremovexattr", "fsetxattr", "fstat", "fstat64", "fstatat64", "fstatfs",
		"fstatfs64", "fsync", "ftruncate", "ftruncate64", "futex", "futex_requeue",
		"futex_time64", "futex_wait", "futex_waitv", "futex_wake", "futimesat",
		"get_robust_list", "get_thread_area", "getcpu", "getcwd",
		"getdents", "getdents64", "getegid", "getegid32", "geteuid", "geteuid32",
		"getgid", "getgid32", "getgroups", "getgroups32", "getitimer", "getpeername",
		"getpgid", "getpgrp", "getpid", "getppid", "getpriority", "getrandom",
		"getresgid", "getresgid32", "getresuid", "getresuid32", "getrlimit",
		"getrusage", "getsid", "getsockname", "getsockopt", "gettid", "gettimeofday",
		"getuid", "getuid32", "getxattr", "inotify_add_watch", "inotify_init",
		"inotify_init1", "inotify_rm_watch", "io_cancel", "io_destroy", "io_getevents",
		"io_pgetevents", "io_pgetevents_time64", "io_setup", "io_submit", "ioctl",
		"ioprio_get", "ioprio_set", "ipc", "kill", "landlock_add_rule",
		"landlock_create_ruleset", "landlock_restrict_self", "lchown", "lchown32",
		"lgetxattr", "link", "linkat", "listen", "listxattr", "llistxattr", "lremovexattr",
		"lseek", "lsetxattr", "lstat", "lstat64", "madvise", "map_shadow_stack",
		"membarrier", "memfd_create", "memfd_secret", "mincore", "mkdir", "mkdirat",
		"mknod", "mknodat", "mlock", "mlock2", "mlockall", "mmap", "mmap2", "mprotect",
		"mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive",
		"mq_timedreceive_time64", "mq_timedsend", "mq_timedsend_time64", "mq_unlink",
		"mremap", "mseal", "msgctl", "msgget", "msgrcv", "msgsnd", "msync", "munlock",
		"munlockall", "munmap", "name_to_handle_at", "nanosleep", "newfstatat",
		"open", "openat", "openat2", "pause", "pidfd_open", "pidfd_send_signal",
		"pipe", "pipe2", "pkey_alloc", "pkey_free", "pkey_mprotect", "poll", "ppoll",
		"ppoll_time64", "prctl", "pread64", "preadv", "preadv2", "prlimit64",
		"process_mrelease", "pselect6", "pselect6_time64", "pwrite64", "pwritev",
		"pwritev2", "read", "readahead", "readlink", "readlinkat", "readv", "recv",
		"recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg", "remap_file_pages",
		"removexattr", "rename", "renameat", "renameat2", "restart_syscall",
		"rmdir", "rseq", "rt_sigaction", "rt_sigpending", "rt_sigprocmask",
		"rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait",
		"rt_sigtimedwait_time64", "rt_tgsigqueueinfo", "sched_get_priority_max",
		"sched_get_priority_min", "sched_getaffinity", "sched_getattr",
		"sched_getparam", "sched_getscheduler", "sched_rr_get_interval",
		"sched_rr_get_interval_time64", "sched_setaffinity", "sched_setattr",
		"sched_setparam", "sched_setscheduler", "sched_yield", "seccomp", "select",
		"semctl", "semget", "semop", "semtimedop", "semtimedop_time64", "send",
		"sendfile", "sendfile64", "sendmmsg", "sendmsg", "sendto",
		"set_robust_list", "set_thread_area", "set_tid_address", "setfsgid",
		"setfsgid32", "setfsuid", "setfsuid32", "setgid", "setgid32", "setgroups",
		"setgroups32", "setitimer", "setpgid", "setpriority", "setregid", "setregid32",
		"setresgid", "setresgid32", "setresuid", "setresuid32", "setreuid",
		"setreuid32", "setrlimit", "setsid", "setsockopt", "setuid", "setuid32",
		"setxattr", "shmat", "shmctl", "shmdt", "shmget", "shutdown", "sigaltstack",
		"signalfd", "signalfd4", "sigprocmask", "sigreturn", "socketcall",
		"socketpair", "splice", "stat", "stat64", "statfs", "statfs64", "statx",
		"symlink", "symlinkat", "sync", "sync_file_range", "syncfs", "sysinfo",
		"tee", "tgkill", "time", "timer_create", "timer_delete", "timer_getoverrun",
		"timer_gettime", "timer_gettime64", "timer_settime", "timer_settime64",
		"timerfd_create", "timerfd_gettime", "timerfd_gettime64", "timerfd_settime",
		"timerfd_settime64", "times", "tkill", "truncate", "truncate64", "ugetrlimit",
		"umask", "uname", "unlink", "unlinkat", "utime", "utimensat",
		"utimensat_time64", "utimes", "vfork", "vmsplice", "wait4", "waitid",
		"waitpid", "write", "writev",
	}
}

// namespaceCloneFlags are the clone flags that create namespaces. Without
// them an unprivileged workload could still create a user namespace and hold
// capabilities inside it, which reopens most of what dropping them closed.
const namespaceCloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP |
	unix.CLONE_NEWTIME

// socketFamilies are the address families a workload may open sockets in:
// local, IP and netlink (which libc uses to list interfaces). The rest —
// AF_VSOCK to the hypervisor, AF_ALG, AF_KEY, AF_TIPC, AF_RDS, ... — are
// refused for the kernel surface they open. Matched as exact 64-bit values,
// so a family with high bits set (which the kernel would truncate to an
// int) is refused too.
var socketFamilies = []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// personalities are the personality(2) values glibc and common tools use.
var personalities = []uint64{0x0, 0x0008, 0x20000, 0x20008, 0xffffffff}

// seccompRules is the reviewed default-deny filter as one list, from which
// both the runtime-spec form (for runc) and the BPF program (for the gate)
// are made. Every syscall name appears in one rule only; a name with
// several rules matches when any of them does.
func seccompRules() []specs.LinuxSyscall {
	enosys := uint(unix.ENOSYS)
	rules := []specs.LinuxSyscall{
		{Names: allowedSyscalls(), Action: specs.ActAllow},
		// clone is allowed only without namespace flags (arg 0 on x86).
		{
			Names:  []string{"clone"},
			Action: specs.ActAllow,
			Args:   []specs.LinuxSeccompArg{{Index: 0, Value: namespaceCloneFlags, ValueTwo: 0, Op: specs.OpMaskedEqual}},
		},
		// clone3 passes flags in memory that seccomp cannot inspect;
		// ENOSYS makes libc fall back to clone, which is filtered above.
		{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys},
	}
	for _, f := range socketFamilies {
		rules = append(rules, argEquals("socket", f))
	}
	for _, p := range personalities {
		rules = append(rules, argEquals("personality", p))
	}
	return rules
}

func argEquals(name string, v uint64) specs.LinuxSyscall {
	return specs.LinuxSyscall{
		Names:  []string{name},
		Action: specs.ActAllow,
		Args:   []specs.LinuxSeccompArg{{Index: 0, Value: v, Op: specs.OpEqualTo}},
	}
}

// seccompProfile returns the reviewed filter for runc to compile: native
// system call ABI only. The i386 and x32 entry points (a 64-bit process
// can still use them) take the default action; a compat ABI the workload
// does not need is kernel surface it should not have.
func seccompProfile() *specs.LinuxSeccomp {
	eperm := uint(unix.EPERM)
	return &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: &eperm,
		Architectures:   seccompArches(),
		Syscalls:        seccompRules(),
	}
}

func seccompArches() []specs.Arch {
	switch runtime.GOARCH {
	case "amd64":
		return []specs.Arch{specs.ArchX86_64}
	case "arm64":
		return []specs.Arch{specs.ArchAARCH64}
	default:
		return nil
	}
}

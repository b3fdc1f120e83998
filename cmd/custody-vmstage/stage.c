/*
 * custody-vmstage is the workload stage of every vm-backend guest: the
 * last process of custody's own before the workload, in whose place it
 * execs.
 *
 * The guest's init (cmd/custody-vminit) starts it as PID 1 of a new pid
 * namespace, with a mount namespace of its own, in the workload's cgroup,
 * still the guest's root with every capability:
 *
 *   custody-vmstage NEWROOT UID GID CWD SECCOMP -- ARGV...
 *
 * with the workload's environment as its own. It makes its mounts private,
 * mounts the workload's /proc (its own pid namespace's) under NEWROOT and
 * guards it as runc's default profile does, copies its mountinfo to fd 3,
 * changes root and directory, drops every capability from the bounding
 * set and all I/O port access, sets no_new_privs, drops to UID and GID with no supplementary
 * groups, installs the seccomp filter at FILTER_PATH when SECCOMP is 1,
 * writes its status line to fd 3 and execs ARGV. Fd 3 is close-on-exec:
 * its end tells the init the workload runs.
 *
 * On fd 3: "mountinfo N\n" and N bytes, then "ready SECCOMP NNP ENTERED
 * READY\n" (the seccomp mode and no_new_privs from /proc/self/status, and
 * the guest's uptime as main began and just before the exec). A failure
 * is "error MESSAGE\n" and exit 127: before the ready line it is the
 * containment's setup, which fails the launch; after it, the exec's.
 *
 * It is C, not Go, because under TCG starting a Go runtime again, and
 * exec'ing away from one, was a good part of a small phase's boot.
 */
#define _GNU_SOURCE /* setresuid, setresgid */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define STATUS_FD 3
#define FILTER_PATH "/custody/seccomp.bpf"
#define PATH_SIZE 4096

extern char **environ;

static char msg[4096];

/* fail reports a setup or exec failure on the status fd and exits. */
static void fail(const char *what, const char *arg, int err)
{
	int n = snprintf(msg, sizeof(msg), "error %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "", strerror(err));
	if (n > 0) {
		ssize_t unused = write(STATUS_FD, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
		(void)unused;
	}
	_exit(127);
}

static int write_full(int fd, const char *buf, size_t n)
{
	while (n > 0) {
		ssize_t m = write(fd, buf, n);
		if (m < 0 && errno == EINTR)
			continue;
		if (m <= 0)
			return -1;
		buf += m;
		n -= (size_t)m;
	}
	return 0;
}

/* read_file reads up to max bytes of path into buf; it returns the
 * length, or -1 with errno set. */
static ssize_t read_file(const char *path, char *buf, size_t max)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t got = 0;
	while (got < max) {
		ssize_t n = read(fd, buf + got, max - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int err = errno;
			close(fd);
			errno = err;
			return -1;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	return (ssize_t)got;
}

/* uptime is the guest's uptime in seconds, as text: CLOCK_BOOTTIME, what
 * /proc/uptime shows, to the microsecond. */
static void uptime(char *out, size_t size)
{
	struct timespec ts = {0, 0};
	clock_gettime(CLOCK_BOOTTIME, &ts);
	snprintf(out, size, "%lld.%06ld", (long long)ts.tv_sec, ts.tv_nsec / 1000);
}

/* Under the workload's /proc, as runc's default profile has them (and as
 * the oci backend does): a uid 0 workload without capabilities still
 * passes the DAC checks of /proc/sys (kernel.core_pattern and
 * kernel.modprobe run a helper as full root outside the chroot and its
 * cgroup) and of /proc/sysrq-trigger. Paths this kernel lacks are
 * skipped. The workload has no CAP_SYS_ADMIN to unmount them. */
static const char *proc_readonly[] = {"bus", "fs", "irq", "sys", "sysrq-trigger"};
static const char *proc_masked[] = {"acpi", "asound", "interrupts", "kallsyms", "kcore", "keys",
				    "latency_stats", "sched_debug", "scsi", "timer_list", "timer_stats"};

/* join writes a/b into dst (PATH_SIZE bytes), failing on a path too
 * long for it. */
static void join(char *dst, const char *a, const char *b)
{
	int n = snprintf(dst, PATH_SIZE, "%s/%s", a, b);
	if (n < 0 || n >= PATH_SIZE)
		fail("path", a, ENAMETOOLONG);
}

static void guard_proc(const char *proc, const char *null)
{
	char p[PATH_SIZE];
	struct stat st;
	for (size_t i = 0; i < sizeof(proc_readonly) / sizeof(proc_readonly[0]); i++) {
		join(p, proc, proc_readonly[i]);
		if (lstat(p, &st) != 0) {
			if (errno == ENOENT)
				continue;
			fail("read-only /proc entry", p, errno);
		}
		if (mount(p, p, NULL, MS_BIND | MS_REC, NULL) != 0 ||
		    mount(NULL, p, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
			fail("read-only /proc entry", p, errno);
	}
	for (size_t i = 0; i < sizeof(proc_masked) / sizeof(proc_masked[0]); i++) {
		join(p, proc, proc_masked[i]);
		if (lstat(p, &st) != 0) {
			if (errno == ENOENT)
				continue;
			fail("mask /proc entry", p, errno);
		}
		int r = S_ISDIR(st.st_mode)
			    ? mount("tmpfs", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0555")
			    : mount(null, p, NULL, MS_BIND, NULL);
		if (r != 0)
			fail("mask /proc entry", p, errno);
	}
}

static struct sock_filter filter[BPF_MAXINSNS];

/* load_filter reads the filter before the root changes; its length in
 * instructions. */
static unsigned short load_filter(void)
{
	ssize_t n = read_file(FILTER_PATH, (char *)filter, sizeof(filter));
	if (n < 0)
		fail("seccomp filter", FILTER_PATH, errno);
	if (n == 0 || n % (ssize_t)sizeof(filter[0]) != 0)
		fail("seccomp filter", FILTER_PATH, EINVAL);
	return (unsigned short)(n / (ssize_t)sizeof(filter[0]));
}

/* status_field is the number after key at the start of a line of a
 * /proc status file, or -1. */
static long status_field(const char *status, const char *key)
{
	size_t k = strlen(key);
	for (const char *line = status; line != NULL && *line != '\0';) {
		if (strncmp(line, key, k) == 0)
			return strtol(line + k, NULL, 10);
		line = strchr(line, '\n');
		if (line != NULL)
			line++;
	}
	return -1;
}

static long parse_id(const char *s)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno != 0 || *s == '\0' || *end != '\0' || v < 0 || v > 0xfffffffeL)
		fail("credential", s, EINVAL);
	return v;
}

static char info[1 << 20];

int main(int argc, char **argv)
{
	char entered[32], ready[32];
	uptime(entered, sizeof(entered));
	if (fcntl(STATUS_FD, F_SETFD, FD_CLOEXEC) != 0)
		_exit(127);
	if (argc < 8 || strcmp(argv[6], "--") != 0 || argv[7][0] == '\0')
		fail("usage", "custody-vmstage NEWROOT UID GID CWD SECCOMP -- ARGV...", EINVAL);
	const char *root = argv[1], *cwd = argv[4];
	long uid = parse_id(argv[2]), gid = parse_id(argv[3]);
	int seccomp = strcmp(argv[5], "1") == 0;
	char **args = argv + 7;
	char p[PATH_SIZE], null[PATH_SIZE];

	/* Mounts made here stay in this namespace. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		fail("private mounts", NULL, errno);
	join(p, root, "proc");
	join(null, root, "dev/null");
	if (mount("proc", p, "proc", MS_NODEV | MS_NOSUID | MS_NOEXEC, NULL) != 0)
		fail("proc", p, errno);
	guard_proc(p, null);
	ssize_t n = read_file("/proc/self/mountinfo", info, sizeof(info));
	if (n < 0)
		fail("mountinfo", NULL, errno);
	int h = snprintf(msg, sizeof(msg), "mountinfo %zd\n", n);
	if (write_full(STATUS_FD, msg, (size_t)h) != 0 || write_full(STATUS_FD, info, (size_t)n) != 0)
		_exit(127);
	unsigned short insns = seccomp ? load_filter() : 0;

	if (chroot(root) != 0)
		fail("chroot", root, errno);
	if (chdir(cwd[0] != '\0' ? cwd : "/") != 0)
		fail("cwd", cwd, errno);
	/* No I/O port for the workload: an inherited I/O bitmap or level
	 * would survive the exec and let it write into the streams' early
	 * channel. The init's other threads have none; this makes sure. */
	if (syscall(SYS_ioperm, 0UL, 65536UL, 0) != 0)
		fail("drop I/O port access", NULL, errno);
	if (syscall(SYS_iopl, 0) != 0)
		fail("drop the I/O privilege level", NULL, errno);
	/* Nothing the workload execs gets a capability back, whatever its
	 * uid: it cannot escape the chroot, mount, or make device nodes. */
	for (int c = 0; c < 64; c++) {
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL)
			fail("drop capability", NULL, errno);
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		fail("no_new_privs", NULL, errno);
	if (setgroups(0, NULL) != 0)
		fail("groups", NULL, errno);
	if (setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid) != 0)
		fail("gid", argv[3], errno);
	if (setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) != 0)
		fail("uid", argv[2], errno);
	if (insns > 0) {
		struct sock_fprog prog = {.len = insns, .filter = filter};
		if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
			fail("seccomp filter", NULL, errno);
	}
	n = read_file("/proc/self/status", info, sizeof(info) - 1);
	info[n > 0 ? n : 0] = '\0';
	uptime(ready, sizeof(ready));
	h = snprintf(msg, sizeof(msg), "ready %ld %ld %s %s\n", status_field(info, "Seccomp:"),
		     status_field(info, "NoNewPrivs:"), entered, ready);
	if (write_full(STATUS_FD, msg, (size_t)h) != 0)
		_exit(127);
	execve(args[0], args, environ);
	fail("exec", args[0], errno);
	return 127;
}

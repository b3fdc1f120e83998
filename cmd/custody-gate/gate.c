/*
 * custody-gate holds a container's first process at the threshold of its
 * workload until custodyd has observed it from outside.
 *
 * runc runs it as the container's init (process.args[0] is
 * /proc/self/fd/4, a sealed copy of this binary passed with
 * --preserve-fds), after every namespace, mount, capability drop and
 * no_new_privs is in place. The gate then installs the seccomp filter
 * custodyd compiled once for all containers (a sealed memfd on fd 5, raw
 * struct sock_filter entries) - the profile runc would otherwise compile
 * again for every container. It tells custodyd it is ready on fd 3, waits
 * for the one-byte go-ahead, closes its descriptors and execs the workload
 * in its place: same pid, same credentials, same filter. Without a filter,
 * or with anything but the go-ahead (EOF: custodyd went away or refused),
 * the container ends without running the workload.
 *
 * It is C, not Go, so that it adds no threads, no runtime and almost no
 * memory to the budgets the workload is held to.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CONTROL_FD 3
#define SELF_FD 4
#define FILTER_FD 5

extern char **environ;

static void say(const char *a, const char *b, const char *c, const char *d)
{
	const char *parts[] = {"custody-gate: ", a, b, c, d, "\n"};
	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
		if (parts[i] != NULL) {
			ssize_t unused = write(2, parts[i], strlen(parts[i]));
			(void)unused;
		}
	}
}

static struct sock_filter filter[BPF_MAXINSNS];

/* install_filter installs the program on FILTER_FD; it returns 0 or an
 * errno. */
static int install_filter(void)
{
	struct stat st;
	size_t size, got = 0;

	if (fstat(FILTER_FD, &st) != 0)
		return errno;
	if (!S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    st.st_size % sizeof(filter[0]) != 0 || (size_t)st.st_size > sizeof(filter))
		return EINVAL;
	size = (size_t)st.st_size;
	while (got < size) {
		ssize_t n = pread(FILTER_FD, (char *)filter + got, size - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? errno : EINVAL;
		got += (size_t)n;
	}
	struct sock_fprog prog = {.len = (unsigned short)(size / sizeof(filter[0])), .filter = filter};
	/* runc has set it already; without it an unprivileged filter is refused. */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return errno;
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
		return errno;
	return 0;
}

int main(int argc, char **argv)
{
	char c = 0;
	ssize_t n;

	if (argc < 2 || argv[1][0] != '/') {
		say("usage: custody-gate /absolute/workload [args...]", NULL, NULL, NULL);
		return 125;
	}
	int err = install_filter();
	if (err != 0) {
		say("install the seccomp filter: ", strerror(err), NULL, NULL);
		return 125; /* no filter: the workload never runs */
	}
	do {
		n = write(CONTROL_FD, "r", 1);
	} while (n < 0 && errno == EINTR);
	if (n != 1)
		return 125;
	do {
		n = read(CONTROL_FD, &c, 1);
	} while (n < 0 && errno == EINTR);
	if (n != 1 || c != 'g')
		return 125; /* no go-ahead: the workload never runs */
	close(CONTROL_FD);
	close(SELF_FD);
	close(FILTER_FD);
	execve(argv[1], argv + 1, environ);
	err = errno;
	say("exec ", argv[1], ": ", strerror(err));
	return (err == ENOENT || err == ENOTDIR) ? 127 : 126;
}

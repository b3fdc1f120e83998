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
 * Pooled (argv[1] is "--pooled"): the container was made for a pool
 * profile before any grant existed, so its workload is not in its config.
 * The go-ahead is then 'p', a 4-byte little-endian length and that many
 * bytes: the working directory, NUL; each argument, NUL; an empty string;
 * each KEY=VALUE, NUL. The gate changes to the directory and execs exactly
 * that argv and environment; anything malformed ends the container.
 *
 * Cold (argv is "-e" KEY=VALUE pairs, then the absolute workload and its
 * arguments): the gate execs the workload with exactly those variables,
 * as a pooled gate does, never its own environment, to which runc adds
 * HOME when the config's has none.
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

#define POOLED_MAX (256 * 1024)
#define POOLED_SLOTS 8192

static char pooled[POOLED_MAX + 1];
static char *pooled_argv[POOLED_SLOTS + 1];
static char *pooled_envp[POOLED_SLOTS + 1];

/* read_full reads exactly n bytes from CONTROL_FD; 0 on success. */
static int read_full(char *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t m = read(CONTROL_FD, buf + got, n - got);
		if (m < 0 && errno == EINTR)
			continue;
		if (m <= 0)
			return -1;
		got += (size_t)m;
	}
	return 0;
}

/* read_pooled reads the pooled go-ahead's workload; it returns the working
 * directory, or NULL when anything about it is malformed. */
static const char *read_pooled(void)
{
	unsigned char len[4];
	if (read_full((char *)len, 4) != 0)
		return NULL;
	size_t n = (size_t)len[0] | (size_t)len[1] << 8 | (size_t)len[2] << 16 | (size_t)len[3] << 24;
	if (n == 0 || n > POOLED_MAX || read_full(pooled, n) != 0 || pooled[n - 1] != '\0')
		return NULL;
	pooled[n] = '\0';
	char *p = pooled, *end = pooled + n;
	const char *cwd = p;
	p += strlen(p) + 1;
	size_t argc = 0, envc = 0;
	while (p < end && *p != '\0') {
		if (argc == POOLED_SLOTS)
			return NULL;
		pooled_argv[argc++] = p;
		p += strlen(p) + 1;
	}
	if (p >= end || argc == 0 || cwd[0] != '/' || pooled_argv[0][0] != '/')
		return NULL;
	p++; /* the empty string between argv and the environment */
	while (p < end) {
		if (envc == POOLED_SLOTS || strchr(p, '=') == NULL)
			return NULL;
		pooled_envp[envc++] = p;
		p += strlen(p) + 1;
	}
	pooled_argv[argc] = NULL;
	pooled_envp[envc] = NULL;
	return cwd;
}

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

	int is_pooled = argc == 2 && strcmp(argv[1], "--pooled") == 0;
	int first = 1; /* the cold workload's argv[0] */
	size_t envc = 0;
	while (!is_pooled && first + 1 < argc && strcmp(argv[first], "-e") == 0) {
		if (envc == POOLED_SLOTS || strchr(argv[first + 1], '=') == NULL)
			break;
		pooled_envp[envc++] = argv[first + 1];
		first += 2;
	}
	pooled_envp[envc] = NULL;
	if (argc < 2 || (!is_pooled && (first >= argc || argv[first][0] != '/'))) {
		say("usage: custody-gate [-e KEY=VALUE]... /absolute/workload [args...] | --pooled", NULL, NULL, NULL);
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
	if (n != 1 || c != (is_pooled ? 'p' : 'g'))
		return 125; /* no go-ahead: the workload never runs */
	if (is_pooled) {
		const char *cwd = read_pooled();
		if (cwd == NULL) {
			say("malformed pooled go-ahead", NULL, NULL, NULL);
			return 125;
		}
		if (chdir(cwd) != 0) {
			err = errno;
			say("chdir ", cwd, ": ", strerror(err));
			return 126;
		}
		close(CONTROL_FD);
		close(SELF_FD);
		close(FILTER_FD);
		execve(pooled_argv[0], pooled_argv, pooled_envp);
		err = errno;
		say("exec ", pooled_argv[0], ": ", strerror(err));
		return (err == ENOENT || err == ENOTDIR) ? 127 : 126;
	}
	close(CONTROL_FD);
	close(SELF_FD);
	close(FILTER_FD);
	execve(argv[first], argv + first, pooled_envp);
	err = errno;
	say("exec ", argv[first], ": ", strerror(err));
	return (err == ENOENT || err == ENOTDIR) ? 127 : 126;
}

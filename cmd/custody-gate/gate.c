/*
 * custody-gate holds a container's first process at the threshold of its
 * workload until custodyd has observed it from outside.
 *
 * runc runs it as the container's init (process.args[0] is
 * /proc/self/fd/4, a sealed copy of this binary passed with
 * --preserve-fds), after every namespace, mount, capability drop,
 * no_new_privs and seccomp filter is in place. It tells custodyd it is
 * ready on fd 3, waits for the one-byte go-ahead, closes both descriptors
 * and execs the workload in its place: same pid, same credentials, same
 * filter. Anything but the go-ahead (EOF: custodyd went away or refused)
 * ends the container without running the workload.
 *
 * It is C, not Go, so that it adds no threads, no runtime and almost no
 * memory to the budgets the workload is held to.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#define CONTROL_FD 3
#define SELF_FD 4

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

int main(int argc, char **argv)
{
	char c = 0;
	ssize_t n;

	if (argc < 2 || argv[1][0] != '/') {
		say("usage: custody-gate /absolute/workload [args...]", NULL, NULL, NULL);
		return 125;
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
	execve(argv[1], argv + 1, environ);
	int err = errno;
	say("exec ", argv[1], ": ", strerror(err));
	return (err == ENOENT || err == ENOTDIR) ? 127 : 126;
}

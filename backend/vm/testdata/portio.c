/* portio tries the I/O port its argument names as a workload could: it
 * asks for access (ioperm, iopl) and, in a child, writes a byte to it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	unsigned short port = (unsigned short)strtoul(argv[1], NULL, 0);
	printf("ioperm=%s\n", ioperm(port, 1, 1) == 0 ? "granted" : strerror(errno));
	printf("iopl=%s\n", iopl(3) == 0 ? "granted" : strerror(errno));
	fflush(stdout);
	pid_t p = fork();
	if (p == 0) {
		outb('x', port);
		_exit(0);
	}
	int st = 0;
	if (p < 0 || waitpid(p, &st, 0) != p)
		return 3;
	printf("outb=%s\n", WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "ran");
	return 0;
}

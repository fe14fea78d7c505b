/*
 * A stand-in for uffdd in t_sanitizer_check, built with the daemon's flags
 * (sanitizers included). tests/lib.sh's run_daemon starts it as it starts
 * uffdd: it opens the control socket named by --control, logs "ready", and
 * at SIGTERM breaks the shutdown rule as SANFAKE says:
 *   clean   exits 0
 *   leak    loses heap blocks and exits 0: LeakSanitizer must report them
 *   ubsan   overflows a signed int (a UBSan report)
 *   asan    writes to a freed heap block (an AddressSanitizer report)
 *   status  exits 3
 *   hang    ignores SIGTERM
 * It also stands in for uffd-client in t_runner_check, whatever its
 * arguments: it says "uffd-client: refused: made up" on stderr, as a
 * client refused by its daemon would, and exits 1 after, as SANFAKE says:
 *   client-clean  nothing more
 *   client-leak   losing heap blocks (a LeakSanitizer report at exit)
 *   client-ubsan  overflowing a signed int (a UBSan report)
 *   client-asan   writing to a freed heap block (an AddressSanitizer report)
 */
#include "config.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

static void *volatile sink;

static __attribute__((noinline)) void
leak(void)
{
	for (int i = 0; i < 16; i++) {
		sink = malloc(4096);
		memset(sink, i, 4096);
	}
	sink = NULL;
}

int
main(int argc, char **argv)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	const char *mode = getenv("SANFAKE"), *control = NULL;
	volatile int big = INT_MAX, one = 1;
	sigset_t set;
	int fd, sig;

	if (mode != NULL && strncmp(mode, "client-", 7) == 0) {
		fprintf(stderr, "uffd-client: refused: made up\n");
		if (strcmp(mode, "client-leak") == 0) {
			leak();
		} else if (strcmp(mode, "client-ubsan") == 0) {
			int r = big + one;

			fprintf(stderr, "sanfake: %d\n", r);
		} else if (strcmp(mode, "client-asan") == 0) {
			sink = malloc(16);
			free(sink);
			*(char *)sink = 1;
		}
		return 1;
	}
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--control") == 0)
			control = argv[i + 1];
	if (mode == NULL || control == NULL ||
	    strlen(control) >= sizeof(sun.sun_path)) {
		fprintf(stderr, "usage: SANFAKE=MODE sanfake --control PATH\n");
		return 2;
	}
	strcpy(sun.sun_path, control);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 ||
	    listen(fd, 1) < 0) {
		perror("sanfake: control socket");
		return 1;
	}
	if (strcmp(mode, "hang") == 0)
		signal(SIGTERM, SIG_IGN);
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	fprintf(stderr, "sanfake: ready: control %s (%s)\n", control, mode);
	if (strcmp(mode, "hang") == 0)
		for (;;)
			pause();
	sigwait(&set, &sig);
	fprintf(stderr, "sanfake: signal %d: shutting down (%s)\n", sig, mode);
	close(fd);
	unlink(control);
	if (strcmp(mode, "leak") == 0) {
		leak();
	} else if (strcmp(mode, "ubsan") == 0) {
		int r = big + one;

		fprintf(stderr, "sanfake: %d\n", r);
	} else if (strcmp(mode, "asan") == 0) {
		sink = malloc(16);
		free(sink);
		*(char *)sink = 1;
	} else if (strcmp(mode, "status") == 0) {
		return 3;
	}
	return 0;
}

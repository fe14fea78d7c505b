/*
 * The engine's confinement (daemon/sandbox.c), from the inside: a child
 * enters it as user nobody with one writable directory, then reports what
 * /proc says of it and what it may still do; other children try what the
 * filter forbids and must die of SIGSYS. Needs root (77 without).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include "daemon/sandbox.h"
#include "tests/unit/unit.h"

static char dir[] = "/tmp/uffdd-sandbox-XXXXXX";

/* The value of field key in /proc/self/status, or "". */
static const char *
status(const char *key)
{
	static char line[256];
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, key, strlen(key)) == 0) {
			fclose(f);
			line[strcspn(line, "\n")] = '\0';
			return line + strlen(key) +
			       strspn(line + strlen(key), " \t:");
		}
	if (f)
		fclose(f);
	return "";
}

/* Runs fn in a confined child; its wait status. */
static int
confined(void (*fn)(void))
{
	struct sandbox_dir dirs[] = {{dir, 1}, {"/proc", 0}};
	pid_t p = fork();
	int st, ll;
	char err[256];

	if (p == 0) {
		if (sandbox_enter("nobody", dirs, 2, &ll, err, sizeof(err)) <
		    0) {
			fprintf(stderr, "sandbox_enter: %s\n", err);
			_exit(100);
		}
		fn();
		_exit(0);
	}
	waitpid(p, &st, 0);
	return st;
}

/* What the child may still do, and what it is: exit code bits for failures. */
static void
inside(void)
{
	char path[128];
	int bad = 0, fd;

	bad |= strcmp(status("Uid"), "0") == 0 || getuid() == 0;
	bad |= strcmp(status("CapEff"), "0000000000000000") != 0 ? 2 : 0;
	bad |= strcmp(status("NoNewPrivs"), "1") != 0 ? 4 : 0;
	bad |= strcmp(status("Seccomp"), "2") != 0 ? 8 : 0;
	snprintf(path, sizeof(path), "%s/file", dir);
	fd = open(path, O_CREAT | O_WRONLY, 0600);
	bad |= fd < 0 ? 16 : 0;
	if (fd >= 0)
		close(fd);
	/* Landlock, where the kernel has it: nothing but the two dirs. */
	if (open("/etc/hostname", O_RDONLY) >= 0 &&
	    syscall(SYS_landlock_create_ruleset, NULL, 0, 1) > 0)
		bad |= 32;
	_exit(bad);
}

/* A normal exit: under the sanitizers, LeakSanitizer runs now, confined. */
static void
leave(void)
{
	exit(0);
}

static void
read_other(void)
{
	char buf[8];
	struct iovec l = {buf, 8}, r = {buf, 8};

	process_vm_readv(getppid(), &l, 1, &r, 1, 0);
}

static void
signal_other(void)
{
	kill(getppid(), 0);
}

static void
netlink(void)
{
	socket(AF_NETLINK, SOCK_RAW, 0);
}

static void
getfd(void)
{
	syscall(SYS_pidfd_getfd, 0, 0, 0);
}

int
main(void)
{
	int st;

	if (geteuid() != 0) {
		printf("SKIP: needs root\n");
		return 77;
	}
	if (mkdtemp(dir) == NULL || chmod(dir, 0777) < 0)
		return 1;
	st = confined(inside);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
		fprintf(stderr, "inside: failures 0x%x\n", WEXITSTATUS(st));
	st = confined(leave);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	st = confined(read_other);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS);
	st = confined(signal_other);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS);
	st = confined(netlink);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS);
	st = confined(getfd);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS);
	{
		char path[128];

		snprintf(path, sizeof(path), "%s/file", dir);
		unlink(path);
		rmdir(dir);
	}
	return UNIT_DONE();
}

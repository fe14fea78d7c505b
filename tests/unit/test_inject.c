/*
 * System call injection survives signals handled by the tracer. A signal
 * whose handler has no SA_RESTART (libFuzzer's timer, or any handler a
 * program embedding this code installs) interrupts the tracer's waits; an
 * interrupted wait must not fail the injection, nor leave the target
 * traced, stopped or holding a descriptor we made it open.
 *
 * A child sits in pause(); the tracer, with a timer firing every 50 us,
 * runs getpid(), openat("/dev/null") and close() in it many times over,
 * the way the destination takes and later closes a target's userfaultfd.
 * Every call must return what the call returns, every inject_begin must
 * succeed (a thread left traced would refuse the next PTRACE_SEIZE), and
 * at the end the child runs untraced with no descriptor beyond its own.
 *
 * In the engine (a privileged part to ask: privop_init()), neither an
 * injection nor the opening of a process is done at all: both refuse with
 * EPERM and say why, and the child is not traced.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>

#include "daemon/inject.h"
#include "daemon/privop.h"
#include "daemon/procref.h"
#include "tests/unit/unit.h"

#define ROUNDS 3000

static volatile sig_atomic_t ticks;

static void
tick(int sig)
{
	(void)sig;
	ticks++;
}

static int
fd_count(pid_t pid)
{
	char path[64];
	struct dirent *e;
	int n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	if ((d = opendir(path)) == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* The TracerPid line of /proc/PID/status. */
static int
tracer_of(pid_t pid)
{
	char path[64], line[256];
	int tracer = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "TracerPid: %d", &tracer) == 1)
			break;
	fclose(f);
	return tracer;
}

/* As the engine: no injection into child, no opening of it. */
static void
engine_refuses(pid_t child)
{
	struct inject inj;
	struct procref r;
	char err[128];
	int sv[2];

	CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
	privop_init(sv[0]);
	errno = 0;
	CHECK(inject_begin(&inj, child, 0) < 0 && errno == EPERM &&
	      strstr(inj.err, "engine") != NULL);
	CHECK(tracer_of(child) == 0);
	errno = 0;
	CHECK(procref_open(&r, child, err, sizeof(err)) < 0 && errno == EPERM &&
	      r.pidfd < 0 && strstr(err, "engine") != NULL);
	privop_close();
	close(sv[1]);
}

int
main(void)
{
	struct sigaction sa = {.sa_handler = tick}; /* no SA_RESTART */
	struct itimerval it = {{0, 50}, {0, 50}};
	static const char devnull[] = "/dev/null";
	int begun = 0, ok_calls = 0, opened = 0, fds;
	pid_t child;

	child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		for (;;)
			pause();
	}
	usleep(10000);
	fds = fd_count(child);
	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
	for (int i = 0; i < ROUNDS; i++) {
		struct inject inj;
		long fd;

		if (inject_begin(&inj, child, 0) < 0) {
			if (i == 0 && errno == EPERM) {
				printf("SKIP: ptrace of a child refused "
				       "here: %s\n",
				       inj.err);
				kill(child, SIGKILL);
				waitpid(child, NULL, 0);
				return 77;
			}
			fprintf(stderr, "round %d: %s\n", i, inj.err);
			break;
		}
		begun++;
		ok_calls += inject_syscall(&inj, SYS_getpid, 0, 0, 0, 0, 0,
					   0) == child;
		/* The child forked from us: its copy of the path is here. */
		fd = inject_syscall(&inj, SYS_openat, (unsigned long)AT_FDCWD,
				    (unsigned long)devnull, O_RDONLY, 0, 0, 0);
		if (fd >= 0) {
			opened++;
			ok_calls += inject_syscall(&inj, SYS_close,
						   (unsigned long)fd, 0, 0, 0,
						   0, 0) == 0;
		}
		inject_end(&inj);
	}
	it = (struct itimerval){{0, 0}, {0, 0}};
	setitimer(ITIMER_REAL, &it, NULL);
	printf("%d rounds begun, %d calls right, %d opened, %d timer "
	       "signals\n",
	       begun, ok_calls, opened, (int)ticks);
	CHECK(ticks > 0);
	CHECK(begun == ROUNDS);
	CHECK(opened == ROUNDS);
	CHECK(ok_calls == 2 * ROUNDS);
	CHECK(fd_count(child) == fds);
	CHECK(tracer_of(child) == 0);
	engine_refuses(child);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	return UNIT_DONE();
}

/*
 * The source's bulk read of another process's anonymous memory, three
 * ways an unprivileged engine could have it (docs/privsep.md, "The bulk
 * read"):
 *   pread   pread of /proc/CHILD/mem, opened once (what the engine does
 *           since the split: the kernel copies each page twice);
 *   pvr     process_vm_readv (one copy; what the daemon did as root, and
 *           what an engine without capabilities may not call);
 *   reader  a second process does process_vm_readv into a buffer shared
 *           with the first, which asks for runs over a socket pair, two
 *           slots so that the next run is read while one is used (the
 *           privileged reader the plan had): the CPU of both is counted.
 * A child maps SIZE bytes (default 1 GiB), writes every page and waits,
 * as a frozen source; every way reads all of it in runs of RUN bytes
 * (default 256 KiB), for ROUNDS rounds, alternating.
 *
 *   bench_remote_read [RUN [ROUNDS [SIZE]]]
 *
 * Prints "remote_read method=M run=R cpu_s_per_gib=C wall_s=W" a line.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double
ru_s(const struct rusage *r)
{
	return (double)(r->ru_utime.tv_sec + r->ru_stime.tv_sec) +
	       (double)(r->ru_utime.tv_usec + r->ru_stime.tv_usec) / 1e6;
}

static double
cpu_self(void)
{
	struct rusage r;

	getrusage(RUSAGE_SELF, &r);
	return ru_s(&r);
}

static double
wall(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void
die(const char *what)
{
	perror(what);
	exit(1);
}

/* Every run read by pread of the child's mem file. */
static void
by_pread(int memfd, const uint8_t *at, size_t size, size_t run, uint8_t *buf)
{
	for (size_t o = 0; o < size; o += run)
		if (pread(memfd, buf, run, (off_t)(uintptr_t)(at + o)) !=
		    (ssize_t)run)
			die("pread");
}

static void
by_pvr(pid_t child, uint8_t *at, size_t size, size_t run, uint8_t *buf)
{
	for (size_t o = 0; o < size; o += run) {
		struct iovec l = {buf, run}, r = {at + o, run};

		if (process_vm_readv(child, &l, 1, &r, 1, 0) != (ssize_t)run)
			die("process_vm_readv");
	}
}

/* The reader process: each request (address, slot) read into its slot. */
static void
reader(int sock, pid_t child, uint8_t *shared, size_t run)
{
	uint64_t req[2];

	while (read(sock, req, sizeof(req)) == sizeof(req)) {
		struct iovec l = {shared + req[1] * run, run};
		struct iovec r = {(void *)(uintptr_t)req[0], run};
		ssize_t n = process_vm_readv(child, &l, 1, &r, 1, 0);

		if (write(sock, &n, sizeof(n)) != sizeof(n))
			_exit(1);
	}
	_exit(0);
}

/* Asks the reader for every run, one ahead; its CPU is added to ours. */
static double
by_reader(pid_t child, uint8_t *at, size_t size, size_t run)
{
	uint8_t *shared = mmap(NULL, 2 * run, PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	uint64_t req[2] = {(uintptr_t)at, 0};
	struct rusage ru;
	int sp[2], st;
	pid_t r;
	ssize_t n;

	if (shared == MAP_FAILED ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sp) < 0)
		die("reader setup");
	if ((r = fork()) == 0) {
		close(sp[0]);
		reader(sp[1], child, shared, run);
	}
	close(sp[1]);
	if (write(sp[0], req, sizeof(req)) != sizeof(req))
		die("request");
	for (size_t o = 0; o < size; o += run) {
		if (read(sp[0], &n, sizeof(n)) != sizeof(n) ||
		    n != (ssize_t)run)
			die("reader");
		if (o + run < size) {
			req[0] = (uintptr_t)(at + o + run);
			req[1] = (o / run + 1) & 1;
			if (write(sp[0], req, sizeof(req)) != sizeof(req))
				die("request");
		}
	}
	close(sp[0]);
	if (wait4(r, &st, 0, &ru) < 0)
		die("wait4");
	munmap(shared, 2 * run);
	return ru_s(&ru);
}

int
main(int argc, char **argv)
{
	size_t run = argc > 1 ? strtoull(argv[1], NULL, 0) : 256u << 10;
	int rounds = argc > 2 ? atoi(argv[2]) : 3;
	size_t size = argc > 3 ? strtoull(argv[3], NULL, 0) : 1ull << 30;
	double gib = (double)size / (1 << 30);
	uint8_t *at, *buf;
	char path[64];
	int memfd;
	pid_t child;

	if (run == 0 || run % 4096 || size % run)
		die("RUN must be pages and divide SIZE");
	at = mmap(NULL, size, PROT_READ | PROT_WRITE,
		  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	buf = aligned_alloc(4096, run);
	if (at == MAP_FAILED || buf == NULL)
		die("memory");
	for (size_t i = 0; i < size; i += 4096)
		at[i] = (uint8_t)(i >> 12) | 1;
	if ((child = fork()) == 0) {
		pause();
		_exit(0);
	}
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)child);
	if ((memfd = open(path, O_RDONLY)) < 0)
		die(path);
	for (int k = 0; k < rounds; k++) {
		for (int m = 0; m < 3; m++) {
			static const char *const name[] = {"pread", "pvr",
							   "reader"};
			double c0 = cpu_self(), t0 = wall(), other = 0;

			if (m == 0)
				by_pread(memfd, at, size, run, buf);
			else if (m == 1)
				by_pvr(child, at, size, run, buf);
			else
				other = by_reader(child, at, size, run);
			printf("remote_read method=%s run=%zu "
			       "cpu_s_per_gib=%.3f "
			       "wall_s=%.3f\n",
			       name[m], run, (cpu_self() - c0 + other) / gib,
			       wall() - t0);
			fflush(stdout);
		}
	}
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	return 0;
}

/*
 * Source-side reads of shared memory: is io_uring worth it (issue 6)?
 *
 * A child maps a memfd of SIZE bytes (default 1 GiB) shared, fills it and
 * stops itself, as a frozen source process. The parent opens the memfd
 * through /proc/CHILD/map_files, as the source daemon does for shared
 * regions, and reads all of it into a small reused buffer ring, in runs
 * of RUN bytes, three ways:
 *   pvr    one process_vm_readv per run (the daemon's bulk read today);
 *   pread  one pread per run on the map_files descriptor;
 *   uring  io_uring reads of the same descriptor, BATCH runs a submission
 *          (one io_uring_enter submits them and waits for all).
 * Each way runs for 4 KiB runs (a scattered data class) and 64 KiB runs
 * (a bulk frame), alternating, and every run is checked against the
 * child's pattern.
 *
 * Prints one line per method and run size: "read method=M run=R secs=S
 * cpu_s_per_gib=C bad=0".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include "tests/bench/bench.h"

#define BATCH 32
#define RING (2UL << 20) /* reused destination: no fresh pages */

static void
die(const char *what)
{
	fprintf(stderr, "bench_read: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* Each page of the child's memory starts with its own offset. */
static uint64_t
check(const uint8_t *buf, uint64_t off, uint64_t len)
{
	uint64_t bad = 0;

	for (uint64_t i = 0; i < len; i += 4096) {
		uint64_t want = off + i;

		bad += memcmp(buf + i, &want, sizeof(want)) != 0;
	}
	return bad;
}

struct target {
	pid_t pid;
	uint8_t *addr; /* in the child (same address: mapped before fork) */
	int fd;	       /* the memfd, through /proc/PID/map_files */
	uint64_t size;
};

/* One system call a run: process_vm_readv (pvr) or pread of the memfd. */
static uint64_t
read_each(const struct target *t, uint8_t *ring, uint64_t run, int pvr)
{
	uint64_t bad = 0;

	for (uint64_t off = 0; off < t->size; off += run) {
		uint8_t *b = ring + off % RING;
		struct iovec l = {b, run}, r = {t->addr + off, run};
		ssize_t got = pvr ? process_vm_readv(t->pid, &l, 1, &r, 1, 0)
				  : pread(t->fd, b, run, (off_t)off);

		if (got != (ssize_t)run)
			die(pvr ? "process_vm_readv" : "pread");
		bad += check(b, off, run);
	}
	return bad;
}

static uint64_t
read_uring(const struct target *t, struct io_uring *ring_q, uint8_t *ring,
	   uint64_t run)
{
	uint64_t bad = 0;

	for (uint64_t off = 0; off < t->size;) {
		uint64_t first = off;
		unsigned n = 0;

		for (; n < BATCH && off < t->size; n++, off += run) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(ring_q);

			io_uring_prep_read(sqe, t->fd, ring + off % RING,
					   (unsigned)run, off);
		}
		if (io_uring_submit_and_wait(ring_q, n) < 0)
			die("io_uring_submit_and_wait");
		for (unsigned i = 0; i < n; i++) {
			struct io_uring_cqe *cqe;

			if (io_uring_peek_cqe(ring_q, &cqe) != 0)
				die("io_uring_peek_cqe");
			if (cqe->res != (int)run) {
				errno = cqe->res < 0 ? -cqe->res : EIO;
				die("io_uring read");
			}
			io_uring_cqe_seen(ring_q, cqe);
		}
		for (uint64_t o = first; o < off; o += run)
			bad += check(ring + o % RING, o, run);
	}
	return bad;
}

int
main(int argc, char **argv)
{
	static const uint64_t runs[] = {4096, 64 << 10};
	static const char *const methods[] = {"pvr", "pread", "uring"};
	struct target t = {.size = 1ULL << 30};
	struct io_uring q;
	uint8_t *ring;
	char path[96];
	int mfd, rc = 0;

	if (argc > 1)
		t.size = strtoull(argv[1], NULL, 0) & ~((64ULL << 10) - 1);
	if (t.size < RING)
		t.size = RING;
	mfd = memfd_create("bench_read", MFD_CLOEXEC);
	if (mfd < 0 || ftruncate(mfd, (off_t)t.size) < 0)
		die("memfd");
	t.addr = mmap(NULL, t.size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (t.addr == MAP_FAILED)
		die("mmap");
	for (uint64_t i = 0; i < t.size; i += 4096)
		memcpy(t.addr + i, &i, sizeof(i));
	if ((t.pid = fork()) == 0) {
		raise(SIGSTOP); /* frozen, as a source process is */
		_exit(0);
	}
	if (t.pid < 0)
		die("fork");
	/* Only the child maps the memory now, as only the source process. */
	munmap(t.addr, t.size);
	close(mfd);
	snprintf(path, sizeof(path), "/proc/%d/map_files/%lx-%lx", (int)t.pid,
		 (unsigned long)t.addr, (unsigned long)t.addr + t.size);
	if ((t.fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		die(path);
	if (posix_memalign((void **)&ring, 4096, RING) != 0)
		die("buffer");
	memset(ring, 0, RING);
	if (io_uring_queue_init(BATCH, &q, 0) < 0)
		die("io_uring_queue_init");
	for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
		for (size_t m = 0; m < 3; m++) {
			double t0 = now_s(), c0 = cpu_s(RUSAGE_SELF), t1, c1;
			uint64_t bad =
				m < 2 ? read_each(&t, ring, runs[r], m == 0)
				      : read_uring(&t, &q, ring, runs[r]);

			t1 = now_s();
			c1 = cpu_s(RUSAGE_SELF);
			printf("read method=%s run=%" PRIu64 " secs=%.3f "
			       "cpu_s_per_gib=%.3f bad=%" PRIu64 "\n",
			       methods[m], runs[r], t1 - t0,
			       (c1 - c0) / ((double)t.size / (1 << 30)), bad);
			rc |= bad != 0;
		}
	}
	io_uring_queue_exit(&q);
	kill(t.pid, SIGKILL);
	waitpid(t.pid, NULL, 0);
	return rc;
}

/*
 * Classification benchmark (issue 3): a child maps 4 GiB and populates half
 * of it (16 pages of every 32, no huge pages); the parent classifies the
 * child's memory with PAGEMAP_SCAN, with uffdd's batched pagemap reads, and
 * with the naive one-entry-per-read loop, alternating, medians of 5 rounds.
 * Targets: scan under 50 ms, batched reads under 100 ms, both printed
 * beside the naive time of the same run.
 */
#include "config.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "tests/bench/bench.h"

#include "daemon/compat.h"
#include "daemon/pagemap.h"

#define PS 4096ULL
#define ROUNDS 5

static uint64_t size = 4ULL << 30;

/* The naive way: one 8-byte pread per page. */
static int64_t
naive(pid_t pid, uint64_t start, uint64_t npages)
{
	char path[64];
	int64_t n = 0;
	uint64_t e;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)pid);
	if ((fd = open(path, O_RDONLY)) < 0)
		return -1;
	for (uint64_t p = 0; p < npages; p++) {
		if (pread(fd, &e, 8, (off_t)((start / PS + p) * 8)) != 8) {
			close(fd);
			return -1;
		}
		n += (e & (PM_PRESENT | PM_SWAP)) != 0;
	}
	close(fd);
	return n;
}

static int
cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double
median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	return v[n / 2];
}

int
main(int argc, char **argv)
{
	uint64_t npages, addr, *bits;
	double t_scan[ROUNDS], t_read[ROUNDS], t_naive[ROUNDS];
	int pfd[2], have_scan = 1;
	int64_t want = -1;
	pid_t child;

	if (argc > 1)
		size = strtoull(argv[1], NULL, 0) << 20;
	npages = size / PS;
	bits = calloc((npages + 63) / 64, 8);
	if (pipe(pfd) < 0 || bits == NULL)
		return 1;
	if ((child = fork()) == 0) {
		char *m = mmap(NULL, size, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
			       0);

		if (m == MAP_FAILED)
			_exit(1);
		madvise(m, size, MADV_NOHUGEPAGE);
		for (uint64_t p = 0; p < npages; p++)
			if (p % 32 < 16)
				m[p * PS] = 1;
		addr = (uint64_t)(uintptr_t)m;
		if (write(pfd[1], &addr, 8) != 8)
			_exit(1);
		pause();
		_exit(0);
	}
	if (read(pfd[0], &addr, 8) != 8) {
		fprintf(stderr,
			"bench_classify: child failed to map %llu MiB\n",
			(unsigned long long)(size >> 20));
		return 1;
	}
	for (int r = 0; r < ROUNDS; r++) {
		double t0;
		int64_t n;

		memset(bits, 0, (npages + 63) / 64 * 8);
		t0 = now_s();
		n = pagemap_classify(child, addr, npages, PS, bits,
				     PAGEMAP_SCAN_IOCTL);
		t_scan[r] = now_s() - t0;
		if (n < 0)
			have_scan = 0;
		else if (want >= 0 && n != want)
			fprintf(stderr, "scan: %lld pages, want %lld\n",
				(long long)n, (long long)want);
		memset(bits, 0, (npages + 63) / 64 * 8);
		t0 = now_s();
		n = pagemap_classify(child, addr, npages, PS, bits,
				     PAGEMAP_READ);
		t_read[r] = now_s() - t0;
		if (want < 0)
			want = n;
		t0 = now_s();
		n = naive(child, addr, npages);
		t_naive[r] = now_s() - t0;
		if (n != want)
			fprintf(stderr, "naive: %lld pages, want %lld\n",
				(long long)n, (long long)want);
	}
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	{
		double s = median(t_scan, ROUNDS) * 1e3;
		double b = median(t_read, ROUNDS) * 1e3;
		double nv = median(t_naive, ROUNDS) * 1e3;

		printf("classify %llu MiB, %lld of %llu pages populated, "
		       "median of %d rounds\n",
		       (unsigned long long)(size >> 20), (long long)want,
		       (unsigned long long)npages, ROUNDS);
		printf("%-32s %10s %10s %8s %8s\n", "method", "ms", "naive ms",
		       "speedup", "target");
		if (have_scan)
			printf("%-32s %10.1f %10.1f %7.0fx %6s %s\n",
			       "PAGEMAP_SCAN", s, nv, nv / s, "<50",
			       s < 50 ? "met" : "MISSED");
		else
			printf("%-32s %10s\n", "PAGEMAP_SCAN",
			       "n/a (kernel < 6.7)");
		printf("%-32s %10.1f %10.1f %7.0fx %6s %s\n",
		       "pagemap reads (64 KiB batches)", b, nv, nv / b, "<100",
		       b < 100 ? "met" : "MISSED");
		printf("%-32s %10.1f\n", "pagemap reads (8 B each, naive)", nv);
	}
	return 0;
}

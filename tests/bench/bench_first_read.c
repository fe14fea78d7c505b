/*
 * What a target's first read of a page costs once userfaultfd installed
 * it, against a page the process wrote itself (docs/benchmarks.md, "The
 * scanning target"). SIZE bytes (default 256 MiB) are registered with a
 * userfaultfd, filled by UFFDIO_COPY in runs of RUN pages (default 64),
 * unregistered, then read one word a page, twice; then a plain mapping
 * the process wrote is read the same way. For each pass: microseconds a
 * page, reads over 5 us, and the page faults the process took.
 *
 *   bench_first_read [RUN_PAGES [SIZE]]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PS 4096u

static uint64_t
ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static long
faults(void)
{
	struct rusage r;

	getrusage(RUSAGE_SELF, &r);
	return r.ru_minflt + r.ru_majflt;
}

static void
scan(const char *what, volatile const uint8_t *m, size_t size)
{
	uint64_t t0 = ns(), sum = 0;
	unsigned long slow = 0;
	long f0 = faults();

	for (size_t i = 0; i < size; i += PS) {
		uint64_t a = ns();

		sum += m[i];
		slow += ns() - a > 5000;
	}
	printf("first_read pass=%s us_per_page=%.3f slow=%lu faults=%ld "
	       "sum=%llu\n",
	       what, (double)(ns() - t0) / ((double)size / PS * 1e3), slow,
	       faults() - f0, (unsigned long long)sum);
}

static uint8_t *
anon(size_t size)
{
	uint8_t *m = mmap(NULL, size, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	madvise(m, size, MADV_NOHUGEPAGE); /* 4 KiB pages, as a target's */
	return m;
}

int
main(int argc, char **argv)
{
	size_t run = (argc > 1 ? strtoull(argv[1], NULL, 0) : 64) * PS;
	size_t size = argc > 2 ? strtoull(argv[2], NULL, 0) : 256u << 20;
	struct uffdio_api api = {.api = UFFD_API};
	uint8_t *m = anon(size), *p, *src;
	int u = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	struct uffdio_register r = {.range = {(uintptr_t)m, size},
				    .mode = UFFDIO_REGISTER_MODE_MISSING};
	struct uffdio_range all = {(uintptr_t)m, size};

	if (run == 0 || size % run) {
		fprintf(stderr, "RUN_PAGES must divide SIZE\n");
		return 1;
	}
	if (u < 0 || ioctl(u, UFFDIO_API, &api) ||
	    ioctl(u, UFFDIO_REGISTER, &r)) {
		perror("userfaultfd");
		return 1;
	}
	if ((src = aligned_alloc(PS, run)) == NULL)
		return 1;
	memset(src, 7, run);
	for (size_t o = 0; o < size; o += run) {
		struct uffdio_copy c = {.dst = (uintptr_t)m + o,
					.src = (uintptr_t)src,
					.len = run};

		if (ioctl(u, UFFDIO_COPY, &c)) {
			perror("UFFDIO_COPY");
			return 1;
		}
	}
	ioctl(u, UFFDIO_UNREGISTER, &all);
	scan("installed-first", m, size);
	scan("installed-second", m, size);
	p = anon(size);
	for (size_t i = 0; i < size; i += PS)
		p[i] = 1;
	scan("written-by-self", p, size);
	return 0;
}

/*
 * Patch 4: un-protecting with UFFDIO_WRITEPROTECT keeps exclusive anonymous
 * pages writable.  Counts the minor faults that writes take after an
 * un-protect (0 expected; one per page on an unpatched kernel), then runs
 * the toggle-and-write microbenchmark of Peter Collingbourne's mprotect
 * patch with UFFDIO_WRITEPROTECT in place of mprotect.
 */
#include "ktest.h"

#define NPAGES 256
#define ITERS 2000

static int
wp(int fd, char *p, size_t len, int on)
{
	struct uffdio_writeprotect w = {
		.range = {.start = (unsigned long)p, .len = len},
		.mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0,
	};

	return ioctl(fd, UFFDIO_WRITEPROTECT, &w);
}

int
main(int argc, char **argv)
{
	long psz = sysconf(_SC_PAGESIZE);
	size_t len = NPAGES * psz;
	int iters = argc > 1 ? atoi(argv[1]) : ITERS;
	long f0, faults;
	double t0, bench;
	char *p;
	int fd;

	kt_name = "wp_unprotect";
	fd = kt_uffd(0, NULL);
	if (fd < 0)
		kt_error("UFFDIO_API: %s", strerror(errno));
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	if (p == MAP_FAILED)
		kt_error("mmap: %s", strerror(errno));
	madvise(p, len, MADV_NOHUGEPAGE);
	memset(p, 1, len);
	kt_register(fd, p, len, UFFDIO_REGISTER_MODE_WP);

	if (wp(fd, p, len, 1) < 0 || wp(fd, p, len, 0) < 0)
		kt_error("UFFDIO_WRITEPROTECT: %s", strerror(errno));
	f0 = kt_minflt();
	for (int i = 0; i < NPAGES; i++)
		p[i * psz] = 2;
	faults = kt_minflt() - f0;

	/* the toggle-and-write loop (the seed's benchmark, 1 MiB) */
	t0 = kt_now();
	for (int i = 0; i < iters; i++) {
		memset(p, i, len);
		wp(fd, p, len, 1);
		wp(fd, p, len, 0);
	}
	bench = kt_now() - t0;
	kt_info("bench: %d x (write 1 MiB, protect, un-protect): %.3f s, %.1f "
		"us/iter",
		iters, bench, bench * 1e6 / iters);
	printf("BENCH wp_toggle_us %.1f\n", bench * 1e6 / iters);
	if (faults <= NPAGES / 64)
		kt_exit("PASS",
			"%ld minor faults writing %d pages after un-protect",
			faults, NPAGES);
	kt_exit("FAIL", "%ld minor faults writing %d pages after un-protect",
		faults, NPAGES);
}

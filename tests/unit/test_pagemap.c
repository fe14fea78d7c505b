/*
 * Both classification paths agree, page for page, with a map we know: a
 * child maps a region, touches a known pattern of pages (leaving runs
 * untouched and a read-only touch that maps the zero page), and the parent
 * classifies the child's pagemap with each method. Shared memory: a memfd
 * with pages the child touched through its mapping, pages written through
 * the file only (in the page cache, never mapped: pagemap says none) and
 * holes; the file-only and the pagemap-then-file classifications must both
 * find exactly the written pages. Swapped pages are covered by the
 * integration tests and the kernel VM test (they need a swap device).
 *
 * A private file mapping: of pages read (the file's, resident), written
 * (anonymous copies, some then made read-only) and never touched, only
 * the written ones are data, with each method. And bit_set_range(), which
 * sets a run's bits a word at a time, against bit_set() bit by bit.
 */
#include "config.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "daemon/compat.h"
#include "daemon/pagemap.h"
#include "tests/unit/unit.h"

#define NPAGES 20000
#define SHM_PAGES 2000
#define PS 4096

static int
touched(uint64_t p)
{
	return (p % 7 == 0) || (p >= 5000 && p < 5300) || p == NPAGES - 1;
}

#define FPAGES 96

static void
cow_case(void)
{
	char path[] = "/var/tmp/uffdd-test-cow-XXXXXX";
	int fd = mkstemp(path);
	static char page[PS];
	uint64_t want[bit_words(FPAGES)], got[bit_words(FPAGES)];
	volatile char *m;
	int64_t expect = 0;

	CHECK(fd >= 0);
	if (fd < 0)
		return;
	unlink(path);
	memset(page, 'f', PS);
	for (int p = 0; p < FPAGES; p++)
		CHECK(pwrite(fd, page, PS, (off_t)p * PS) == PS);
	m = mmap(NULL, FPAGES * PS, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	CHECK(m != MAP_FAILED);
	memset(want, 0, sizeof(want));
	for (uint64_t p = 0; p < FPAGES; p++) {
		if (p % 3 == 0) {
			m[p * PS] = 'w';
			bit_set(want, p);
			expect++;
		} else if (p % 3 == 1) {
			(void)m[p * PS];
		}
	}
	/* Written, then read-only (RELRO): still the process's own. */
	CHECK(mprotect((void *)m, 12 * PS, PROT_READ) == 0);
	for (int how = 0; how < 2; how++) {
		int64_t n;

		memset(got, 0, sizeof(got));
		n = pagemap_classify_cow(
			getpid(), (uint64_t)(uintptr_t)m, FPAGES, got,
			how ? PAGEMAP_SCAN_IOCTL : PAGEMAP_READ);
		if (n < 0 && how)
			break; /* no PAGEMAP_SCAN: said below */
		CHECK(n == expect);
		CHECK(memcmp(got, want, sizeof(got)) == 0);
	}
	munmap((void *)m, FPAGES * PS);
	close(fd);
}

/* memfd pages the child touches through its mapping / writes to the file */
static int
shm_mapped(uint64_t p)
{
	return p % 3 == 0 || (p >= 1000 && p < 1100);
}

static int
shm_written(uint64_t p)
{
	return p % 5 == 0 || p == SHM_PAGES - 1;
}

/* Classifies [first, first + n) of the child's memfd mapping both ways. */
static void
check_shmem(pid_t child, uint64_t shm, int mfd, uint64_t first, uint64_t n)
{
	uint64_t *want = calloc(bit_words(n), 8), *a = calloc(bit_words(n), 8);
	uint64_t *b = calloc(bit_words(n), 8);
	int64_t expect = 0;

	for (uint64_t p = 0; p < n; p++) {
		if (shm_mapped(first + p) || shm_written(first + p)) {
			bit_set(want, p);
			expect++;
		}
	}
	CHECK(pagemap_classify_file(mfd, first * PS, n, PS, a) == expect);
	CHECK(memcmp(a, want, bit_words(n) * 8) == 0);
	CHECK(pagemap_classify_shmem(child, shm + first * PS, mfd, first * PS,
				     n, PS, b) == expect);
	CHECK(memcmp(b, want, bit_words(n) * 8) == 0);
	free(want);
	free(a);
	free(b);
}

/* bit_set_range() sets what bit_set() page by page would, and no more. */
static void
set_ranges(void)
{
	static const uint64_t cuts[][2] = {
		{0, 0},	   {0, 1},    {5, 6},	  {0, 64},   {63, 65},
		{1, 63},   {64, 128}, {60, 200},  {3, 300},  {128, 129},
		{100, 99}, {0, 320},  {127, 193}, {191, 192}};
	uint64_t a[5], b[5];

	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		memset(a, 0, sizeof(a));
		memset(b, 0, sizeof(b));
		a[1] = b[1] = 0x1234; /* bits already set stay */
		bit_set_range(a, cuts[i][0], cuts[i][1]);
		for (uint64_t p = cuts[i][0]; p < cuts[i][1]; p++)
			bit_set(b, p);
		CHECK(memcmp(a, b, sizeof(a)) == 0 ||
		      !fprintf(stderr, "range %llu-%llu\n",
			       (unsigned long long)cuts[i][0],
			       (unsigned long long)cuts[i][1]));
	}
}

int
main(void)
{
	int pfd[2];
	uint64_t addr;
	pid_t child;
	uint64_t *want = calloc(bit_words(NPAGES), 8);
	uint64_t *a = calloc(bit_words(NPAGES), 8);
	uint64_t *b = calloc(bit_words(NPAGES), 8);
	int64_t na, nb, expect = 0;
	int scan_ok, mfd = memfd_create("test_pagemap", MFD_CLOEXEC);
	uint64_t shm;

	set_ranges();
	CHECK(mfd >= 0);
	CHECK(ftruncate(mfd, (off_t)SHM_PAGES * PS) == 0);
	for (uint64_t p = 0; p < SHM_PAGES; p++)
		if (shm_written(p))
			CHECK(pwrite(mfd, "w", 1, (off_t)(p * PS)) == 1);
	CHECK(pipe(pfd) == 0);
	child = fork();
	if (child == 0) {
		char *m =
			mmap(NULL, (size_t)NPAGES * PS, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		volatile char sink;

		madvise(m, (size_t)NPAGES * PS, MADV_NOHUGEPAGE);
		for (uint64_t p = 0; p < NPAGES; p++)
			if (touched(p))
				m[p * PS] = 1;
		sink = m[9001 * PS]; /* read-only: the zero page, present */
		(void)sink;
		addr = (uint64_t)(uintptr_t)m;
		m = mmap(NULL, (size_t)SHM_PAGES * PS, PROT_READ | PROT_WRITE,
			 MAP_SHARED, mfd, 0);
		for (uint64_t p = 0; p < SHM_PAGES; p++)
			if (shm_mapped(p))
				m[p * PS + 1] = 1;
		shm = (uint64_t)(uintptr_t)m;
		if (write(pfd[1], &addr, sizeof(addr)) != sizeof(addr) ||
		    write(pfd[1], &shm, sizeof(shm)) != sizeof(shm))
			_exit(1);
		pause();
		_exit(0);
	}
	CHECK(read(pfd[0], &addr, sizeof(addr)) == sizeof(addr));
	CHECK(read(pfd[0], &shm, sizeof(shm)) == sizeof(shm));
	check_shmem(child, shm, mfd, 0, SHM_PAGES);
	check_shmem(child, shm, mfd, 999, 130); /* a window across the run */
	for (uint64_t p = 0; p < NPAGES; p++) {
		if (touched(p) || p == 9001) {
			bit_set(want, p);
			expect++;
		}
	}
	na = pagemap_classify(child, addr, NPAGES, PS, a, PAGEMAP_READ);
	CHECK(na == expect);
	CHECK(memcmp(a, want, bit_words(NPAGES) * 8) == 0);

	/* PAGEMAP_SCAN only where the kernel has it (6.7+). */
	nb = pagemap_classify(child, addr, NPAGES, PS, b, PAGEMAP_SCAN_IOCTL);
	scan_ok = nb >= 0;
	if (scan_ok) {
		CHECK(nb == expect);
		CHECK(memcmp(b, want, bit_words(NPAGES) * 8) == 0);
		/* A window that starts and ends inside ranges. */
		memset(b, 0, bit_words(NPAGES) * 8);
		nb = pagemap_classify(child, addr + 5100 * PS, 300, PS, b,
				      PAGEMAP_SCAN_IOCTL);
		/* 5100..5299 all touched, then multiples of 7 up to 5399 */
		CHECK(nb == 214);
	} else {
		printf("PAGEMAP_SCAN not available: fallback path only\n");
	}
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	cow_case();
	close(mfd);
	free(want);
	free(a);
	free(b);
	return UNIT_DONE();
}

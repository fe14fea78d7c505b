/*
 * memcheck: the guest-side checker of the QEMU end-to-end test. Runs as a
 * static binary inside the guest's initramfs. It fills a buffer (256 MiB by
 * default) with a pattern derived from each word's index, then re-verifies
 * it forever, one page at a time, and reports on the console (a second
 * argument N first writes N MiB elsewhere and frees them):
 *   memcheck: filled N MiB
 *   memcheck: pass P ok|BAD mismatches M longest-stall S ms
 * A stall is the longest wall-clock gap between two consecutive pages: on a
 * destination whose RAM arrives post-copy, that is how long the guest waited
 * for a page (plus the time the vCPUs were stopped for switchover).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096

static uint64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Each word's value: its index mixed with a constant, never zero. */
static uint64_t
pattern(size_t i)
{
	uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull + 0x5bd1e995;

	return x ^ (x >> 29);
}

/*
 * Writes mib MiB that are not zeros and gives them back: free guest
 * memory then holds data, as it does after a guest has run a while.
 */
static void
scratch(size_t mib)
{
	size_t words = mib << 17;
	uint64_t *b =
		mmap(NULL, words * sizeof(uint64_t), PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	if (b == MAP_FAILED)
		return;
	for (size_t i = 0; i < words; i++)
		b[i] = ~pattern(i);
	munmap(b, words * sizeof(uint64_t));
	printf("memcheck: wrote and freed %zu MiB\n", mib);
}

int
main(int argc, char **argv)
{
	size_t mib = argc > 1 ? strtoul(argv[1], NULL, 0) : 256;
	size_t words = mib << 17, perpage = PAGE / sizeof(uint64_t);
	uint64_t *buf, t0, prev, gap, worst = 0, passworst, total_bad = 0;
	unsigned long pass;

	setvbuf(stdout, NULL, _IOLBF, 0);
	buf = mmap(NULL, words * sizeof(uint64_t), PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (buf == MAP_FAILED) {
		perror("memcheck: mmap");
		return 1;
	}
	/* After the buffer: the pages freed are not the buffer's. */
	if (argc > 2 && strtoul(argv[2], NULL, 0) > 0)
		scratch(strtoul(argv[2], NULL, 0));
	for (size_t i = 0; i < words; i++)
		buf[i] = pattern(i);
	printf("memcheck: filled %zu MiB\n", mib);
	for (pass = 1;; pass++) {
		uint64_t bad = 0;

		passworst = 0;
		t0 = prev = now_us();
		for (size_t p = 0; p < words; p += perpage) {
			uint64_t t;

			for (size_t i = p; i < p + perpage; i++)
				if (buf[i] != pattern(i)) {
					if (bad < 5)
						printf("memcheck: MISMATCH "
						       "word %zu: %#llx\n",
						       i,
						       (unsigned long long)
							       buf[i]);
					bad++;
				}
			t = now_us();
			gap = t - prev;
			prev = t;
			if (gap > passworst)
				passworst = gap;
		}
		if (passworst > worst)
			worst = passworst;
		total_bad += bad;
		printf("memcheck: pass %lu %s mismatches %llu pass-ms %llu "
		       "pass-stall-ms %llu longest-stall-ms %llu\n",
		       pass, total_bad ? "BAD" : "ok",
		       (unsigned long long)total_bad,
		       (unsigned long long)((now_us() - t0) / 1000),
		       (unsigned long long)(passworst / 1000),
		       (unsigned long long)(worst / 1000));
	}
}

/*
 * Test workload for migrations.
 *
 * source: maps SIZE bytes at BASE, fills them with a pattern, optionally pages
 *   some out, prints "ready", then mutates the memory from several threads
 *   until it is frozen (and killed) by the source daemon.
 * dest: maps the same range empty, prints "ready", waits for SIGUSR1, then
 *   touches every page from several threads (optionally writing to pages
 *   before they arrive) and checks every byte; prints the result and waits
 *   for SIGTERM so that its memory can be hashed from outside.
 *
 * dest --touch N (for tests/bench): instead of checking, one thread reads one
 * word of N random pages, one page at a time, timing each read that faults
 * (mincore says the page is not resident yet; pages the bulk lane already
 * installed are skipped), and prints "touched N faults F p50_us X p99_us Y".
 * --touch 0 touches nothing: the bulk lane alone moves the memory.
 *
 * Every 8-byte word is checkable on its own: its top 16 bits are a version,
 * its low 48 bits a hash of (seed, page, word, version). Mutations rewrite one
 * aligned word at a time, so a process frozen at any instant holds only
 * valid words, and a page from the wrong place, a zero page or a torn copy
 * fails the check. Pages with index % untouched == untouched - 1 are never
 * touched on the source and must read as zeros.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/mman.h>

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

#define PS 4096UL
#define WORDS (PS / 8)
#define POKE_WORD 8
#define POKE_TAG 0xFFFFULL

static uint64_t base = 0x500000000000ULL, size = 64ULL << 20, seed = 1;
static unsigned threads = 4, untouched = 16, pageout_every, poke_every;
static int prefault;
static uint64_t touch_n;
static int touch_mode;
static uint8_t *mem;
static atomic_ulong mismatches, checked;

static uint64_t
mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

static uint64_t
word_value(uint64_t page, uint64_t w, uint64_t ver)
{
	uint64_t h = mix(seed * 0x9e3779b97f4a7c15ULL ^ mix(page << 9 | w) ^
			 ver << 52);

	return ver << 48 | (h & 0xffffffffffffULL) | (h == 0);
}

static int
is_untouched(uint64_t page)
{
	return untouched && page % untouched == untouched - 1;
}

static int
is_pageout(uint64_t page)
{
	return pageout_every && !is_untouched(page) &&
	       page % pageout_every == 0;
}

static int
is_poke(uint64_t page)
{
	return poke_every && page % poke_every == 0;
}

static void
map_region(void)
{
	mem = mmap((void *)base, size, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (mem == MAP_FAILED || (uint64_t)mem != base) {
		fprintf(stderr,
			"workload: mmap 0x%" PRIx64 "+0x%" PRIx64 ": %s\n",
			base, size, strerror(errno));
		exit(1);
	}
}

static uint64_t
count_swapped(void)
{
	int fd = open("/proc/self/pagemap", O_RDONLY);
	uint64_t n = 0, npages = size / PS, buf[512];

	if (fd < 0)
		return 0;
	for (uint64_t p = 0; p < npages; p += 512) {
		uint64_t want = npages - p < 512 ? npages - p : 512;
		ssize_t r =
			pread(fd, buf, want * 8, (off_t)((base / PS + p) * 8));

		for (ssize_t i = 0; i < r / 8; i++)
			n += (buf[i] >> 62) & 1;
	}
	close(fd);
	return n;
}

static void *
mutator(void *arg)
{
	uint64_t r = mix((uint64_t)(uintptr_t)arg + seed), npages = size / PS;

	for (;;) {
		uint64_t page, w, *p, ver;

		r = mix(r);
		page = r % npages;
		if (is_untouched(page) || is_pageout(page))
			continue;
		w = (r >> 32) % WORDS;
		p = (uint64_t *)(mem + page * PS) + w;
		ver = ((*p >> 48) % 0xfff0) + 1;
		__atomic_store_n(p, word_value(page, w, ver), __ATOMIC_RELAXED);
	}
	return NULL;
}

static int
run_source(void)
{
	uint64_t npages = size / PS;
	pthread_t t;

	map_region();
	for (uint64_t page = 0; page < npages; page++) {
		uint64_t *p = (uint64_t *)(mem + page * PS);

		if (is_untouched(page))
			continue;
		for (uint64_t w = 0; w < WORDS; w++)
			p[w] = word_value(page, w, 1);
	}
	if (pageout_every) {
		for (uint64_t page = 0; page < npages; page++)
			if (is_pageout(page))
				madvise(mem + page * PS, PS, MADV_PAGEOUT);
		printf("swapped %" PRIu64 "\n", count_swapped());
	}
	printf("ready 0x%" PRIx64 " 0x%" PRIx64 "\n", base, base + size);
	fflush(stdout);
	for (unsigned i = 0; i < threads; i++)
		pthread_create(&t, NULL, mutator, (void *)(uintptr_t)i);
	for (;;)
		pause();
	return 0;
}

static void
report(uint64_t page, uint64_t w, uint64_t got, uint64_t want)
{
	if (atomic_fetch_add(&mismatches, 1) < 5)
		fprintf(stderr,
			"workload: MISMATCH page %" PRIu64 " word %" PRIu64
			": 0x%016" PRIx64 " want 0x%016" PRIx64 "\n",
			page, w, got, want);
}

static void
check_page(uint64_t page)
{
	volatile uint64_t *p = (volatile uint64_t *)(mem + page * PS);

	if (is_poke(page)) /* a write before the page arrives */
		p[POKE_WORD] = POKE_TAG << 48 | page;
	for (uint64_t w = 0; w < WORDS; w++) {
		uint64_t v = p[w], want;

		if (is_poke(page) && w == POKE_WORD)
			want = POKE_TAG << 48 | page;
		else if (is_untouched(page))
			want = 0;
		else
			want = word_value(page, w, v >> 48);
		if (v != want || (!is_untouched(page) && v >> 48 == 0 &&
				  !(is_poke(page) && w == POKE_WORD)))
			report(page, w, v, want);
	}
	atomic_fetch_add(&checked, 1);
}

/*
 * Thread t checks the pages with index % threads == t, even threads walking
 * up and odd ones down, so faults land all over the region at once.
 */
static void *
checker(void *arg)
{
	uint64_t t = (uintptr_t)arg, npages = size / PS;

	if (t % 2 == 0) {
		for (uint64_t i = t; i < npages; i += threads)
			check_page(i);
	} else if (t < npages) {
		uint64_t last = t + (npages - 1 - t) / threads * threads;

		for (uint64_t i = last;; i -= threads) {
			check_page(i);
			if (i < t + threads)
				break;
		}
	}
	return NULL;
}

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* One demand fault at a time, each timed: the latency benchmark's toucher. */
static void
touch_pages(void)
{
	uint64_t npages = size / PS, nlat = 0, r = mix(seed + 7);
	uint64_t *lat = calloc(touch_n ? touch_n : 1, sizeof(*lat));

	for (uint64_t i = 0; i < touch_n; i++) {
		volatile uint64_t *p;
		unsigned char vec = 0;
		uint64_t page, t0;

		r = mix(r);
		page = r % npages;
		p = (volatile uint64_t *)(mem + page * PS);
		if (mincore((void *)p, PS, &vec) == 0 && (vec & 1))
			continue; /* already installed: no fault to time */
		t0 = now_ns();
		(void)*p;
		lat[nlat++] = now_ns() - t0;
	}
	qsort(lat, nlat, sizeof(*lat), cmp_u64);
	printf("touched %" PRIu64 " faults %" PRIu64
	       " p50_us %.1f p99_us %.1f\n",
	       touch_n, nlat, nlat ? (double)lat[nlat / 2] / 1e3 : 0.0,
	       nlat ? (double)lat[nlat * 99 / 100] / 1e3 : 0.0);
	fflush(stdout);
	free(lat);
}

static int
run_dest(void)
{
	uint64_t npages = size / PS;
	pthread_t *ts;
	sigset_t set;
	int sig;

	map_region();
	if (prefault) /* resident garbage that attach must discard */
		for (uint64_t page = 0; page < npages; page += 7)
			memset(mem + page * PS, 0xa5, PS);
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	printf("ready 0x%" PRIx64 " 0x%" PRIx64 "\n", base, base + size);
	fflush(stdout);
	do {
		sigwait(&set, &sig);
		if (sig == SIGTERM)
			return 2;
	} while (sig != SIGUSR1);
	if (touch_mode) {
		touch_pages();
		do
			sigwait(&set, &sig);
		while (sig != SIGTERM);
		return 0;
	}
	ts = calloc(threads, sizeof(*ts));
	for (unsigned i = 0; i < threads; i++)
		pthread_create(&ts[i], NULL, checker, (void *)(uintptr_t)i);
	for (unsigned i = 0; i < threads; i++)
		pthread_join(ts[i], NULL);
	printf("verified %lu pages, %lu mismatches\n",
	       (unsigned long)atomic_load(&checked),
	       (unsigned long)atomic_load(&mismatches));
	fflush(stdout);
	do
		sigwait(&set, &sig);
	while (sig != SIGTERM);
	return atomic_load(&mismatches) ? 1 : 0;
}

static void
usage(void)
{
	fprintf(stderr,
		"usage: workload source|dest [--base ADDR] [--size BYTES] "
		"[--seed N]\n"
		"         [--threads N] [--untouched-every K] "
		"[--pageout-every K]\n"
		"         [--poke-every K] [--prefault] [--touch N]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	static const struct option o[] = {
		{"base", required_argument, NULL, 'b'},
		{"size", required_argument, NULL, 's'},
		{"seed", required_argument, NULL, 'S'},
		{"threads", required_argument, NULL, 't'},
		{"untouched-every", required_argument, NULL, 'u'},
		{"pageout-every", required_argument, NULL, 'p'},
		{"poke-every", required_argument, NULL, 'k'},
		{"prefault", no_argument, NULL, 'P'},
		{"touch", required_argument, NULL, 'T'},
		{NULL, 0, NULL, 0}};
	int ch;

	if (argc < 2)
		usage();
	optind = 2;
	while ((ch = getopt_long(argc, argv, "", o, NULL)) != -1) {
		switch (ch) {
		case 'b':
			base = strtoull(optarg, NULL, 0);
			break;
		case 's': {
			char *e;

			size = strtoull(optarg, &e, 0);
			if (*e == 'M')
				size <<= 20;
			else if (*e == 'G')
				size <<= 30;
			break;
		}
		case 'S':
			seed = strtoull(optarg, NULL, 0);
			break;
		case 't':
			threads = (unsigned)atoi(optarg);
			break;
		case 'u':
			untouched = (unsigned)atoi(optarg);
			break;
		case 'p':
			pageout_every = (unsigned)atoi(optarg);
			break;
		case 'k':
			poke_every = (unsigned)atoi(optarg);
			break;
		case 'P':
			prefault = 1;
			break;
		case 'T':
			touch_n = strtoull(optarg, NULL, 0);
			touch_mode = 1;
			break;
		default:
			usage();
		}
	}
	if (size == 0 || size % PS || base % PS || threads == 0)
		usage();
	if (strcmp(argv[1], "source") == 0)
		return run_source();
	if (strcmp(argv[1], "dest") == 0)
		return run_dest();
	usage();
	return 2;
}

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
 * source --hot PCT [--pace-us N] (for pre-copy): the mutators write only to
 * the first PCT percent of the pages, one word each N us per thread;
 * --discard-every K drops one cold page in K mutations instead.
 * --syscall-every K makes one mutation in K a write by the kernel: the
 * word goes through a pipe and read() stores it (a write fault in a
 * system call, which a write-protecting tracker must not turn into EFAULT).
 *
 * dest --touch N (for tests/bench): instead of checking, one thread reads one
 * word of N random pages, one page at a time, timing each read that faults
 * (mincore says the page is not resident yet; pages the bulk lane already
 * installed are skipped), and prints "touched N faults F p50_us X p99_us Y".
 * --touch 0 touches nothing: the bulk lane alone moves the memory.
 * --touch scan reads one word of every page in order, as a scanner does,
 * a read that took over SCAN_FAULT_NS counted as a fault (no mincore: it
 * would slow the scanner down to the stream); it prints the same line.
 *
 * Every 8-byte word is checkable on its own: its top 16 bits are a version,
 * its low 48 bits a hash of (seed, page, word, version). Mutations rewrite one
 * aligned word at a time, so a process frozen at any instant holds only
 * valid words, and a page from the wrong place, a zero page or a torn copy
 * fails the check. Pages with index % untouched == untouched - 1 are never
 * touched on the source and must read as zeros.
 *
 * --kind file-private --file PATH maps PATH (created and filled with its own
 * pattern by the source when empty) MAP_PRIVATE: pages the source writes
 * become anonymous copies and must arrive; the never-written pages (half of
 * them read on the source, so resident as the file's) must read as the
 * file's pattern on the destination. The file itself is never written.
 * --ro-pages N makes N pages from the middle read-only once written (on
 * the destination: before attach), as a loader does with RELRO.
 *
 * dest --try-uffd: once attached (SIGUSR1), looks for a userfaultfd among
 * its own descriptors and tries to register a mapping of its own with each,
 * and to make one itself (syscall and /dev/userfaultfd); prints
 * "uffd-attempt: fds N, registered N, syscall ERR, device ERR".
 * --sibling vm|files (either mode): forks, before "ready", a process that shares its
 * memory (CLONE_VM) or file table (CLONE_FILES) and sleeps; prints
 * "sibling PID". --sibling holder (shared kinds): a process of its own
 * that maps the same shared memory 1 TiB higher (base + 0x10000000000)
 * and never writes it, as a guest's RAM holder beside QEMU.
 * dest --signal-bench N: sends itself N signals (a handler counts them)
 * before "ready" and again once attached, printing "signals before|during
 * N us_each X": what a signal costs the target in each state.
 * dest --exec-on-usr2 PATH: on SIGUSR2 before SIGUSR1, runs PATH (a copy
 * of this program, perhaps setuid) with the same arguments: the same
 * mapping in another program, for tests of a target that execs after the
 * daemon checked it.
 * source --swap-on-usr2 new|same (memfd): on each SIGUSR2 the region's
 * mapping is replaced in place (MAP_FIXED, same address, size and offset)
 * by one of another memfd of the same name, filled with the pattern at
 * version SWAP_VER ("new"), or of the same memfd again ("same"); the
 * mutators write on through it. Prints "swapped new|same". The old file
 * stays open: what a daemon still reads of it is not the process's.
 * source --bypass-on-usr2 pwrite|map (memfd, tmpfs): on each SIGUSR2 every
 * fourth cold page (past --hot's set) is written anew, at version
 * BYPASS_VER, other than through the mapping at BASE: by pwrite() on the
 * file ("pwrite"), or through a second shared mapping of the file,
 * elsewhere and kept ("map"). Prints "bypassed pwrite|map PAGES". A
 * tracker of the mapping at BASE sees none of these writes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/userfaultfd.h>

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

#define PS 4096UL
#define WORDS (PS / 8)
#define POKE_WORD 8
#define POKE_TAG 0xFFFFULL

static uint64_t base = 0x500000000000ULL, size = 64ULL << 20, seed = 1;
static unsigned threads = 4, untouched = 16, pageout_every, poke_every;
static unsigned zero_every;
static uint64_t ro_pages;
static const char *kind = "anon", *file_path, *exec_path, *sibling;
static int try_uffd;
static unsigned signal_bench;
static void start_sibling(void);
static char **saved_argv;
/*
 * dest --event: what the target does to pages [ev0, ev0 + EV_PAGES) right
 * after it starts, while they are still missing: "remove" (madvise; they
 * must then read as zeros), "unmap" (munmap; they are not checked),
 * "remap" (mremap to moved_at; they must be found there) or "protect"
 * (mprotect read-only, from a page off the 64-page grid, which splits the
 * mapping where no bulk frame would end; they read as before) or "punch"
 * (memfd, tmpfs, shared: fetched, then a hole punched in the file, which
 * no uffd event reports; they must then read as zeros); "punch-wait" as
 * well, but then it prints "punched" and checks only once it gets SIGUSR2
 * (so that a destination restart comes between the hole and the reads).
 * "fork-punch" punches that hole, then forks a child that checks every
 * page (the hole first read there: the parent checks once it exited).
 * "grow" (anon) is not about those pages: the region grows in place by
 * EV_PAGES (mremap, no event), and the new pages must read as zeros at
 * once ("grown" is printed then).
 * "fork" forks a child that checks every page too; "fork-remove" as well,
 * but the child first discards those pages (madvise, anon only), which
 * must then read as zeros in the child alone, and waits 4 s before it
 * checks (so that a destination restart finds them discarded, untouched).
 * "fork-idle" forks a child that prints "child PID" and checks every page
 * only once it gets SIGUSR1 (so the migration must complete while it
 * idles); "fork-exit" as well, and the parent exits at once after the fork
 * (as a daemon detaches), leaving its child to be migrated alone;
 * "fork-exit-late" as well, but the parent exits only at SIGUSR2.
 * "remove-storm" (anon) is not about those pages either: one page in
 * every 4 of the whole region (index % 4 == 1), one madvise each, while
 * the bulk stream installs around them; each must read as zeros right
 * after its madvise, and when checked.
 */
static const char *event;
static uint64_t ev0;
static int in_child; /* the child of --event fork and fork-remove */
static uint8_t *moved_at;
#define EV_PAGES 256
static int prefault, sigbus_ok;
/*
 * dest --idle-child: before the migration, every page is filled with
 * garbage (which attach discards) and a child is forked that only sleeps:
 * a process the target had before, holding all those pages, which must not
 * be taken for the one it forks during the migration (--event fork).
 */
static int idle_child;
/*
 * dest --stuck-thread: a thread calls vfork() and its child sleeps, so
 * the thread waits in the kernel where no signal (nor ptrace) reaches it
 * until the child is killed.
 */
static int stuck_thread;
static int map_fd = -1;
static const char *swap_how; /* --swap-on-usr2 */
#define SWAP_VER 0x100
static const char *bypass_how; /* --bypass-on-usr2 */
#define BYPASS_VER 0x200
static unsigned pace_us;
/*
 * source --hot PCT: the mutators write only to the first PCT percent of
 * the pages (the hot set; the rest stays cold), one word each pace_us
 * (--pace-us) when set: a steady writer, for pre-copy.
 */
static unsigned hot_pct = 100;
/*
 * source --discard-every K (with --hot): one mutation in K drops a whole
 * cold page instead (it reads as zeros from then on: drop_advice()), as
 * a process that frees memory it no longer uses.
 * Such pages fail a destination's check: compare memory hashes instead.
 */
static unsigned discard_every;

/*
 * How --discard-every drops a page: MADV_DONTNEED for private memory;
 * shared memory keeps its data under that, so a hole is punched
 * (MADV_REMOVE), as a balloon does to a guest's RAM file.
 */
static int drop_advice(void);
static unsigned syscall_every;
static atomic_ulong lost;
static __thread sigjmp_buf bus_jmp;
static __thread volatile int bus_armed;
static uint64_t touch_n;
static int touch_mode; /* 1 random pages, 2 every page in order (scan) */
#define SCAN_FAULT_NS 5000
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

/* The bytes of the --file a private file mapping starts from. */
static uint64_t
file_word(uint64_t page, uint64_t w)
{
	return 0xFFFEULL << 48 |
	       (mix(seed * 0x2545f4914f6cdd1dULL ^ mix(page << 9 | w)) &
		0xffffffffffffULL);
}

static int
is_hugetlb(void)
{
	return strncmp(kind, "hugetlb", 7) == 0;
}

static int
is_untouched(uint64_t page)
{
	/* Huge pages populate whole: leave every fourth one untouched. */
	if (is_hugetlb() && (page / 512) % 4 == 3)
		return 1;
	return untouched && page % untouched == untouched - 1;
}

/* Written with zeros on purpose: data pages whose bytes are all zero. */
static int
is_zeroed(uint64_t page)
{
	return zero_every && !is_untouched(page) &&
	       page % zero_every == zero_every - 2;
}

/*
 * Paged out in whole huge pages (512 of ours): hugetlb has no smaller
 * unit, and a THP paged out a 4 KiB page at a time is split, so that
 * none would be left to migrate.
 */
static int
out_in_huge_units(void)
{
	return is_hugetlb() || strcmp(kind, "thp") == 0;
}

/*
 * Paged out after writing: every pageout_every-th page, or huge page
 * where those go whole (out_in_huge_units).
 */
static int
is_pageout(uint64_t page)
{
	uint64_t unit = out_in_huge_units() ? page / 512 : page;

	return pageout_every && !is_untouched(page) && !is_zeroed(page) &&
	       unit % pageout_every == 0;
}

/* Read-only once written (--ro-pages): the middle of the region. */
static int
is_ro(uint64_t page)
{
	return page >= size / PS / 2 && page < size / PS / 2 + ro_pages;
}

static void
protect_ro(void)
{
	if (ro_pages &&
	    mprotect(mem + size / PS / 2 * PS, ro_pages * PS, PROT_READ) < 0) {
		perror("workload: mprotect");
		exit(1);
	}
}

static int
is_poke(uint64_t page)
{
	return poke_every && page % poke_every == 0;
}

/*
 * The --file of a private file mapping: filled with file_word() when empty
 * (the source comes first), and then only ever read.
 */
static int
open_file(void)
{
	int fd = open(file_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	uint64_t buf[WORDS];
	off_t len;

	if (fd < 0 || (len = lseek(fd, 0, SEEK_END)) < 0)
		return -1;
	if (len == 0) {
		for (uint64_t page = 0; page < size / PS; page++) {
			for (uint64_t w = 0; w < WORDS; w++)
				buf[w] = file_word(page, w);
			if (pwrite(fd, buf, PS, (off_t)(page * PS)) != PS) {
				close(fd);
				return -1;
			}
		}
		fsync(fd);
	} else if ((uint64_t)len != size) {
		fprintf(stderr, "workload: %s: %lld bytes, want %" PRIu64 "\n",
			file_path, (long long)len, size);
		exit(1);
	}
	return fd;
}

/* Whether --kind maps a file this process keeps a descriptor of. */
static int
map_kind_fd(void)
{
	return strcmp(kind, "memfd") == 0 || strcmp(kind, "tmpfs") == 0;
}

static int
drop_advice(void)
{
	return strcmp(kind, "shared") == 0 || strcmp(kind, "memfd") == 0 ||
			       strcmp(kind, "tmpfs") == 0
		       ? MADV_REMOVE
		       : MADV_DONTNEED;
}

/*
 * The region at BASE, of the --kind asked for: private anonymous, shared
 * anonymous, a memfd or a tmpfs file (unlinked at once), all mapped at the
 * same address in source and destination.
 */
static void
map_region(void)
{
	int flags = MAP_FIXED_NOREPLACE, fd = -1;

	if (strcmp(kind, "anon") == 0) {
		flags |= MAP_PRIVATE | MAP_ANONYMOUS;
	} else if (strcmp(kind, "hugetlb") == 0) {
		flags |= MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB;
	} else if (strcmp(kind, "hugetlb-shared") == 0) {
		flags |= MAP_SHARED | MAP_ANONYMOUS | MAP_HUGETLB;
	} else if (strcmp(kind, "file-private") == 0 && file_path) {
		fd = open_file();
		flags |= MAP_PRIVATE;
	} else if (strcmp(kind, "thp") == 0) {
		flags |= MAP_PRIVATE | MAP_ANONYMOUS;
	} else if (strcmp(kind, "shared") == 0) {
		flags |= MAP_SHARED | MAP_ANONYMOUS;
	} else if (strcmp(kind, "memfd") == 0) {
		fd = memfd_create("uffdd-workload", MFD_CLOEXEC);
		flags |= MAP_SHARED;
	} else if (strcmp(kind, "tmpfs") == 0) {
		char path[64];

		snprintf(path, sizeof(path), "/dev/shm/uffdd-workload-%d",
			 (int)getpid());
		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		unlink(path);
		flags |= MAP_SHARED;
	} else {
		fprintf(stderr,
			"workload: --kind %s: anon, thp, hugetlb, "
			"hugetlb-shared, shared, memfd, tmpfs or file-private "
			"(with --file)\n",
			kind);
		exit(2);
	}
	if (fd >= 0 && !file_path && ftruncate(fd, (off_t)size) < 0) {
		perror("workload: ftruncate");
		exit(1);
	}
	if (flags & MAP_ANONYMOUS)
		fd = -1;
	else if (fd < 0) {
		perror("workload: backing file");
		exit(1);
	}
	mem = mmap((void *)base, size, PROT_READ | PROT_WRITE, flags, fd, 0);
	if (mem == MAP_FAILED || (uint64_t)mem != base) {
		fprintf(stderr,
			"workload: mmap 0x%" PRIx64 "+0x%" PRIx64 ": %s\n",
			base, size, strerror(errno));
		exit(1);
	}
	map_fd = fd; /* kept: --event punch */
	if (strcmp(kind, "thp") == 0)
		madvise(mem, size, MADV_HUGEPAGE);
}

/*
 * Pages swapped out now. Anonymous memory says so in pagemap; shared memory
 * does not (the gap uffdd works around), so count written pages that
 * mincore reports not resident instead.
 */
static uint64_t
count_swapped(void)
{
	uint64_t n = 0, npages = size / PS, buf[512];
	int fd;

	if (strcmp(kind, "anon") != 0 && strcmp(kind, "thp") != 0 &&
	    strcmp(kind, "file-private") != 0) {
		unsigned char *vec = malloc(npages);

		if (vec == NULL || mincore(mem, size, vec) < 0)
			return 0;
		for (uint64_t p = 0; p < npages; p++)
			n += is_pageout(p) && !(vec[p] & 1);
		free(vec);
		return n;
	}
	if ((fd = open("/proc/self/pagemap", O_RDONLY)) < 0)
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

/* --syscall-every: *p = v, stored by the kernel (read() from a pipe). */
static void
store_by_read(uint64_t *p, uint64_t v)
{
	static __thread int fds[2] = {-1, -1};
	ssize_t got;

	if (fds[0] < 0 && pipe(fds) < 0) {
		perror("pipe");
		exit(1);
	}
	if (write(fds[1], &v, sizeof(v)) != (ssize_t)sizeof(v) ||
	    (got = read(fds[0], p, sizeof(v))) != (ssize_t)sizeof(v)) {
		fprintf(stderr, "store by read() at %p: %s\n", (void *)p,
			strerror(errno));
		exit(3);
	}
}

static void *
mutator(void *arg)
{
	uint64_t r = mix((uint64_t)(uintptr_t)arg + seed), npages = size / PS;
	uint64_t hot = npages * hot_pct / 100 ? npages * hot_pct / 100 : 1;

	for (;;) {
		uint64_t page, w, *p, ver;

		if (pace_us)
			usleep(pace_us);
		r = mix(r);
		page = r % hot;
		if (discard_every && (r >> 16) % discard_every == 0 &&
		    npages > hot) {
			page = hot + (r >> 24) % (npages - hot);
			madvise(mem + page * PS, PS, drop_advice());
			continue;
		}
		if (is_untouched(page) || is_pageout(page) || is_zeroed(page) ||
		    is_ro(page))
			continue;
		w = (r >> 32) % WORDS;
		p = (uint64_t *)(mem + page * PS) + w;
		ver = ((*p >> 48) % 0xfff0) + 1;
		if (syscall_every && (r >> 8) % syscall_every == 0) {
			store_by_read(p, word_value(page, w, ver));
			continue;
		}
		__atomic_store_n(p, word_value(page, w, ver), __ATOMIC_RELAXED);
	}
	return NULL;
}

/*
 * --swap-on-usr2: the mapping at mem replaced in place, with no moment
 * unmapped (the mutators write on): a fresh memfd of the same name holding
 * valid words of its own, or the same file mapped again.
 */
static void
swap_mapping(void)
{
	int fd = map_fd;
	uint8_t *fill;

	if (strcmp(swap_how, "new") == 0) {
		fd = memfd_create("uffdd-workload", MFD_CLOEXEC);
		if (fd < 0 || ftruncate(fd, (off_t)size) < 0) {
			perror("workload: swap: memfd");
			exit(1);
		}
		fill = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
			    0);
		if (fill == MAP_FAILED) {
			perror("workload: swap: mmap");
			exit(1);
		}
		for (uint64_t page = 0; page < size / PS; page++)
			for (uint64_t w = 0; !is_untouched(page) &&
					     !is_zeroed(page) && w < WORDS;
			     w++)
				((uint64_t *)(fill + page * PS))[w] =
					word_value(page, w, SWAP_VER);
		munmap(fill, size);
	}
	if (mmap(mem, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
		 0) != mem) {
		perror("workload: swap: mmap MAP_FIXED");
		exit(1);
	}
	printf("swapped %s\n", swap_how);
	fflush(stdout);
}

/*
 * --bypass-on-usr2: cold pages written where a tracker of the mapping at
 * mem cannot see it (the file itself, or another mapping of it), with
 * words valid at a version of their own.
 */
static void
bypass_write(void)
{
	static uint8_t *other; /* the second mapping, kept: "map" */
	uint64_t npages = size / PS, hot = npages * hot_pct / 100, n = 0;
	uint64_t buf[WORDS];

	if (strcmp(bypass_how, "map") == 0 && other == NULL &&
	    (other = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED,
			  map_fd, 0)) == MAP_FAILED) {
		perror("workload: bypass: mmap");
		exit(1);
	}
	for (uint64_t page = hot; page < npages; page += 4) {
		if (is_untouched(page) || is_pageout(page) || is_zeroed(page) ||
		    is_ro(page))
			continue;
		for (uint64_t w = 0; w < WORDS; w++)
			buf[w] = word_value(page, w, BYPASS_VER);
		if (other != NULL)
			memcpy(other + page * PS, buf, PS);
		else if (pwrite(map_fd, buf, PS, (off_t)(page * PS)) != PS) {
			perror("workload: bypass: pwrite");
			exit(1);
		}
		n++;
	}
	printf("bypassed %s %" PRIu64 "\n", bypass_how, n);
	fflush(stdout);
}

static int
run_source(void)
{
	uint64_t npages = size / PS;
	pthread_t t;
	sigset_t set;
	int sig;

	map_region();
	for (uint64_t page = 0; page < npages; page++) {
		uint64_t *p = (uint64_t *)(mem + page * PS);

		if (is_untouched(page)) {
			/* Half the file's pages resident, half never read. */
			if (file_path && (page / untouched) % 2 == 0)
				(void)*(volatile uint64_t *)p;
			continue;
		}
		if (is_zeroed(page)) {
			memset(p, 0, PS);
			continue;
		}
		for (uint64_t w = 0; w < WORDS; w++)
			p[w] = word_value(page, w, 1);
	}
	protect_ro();
	if (pageout_every) {
		/*
		 * hugetlb never swaps; shared hugetlb pages that this process
		 * drops from its page tables keep their bytes in the page
		 * cache, which pagemap cannot see either.
		 */
		int advice = strcmp(kind, "hugetlb-shared") == 0 ? MADV_DONTNEED
								 : MADV_PAGEOUT;

		uint64_t unit = out_in_huge_units() ? 512 : 1;

		for (uint64_t page = 0; page < npages; page += unit)
			for (uint64_t p = page; p < page + unit; p++)
				if (is_pageout(p)) {
					madvise(mem + page * PS, unit * PS,
						advice);
					break;
				}
		printf("swapped %" PRIu64 "\n", count_swapped());
	}
	if (sibling)
		start_sibling();
	printf("ready 0x%" PRIx64 " 0x%" PRIx64 "\n", base, base + size);
	fflush(stdout);
	/* The mutators inherit the mask: SIGUSR2 is this thread's alone. */
	sigemptyset(&set);
	sigaddset(&set, SIGUSR2);
	if (swap_how || bypass_how)
		pthread_sigmask(SIG_BLOCK, &set, NULL);
	for (unsigned i = 0; i < threads; i++)
		pthread_create(&t, NULL, mutator, (void *)(uintptr_t)i);
	for (;;) {
		if (!swap_how && !bypass_how) {
			pause();
			continue;
		}
		if (sigwait(&set, &sig) != 0 || sig != SIGUSR2)
			continue;
		if (swap_how)
			swap_mapping();
		else
			bypass_write();
	}
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

/*
 * With --sigbus-ok a poisoned page (a page the migration lost) is counted
 * and skipped instead of killing the process, so the test can check that
 * every page it could read is right.
 */
static void
on_sigbus(int sig, siginfo_t *si, void *uc)
{
	if (!bus_armed)
		abort();
	siglongjmp(bus_jmp, 1);
}

static void check_page_guarded(uint64_t page);

static void
check_page(uint64_t page)
{
	if (pace_us)
		usleep(pace_us);
	if (!sigbus_ok) {
		check_page_guarded(page);
		return;
	}
	if (sigsetjmp(bus_jmp, 1)) {
		bus_armed = 0;
		atomic_fetch_add(&lost, 1);
		return;
	}
	bus_armed = 1;
	check_page_guarded(page);
	bus_armed = 0;
}

/*
 * --event punch: pages [ev0, ev0 + EV_PAGES) at `at` fetched, then a hole
 * punched there in the file (no uffd event). 0, or -1 with errno set.
 */
static int
punch_hole(uint8_t *at)
{
	for (uint64_t p = 0; p < EV_PAGES; p++)
		(void)*(volatile uint64_t *)(at + p * PS);
	if (map_fd < 0) {
		/* Shared anonymous: its shmem file, by name. */
		char mf[80];

		snprintf(mf, sizeof(mf),
			 "/proc/self/map_files/%" PRIx64 "-%" PRIx64, base,
			 base + size);
		map_fd = open(mf, O_RDWR | O_CLOEXEC);
	}
	return fallocate(map_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			 (off_t)(ev0 * PS), EV_PAGES * PS);
}

static int
in_event(uint64_t page)
{
	if (event && strcmp(event, "fork-punch") == 0)
		return page >= ev0 && page < ev0 + EV_PAGES;
	if (event && strcmp(event, "fork-remove") == 0)
		return in_child && page >= ev0 && page < ev0 + EV_PAGES;
	return event && strncmp(event, "fork", 4) != 0 &&
	       strcmp(event, "grow") != 0 && page >= ev0 &&
	       page < ev0 + EV_PAGES;
}

/* --event remove-storm's pages. */
static int
in_storm(uint64_t page)
{
	return event && strcmp(event, "remove-storm") == 0 && page % 4 == 1;
}

/* Drops page p and reads it back: 1 if the source's bytes were there. */
static int
drop_one(uint64_t p, uint8_t *dropped)
{
	volatile uint64_t *w = (volatile uint64_t *)(mem + p * PS);

	dropped[p / 4] = 1;
	if (madvise(mem + p * PS, PS, MADV_DONTNEED) < 0) {
		perror("workload: --event remove-storm");
		exit(1);
	}
	return w[0] != 0 || w[WORDS - 1] != 0;
}

/*
 * --event remove-storm: each page dropped alone, and read back at once:
 * the source's bytes there would be an install after the drop. Dropped
 * first where the bulk stream is about to install: just past the lowest
 * page not yet in (mincore), where frames are on their way; the rest
 * after.
 */
static int
remove_storm(void)
{
	uint64_t n = size / PS, front = 0;
	unsigned char *vec = malloc(n);
	uint8_t *dropped = calloc(n / 4 + 1, 1);
	unsigned long early = 0, near = 0, stuck = 0;

	if (vec == NULL || dropped == NULL)
		return -1;
	while (front < n) {
		uint64_t was = front;

		if (mincore(mem, size, vec) < 0)
			return -1;
		while (front < n && ((vec[front] & 1) ||
				     (front % 4 == 1 && dropped[front / 4])))
			front++;
		for (uint64_t p = front | 1; p < front + 256 && p < n; p += 4)
			if (p % 4 == 1 && !dropped[p / 4]) {
				early += (unsigned long)drop_one(p, dropped);
				near++;
			}
		/* A page that does not come in: past it, after a while. */
		stuck = front == was ? stuck + 1 : 0;
		if (stuck > 1000)
			front++;
	}
	for (uint64_t p = 1; p < n; p += 4)
		if (!dropped[p / 4])
			early += (unsigned long)drop_one(p, dropped);
	printf("storm: %lu pages read back the source's bytes (%lu dropped "
	       "at the stream's front)\n",
	       early, near);
	fflush(stdout);
	atomic_fetch_add(&mismatches, early);
	free(vec);
	free(dropped);
	return 0;
}

static void
check_page_guarded(uint64_t page)
{
	volatile uint64_t *p = (volatile uint64_t *)(mem + page * PS);
	int removed = (in_event(page) && (strcmp(event, "remove") == 0 ||
					  strncmp(event, "punch", 5) == 0 ||
					  strcmp(event, "fork-punch") == 0 ||
					  strcmp(event, "fork-remove") == 0)) ||
		      in_storm(page);

	if (in_event(page) && strcmp(event, "unmap") == 0) {
		atomic_fetch_add(&checked, 1);
		return;
	}
	if (in_event(page) && strcmp(event, "remap") == 0)
		p = (volatile uint64_t *)(moved_at + (page - ev0) * PS);

	if (is_poke(page)) /* a write before the page arrives */
		p[POKE_WORD] = POKE_TAG << 48 | page;
	for (uint64_t w = 0; w < WORDS; w++) {
		uint64_t v = p[w], want;

		if (is_poke(page) && w == POKE_WORD)
			want = POKE_TAG << 48 | page;
		else if (is_untouched(page) && file_path)
			want = file_word(page, w);
		else if (is_untouched(page) || is_zeroed(page) || removed)
			want = 0;
		else
			want = word_value(page, w, v >> 48);
		if (v != want ||
		    (!is_untouched(page) && !is_zeroed(page) && !removed &&
		     v >> 48 == 0 && !(is_poke(page) && w == POKE_WORD)))
			report(page, w, v, want);
	}
	atomic_fetch_add(&checked, 1);
}

/*
 * Thread t checks the pages with index % threads == t, even threads walking
 * up and odd ones down, so faults land all over the region at once.
 */
static pid_t checker_tid[1024];

static void *
checker(void *arg)
{
	uint64_t t = (uintptr_t)arg, npages = size / PS;

	if (t < 1024)
		checker_tid[t] = (pid_t)syscall(SYS_gettid);
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
	uint64_t *at = calloc(touch_n ? touch_n : 1, sizeof(*at));

	for (uint64_t i = 0; i < touch_n; i++) {
		volatile uint64_t *p;
		unsigned char vec = 0;
		uint64_t page, t0;

		if (touch_mode == 2) {
			p = (volatile uint64_t *)(mem + i * PS);
			t0 = now_ns();
			(void)*p;
			if (now_ns() - t0 > SCAN_FAULT_NS) {
				at[nlat] = t0;
				lat[nlat++] = now_ns() - t0;
			}
			continue;
		}
		r = mix(r);
		page = r % npages;
		p = (volatile uint64_t *)(mem + page * PS);
		if (mincore((void *)p, PS, &vec) == 0 && (vec & 1))
			continue; /* already installed: no fault to time */
		t0 = now_ns();
		(void)*p;
		at[nlat] = t0;
		lat[nlat++] = now_ns() - t0;
	}
	if (getenv("WORKLOAD_LAT_DIR")) {
		/* Every latency, for looking into the tail (bench). */
		cpu_set_t cs;
		char path[512], name[16] = "free";
		FILE *f;

		/* Named by placement: cpuN where pinned to CPU N, else free. */
		if (sched_getaffinity(0, sizeof(cs), &cs) == 0 &&
		    CPU_COUNT(&cs) == 1)
			for (int c = 0; c < CPU_SETSIZE; c++)
				if (CPU_ISSET(c, &cs))
					snprintf(name, sizeof(name), "cpu%d",
						 c);
		snprintf(path, sizeof(path), "%s/%s-%" PRIu64 "M.lat",
			 getenv("WORKLOAD_LAT_DIR"), name, size >> 20);
		if ((f = fopen(path, "a")) != NULL) {
			for (uint64_t i = 0; i < nlat; i++)
				fprintf(f, "%" PRIu64 " %" PRIu64 "\n", lat[i],
					at[i]);
			fprintf(f, "-\n");
			fclose(f);
		}
	}
	qsort(lat, nlat, sizeof(*lat), cmp_u64);
	printf("touched %" PRIu64 " faults %" PRIu64
	       " p50_us %.1f p99_us %.1f\n",
	       touch_n, nlat, nlat ? (double)lat[nlat / 2] / 1e3 : 0.0,
	       nlat ? (double)lat[nlat * 99 / 100] / 1e3 : 0.0);
	fflush(stdout);
	free(lat);
	free(at);
}

static void *
stuck(void *arg)
{
	(void)arg;
	if (vfork() == 0) {
		/* Shares our memory: only system calls until it dies. */
		for (;;)
			syscall(SYS_pause);
	}
	return NULL;
}

/* --try-uffd: what a target could do with a userfaultfd it was given. */
static void
uffd_attempt(void)
{
	struct uffdio_api api = {.api = UFFD_API};
	int fds = 0, registered = 0, dev;
	long sys;
	char *own = mmap(NULL, PS, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	const char *sys_err, *dev_err;

	for (int fd = 0; fd < 1024; fd++) {
		char path[64], link[128];
		ssize_t n;
		struct uffdio_register r = {
			.range = {(unsigned long)own, PS},
			.mode = UFFDIO_REGISTER_MODE_MISSING};

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n = readlink(path, link, sizeof(link) - 1);
		if (n < 0 || (link[n] = '\0', !strstr(link, "userfaultfd")))
			continue;
		fds++;
		ioctl(fd, UFFDIO_API, &api); /* may fail: done once already */
		if (ioctl(fd, UFFDIO_REGISTER, &r) == 0)
			registered++;
	}
	sys = syscall(SYS_userfaultfd, O_CLOEXEC);
	sys_err = sys >= 0 ? "ok" : strerror(errno);
	dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
	dev_err = dev >= 0 ? "ok" : strerror(errno);
	printf("uffd-attempt: fds %d, registered %d, syscall %s, device %s\n",
	       fds, registered, sys_err, dev_err);
	fflush(stdout);
}

/*
 * --sibling files-grab: what a helper sharing our file table would do to
 * a descriptor the daemon hands us: look at the table all the time and
 * keep a copy of any /dev/userfaultfd it finds there.
 */
static void
grab_devices(void)
{
	char path[64], link[64];

	for (;;) {
		for (int fd = 0; fd < 1024; fd++) {
			ssize_t n;

			snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
			n = readlink(path, link, sizeof(link) - 1);
			if (n <= 0)
				continue;
			link[n] = '\0';
			if (strcmp(link, "/dev/userfaultfd") == 0 &&
			    dup(fd) >= 0) {
				printf("grabbed /dev/userfaultfd\n");
				fflush(stdout);
			}
		}
		usleep(50);
	}
}

/*
 * --sibling holder: a process of its own (no memory or files shared) that
 * maps the same shared memory, moved HOLDER_SHIFT up, and never writes
 * it: the holder of a guest's RAM that QEMU writes, in small.
 */
#define HOLDER_SHIFT 0x10000000000ULL

static void
hold_moved(void)
{
	void *to = (void *)(uintptr_t)(base + HOLDER_SHIFT);

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (mremap(mem, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, to) != to) {
		perror("workload: holder: mremap");
		exit(1);
	}
}

static int
sibling_main(void *arg)
{
	if (strcmp(sibling, "files-grab") == 0)
		grab_devices();
	if (strcmp(sibling, "holder") == 0)
		hold_moved();
	for (;;)
		pause();
	return 0;
}

/* --sibling: a process sharing our memory or files, not our thread. */
static void
start_sibling(void)
{
	static char stack[64 << 10];
	int flags = strcmp(sibling, "vm") == 0	     ? CLONE_VM
		    : strcmp(sibling, "holder") == 0 ? 0
						     : CLONE_FILES;
	pid_t p = clone(sibling_main, stack + sizeof(stack), flags | SIGCHLD,
			NULL);

	if (p < 0) {
		perror("workload: clone");
		exit(1);
	}
	printf("sibling %d\n", (int)p);
	fflush(stdout);
}

static atomic_uint bench_seen;

static void
on_bench(int sig)
{
	atomic_fetch_add(&bench_seen, 1);
}

/* --signal-bench: n signals to ourselves, each handled before the next. */
static void
bench_signals(const char *when)
{
	struct sigaction sa = {.sa_handler = on_bench};
	struct timespec a, b;

	sigaction(SIGURG, &sa, NULL);
	atomic_store(&bench_seen, 0);
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (unsigned i = 0; i < signal_bench; i++)
		raise(SIGURG);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("signals %s %u us_each %.2f\n", when, atomic_load(&bench_seen),
	       ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3 /
		       (signal_bench ? signal_bench : 1));
	fflush(stdout);
}

static int
run_dest(void)
{
	uint64_t npages = size / PS;
	pthread_t *ts;
	sigset_t set;
	int sig;

	map_region();
	if (sigbus_ok) {
		struct sigaction sa = {.sa_sigaction = on_sigbus,
				       .sa_flags = SA_SIGINFO | SA_NODEFER};

		sigaction(SIGBUS, &sa, NULL);
	}
	if (prefault) /* resident garbage that attach must discard */
		for (uint64_t page = 0; page < npages; page += 7)
			memset(mem + page * PS, 0xa5, PS);
	if (idle_child) {
		pid_t c;

		memset(mem, 0xa5, size);
		if ((c = fork()) < 0) {
			perror("workload: fork");
			return 1;
		}
		if (c == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			for (;;)
				pause();
		}
	}
	if (stuck_thread) {
		pthread_t t;

		pthread_create(&t, NULL, stuck, NULL);
	}
	protect_ro();
	if (sibling)
		start_sibling();
	if (signal_bench)
		bench_signals("before");
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGUSR2);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	printf("ready 0x%" PRIx64 " 0x%" PRIx64 "\n", base, base + size);
	fflush(stdout);
	do {
		sigwait(&set, &sig);
		if (sig == SIGTERM)
			return 2;
		if (sig == SIGUSR2 && exec_path) {
			pthread_sigmask(SIG_UNBLOCK, &set, NULL);
			execv(exec_path, saved_argv);
			perror("workload: execv");
			return 1;
		}
	} while (sig != SIGUSR1);
	if (try_uffd)
		uffd_attempt();
	if (signal_bench)
		bench_signals("during");
	if (event && strncmp(event, "fork", 4) == 0) {
		/*
		 * The child checks every page too, with its own threads, while
		 * most are still missing in both processes.
		 */
		pid_t c;

		if (strcmp(event, "fork-punch") == 0 &&
		    punch_hole(mem + ev0 * PS) < 0) {
			perror("workload: --event fork-punch");
			return 1;
		}
		c = fork();

		if (c < 0) {
			perror("workload: fork");
			return 1;
		}
		if (c == 0) {
			in_child = 1;
			if (strcmp(event, "fork-remove") == 0) {
				if (madvise(mem + ev0 * PS, EV_PAGES * PS,
					    MADV_DONTNEED) < 0) {
					perror("workload: child madvise");
					_exit(1);
				}
				sleep(4);
			}
			if (strcmp(event, "fork-idle") == 0 ||
			    strncmp(event, "fork-exit", 9) == 0) {
				printf("child %d\n", (int)getpid());
				fflush(stdout);
				do {
					sigwait(&set, &sig);
					if (sig == SIGTERM)
						_exit(2);
				} while (sig != SIGUSR1);
			}
			ts = calloc(threads, sizeof(*ts));
			for (unsigned i = 0; i < threads; i++)
				pthread_create(&ts[i], NULL, checker,
					       (void *)(uintptr_t)i);
			for (unsigned i = 0; i < threads; i++)
				pthread_join(ts[i], NULL);
			printf("child verified %lu pages, %lu mismatches\n",
			       (unsigned long)atomic_load(&checked),
			       (unsigned long)atomic_load(&mismatches));
			fflush(stdout);
			_exit(atomic_load(&mismatches) ? 1 : 0);
		}
		if (strcmp(event, "fork-exit-late") == 0)
			do
				sigwait(&set, &sig);
			while (sig != SIGUSR2 && sig != SIGTERM);
		if (strncmp(event, "fork-exit", 9) == 0)
			_exit(0);
		/* The child reads the hole first, then the parent. */
		if (strcmp(event, "fork-punch") == 0)
			waitpid(c, NULL, 0);
	} else if (event) {
		uint8_t *at = mem + ev0 * PS;
		int rc = 0;

		if (strcmp(event, "remove") == 0)
			rc = madvise(at, EV_PAGES * PS,
				     strcmp(kind, "anon") == 0 ? MADV_DONTNEED
							       : MADV_REMOVE);
		else if (strcmp(event, "remove-storm") == 0)
			rc = remove_storm();
		else if (strcmp(event, "unmap") == 0)
			rc = munmap(at, EV_PAGES * PS);
		else if (strncmp(event, "punch", 5) == 0)
			rc = punch_hole(at);
		else if (strcmp(event, "grow") == 0) {
			rc = mremap(mem, size, size + EV_PAGES * PS, 0) ==
					     MAP_FAILED
				     ? -1
				     : 0;
			for (uint64_t p = 0; rc == 0 && p < EV_PAGES; p++)
				if (*(volatile uint64_t *)(mem + size +
							   p * PS) != 0)
					report(size / PS + p, 0, 1, 0);
			printf("grown\n");
			fflush(stdout);
		} else if (strcmp(event, "protect") == 0)
			rc = mprotect(at + 7 * PS, (EV_PAGES - 14) * PS,
				      PROT_READ);
		else if (strcmp(event, "remap") == 0) {
			moved_at =
				mremap(at, EV_PAGES * PS, EV_PAGES * PS,
				       MREMAP_MAYMOVE | MREMAP_FIXED,
				       (void *)(base + size + (64ULL << 20)));
			rc = moved_at == MAP_FAILED ? -1 : 0;
		}
		if (rc < 0) {
			fprintf(stderr, "workload: --event %s: %s\n", event,
				strerror(errno));
			return 1;
		}
		/*
		 * The split only matters to frames of the bulk lane: let it
		 * reach the range (at 4 MiB/s, a quarter into 32 MiB) before
		 * the checkers fetch its pages one by one.
		 */
		if (strcmp(event, "protect") == 0)
			sleep(4);
		if (strcmp(event, "punch-wait") == 0) {
			printf("punched\n");
			fflush(stdout);
			do {
				sigwait(&set, &sig);
				if (sig == SIGTERM)
					return 2;
			} while (sig != SIGUSR2);
		}
	}
	if (touch_mode) {
		if (touch_mode == 2)
			touch_n = size / PS;
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
	printf("tids");
	for (unsigned i = 0; i < threads && i < 1024; i++)
		printf(" %d", (int)checker_tid[i]);
	printf("\nverified %lu pages, %lu mismatches, %lu lost\n",
	       (unsigned long)atomic_load(&checked),
	       (unsigned long)atomic_load(&mismatches),
	       (unsigned long)atomic_load(&lost));
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
		"         [--poke-every K] [--prefault] [--sigbus-ok] "
		"[--pace-us N] [--hot PCT]\n"
		"         [--discard-every K] [--syscall-every K]\n"
		"         [--kind anon|thp|hugetlb|hugetlb-shared|shared|memfd|"
		"tmpfs|\n"
		"                 file-private --file PATH] [--zero-every K]\n"
		"         [--ro-pages N]\n"
		"         [--event "
		"remove|unmap|remap|fork|fork-remove|fork-idle|fork-exit|\n"
		"                  "
		"fork-exit-late|protect|punch|punch-wait|fork-punch|grow]\n"
		"         [--touch N] [--idle-child] [--stuck-thread]\n"
		"         [--exec-on-usr2 PATH] [--try-uffd] [--sibling "
		"vm|files|files-grab|holder]\n"
		"         [--signal-bench N] [--swap-on-usr2 new|same]\n"
		"         [--bypass-on-usr2 pwrite|map]\n");
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
		{"idle-child", no_argument, NULL, 'I'},
		{"stuck-thread", no_argument, NULL, 'V'},
		{"sigbus-ok", no_argument, NULL, 'B'},
		{"pace-us", required_argument, NULL, 'D'},
		{"hot", required_argument, NULL, 'H'},
		{"discard-every", required_argument, NULL, 'J'},
		{"syscall-every", required_argument, NULL, 'Q'},
		{"kind", required_argument, NULL, 'K'},
		{"zero-every", required_argument, NULL, 'Z'},
		{"event", required_argument, NULL, 'E'},
		{"touch", required_argument, NULL, 'T'},
		{"file", required_argument, NULL, 'F'},
		{"ro-pages", required_argument, NULL, 'R'},
		{"exec-on-usr2", required_argument, NULL, 'X'},
		{"try-uffd", no_argument, NULL, 'U'},
		{"sibling", required_argument, NULL, 'L'},
		{"signal-bench", required_argument, NULL, 'G'},
		{"swap-on-usr2", required_argument, NULL, 'W'},
		{"bypass-on-usr2", required_argument, NULL, 'Y'},
		{NULL, 0, NULL, 0}};
	int ch;

	saved_argv = argv;
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
		case 'I':
			idle_child = 1;
			break;
		case 'V':
			stuck_thread = 1;
			break;
		case 'P':
			prefault = 1;
			break;
		case 'B':
			sigbus_ok = 1;
			break;
		case 'J':
			discard_every = (unsigned)atoi(optarg);
			break;
		case 'Q':
			syscall_every = (unsigned)atoi(optarg);
			break;
		case 'H':
			hot_pct = (unsigned)atoi(optarg);
			if (hot_pct == 0 || hot_pct > 100)
				hot_pct = 100;
			break;
		case 'D':
			pace_us = (unsigned)atoi(optarg);
			break;
		case 'K':
			kind = optarg;
			break;
		case 'Z':
			zero_every = (unsigned)atoi(optarg);
			break;
		case 'E':
			event = optarg;
			if (strcmp(event, "remove") && strcmp(event, "unmap") &&
			    strcmp(event, "remap") && strcmp(event, "fork") &&
			    strcmp(event, "fork-remove") &&
			    strcmp(event, "fork-idle") &&
			    strcmp(event, "fork-exit") &&
			    strcmp(event, "fork-exit-late") &&
			    strcmp(event, "protect") &&
			    strcmp(event, "punch") &&
			    strcmp(event, "punch-wait") &&
			    strcmp(event, "fork-punch") &&
			    strcmp(event, "remove-storm") &&
			    strcmp(event, "grow"))
				usage();
			break;
		case 'F':
			file_path = optarg;
			break;
		case 'R':
			ro_pages = strtoull(optarg, NULL, 0);
			break;
		case 'X':
			exec_path = optarg;
			break;
		case 'U':
			try_uffd = 1;
			break;
		case 'L':
			sibling = optarg;
			if (strcmp(sibling, "vm") && strcmp(sibling, "files") &&
			    strcmp(sibling, "files-grab") &&
			    strcmp(sibling, "holder"))
				usage();
			break;
		case 'G':
			signal_bench = (unsigned)atoi(optarg);
			break;
		case 'W':
			swap_how = optarg;
			if (strcmp(swap_how, "new") && strcmp(swap_how, "same"))
				usage();
			break;
		case 'Y':
			bypass_how = optarg;
			if (strcmp(bypass_how, "pwrite") &&
			    strcmp(bypass_how, "map"))
				usage();
			break;
		case 'T':
			touch_n = strtoull(optarg, NULL, 0);
			touch_mode = 1;
			if (strcmp(optarg, "scan") == 0)
				touch_mode = 2;
			break;
		default:
			usage();
		}
	}
	if (size == 0 || size % PS || base % PS || threads == 0 ||
	    ro_pages > size / PS / 2 ||
	    (swap_how && strcmp(kind, "memfd") != 0) ||
	    (bypass_how && (swap_how || map_kind_fd() == 0)))
		usage();
	ev0 = size / PS / 4;
	if (event && ev0 + EV_PAGES > size / PS)
		usage();
	if (strcmp(argv[1], "source") == 0)
		return run_source();
	if (strcmp(argv[1], "dest") == 0)
		return run_dest();
	usage();
	return 2;
}

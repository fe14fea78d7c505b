/*
 * Source-side page classification (docs/design.md): which pages of a region
 * hold data (present or swapped out) and which were never populated.
 */
#ifndef UFFDD_PAGEMAP_H
#define UFFDD_PAGEMAP_H

#include <stdint.h>
#include <string.h>
#include <sys/types.h>

/* A plain bit array, one bit a page. */
static inline int
bit_test(const uint64_t *b, uint64_t i)
{
	return (b[i >> 6] >> (i & 63)) & 1;
}

static inline void
bit_set(uint64_t *b, uint64_t i)
{
	b[i >> 6] |= 1ULL << (i & 63);
}

static inline void
bit_clear(uint64_t *b, uint64_t i)
{
	b[i >> 6] &= ~(1ULL << (i & 63));
}

static inline uint64_t
bit_words(uint64_t n)
{
	return (n + 63) / 64;
}

/*
 * Sets bits [from, to): the words between the ends at once, so that a run
 * of pages costs its words, not its pages (an image's run is one record
 * however long).
 */
static inline void
bit_set_range(uint64_t *b, uint64_t from, uint64_t to)
{
	uint64_t fw = from >> 6, lw, head, tail;

	if (from >= to)
		return;
	lw = (to - 1) >> 6;
	head = ~0ULL << (from & 63);
	tail = ~0ULL >> (63 - ((to - 1) & 63));
	if (fw == lw) {
		b[fw] |= head & tail;
		return;
	}
	b[fw] |= head;
	memset(b + fw + 1, 0xff, (size_t)(lw - fw - 1) * sizeof(*b));
	b[lw] |= tail;
}

enum pagemap_method {
	PAGEMAP_READ,	    /* batched pread of /proc/PID/pagemap */
	PAGEMAP_SCAN_IOCTL, /* the PAGEMAP_SCAN ioctl, 6.7+ */
};

/* The method the daemon uses: PAGEMAP_SCAN when probed and not disabled. */
enum pagemap_method pagemap_method(void);
extern int pagemap_force_read;

/*
 * Sets bit i of `data` (bit_words(npages) words, zeroed by the caller) for
 * each page of [start, start + npages * page_size) that holds data: present
 * or swapped out. Returns the number of data pages, or -1 with errno set.
 */
int64_t pagemap_classify(pid_t pid, uint64_t start, uint64_t npages,
			 uint64_t page_size, uint64_t *data,
			 enum pagemap_method how);

/*
 * The same for a private file mapping (4 KiB pages): only the pages the
 * process wrote (anonymous copies, resident or swapped out) hold data.
 */
int64_t pagemap_classify_cow(pid_t pid, uint64_t start, uint64_t npages,
			     uint64_t *data, enum pagemap_method how);

/*
 * The same for shared memory, from its backing file (fd) at file offset
 * off: allocated pages hold data, holes are ZERO.
 */
int64_t pagemap_classify_file(int fd, uint64_t off, uint64_t npages,
			      uint64_t page_size, uint64_t *data);

/*
 * The same for shared memory on a kernel whose pagemap reports swapped-out
 * shmem (kfeat.shmem_pm_swap): pagemap first, the backing file only for the
 * pages pagemap reports as none, or as swapped with the uffd-wp bit (which
 * a write tracker's marker on a page never touched, or punched, shows too).
 */
int64_t pagemap_classify_shmem(pid_t pid, uint64_t start, int fd, uint64_t off,
			       uint64_t npages, uint64_t page_size,
			       uint64_t *data);
/*
 * The same through another process's shared mapping of that file part at
 * start, by PAGEMAP_SCAN on its pagemap descriptor: a page present there
 * is the file's data, on any kernel; the file decides the rest (a
 * swapped report there may be a write tracker's marker on a hole), and
 * only the pages with a care bit: the others are left without a data bit
 * (care NULL: every page is decided). Cheaper
 * than the file alone where that process maps most of the data (the file
 * is walked page by page, the page tables by PAGEMAP_SCAN).
 */
int64_t pagemap_classify_mapped(int pagemap, uint64_t start, int fd,
				uint64_t off, uint64_t npages,
				uint64_t page_size, uint64_t *data,
				const uint64_t *care);

/* The first bit equal to `want` at or after `from` below n; n if none. */
static inline uint64_t
bit_next(const uint64_t *b, uint64_t from, uint64_t n, int want)
{
	uint64_t flip = want ? 0 : ~0ULL;

	while (from < n) {
		uint64_t w = (b[from >> 6] ^ flip) >> (from & 63);

		if (w) {
			from += (uint64_t)__builtin_ctzll(w);
			return from < n ? from : n;
		}
		from = (from | 63) + 1;
	}
	return n;
}

/* The first clear bit at or after `from` below n; n when there is none. */
static inline uint64_t
bit_next_clear(const uint64_t *b, uint64_t from, uint64_t n)
{
	return bit_next(b, from, n, 0);
}

/* The first set bit at or after `from` below n; n when there is none. */
static inline uint64_t
bit_next_set(const uint64_t *b, uint64_t from, uint64_t n)
{
	return bit_next(b, from, n, 1);
}

#endif

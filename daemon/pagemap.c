/*
 * Classification of anonymous pages: PAGEMAP_SCAN (6.7+) returns ranges of
 * present or swapped pages in one call; the fallback reads
 * /proc/PID/pagemap in large batches. Both fill the same bit array.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "daemon/compat.h"
#include "daemon/pagemap.h"
#include "daemon/procfile.h"

/*
 * 8-byte reads cost 50x more than 8 KiB ones (measured on 6.18: 1.0 s vs
 * 20 ms for 4 GiB half touched); 64 KiB batches sit well on the flat part of that curve.
 */
#define PAGEMAP_BATCH 8192
/* Ranges one PAGEMAP_SCAN call may return before we go round again. */
#define SCAN_VEC 4096

/*
 * What a classification counts as data. CL_ANON_ONLY: anonymous pages
 * only (a private file mapping's own pages). CL_MARKERS: shared memory
 * under a write tracker, whose none entries may hold uffd-wp markers,
 * which pagemap reports as swapped (a swap-type entry) whether or not the
 * file holds the page: only a present page is data then, or a swapped one
 * without the uffd-wp bit; the backing file decides the rest.
 */
#define CL_ANON_ONLY 1
#define CL_MARKERS 2

static int
open_pagemap(pid_t pid)
{
	return procfile_pagemap(pid);
}

static int64_t
classify_read(int fd, uint64_t start, uint64_t npages, uint64_t page_size,
	      uint64_t *data, int flags)
{
	uint64_t skip = flags & CL_ANON_ONLY ? PM_FILE : 0;
	uint64_t *ent, done = 0;
	int64_t count = 0;

	if ((ent = malloc(PAGEMAP_BATCH * sizeof(*ent))) == NULL)
		return -1;
	while (done < npages) {
		uint64_t want = npages - done;
		off_t off = (off_t)((start / page_size + done) * sizeof(*ent));
		ssize_t r;

		if (want > PAGEMAP_BATCH)
			want = PAGEMAP_BATCH;
		r = pread(fd, ent, want * sizeof(*ent), off);
		if (r <= 0 || r % (ssize_t)sizeof(*ent)) {
			if (r >= 0)
				errno = EIO;
			count = -1;
			break;
		}
		for (uint64_t i = 0; i < (uint64_t)r / sizeof(*ent); i++) {
			uint64_t e = ent[i];

			if ((flags & CL_MARKERS) && (e & PM_UFFD_WP))
				e &= ~PM_SWAP;
			if ((e & (PM_PRESENT | PM_SWAP)) && !(e & skip)) {
				bit_set(data, done + i);
				count++;
			}
		}
		done += (uint64_t)r / sizeof(*ent);
	}
	free(ent);
	return count;
}

/*
 * On 6.18 walk_end can lag behind what was returned (seen here): resuming
 * there would report ranges twice, so resume past the last range returned.
 * A call that returns fewer ranges than it had room for walked to the end.
 */
static int64_t
classify_scan(int fd, uint64_t start, uint64_t npages, uint64_t page_size,
	      uint64_t *data, int flags)
{
	uint64_t skip = flags & CL_ANON_ONLY ? PAGE_IS_FILE : 0;
	uint64_t any = flags & CL_MARKERS ? PAGE_IS_PRESENT
					  : PAGE_IS_PRESENT | PAGE_IS_SWAPPED;
	struct page_region *vec = malloc(SCAN_VEC * sizeof(*vec));
	uint64_t end = start + npages * page_size, at = start;
	int64_t count = 0;

	if (vec == NULL)
		return -1;
	while (at < end) {
		struct pm_scan_arg a = {
			.size = sizeof(a),
			.start = at,
			.end = end,
			.vec = (uint64_t)(uintptr_t)vec,
			.vec_len = SCAN_VEC,
			/* CL_ANON_ONLY: FILE inverted and required: not. */
			.category_inverted = skip,
			.category_mask = skip,
			.category_anyof_mask = any,
			.return_mask = any,
		};
		long n = ioctl(fd, PAGEMAP_SCAN, &a);

		if (n < 0) {
			count = -1;
			break;
		}
		for (long i = 0; i < n; i++) {
			uint64_t s =
				vec[i].start < start ? start : vec[i].start;
			uint64_t e = vec[i].end > end ? end : vec[i].end;

			for (uint64_t p = (s - start) / page_size;
			     p < (e - start) / page_size; p++) {
				if (!bit_test(data, p)) {
					bit_set(data, p);
					count++;
				}
			}
		}
		if (n < SCAN_VEC)
			break;
		at = a.walk_end > vec[n - 1].end ? a.walk_end : vec[n - 1].end;
	}
	free(vec);
	return count;
}

/*
 * Sets the data bits of pages [from, to) of a shared region from its backing
 * file (page p at file offset off + p * page_size): every page that holds
 * data, resident or swapped, is allocated; a never-touched page is a hole.
 * Returns the number of bits it set.
 */
static int64_t
classify_file_range(int fd, uint64_t off, uint64_t from, uint64_t to,
		    uint64_t page_size, uint64_t *data)
{
	uint64_t end = off + to * page_size, at = off + from * page_size;
	int64_t count = 0;

	while (at < end) {
		off_t d = lseek(fd, (off_t)at, SEEK_DATA), h;

		if (d < 0 && errno == ENXIO)
			break; /* only holes from here to EOF */
		if (d < 0)
			return -1;
		if ((uint64_t)d >= end)
			break;
		h = lseek(fd, d, SEEK_HOLE);
		if (h < 0)
			return -1;
		if ((uint64_t)h > end)
			h = (off_t)end;
		for (uint64_t p = ((uint64_t)d - off) / page_size;
		     p < ((uint64_t)h - off + page_size - 1) / page_size; p++) {
			if (!bit_test(data, p)) {
				bit_set(data, p);
				count++;
			}
		}
		at = (uint64_t)h;
	}
	return count;
}

/*
 * Shared memory cannot be classified from an unpatched pagemap: a
 * swapped-out shmem page reads as an all-zero entry, exactly like a page
 * never touched (still so on 6.18), and trusting it loses data
 * silently. The backing file knows.
 */
int64_t
pagemap_classify_file(int fd, uint64_t off, uint64_t npages, uint64_t page_size,
		      uint64_t *data)
{
	return classify_file_range(fd, off, 0, npages, page_size, data);
}

/*
 * Where pagemap reports swapped-out shmem (kernel/ patch 0002, probed as
 * shmem_pm_swap), its PM_PRESENT and PM_SWAP entries are data without a
 * question to the file. A none entry is not yet a hole: it may be a page in
 * the page cache that this process never mapped, so the backing file
 * decides for the runs of none entries, and only for those.
 */
/*
 * The first page at or after from, below n, that is (want) or is not
 * (!want) undecided: no data bit, and a care bit (care NULL: all care).
 */
static uint64_t
next_undecided(const uint64_t *data, const uint64_t *care, uint64_t from,
	       uint64_t n, int want)
{
	while (from < n) {
		uint64_t i = from >> 6;
		uint64_t u = ~data[i] & (care ? care[i] : ~0ULL);
		uint64_t w = (want ? u : ~u) >> (from & 63);

		if (w) {
			from += (uint64_t)__builtin_ctzll(w);
			return from < n ? from : n;
		}
		from = (from | 63) + 1;
	}
	return n;
}

/* The undecided runs of pages [0, npages), decided by the file. */
static int64_t
none_by_file(int fd, uint64_t off, uint64_t npages, uint64_t page_size,
	     uint64_t *data, const uint64_t *care)
{
	int64_t count = 0;

	for (uint64_t p = next_undecided(data, care, 0, npages, 1);
	     p < npages;) {
		uint64_t q = next_undecided(data, care, p, npages, 0);
		int64_t n = classify_file_range(fd, off, p, q, page_size, data);

		if (n < 0)
			return -1;
		count += n;
		p = next_undecided(data, care, q, npages, 1);
	}
	return count;
}

int64_t
pagemap_classify_shmem(pid_t pid, uint64_t start, int fd, uint64_t off,
		       uint64_t npages, uint64_t page_size, uint64_t *data)
{
	int pm = open_pagemap(pid);
	int64_t count, more;

	if (pm < 0)
		return -1;
	count = classify_read(pm, start, npages, page_size, data, CL_MARKERS);
	close(pm);
	if (count < 0)
		return -1;
	more = none_by_file(fd, off, npages, page_size, data, NULL);
	return more < 0 ? -1 : count + more;
}

int64_t
pagemap_classify_mapped(int pagemap, uint64_t start, int fd, uint64_t off,
			uint64_t npages, uint64_t page_size, uint64_t *data,
			const uint64_t *care)
{
	int64_t count = classify_scan(pagemap, start, npages, page_size, data,
				      CL_MARKERS);
	int64_t more;

	if (count < 0)
		return -1;
	more = none_by_file(fd, off, npages, page_size, data, care);
	return more < 0 ? -1 : count + more;
}

/*
 * Huge pages (hugetlb) have one pagemap entry per 4 KiB like the rest; the
 * entry of a huge page's first subpage speaks for all of it.
 */
static int64_t
classify_read_huge(int fd, uint64_t start, uint64_t npages, uint64_t page_size,
		   uint64_t *data)
{
	uint64_t small = (uint64_t)sysconf(_SC_PAGESIZE), e;
	int64_t count = 0;

	for (uint64_t p = 0; p < npages; p++) {
		off_t off =
			(off_t)((start + p * page_size) / small * sizeof(e));

		if (pread(fd, &e, sizeof(e), off) != (ssize_t)sizeof(e))
			return -1;
		if (e & (PM_PRESENT | PM_SWAP)) {
			bit_set(data, p);
			count++;
		}
	}
	return count;
}

static int64_t
classify(pid_t pid, uint64_t start, uint64_t npages, uint64_t page_size,
	 uint64_t *data, enum pagemap_method how, int flags)
{
	int fd = open_pagemap(pid);
	int64_t n;

	if (fd < 0)
		return -1;
	if (how == PAGEMAP_SCAN_IOCTL)
		n = classify_scan(fd, start, npages, page_size, data, flags);
	else if (page_size != (uint64_t)sysconf(_SC_PAGESIZE))
		n = classify_read_huge(fd, start, npages, page_size, data);
	else
		n = classify_read(fd, start, npages, page_size, data, flags);
	close(fd);
	return n;
}

int64_t
pagemap_classify(pid_t pid, uint64_t start, uint64_t npages, uint64_t page_size,
		 uint64_t *data, enum pagemap_method how)
{
	return classify(pid, start, npages, page_size, data, how, 0);
}

/*
 * A private file mapping holds two kinds of page: the file's (page cache,
 * PM_FILE / PAGE_IS_FILE) and the anonymous copies the process made by
 * writing. Only the copies are the process's own data; a swap entry there
 * is always such a copy (file pages are dropped, never swapped).
 */
int64_t
pagemap_classify_cow(pid_t pid, uint64_t start, uint64_t npages, uint64_t *data,
		     enum pagemap_method how)
{
	return classify(pid, start, npages, (uint64_t)sysconf(_SC_PAGESIZE),
			data, how, CL_ANON_ONLY);
}

/*
 * The installer, the bottom of the destination's data path: a frame's
 * pages that a target lacks go in with UFFDIO_COPY or ZEROPAGE, and what
 * happened comes back (done, an event to read first, the target gone, or
 * refused with why). It reads no event and ends no migration itself: the
 * caller does (feed.c), so nothing here calls up.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "daemon/compat.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/migration.h"
#include "daemon/stats.h"

/*
 * hugetlb has no UFFDIO_ZEROPAGE: a zero huge page is copied from here,
 * an untouched mapping that reads as zeros, ZERO_SOURCE_LEN bytes long
 * (a whole number of every page size a region may have: frame.h).
 */
#define ZERO_SOURCE_LEN FRAME_DATA_MAX

/* The zero source, mapped at its first use. */
static const uint8_t *
zero_source(void)
{
	static void *z;

	if (z == NULL) {
		z = mmap(NULL, ZERO_SOURCE_LEN, PROT_READ,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (z == MAP_FAILED)
			fatal("zero buffer");
	}
	return z;
}

/*
 * Installs zeros at addr, the way the region's kind allows. hugetlb copies
 * them from the zero source, at most its length at a time: a longer copy
 * would put the daemon's own memory past its end into the target.
 */
enum uffd_res
dest_install_zero(struct dest *d, const struct dst_region *dr, uint64_t addr,
		  uint64_t len, uint64_t mode, uint64_t *done)
{
	enum uffd_res res = UFFD_OK;

	if (dr->r.kind != REGION_HUGETLB)
		return uffd_zeropage(d->uffd, addr, len, mode, done);
	if (dr->r.page_size > ZERO_SOURCE_LEN)
		fatalx("zero huge page of %u bytes at 0x%llx: larger than "
		       "the zero source (region_table_check() lets none in)",
		       dr->r.page_size, (unsigned long long)addr);
	*done = 0;
	while (res == UFFD_OK && *done < len) {
		uint64_t want = len - *done, got;

		if (want > ZERO_SOURCE_LEN)
			want = ZERO_SOURCE_LEN;
		res = uffd_copy(d->uffd, addr + *done, zero_source(), want,
				mode, &got);
		*done += got;
	}
	return res;
}

/*
 * An install at addr refused for good (errno says why): the target is
 * gone, or why it failed is kept for the caller (feed.c), which fails
 * the migration.
 */
static enum install_res
refused(struct install_try *it, enum uffd_res res, int zero, uint64_t addr)
{
	if (res == UFFD_GONE)
		return INSTALL_GONE;
	snprintf(it->why, sizeof(it->why), "%s at 0x%llx: %s",
		 zero ? "UFFDIO_ZEROPAGE" : "UFFDIO_COPY",
		 (unsigned long long)addr, strerror(errno));
	return INSTALL_FAILED;
}

/*
 * Installs a run of missing pages, handling each outcome the way the
 * errno map says (uffd.h, docs/design.md). *got: the pages this call
 * installed. INSTALL_DONE, or what stopped it (INSTALL_EVENTS: an event is
 * pending, and the page map may change once it is read).
 */
static enum install_res
install_run(struct dest *d, struct dst_region *dr, uint64_t page, uint64_t n,
	    const uint8_t *src, int zero, int likely, struct install_try *it,
	    uint64_t *got)
{
	uint64_t ps = dr->r.page_size, len = n * ps, off = 0, done;
	uint64_t addr = dest_page_addr(dr, page);
	int piecewise = 0;

	*got = 0;

	while (off < len) {
		/*
		 * A page a thread waits on will be touched at once: young PTE;
		 * a prefetched one may never be: old PTE, reclaimed first
		 * (docs/design.md). Only where the patched kernel has it.
		 */
		uint64_t mode =
			likely && d->hints ? UFFDIO_COPY_MODE_ACCESS_LIKELY : 0;
		uint64_t want = piecewise ? ps : len - off;
		enum uffd_res res =
			zero ? dest_install_zero(d, dr, addr + off, want, mode,
						 &done)
			     : uffd_copy(d->uffd, addr + off, src + off, want,
					 mode, &done);

		if (res == UFFD_FAIL && errno == EINVAL && mode) {
			/* This uffd was made without the feature: go on. */
			d->hints = 0;
			continue;
		}
		/*
		 * One install must stay inside one mapping, and the target
		 * may have split a region since (mprotect, madvise with
		 * flags: no event tells us): page by page, then.
		 */
		if (res == UFFD_FAIL && errno == ENOENT && done == 0 &&
		    !piecewise && want > ps) {
			piecewise = 1;
			continue;
		}
		if (mode && done)
			d->m->cnt.hinted_pages += done / ps;

		done -= done % ps;
		pagestate_set_present(&dr->ps, page + off / ps, done / ps);
		/* After the install, never before (record.c). */
		dest_record_mark(dr, page + off / ps, done / ps);
		*got += done / ps;
		off += done;
		switch (res) {
		case UFFD_OK:
			break;
		case UFFD_EXISTS:
			/* Present already: keep it, wake whoever waits. */
			pagestate_set_present(&dr->ps, page + off / ps, 1);
			dest_record_mark(dr, page + off / ps, 1);
			uffd_wake(d->uffd, addr + off, ps);
			off += ps;
			break;
		case UFFD_RETRY:
			/*
			 * A partial install goes on; otherwise an event is
			 * pending: read it, and let the caller look at the
			 * page map again, which the event may have changed.
			 */
			if (done == 0)
				return INSTALL_EVENTS;
			break;
		case UFFD_GONE:
		case UFFD_FAIL:
			return refused(it, res, zero, addr + off);
		}
	}
	return INSTALL_DONE;
}

/*
 * Where pages from byte off of a frame's data can be installed from: in
 * place, as many whole pages (at most max) as one extent of the input
 * buffer holds, or a page split between two extents gathered into d->buf.
 * Sets *src; returns the number of pages.
 */
uint64_t
dest_frame_pages(struct dest *d, const struct evbuffer_iovec *v, int nv,
		 uint64_t off, uint64_t ps, uint64_t max, const uint8_t **src)
{
	uint64_t at = 0, got = 0;
	int i;

	for (i = 0; i < nv && off >= at + v[i].iov_len; i++)
		at += v[i].iov_len;
	if (i == nv)
		fatalx("dest_frame_pages: offset %llu past the frame",
		       (unsigned long long)off);
	if (at + v[i].iov_len - off >= ps) {
		uint64_t k = (at + v[i].iov_len - off) / ps;

		*src = (const uint8_t *)v[i].iov_base + (off - at);
		return k < max ? k : max;
	}
	for (uint64_t from = off - at; i < nv && got < ps; i++, from = 0) {
		uint64_t l = v[i].iov_len - from;

		if (l > ps - got)
			l = ps - got;
		memcpy(d->in.buf + got, (const uint8_t *)v[i].iov_base + from,
		       l);
		got += l;
	}
	*src = d->in.buf;
	return 1;
}

/*
 * An install refused with EAGAIN (internal.h, RETRY_SECS): spins, then
 * sleeps a little. -1 once it has been refused for RETRY_SECS.
 */
static int
retry_later(int *retries, uint64_t *stuck)
{
	uint64_t now = now_ns();

	if (++*retries == 1)
		*stuck = now;
	if (now - *stuck > (uint64_t)RETRY_SECS * 1000000000u)
		return -1;
	if (*retries > RETRY_SPIN)
		usleep(RETRY_SLEEP_US);
	return 0;
}

void
dest_install_count(struct dest *t, const struct dst_region *dr,
		   const Uffdd__PageData *pd, uint64_t got)
{
	if (pd->zero)
		t->m->cnt.zero_pages += got;
	metrics_pages(ROLE_DEST, pd->demand,
		      pd->zero ? METRICS_ZERO : METRICS_DATA, got,
		      pd->zero ? 0 : got * dr->r.page_size);
	if (pd->demand)
		t->m->cnt.demand_pages += got;
	else
		t->m->cnt.prefetched_pages += got;
}

/*
 * Installs the pages of frame pd that t is missing, run by run, from the
 * input buffer extent by extent (dest_frame_pages() gathers into
 * root->buf what straddles two extents). INSTALL_DONE, or what stopped it
 * (it: kept by the caller across its calls for one frame).
 */
enum install_res
dest_install_missing(struct dest *t, struct dest *root, struct dst_region *dr,
		     const Uffdd__PageData *pd, const struct evbuffer_iovec *v,
		     int nv, struct install_try *it)
{
	uint64_t p = it->at > pd->page ? it->at : pd->page;
	uint64_t end = pd->page + pd->npages;
	enum install_res res = INSTALL_DONE;
	const uint8_t *src = NULL;

	while (p < end && res == INSTALL_DONE) {
		uint64_t n = pagestate_present_run(&dr->ps, p, end - p);
		uint64_t got;

		p += n;
		if (p >= end)
			break;
		n = pagestate_missing_run(&dr->ps, p, end - p);
		n = dest_addr_run(dr, p, n);
		if (!pd->zero)
			n = dest_frame_pages(root, v, nv,
					     (p - pd->page) * dr->r.page_size,
					     dr->r.page_size, n, &src);
		res = install_run(t, dr, p, n, pd->zero ? NULL : src, pd->zero,
				  pd->demand, it, &got);
		if (res == INSTALL_GONE || res == INSTALL_FAILED)
			return res;
		if (got > 0)
			it->retries = 0;
		else if (retry_later(&it->retries, &it->stuck) < 0) {
			snprintf(it->why, sizeof(it->why),
				 "install at 0x%llx keeps failing with EAGAIN "
				 "for %d s",
				 (unsigned long long)dest_page_addr(dr, p),
				 RETRY_SECS);
			return INSTALL_FAILED;
		}
		dest_install_count(t, dr, pd, got);
		/* The page map is looked at again from p: see install_run. */
		it->at = p;
	}
	return res;
}

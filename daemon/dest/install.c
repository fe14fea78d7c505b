/*
 * The source's frames into the target: each PAGE_DATA frame (either lane)
 * is checked, its bytes taken from the input buffer, and its pages
 * installed with UFFDIO_COPY or ZEROPAGE into the root and then into its
 * forked children, every page exactly once. A bulk frame goes in pieces,
 * so that a fault that comes meanwhile is answered first.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "daemon/compat.h"
#include "daemon/conn.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/metrics.h"
#include "daemon/migration.h"
#include "daemon/stats.h"

/* Input-buffer extents one frame's data may span and be used in place. */
#define PEEK_MAX 16

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
 * gone, or the migration fails as a lost source fails it (missing pages
 * poisoned, or the target stopped; the source told), never with threads
 * left waiting on pages that cannot come. A forked child's failure is its
 * root's.
 */
static void
install_failed(struct dest *d, enum uffd_res res, int zero, uint64_t addr)
{
	if (res == UFFD_GONE) {
		dest_target_exited(d);
		return;
	}
	dest_fail(d->root ? d->root : d, "%s at 0x%llx: %s",
		  zero ? "UFFDIO_ZEROPAGE" : "UFFDIO_COPY",
		  (unsigned long long)addr, strerror(errno));
}

/*
 * Installs a run of missing pages, handling each outcome the way the
 * errno map says (uffd.h, docs/design.md). Returns the pages this call installed, or -1 when the
 * migration can no longer go on (failed).
 */
static int64_t
install_run(struct dest *d, struct dst_region *dr, uint64_t page, uint64_t n,
	    const uint8_t *src, int zero, int likely)
{
	uint64_t ps = dr->r.page_size, len = n * ps, off = 0, done;
	uint64_t addr = dest_page_addr(dr, page);
	int64_t installed = 0;
	int piecewise = 0;

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
		installed += (int64_t)(done / ps);
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
			if (done == 0) {
				dest_read_faults(d);
				return installed;
			}
			break;
		case UFFD_GONE:
		case UFFD_FAIL:
			install_failed(d, res, zero, addr + off);
			return -1;
		}
	}
	return installed;
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
 * A ZERO run of the bulk stream is not installed in shared memory and
 * hugetlb: the page is none (attach discarded it), reads as zeros once the
 * migration is over, and a thread that touches it before gets a zero page
 * then, as for a page the target discarded itself (dest_zero_discarded()).
 * Installing them would give each a real page, for guest RAM most of it. A
 * page a thread waits on is installed.
 *
 * Private anonymous memory gets them installed (zero_run_installed()):
 * there UFFDIO_ZEROPAGE maps the kernel's one zero page, which costs no
 * memory, and a page left none costs a thread that reads it a round trip
 * through this daemon, which a busy target starves of CPU (the demo's
 * checkers, one zero page in 16: docs/busy-destination.md).
 */
static int
zero_run_installed(const struct dst_region *dr)
{
	return dr->r.kind == REGION_ANON_PRIVATE;
}

static void
zero_run_none(struct dest *t, struct dst_region *dr, const Uffdd__PageData *pd)
{
	for (uint64_t q = pd->page; q < pd->page + pd->npages; q++) {
		if (pagestate_get(&dr->ps, q) == PAGE_MISSING) {
			pagestate_set(&dr->ps, q, PAGE_DISCARDED);
			t->m->cnt.zero_pages++;
			t->m->cnt.prefetched_pages++;
			metrics_pages(ROLE_DEST, 0, METRICS_HOLE, 1, 0);
		}
	}
}

/*
 * Shared memory has one page cache: what the root just installed the
 * child t has too. Mark it, and wake the child's threads, whose faults
 * wait on the child's own uffd. A page the root left none is one here
 * too: a child's thread that waits on it gets a zero page through the
 * child's uffd. (Once the root's target is gone, the child installs
 * itself.)
 */
static void
follow_root(struct dest *t, struct dest *root, struct dst_region *dr,
	    const Uffdd__PageData *pd)
{
	struct dst_region *rr = dest_region_by_index(root, pd->region);

	for (uint64_t p = pd->page; rr && p < pd->page + pd->npages; p++) {
		enum page_state rs = pagestate_get(&rr->ps, p);
		enum page_state ks = pagestate_get(&dr->ps, p);

		if (rs == PAGE_PRESENT && ks < PAGE_PRESENT) {
			pagestate_set(&dr->ps, p, PAGE_PRESENT);
			uffd_wake(t->uffd, dest_page_addr(dr, p),
				  dr->r.page_size);
		} else if (rs == PAGE_DISCARDED && ks == PAGE_MISSING) {
			pagestate_set(&dr->ps, p, PAGE_DISCARDED);
		} else if (rs == PAGE_DISCARDED && ks == PAGE_REQUESTED) {
			dest_zero_discarded(t, dr, p);
		}
	}
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

/*
 * Installs the pages of frame pd that t is missing, run by run, from the
 * input buffer extent by extent (dest_frame_pages() gathers into
 * root->buf what straddles two extents). -1 when t can take no more.
 */
int
dest_install_missing(struct dest *t, struct dest *root, struct dst_region *dr,
		     const Uffdd__PageData *pd, const struct evbuffer_iovec *v,
		     int nv)
{
	uint64_t p = pd->page, end = pd->page + pd->npages;
	const uint8_t *src;
	uint64_t stuck = 0; /* since when nothing went in */
	int retries = 0;

	while (p < end) {
		uint64_t n = pagestate_present_run(&dr->ps, p, end - p);
		int64_t got;

		p += n;
		if (p >= end)
			break;
		n = pagestate_missing_run(&dr->ps, p, end - p);
		n = dest_addr_run(dr, p, n);
		if (!pd->zero) {
			n = dest_frame_pages(root, v, nv,
					     (p - pd->page) * dr->r.page_size,
					     dr->r.page_size, n, &src);
			got = install_run(t, dr, p, n, src, 0, pd->demand);
		} else {
			got = install_run(t, dr, p, n, NULL, 1, pd->demand);
		}
		if (got < 0)
			return -1;
		if (got > 0)
			retries = 0;
		else if (retry_later(&retries, &stuck) < 0) {
			dest_fail(t->root ? t->root : t,
				  "install at 0x%llx keeps failing with "
				  "EAGAIN for %d s",
				  (unsigned long long)dest_page_addr(dr, p),
				  RETRY_SECS);
			return -1;
		}
		if (pd->zero)
			t->m->cnt.zero_pages += (uint64_t)got;
		metrics_pages(ROLE_DEST, pd->demand,
			      pd->zero ? METRICS_ZERO : METRICS_DATA,
			      (uint64_t)got,
			      pd->zero ? 0 : (uint64_t)got * dr->r.page_size);
		if (pd->demand)
			t->m->cnt.demand_pages += (uint64_t)got;
		else
			t->m->cnt.prefetched_pages += (uint64_t)got;
		/* The page map is looked at again from p: see install_run. */
	}
	return 0;
}

/*
 * Installs what one PAGE_DATA frame brings into target t (the root or one
 * of its forked children): every page t does not have yet. The data is
 * read from the frame in place. Returns -1 when t can take no more.
 */
static int
install_frame(struct dest *t, struct dest *root, const Uffdd__PageData *pd,
	      const struct evbuffer_iovec *v, int nv)
{
	struct dst_region *dr = dest_region_by_index(t, pd->region);

	if (dr == NULL)
		return 0;
	if (dr->r.kind == REGION_FILE_PRIVATE)
		/* A child inherited these at its fork, after the release. */
		return t->root ? 0 : dest_write_private(t, dr, pd, v, nv);
	if (pd->zero && !pd->demand && !zero_run_installed(dr))
		zero_run_none(t, dr, pd);
	if (t->root && !root->gone && region_kind_shmem(dr->r.kind))
		/* Nothing to install through the child's uffd. */
		follow_root(t, root, dr, pd);
	else if (dest_install_missing(t, root, dr, pd, v, nv) < 0)
		return -1;
	if (t->fr.nwaiters)
		dest_settle(t, pd->region, pd->page, pd->npages);
	t->m->cnt.pages_present = dest_present_total(t);
	return 0;
}

/*
 * The root has what frame pd brings: its children take their part, and
 * the migration completes once every page is in.
 */
static void
page_done(struct dest *d, const Uffdd__PageData *pd,
	  const struct evbuffer_iovec *v, int nv)
{
	for (size_t i = 0; i < d->kin.nkids;) {
		struct dest *k = d->kin.kids[i];

		if (install_frame(k, d, pd, v, nv) < 0) {
			/* Gone (dest_child_done() ran) or failed: off. */
			if (i < d->kin.nkids && d->kin.kids[i] == k)
				dest_child_done(k);
			continue;
		}
		if (dest_present_total(k) == k->m->cnt.pages_total) {
			dest_child_done(k); /* removes it from kids */
			continue;
		}
		i++;
	}
	d->m->cnt.pages_present = dest_present_total(d);
	dest_maybe_complete(d);
}

/*
 * The install into the root found its target gone, and its forked
 * children migrate on (root_gone()): the frame is still theirs, all of it.
 * Dropped there, its pages never came to the children (the source sends
 * each once), and an idle child's migration waited for good.
 */
static int
root_went(const struct dest *d)
{
	return d->gone && d->m->state == MIG_RUNNING;
}

/*
 * While one thread waits for a demand answer, the bulk lane waits: on a
 * busy machine the daemons share CPUs, and installing bulk frames kept the
 * source from running to answer. Only for one: with several requests in
 * flight (threads faulting back to back) holding the lane starved it, and
 * every page came on demand at half the speed.
 */
void
dest_bulk_hold(struct dest *d)
{
	int rec = (d->m->ws != NULL && !migration_ws_closed(d->m)) ||
		  d->bh.run_hold == 1;

	if (d->bulk)
		conn_pause(d->bulk, d->fr.nrequests == 1 || rec);
	if (d->in.pending && d->fr.nrequests != 1)
		event_active(d->in.piece_ev, EV_TIMEOUT, 0);
}

/* The recording's end, checked every 100 ms: the bulk lane goes on. */
static void
ws_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct dest *d = arg;

	if (!migration_ws_closed(d->m))
		return;
	event_del(d->bh.ws_ev);
	dest_bulk_hold(d);
}

/*
 * attach --record-working-set: the bulk lane is held from the start until
 * the recording is over (dest_bulk_hold()); a page the bulk stream brought
 * first would be touched without a fault, and missing from the record.
 */
void
dest_ws_watch(struct dest *d)
{
	struct timeval tv = {0, 100 * 1000};

	d->bh.ws_ev = event_new(base, -1, EV_PERSIST, ws_cb, d);
	if (d->bh.ws_ev == NULL)
		fatal("working-set timer");
	event_add(d->bh.ws_ev, &tv);
}

/* No bulk frame is pending: the bulk lane hands frames again. */
static void
pieces_stop(struct dest *d)
{
	d->in.pending = 0;
	if (d->bulk)
		conn_stall(d->bulk, 0);
}

/*
 * Installs the pending bulk frame a piece at a time, reading the uffd in
 * between: a fault that comes meanwhile is requested at once, and its
 * answer goes in before the rest of the frame (the loop serves the demand
 * lane and the uffd first; dest_bulk_hold() brings us back). A whole 256 KiB
 * frame takes tens of microseconds to install, which a fault would
 * otherwise wait out twice: before its request and before its answer.
 */
static void
bulk_pieces(struct dest *d)
{
	while (d->in.pending) {
		struct dst_region *dr =
			dest_region_by_index(d, d->in.pend.region);
		Uffdd__PageData sub = d->in.pend;
		struct evbuffer_iovec v;
		uint64_t ps, piece;

		if (d->m->state != MIG_RUNNING || d->bulk == NULL ||
		    dr == NULL) {
			pieces_stop(d); /* send_holdings() will say */
			return;
		}
		if (d->fr.nrequests == 1)
			return; /* dest_bulk_hold() lets it go on */
		ps = dr->r.page_size;
		/*
		 * Pieces only while faults come (loop_demand_recent()): else
		 * the frame goes in one UFFDIO_COPY, without the uffd read
		 * between pieces (3 of each per 256 KiB frame, 6% of the
		 * destination's CPU per GiB: docs/busy-destination.md).
		 */
		piece = DEMAND_STEP_BYTES / ps ? DEMAND_STEP_BYTES / ps : 1;
		if (!loop_demand_recent())
			piece = d->in.pend.npages;
		sub.page += d->in.pdone;
		sub.npages =
			(uint32_t)(d->in.pend.npages - d->in.pdone < piece
					   ? d->in.pend.npages - d->in.pdone
					   : piece);
		v.iov_base = d->in.pbuf + d->in.pdone * ps;
		v.iov_len = sub.npages * ps;
		d->in.pdone += sub.npages;
		if (install_frame(d, d, &sub, &v, 1) < 0 && !root_went(d)) {
			pieces_stop(
				d); /* as dest_page_data() gives up a frame */
			return;
		}
		if (d->in.pdone == d->in.pend.npages || d->gone) {
			v.iov_base = d->in.pbuf;
			v.iov_len = d->in.pend.npages * ps;
			pieces_stop(d);
			page_done(d, &d->in.pend, &v, 1);
			return;
		}
		dest_read_faults(d);
		if (d->fr.nrequests > 0 && d->fr.nrequests != 1) {
			/* Several wait: their answers first, then on. */
			event_active(d->in.piece_ev, EV_TIMEOUT, 0);
			return;
		}
	}
}

/* Faults were served meanwhile: the pending frame goes on. */
static void
piece_cb(evutil_socket_t fd, short ev, void *arg)
{
	bulk_pieces(arg);
}

/*
 * A frame the source may send: within one of our regions, as long as its
 * data says, and no more than a frame covers. Else the lanes go down.
 */
static int
frame_fits(struct dest *d, struct conn *c, const struct frame_hdr *h,
	   const Uffdd__PageData *pd, const struct dst_region *dr)
{
	if (dr == NULL || pd->npages == 0 || pd->page >= dr->npages ||
	    pd->npages > dr->npages - pd->page ||
	    h->data_len !=
		    (pd->zero ? 0 : (uint64_t)pd->npages * dr->r.page_size)) {
		log_warnx("%s: PAGE_DATA out of bounds (region %u page "
			  "%llu+%u, %u bytes)",
			  conn_name(c), pd->region,
			  (unsigned long long)pd->page, pd->npages,
			  h->data_len);
		dest_lanes_down(d, "malformed PAGE_DATA");
		return 0;
	}
	/*
	 * No source sends more (frame.h): the data would not fit our
	 * buffers, nor a ZERO run of huge pages the zero source.
	 */
	if (frame_pages_fit(dr->r.page_size, pd->npages) != pd->npages) {
		log_warnx("%s: PAGE_DATA of %u pages of %u bytes (region %u "
			  "page %llu%s): more than one frame covers (%u "
			  "bytes); closing the lane",
			  conn_name(c), pd->npages, dr->r.page_size, pd->region,
			  (unsigned long long)pd->page,
			  pd->zero ? ", ZERO" : "", FRAME_DATA_MAX);
		dest_lanes_down(d, "PAGE_DATA larger than a frame");
		return 0;
	}
	return 1;
}

/*
 * A bulk frame's bytes are taken into d->pbuf (or read there: see
 * conn_set_sink()) and installed in pieces
 * (bulk_pieces()); the bulk lane hands no other frame meanwhile.
 */
static void
bulk_take(struct dest *d, struct conn *c, const struct frame_hdr *h,
	  const Uffdd__PageData *pd)
{
	if (d->in.pbuf == NULL) {
		if (posix_memalign((void **)&d->in.pbuf, 4096,
				   FRAME_DATA_MAX) != 0)
			fatal("page buffer");
		d->in.piece_ev = event_new(base, -1, 0, piece_cb, d);
		if (d->in.piece_ev == NULL)
			fatalx("event_new");
		event_priority_set(d->in.piece_ev, PRIO_BULK);
	}
	/*
	 * The lane's next frames are read from the socket straight into
	 * d->pbuf (the conn is stalled while we hold it): the take below
	 * then copies nothing (8-10% of the destination's CPU per GiB).
	 */
	conn_set_sink(c, FRAME_PAGE_DATA, d->in.pbuf, FRAME_DATA_MAX);
	if (conn_take_data(c, d->in.pbuf, h->data_len) < 0) {
		dest_lanes_down(d, "short PAGE_DATA");
		return;
	}
	d->m->cnt.bytes += h->data_len;
	/* Reads in small steps too while faults come. */
	conn_set_io_max(c, loop_demand_recent() ? DEMAND_STEP_BYTES : 0);
	loop_bulk();
	/* The fields alone: msg and what it points to go after us. */
	d->in.pend = (Uffdd__PageData)UFFDD__PAGE_DATA__INIT;
	d->in.pend.region = pd->region;
	d->in.pend.page = pd->page;
	d->in.pend.npages = pd->npages;
	d->in.pdone = 0;
	d->in.pending = 1;
	conn_stall(c, 1);
	bulk_pieces(d);
}

/*
 * A PAGE_DATA frame from either lane: checked, its bytes taken, and its
 * pages installed into the root, then into its children (page_done()).
 */
void
dest_page_data(struct dest *d, struct conn *c, const struct frame_hdr *h,
	       const Uffdd__PageData *pd)
{
	struct dst_region *dr = dest_region_by_index(d, pd->region);
	struct evbuffer_iovec v[PEEK_MAX];
	int nv = 0;

	if (!frame_fits(d, c, h, pd, dr))
		return;
	if (d->held.precopy) {
		dest_precopy_data(d, c, h, pd, dr);
		return;
	}
	/*
	 * The page bytes are copied out of the input buffer before anything
	 * is installed. Installing in place from the buffer lost pages: an
	 * install can read uffd events and send requests, which may make a
	 * lane read or write, and an evbuffer that grows can move the bytes
	 * we pointed into (seen with TLS and plaintext lanes alike).
	 */
	if (c == d->bulk && h->data_len && !pd->demand &&
	    dr->r.kind != REGION_FILE_PRIVATE) {
		bulk_take(d, c, h, pd);
		return;
	}
	if (h->data_len) {
		if (conn_take_data(c, d->in.buf, h->data_len) < 0) {
			dest_lanes_down(d, "short PAGE_DATA");
			return;
		}
		v[0].iov_base = d->in.buf;
		v[0].iov_len = h->data_len;
		nv = 1;
	}
	d->m->cnt.bytes += h->data_len;
	if (pd->demand)
		loop_poll(); /* the thread's next fault may follow */
	else
		loop_bulk();
	if (install_frame(d, d, pd, v, nv) < 0 && !root_went(d))
		return;
	if (pd->demand && d->bulk)
		loop_yield_woken(); /* before the bulk work goes on */
	page_done(d, pd, v, nv);
}

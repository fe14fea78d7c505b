/*
 * The source's PAGE_DATA frames (either lane) as the lanes hand them in:
 * each is checked, its bytes taken from the input buffer, and its pages
 * fed to the root and then to its forked children (feed.c), every page
 * exactly once; then the migration completes once every page is in. A
 * bulk frame goes in pieces, so that a fault that comes meanwhile is
 * answered first. Returns the lanes what they must do; never calls them.
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
#include "daemon/dest/installer.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/metrics.h"
#include "daemon/migration.h"
#include "daemon/stats.h"

/* Input-buffer extents one frame's data may span and be used in place. */
#define PEEK_MAX 16

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

/* A frame's private file pages written into t, or the migration fails. */
static int
write_private(struct dest *t, struct dst_region *dr, const Uffdd__PageData *pd,
	      const struct evbuffer_iovec *v, int nv)
{
	char err[256];

	if (dest_write_private(t, dr, pd, v, nv, err, sizeof(err)) == 0)
		return 0;
	dest_fail(t, "%s", err);
	return -1;
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
		return t->root ? 0 : write_private(t, dr, pd, v, nv);
	if (pd->zero && !pd->demand && !zero_run_installed(dr))
		zero_run_none(t, dr, pd);
	if (t->root && !root->gone && region_kind_shmem(dr->r.kind))
		/* Nothing to install through the child's uffd. */
		follow_root(t, root, dr, pd);
	else if (dest_install_pages(t, root, dr, pd, v, nv) < 0)
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
		if (dest_bulk_waits(d))
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
		if (d->fr.nrequests > 0 && !dest_bulk_waits(d)) {
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
 * data says, and no more than a frame covers: NULL. Else why the lanes
 * must go down.
 */
static const char *
frame_fits(struct conn *c, const struct frame_hdr *h, const Uffdd__PageData *pd,
	   const struct dst_region *dr)
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
		return "malformed PAGE_DATA";
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
		return "PAGE_DATA larger than a frame";
	}
	return NULL;
}

/*
 * A bulk frame's bytes are taken into d->pbuf (or read there: see
 * conn_set_sink()) and installed in pieces
 * (bulk_pieces()); the bulk lane hands no other frame meanwhile.
 */
static const char *
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
	if (conn_take_data(c, d->in.pbuf, h->data_len) < 0)
		return "short PAGE_DATA";
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
	d->in.front_reg = pd->region;
	d->in.front_page = pd->page + pd->npages;
	dest_stream_taken(d);
	conn_stall(c, 1);
	bulk_pieces(d);
	return NULL;
}

/*
 * A frame's pages, from v, into the root d and then its children: what a
 * bulk frame back from the installing thread goes on to (offload.c).
 */
static void
frame_in(struct dest *d, const Uffdd__PageData *pd,
	 const struct evbuffer_iovec *v, int nv)
{
	if (install_frame(d, d, pd, v, nv) < 0 && !root_went(d))
		return;
	page_done(d, pd, v, nv);
}

/*
 * A PAGE_DATA frame from either lane: checked, its bytes taken, and its
 * pages installed into the root, then into its children (page_done()).
 * NULL, or why the lanes must go down (the caller, the lanes, takes them
 * down: nothing here calls up into them).
 */
const char *
dest_page_data(struct dest *d, struct conn *c, const struct frame_hdr *h,
	       const Uffdd__PageData *pd)
{
	struct dst_region *dr = dest_region_by_index(d, pd->region);
	struct evbuffer_iovec v[PEEK_MAX];
	const char *why = frame_fits(c, h, pd, dr);
	int nv = 0;

	if (why != NULL)
		return why;
	if (d->held.precopy)
		return dest_precopy_data(d, c, h, pd, dr);
	/*
	 * The page bytes are copied out of the input buffer before anything
	 * is installed. Installing in place from the buffer lost pages: an
	 * install can read uffd events and send requests, which may make a
	 * lane read or write, and an evbuffer that grows can move the bytes
	 * we pointed into (seen with TLS and plaintext lanes alike).
	 */
	if (c == d->bulk && h->data_len && !pd->demand &&
	    dr->r.kind != REGION_FILE_PRIVATE) {
		int taken = dest_offload(d, c, h, pd, dr, frame_in, &why);

		if (taken == 0)
			return why;
		if (taken == -1)
			return bulk_take(d, c, h, pd);
	}
	if (h->data_len) {
		if (conn_take_data(c, d->in.buf, h->data_len) < 0)
			return "short PAGE_DATA";
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
		return NULL;
	if (pd->demand && d->bulk)
		loop_yield_woken(); /* before the bulk work goes on */
	page_done(d, pd, v, nv);
	return NULL;
}

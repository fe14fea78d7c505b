/*
 * What the target's userfaultfd says: page faults, which become requests
 * on the demand lane (or zero pages, for pages that are none), and the
 * target's own changes to its memory (discards, moves, forks), which the
 * page map follows before any page is installed again. The threads that
 * wait on a page are counted here until its frame settles them.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/compat.h"
#include "daemon/conn.h"
#include "daemon/dest/installer.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/metrics.h"
#include "daemon/migration.h"
#include "daemon/procref.h"
#include "daemon/stats.h"

/* The region and page an address of the target belongs to, or NULL. */
static struct dst_region *
locate(struct dest *d, uint64_t addr, uint64_t *page)
{
	for (size_t i = 0; i < d->nregs; i++) {
		struct dst_region *dr = &d->regs[i];
		uint64_t ps = dr->r.page_size, pa = addr - addr % ps;

		for (size_t k = dr->nmoves; k-- > 0;) {
			const struct move *mv = &dr->moves[k];
			uint64_t p = mv->p0 + (pa - mv->base) / ps;

			if (pa >= mv->base && p < mv->p1 &&
			    dest_page_addr(dr, p) == pa) {
				*page = p;
				return dr;
			}
		}
		if (pa >= dr->r.start && pa - dr->r.start < dr->r.length &&
		    dest_page_addr(dr, (pa - dr->r.start) / ps) == pa) {
			*page = (pa - dr->r.start) / ps;
			return dr;
		}
	}
	return NULL;
}

/*
 * The pages [*lo, *hi) of dr whose addresses lie in [start, end): one
 * range when the region was never moved (mremap), which is what keeps a
 * guest's balloon, a madvise per 4 KiB page, from scanning every page of
 * every region each time. 0 when dr was moved: the caller looks at each.
 */
static int
pages_in(const struct dst_region *dr, uint64_t start, uint64_t end,
	 uint64_t *lo, uint64_t *hi)
{
	uint64_t ps = dr->r.page_size, rend = dr->r.start + dr->npages * ps;

	if (dr->nmoves)
		return 0;
	*lo = *hi = 0;
	if (end <= dr->r.start || start >= rend)
		return 1;
	*lo = start <= dr->r.start ? 0 : (start - dr->r.start + ps - 1) / ps;
	*hi = end >= rend ? dr->npages : (end - dr->r.start + ps - 1) / ps;
	return 1;
}

/*
 * The target discarded [start, end) itself (madvise DONTNEED or REMOVE,
 * munmap): those pages must never receive the source's bytes.
 */
static void
discard_range(struct dest *d, uint64_t start, uint64_t end)
{
	uint64_t n = 0;
	int waited = 0;

	for (size_t i = 0; i < d->nregs; i++) {
		struct dst_region *dr = &d->regs[i];
		uint64_t lo = 0, hi = dr->npages;
		int linear = pages_in(dr, start, end, &lo, &hi);

		for (uint64_t p = lo; p < hi; p++) {
			uint64_t a = linear ? start : dest_page_addr(dr, p);

			if (a >= start && a < end &&
			    pagestate_get(&dr->ps, p) != PAGE_DISCARDED) {
				waited |= pagestate_set(&dr->ps, p,
							PAGE_DISCARDED) ==
					  PAGE_REQUESTED;
				n++;
			}
		}
	}
	d->m->cnt.discarded_pages += n;
	/*
	 * A thread that waited on one of them would wait for data that is
	 * never installed now: wake it, and its fault comes again, for a
	 * zero page.
	 */
	if (waited && d->uffd >= 0)
		uffd_wake(d->uffd, start, end - start);
	log_debug("migration %s: target discarded 0x%llx-0x%llx (%llu pages)",
		  log_id(d->m->id), (unsigned long long)start,
		  (unsigned long long)end, (unsigned long long)n);
}

/*
 * The target moved [from, from + len) to `to` (mremap): the pages there
 * keep their identity (region, index) and get a new address. A scan over
 * every page is fine: mremap of migrating memory is rare.
 */
static void
remap_range(struct dest *d, uint64_t from, uint64_t to, uint64_t len)
{
	for (size_t i = 0; i < d->nregs; i++) {
		struct dst_region *dr = &d->regs[i];
		uint64_t p = 0;

		while (p < dr->npages) {
			uint64_t a = dest_page_addr(dr, p), n;

			if (a < from || a >= from + len) {
				p++;
				continue;
			}
			n = dest_addr_run(dr, p, dr->npages - p);
			if (a + n * dr->r.page_size > from + len)
				n = (from + len - a) / dr->r.page_size;
			dest_add_move(dr, p, p + n, to + (a - from));
			p += n;
		}
	}
	log_debug("migration %s: target moved 0x%llx+0x%llx to 0x%llx",
		  log_id(d->m->id), (unsigned long long)from,
		  (unsigned long long)len, (unsigned long long)to);
}

/*
 * A thread waits on a page; first: its fault sends the request. Past
 * INFLIGHT_MAX its wait is not timed: the fault histogram counts it as
 * served at once, so that it counts every fault status does; NULL then.
 */
static struct waiter *
add_waiter(struct dest *d, const struct dst_region *dr, uint64_t page,
	   pid_t tid, int first)
{
	struct waiter *w;
	int front;

	if (d->fr.nwaiters >= INFLIGHT_MAX) {
		metrics_fault(ROLE_DEST, 0);
		return NULL;
	}
	front = first && dest_at_bulk_front(d, dr, page);
	w = &d->fr.waiters[d->fr.nwaiters++];
	*w = (struct waiter){dr->r.index, page, now_ns(), tid, first, front, 0};
	d->fr.nrequests += first != 0;
	d->fr.nfront += front != 0;
	return w;
}

/* Waiters no install will settle (the target gone): their wait so far. */
void
dest_waiters_drop(struct dest *d)
{
	uint64_t t = now_ns();

	for (size_t i = 0; i < d->fr.nwaiters; i++)
		metrics_fault(ROLE_DEST, t - d->fr.waiters[i].t0);
	d->fr.nwaiters = d->fr.nrequests = d->fr.nfront = 0;
}

/*
 * Threads waiting on [page, page+n) are free: charge their wait to their
 * blocktime, and each request's wait to the latency histogram.
 */
void
dest_settle(struct dest *d, uint32_t idx, uint64_t page, uint64_t n)
{
	uint64_t t = now_ns();

	for (size_t i = 0; i < d->fr.nwaiters;) {
		struct waiter *w = &d->fr.waiters[i];

		if (w->reg == idx && w->page >= page && w->page < page + n) {
			migration_blocked(d->m, w->tid, t - w->t0);
			metrics_fault(ROLE_DEST, t - w->t0);
			if (w->first) {
				hist_add(&d->m->latency, t - w->t0);
				d->fr.nrequests--;
				d->fr.nfront -= w->front != 0;
				d->fr.stream_brought += w->unasked == 1;
				if (w->unasked == 0)
					dest_ewma(&d->fr.answer_ns, t - w->t0);
				/* An answer came: the hold waits on a frame. */
				if (w->unasked != 1)
					d->bh.frame_owed = 1;
			}
			*w = d->fr.waiters[--d->fr.nwaiters];
			continue;
		}
		i++;
	}
	dest_bulk_hold(d);
}

/* A thread waits on page: the source is asked for it on the demand lane. */
void
dest_request_page(struct dest *d, struct dst_region *dr, uint64_t page)
{
	Uffdd__PageRequest pr = UFFDD__PAGE_REQUEST__INIT;
	struct conn *lane;

	pagestate_set(&dr->ps, page, PAGE_REQUESTED);
	migration_ws_add(d->m, dr->r.index, page);
	lane = d->root ? d->root->demand : d->demand;
	if (lane == NULL)
		return; /* paused: the request goes out on reconnect */
	pr.region = dr->r.index;
	pr.page = page;
	pr.npages = 1;
	conn_send(lane, FRAME_PAGE_REQUEST, &pr.base);
	dest_run_hold_clock(d);
	dest_bulk_hold(d);
	/* The answer is due in microseconds; for one, nothing else moves. */
	if (dest_bulk_waits(d))
		loop_poll_now();
	else
		loop_poll();
}

/* A zero page the kernel refused for a pending event: once it is read. */
static void
zero_later(struct dest *d, uint64_t addr)
{
	d->fr.zretry = realloc(d->fr.zretry,
			       (d->fr.nzretry + 1) * sizeof(*d->fr.zretry));
	if (d->fr.zretry == NULL)
		fatal("zero page retries");
	d->fr.zretry[d->fr.nzretry++] = addr;
}

/*
 * A thread touches a page the target had discarded: it gets what it would
 * have got without a migration, a zero page.
 */
void
dest_zero_discarded(struct dest *d, struct dst_region *dr, uint64_t page)
{
	uint64_t done, ps = dr->r.page_size, addr = dest_page_addr(dr, page);
	enum uffd_res res = dest_install_zero(
		d, dr, addr, ps,
		d->hints ? UFFDIO_ZEROPAGE_MODE_ACCESS_LIKELY : 0, &done);

	if (res == UFFD_OK || res == UFFD_EXISTS) {
		pagestate_set(&dr->ps, page, PAGE_PRESENT);
		dest_record_mark(dr, page, 1);
		if (res == UFFD_EXISTS)
			uffd_wake(d->uffd, addr, ps);
		else
			d->m->cnt.zero_pages++;
	} else if (res == UFFD_GONE) {
		dest_exited(d);
	} else if (res == UFFD_RETRY) {
		zero_later(d, addr);
	} else {
		log_warn("migration %s: zero page at 0x%llx", log_id(d->m->id),
			 (unsigned long long)addr);
	}
}

/*
 * A fault outside every region: memory the target added to a registered
 * mapping without an event we follow (mremap growing it in place). None of
 * it comes from the source: a zero page, as without a migration.
 */
static void
zero_outside(struct dest *d, uint64_t addr)
{
	uint64_t done, ps = (uint64_t)sysconf(_SC_PAGESIZE);
	enum uffd_res res =
		uffd_zeropage(d->uffd, addr - addr % ps, ps, 0, &done);

	if (res == UFFD_EXISTS)
		uffd_wake(d->uffd, addr - addr % ps, ps);
	else if (res == UFFD_RETRY)
		zero_later(d, addr);
	else if (res == UFFD_GONE)
		dest_exited(d);
	else if (res != UFFD_OK)
		log_warn("migration %s: zero page at 0x%llx outside every "
			 "region",
			 log_id(d->m->id), (unsigned long long)addr);
}

/* The zero pages refused while an event was pending, once it is read. */
static void
zero_retry(struct dest *d)
{
	uint64_t *addrs = d->fr.zretry, page;
	size_t n = d->fr.nzretry;

	d->fr.zretry = NULL;
	d->fr.nzretry = 0;
	for (size_t i = 0; i < n && d->uffd >= 0; i++) {
		struct dst_region *dr = locate(d, addrs[i], &page);

		if (dr == NULL)
			zero_outside(d, addrs[i]);
		else if (pagestate_get(&dr->ps, page) == PAGE_DISCARDED ||
			 pagestate_get(&dr->ps, page) == PAGE_PRESENT)
			dest_zero_discarded(d, dr, page);
	}
	free(addrs);
}

/*
 * A page left to the stream that has not come within two of its frames'
 * time (an answer's, if more), and is not about to: the stream went
 * elsewhere (after another fault, or a window's end), or stalled, and the
 * page is asked for; STREAM_GRACE_US after its fault at the latest. At
 * most that long is added to a fault's wait.
 */
#define STREAM_GRACE_US 1000

static void arm_stream_timer(struct dest *);

/*
 * The timer: each page left to the stream that is still missing is asked
 * for, unless the stream, still at its pace, is about to bring it (its
 * frame is being installed, or due): then it waits on, up to
 * STREAM_GRACE_US from its fault.
 */
static void
stream_late_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct dest *d = arg;
	uint64_t t = now_ns();
	int again = 0;

	(void)fd;
	(void)ev;
	for (size_t i = 0; i < d->fr.nwaiters; i++) {
		struct waiter *w = &d->fr.waiters[i];
		struct dst_region *dr = dest_region_by_index(d, w->reg);

		if (w->unasked != 1 || dr == NULL)
			continue;
		if (pagestate_get(&dr->ps, w->page) != PAGE_REQUESTED) {
			w->unasked = 2; /* settled as it came, or discarded */
			continue;
		}
		if (t - w->t0 < STREAM_GRACE_US * 1000ull &&
		    dest_stream_brings(d, dr, w->page)) {
			again = 1;
			continue;
		}
		w->unasked = 2;
		d->fr.stream_late++;
		dest_request_page(d, dr, w->page);
	}
	if (again)
		arm_stream_timer(d);
}

/* Due in twice the stream's pace (an answer's time if longer), at most
 * STREAM_GRACE_US. */
static void
arm_stream_timer(struct dest *d)
{
	uint64_t us = 2 * d->in.gap_ns / 1000;
	struct timeval tv = {0, 0};

	if (us < dest_answer_ns(d) / 1000)
		us = dest_answer_ns(d) / 1000;
	tv.tv_usec = (suseconds_t)(us < STREAM_GRACE_US ? us : STREAM_GRACE_US);
	if (d->fr.stream_ev == NULL &&
	    (d->fr.stream_ev = evtimer_new(base, stream_late_cb, d)) == NULL)
		fatalx("evtimer_new");
	if (!evtimer_pending(d->fr.stream_ev, NULL))
		evtimer_add(d->fr.stream_ev, &tv);
}

/*
 * Waiter w, just added on page, is left to the bulk stream when it is
 * about to bring the page (dest_stream_brings()): 1. Asked for after
 * STREAM_GRACE_US if it did not come. A waiter not stored (NULL) is asked.
 */
static int
leave_to_stream(struct dest *d, struct dst_region *dr, uint64_t page,
		struct waiter *w)
{
	if (w == NULL || !dest_stream_brings(d, dr, page))
		return 0;
	/*
	 * Waited on, as a page asked for is: what settles a waiter installs
	 * it (a shared ZERO run leaves only a page nobody waits on none).
	 */
	pagestate_set(&dr->ps, page, PAGE_REQUESTED);
	w->unasked = 1;
	arm_stream_timer(d);
	dest_bulk_hold(d); /* a front waiter more: the lane flows */
	return 1;
}

/* A thread faulted at addr: its page is asked for, or it gets a zero page. */
static void
fault(struct dest *d, uint64_t addr, pid_t tid)
{
	struct dst_region *dr;
	uint64_t page;

	if ((dr = locate(d, addr, &page)) == NULL) {
		log_debug("migration %s: fault at 0x%llx outside every region",
			  log_id(d->m->id), (unsigned long long)addr);
		zero_outside(d, addr);
		return;
	}
	if (d->failing)
		return; /* it will be poisoned and woken */
	if (d->held.on && d->held.precopy && d->held.no_hold) {
		char why[256];

		snprintf(why, sizeof(why),
			 "process %d touched its memory at 0x%llx during the "
			 "pre-copy, which it was not held for "
			 "(--precopy-no-hold)",
			 (int)d->m->pid, (unsigned long long)addr);
		/* Stopped first: the failure poisons what it lacks. */
		procref_signal(&d->t, SIGSTOP);
		dest_broken(d, why);
		return;
	}
	d->m->cnt.demand_faults++;
	loop_fault_seen();
	switch (pagestate_get(&dr->ps, page)) {
	case PAGE_MISSING:
		if (!leave_to_stream(d, dr, page,
				     add_waiter(d, dr, page, tid, 1)))
			dest_request_page(d, dr, page);
		break;
	case PAGE_REQUESTED:
		/* Merged with the request in flight. */
		add_waiter(d, dr, page, tid, 0);
		break;
	case PAGE_PRESENT:
		/*
		 * Installed after the fault was queued. In a child the map
		 * may be a parent's guess: ask, and an EEXIST will settle it;
		 * but not for shared memory the record says went in (one
		 * page cache): gone again, as below.
		 */
		if (d->root && !dest_record_has(dr, page)) {
			add_waiter(d, dr, page, tid, 1);
			dest_request_page(d, dr, page);
		} else {
			/*
			 * Or gone again with no event: a hole punched in
			 * shared memory, a page MADV_FREE let go. A wake
			 * alone would make the thread fault for good; a zero
			 * page is what it reads without a migration (EEXIST:
			 * it was a race, and the thread is woken).
			 */
			metrics_fault(ROLE_DEST, 0);
			dest_zero_discarded(d, dr, page);
		}
		break;
	case PAGE_DISCARDED:
		metrics_fault(ROLE_DEST, 0);
		dest_zero_discarded(d, dr, page);
		break;
	}
}

/*
 * One message read from a uffd: a fault, or an event of the target. An
 * event that changes the page map changes what a restart must know: the
 * state file follows once this callback returns (persist.c). 1 when it
 * did: bulk frames planned before are planned again (installer.c).
 */
static int
handle_msg(struct dest *d, const struct uffd_msg *msg)
{
	switch (msg->event) {
	case UFFD_EVENT_PAGEFAULT:
		fault(d, msg->arg.pagefault.address,
		      (pid_t)msg->arg.pagefault.feat.ptid);
		break;
	case UFFD_EVENT_REMOVE:
	case UFFD_EVENT_UNMAP:
		discard_range(d, msg->arg.remove.start, msg->arg.remove.end);
		dest_persist_dirty(d);
		return 1;
	case UFFD_EVENT_REMAP:
		remap_range(d, msg->arg.remap.from, msg->arg.remap.to,
			    msg->arg.remap.len);
		dest_persist_dirty(d);
		return 1;
	case UFFD_EVENT_FORK:
		dest_forked(d, (int)msg->arg.fork.ufd);
		break;
	default:
		log_debug("uffd event %u ignored", msg->event);
		break;
	}
	return 0;
}

/*
 * Reads every pending uffd message: page faults become requests, and the
 * target's own changes to its memory (docs/design.md, non-cooperative
 * events) update the page map before any page is installed again.
 */
void
dest_read_faults(struct dest *d)
{
	struct uffd_msg msgs[64];
	int changed = 0;

	/* No bulk piece goes in while the page map may change (installer.c). */
	dest_installer_quiet();
	/* First what an injection's wait read, in the order it came. */
	if (d->fr.nbacklog) {
		struct uffd_msg *q = d->fr.backlog;
		size_t n = d->fr.nbacklog;

		d->fr.backlog = NULL;
		d->fr.nbacklog = 0;
		for (size_t i = 0; i < n; i++)
			changed |= handle_msg(d, &q[i]);
		free(q);
	}

	for (;;) {
		ssize_t r =
			d->uffd >= 0 ? read(d->uffd, msgs, sizeof(msgs)) : 0;

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			dest_uffd_read_failed(d);
		if (r <= 0)
			break;
		for (size_t i = 0; i < (size_t)r / sizeof(msgs[0]); i++)
			changed |= handle_msg(d, &msgs[i]);
		if ((size_t)r < sizeof(msgs))
			break; /* a short read took every pending message */
	}
	dest_installer_resume(changed);
	if (d->fr.nzretry)
		zero_retry(d);
	if (d->demand)
		conn_flush(d->demand);
}

/* The uffd is readable: a fault or an event of the target waits. */
static void
fault_cb(evutil_socket_t fd, short ev, void *arg)
{
	dest_read_faults(arg);
}

/* Faults and events of d's target reach dest_read_faults() from now on. */
void
dest_fault_watch(struct dest *d)
{
	d->fr.uffd_ev =
		event_new(base, d->uffd, EV_READ | EV_PERSIST, fault_cb, d);
	event_priority_set(d->fr.uffd_ev, PRIO_FAULT);
	event_add(d->fr.uffd_ev, NULL);
}

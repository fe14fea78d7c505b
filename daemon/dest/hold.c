/*
 * Private file mappings: userfaultfd cannot watch them, so the target is
 * held (every thread stopped, by the privileged part) until each page the source had written there is written through
 * /proc/PID/mem. Then it is let go; if they never come, it is stopped.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "daemon/conn.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/migration.h"
#include "daemon/privop.h"
#include "daemon/procfile.h"

/*
 * Pages of a private file mapping asked for in one request: what every
 * source answers (its max-request-pages is at least this).
 */
#define PRIVATE_RUN REQUEST_PAGES_MIN

/* Pages of private file mappings that have not been written yet. */
uint64_t
dest_private_missing(const struct dest *d)
{
	uint64_t n = 0;

	for (size_t i = 0; i < d->nregs; i++)
		if (d->regs[i].r.kind == REGION_FILE_PRIVATE)
			n += d->regs[i].npages - pagestate_done(&d->regs[i].ps);
	return n;
}

/*
 * Asks for every page of the private file mappings at once, in runs the
 * source answers in one frame each: the target is held until they are in.
 * Pages the source has as the file's own come back as ZERO markers.
 */
void
dest_request_private(struct dest *d)
{
	for (size_t i = 0; d->demand && i < d->nregs; i++) {
		struct dst_region *dr = &d->regs[i];
		uint64_t p = 0;

		if (dr->r.kind != REGION_FILE_PRIVATE)
			continue;
		while (p < dr->npages) {
			Uffdd__PageRequest pr = UFFDD__PAGE_REQUEST__INIT;
			uint64_t n;

			p += pagestate_present_run(&dr->ps, p, dr->npages - p);
			if (p >= dr->npages)
				break;
			n = pagestate_missing_run(&dr->ps, p, dr->npages - p);
			if (n > PRIVATE_RUN)
				n = PRIVATE_RUN;
			for (uint64_t k = 0; k < n; k++)
				pagestate_set(&dr->ps, p + k, PAGE_REQUESTED);
			pr.region = dr->r.index;
			pr.page = p;
			pr.npages = (uint32_t)n;
			conn_send(d->demand, FRAME_PAGE_REQUEST, &pr.base);
			p += n;
		}
	}
	if (d->demand)
		conn_flush(d->demand);
}

/*
 * Every thread stays stopped until the pages the target wrote in private
 * file mappings are in (struct dest), or a pre-copy's switchover: the
 * privileged part holds it (PRIVOP_DEST_HOLD).
 */
int
dest_hold_target(struct dest *d, char *err, size_t errlen)
{
	if ((d->held.memfd = procfile_mem_rw(d->m->pid)) < 0) {
		snprintf(err, errlen, "/proc/%d/mem: %s", (int)d->m->pid,
			 strerror(errno));
		return -1;
	}
	/*
	 * attach --precopy-no-hold: the rounds are taken as for a held
	 * target, which runs, trusted not to touch the memory (its faults
	 * fail the migration: fault.c). Its setup ends now.
	 */
	if (d->held.precopy && d->held.no_hold &&
	    dest_private_missing(d) == 0) {
		if (dest_grant_end(d, PRIVOP_DEST_GO, err, errlen) < 0) {
			close(d->held.memfd);
			d->held.memfd = -1;
			return -1;
		}
		d->held.on = 1;
		log_info("process %d not held during the pre-copy "
			 "(--precopy-no-hold): a fault before the switchover "
			 "fails the migration",
			 (int)d->m->pid);
		return 0;
	}
	d->held.no_hold = 0; /* held after all: private file pages */
	/*
	 * A pre-copy's held target dies with the daemon (one not held, as
	 * above, does not): its source still runs, or is let go, so nothing
	 * is lost, and no target runs on pages of several moments.
	 */
	if (dest_grant_end(d, PRIVOP_DEST_HOLD, err, errlen) < 0) {
		close(d->held.memfd);
		return -1;
	}
	d->held.on = 1;
	log_info("process %d held until %s", (int)d->m->pid,
		 d->held.precopy
			 ? "the pre-copy's switchover"
			 : "the pages it wrote in private file mappings are "
			   "in");
	return 0;
}

/*
 * The hold ends. On success every private file page is in; otherwise the
 * target is stopped (SIGSTOP, queued before the threads are let go) rather
 * than left to run on the file's stale pages where the source had its own.
 */
void
dest_release_held(struct dest *d)
{
	uint64_t missing;

	if (!d->held.on)
		return;
	missing = dest_private_missing(d);
	if (missing > 0 && procref_signal(&d->t, SIGSTOP) == 0)
		log_warnx("migration %s: process %d left stopped: %llu pages "
			  "of its private file mappings never arrived",
			  log_id(d->m->id), (int)d->m->pid,
			  (unsigned long long)missing);
	/*
	 * Its pre-copied pages are of several moments: never to run. Its
	 * copy of the uffd goes while it is held (the privileged part closes
	 * it through the hold), so that nothing of the migration stays in it.
	 */
	if (d->held.precopy && d->target_fd >= 0 && !d->held.no_hold)
		dest_close_target_fd(d); /* through the hold */
	if (d->held.precopy && procref_signal(&d->t, SIGSTOP) == 0) {
		log_warnx("migration %s: process %d left stopped: the "
			  "pre-copy ended before its switchover",
			  log_id(d->m->id), (int)d->m->pid);
		missing = 1;
	}
	if (dest_by_grant(d) && !d->held.no_hold)
		dest_grant_end(d, PRIVOP_DEST_GO, NULL, 0);
	d->held.on = 0;
	close(d->held.memfd);
	d->held.memfd = -1;
	if (missing == 0) {
		log_info("migration %s: %s; process %d runs", log_id(d->m->id),
			 d->m->pre.rounds ? "switchover"
					  : "private file pages in",
			 (int)d->m->pid);
		dest_persist_dirty(d); /* not held any more */
	}
}

/*
 * Writes the pages of one frame into a private file mapping of the held
 * target. A write through /proc/PID/mem makes the anonymous copy the source
 * had (and goes through read-only protection, as RELRO needs); a ZERO
 * marker is the file's own page, which the target already maps: nothing to
 * do. Returns -1 with err filled when a page cannot be written: the
 * caller fails the migration.
 */
int
dest_write_private(struct dest *d, struct dst_region *dr,
		   const Uffdd__PageData *pd, const struct evbuffer_iovec *v,
		   int nv, char *err, size_t errlen)
{
	uint64_t ps = dr->r.page_size;

	for (uint64_t p = pd->page; p < pd->page + pd->npages; p++) {
		enum page_state st = pagestate_get(&dr->ps, p);
		const uint8_t *src;

		/* In already, or unmapped by the target after the release. */
		if (st == PAGE_PRESENT || st == PAGE_DISCARDED)
			continue;
		if (!pd->zero) {
			dest_frame_pages(d, v, nv, (p - pd->page) * ps, ps, 1,
					 &src);
			if (!d->held.on ||
			    pwrite(d->held.memfd, src, ps,
				   (off_t)dest_page_addr(dr, p)) !=
				    (ssize_t)ps) {
				snprintf(err, errlen,
					 "writing the private file page at "
					 "0x%llx of process %d: %s",
					 (unsigned long long)dest_page_addr(dr,
									    p),
					 (int)d->m->pid,
					 d->held.on ? strerror(errno)
						    : "target not held");
				return -1;
			}
			if (pd->demand)
				d->m->cnt.demand_pages++;
			else
				d->m->cnt.prefetched_pages++;
			metrics_pages(ROLE_DEST, pd->demand, METRICS_DATA, 1,
				      ps);
		}
		pagestate_set(&dr->ps, p, PAGE_PRESENT);
	}
	if (d->held.on && dest_private_missing(d) == 0 && !d->held.precopy)
		dest_release_held(d);
	d->m->cnt.pages_present = dest_present_total(d);
	return 0;
}

/*
 * Pre-copy on the destination (the source's export --precopy): the target
 * is set up as for any attach (discarded, registered) but held, every
 * thread in ptrace-stop (hold.c), until the source's SWITCHOVER. Until
 * then the source sends rounds of pages while its process runs, and a page
 * may come again with newer bytes: a missing page is installed with
 * UFFDIO_COPY, one installed before is overwritten through /proc/PID/mem
 * (the target does not run, so nothing reads it in between). Pages never
 * sent stay missing: post-copy faults once the target runs.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "daemon/conn.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/migration.h"

/* The source's demand HELLO: whether it pre-copies (set at the attach). */
void
dest_precopy_hello(struct dest *d, const Uffdd__Hello *h)
{
	/* Asked for on every connection: a restored destination too. */
	d->held.ack = 0;
	for (size_t i = 0; i < h->n_features; i++)
		if (strcmp(h->features[i], FEATURE_SWITCHOVER_ACK) == 0)
			d->held.ack = 1;
	if (d->m->state != MIG_CONNECTING)
		return;
	d->held.precopy = 0;
	for (size_t i = 0; i < h->n_features; i++)
		if (strcmp(h->features[i], FEATURE_PRECOPY) == 0)
			d->held.precopy = 1;
	d->m->pre.on = d->held.precopy;
}

/* SWITCHOVER taken: echoed to a source that waits for it. */
static void
ack_switchover(struct dest *d, const Uffdd__Switchover *sw)
{
	if (!d->held.ack || d->demand == NULL)
		return;
	conn_send(d->demand, FRAME_SWITCHOVER, &sw->base);
	conn_flush(d->demand);
}

/*
 * Overwrites the pages of frame pd that are present already, run by run
 * of consecutive addresses: with the frame's bytes (in d->buf), or zeros
 * for a ZERO frame. Returns -1 when the migration failed.
 */
static int
replace_present(struct dest *d, struct dst_region *dr,
		const Uffdd__PageData *pd)
{
	uint64_t ps = dr->r.page_size, p = pd->page,
		 end = pd->page + pd->npages;
	int zeroed = 0;

	while (p < end) {
		uint64_t n = 0, addr;
		const uint8_t *src;

		/*
		 * PRESENT only: a discarded page is none, and a write
		 * through /proc/PID/mem there would fault on our own uffd.
		 */
		if (pagestate_get(&dr->ps, p) != PAGE_PRESENT) {
			p++;
			continue;
		}
		while (p + n < end &&
		       pagestate_get(&dr->ps, p + n) == PAGE_PRESENT)
			n++;
		n = dest_addr_run(dr, p, n);
		/* A ZERO frame has no bytes: d->buf is free for zeros. */
		if (pd->zero && !zeroed) {
			memset(d->in.buf, 0, FRAME_DATA_MAX);
			zeroed = 1;
		}
		src = pd->zero ? d->in.buf : d->in.buf + (p - pd->page) * ps;
		addr = dest_page_addr(dr, p);
		if (pwrite(d->held.memfd, src, n * ps, (off_t)addr) !=
		    (ssize_t)(n * ps)) {
			dest_fail(d,
				  "pre-copy: replacing %llu pages at 0x%llx "
				  "of process %d: %s",
				  (unsigned long long)n,
				  (unsigned long long)addr, (int)d->m->pid,
				  strerror(errno));
			return -1;
		}
		p += n;
	}
	return 0;
}

/*
 * A PAGE_DATA frame of a pre-copy round (checked by dest_page_data()):
 * pages present already are replaced, the others installed; a ZERO marker
 * leaves a missing page none (discarded, as the bulk stream does).
 */
const char *
dest_precopy_data(struct dest *d, struct conn *c, const struct frame_hdr *h,
		  const Uffdd__PageData *pd, struct dst_region *dr)
{
	struct evbuffer_iovec v = {d->in.buf, h->data_len};

	/* Rounds come on the bulk lane; nothing is asked for meanwhile. */
	if (c != d->bulk || pd->demand || !d->held.on ||
	    dr->r.kind == REGION_FILE_PRIVATE)
		return "PAGE_DATA off the bulk stream during a pre-copy";
	if (h->data_len && conn_take_data(c, d->in.buf, h->data_len) < 0)
		return "short PAGE_DATA";
	d->m->cnt.bytes += h->data_len;
	loop_bulk();
	if (replace_present(d, dr, pd) < 0)
		return NULL;
	for (uint64_t p = pd->page; p < pd->page + pd->npages; p++) {
		enum page_state st = pagestate_get(&dr->ps, p);

		if (pd->zero && st == PAGE_MISSING)
			pagestate_set(&dr->ps, p, PAGE_DISCARDED);
		else if (!pd->zero && st == PAGE_DISCARDED)
			pagestate_set(&dr->ps, p, PAGE_MISSING);
	}
	if (!pd->zero && dest_install_pages(d, d, dr, pd, &v, 1) < 0)
		return NULL;
	d->m->cnt.pages_present = dest_present_total(d);
	return NULL;
}

/*
 * The source's ROUND_SYNC, behind a round's last page: every frame before
 * it is installed (pre-copy frames are, as they come). Echoed on the
 * demand lane: the source freezes its process then.
 */
const char *
dest_precopy_sync(struct dest *d, struct conn *c, const Uffdd__Ping *p)
{
	if (!d->held.precopy || c != d->bulk || d->demand == NULL ||
	    d->m->state != MIG_RUNNING)
		return "unexpected ROUND_SYNC";
	conn_send(d->demand, FRAME_ROUND_SYNC, &p->base);
	conn_flush(d->demand);
	return NULL;
}

/*
 * The freeze time: from the source's freeze (its wall clock) to now, when
 * the clocks agree that far: it is at least the time the source says it
 * was frozen when it sent SWITCHOVER, plus ours since it came (t0). Else
 * (clocks out of step) those two parts only, the wire between not
 * counted. ns.
 */
static uint64_t
downtime(const Uffdd__Switchover *sw, uint64_t t0)
{
	uint64_t frozen = sw->frozen_us < UINT64_MAX / 2000
				  ? sw->frozen_us * 1000
				  : UINT64_MAX / 2;
	uint64_t parts = frozen + (now_ns() - t0);
	struct timespec ts;
	uint64_t wall;

	clock_gettime(CLOCK_REALTIME, &ts);
	wall = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	if (sw->freeze_unix_ns && wall > sw->freeze_unix_ns &&
	    wall - sw->freeze_unix_ns >= parts &&
	    wall - sw->freeze_unix_ns < parts + 60000000000ULL)
		return wall - sw->freeze_unix_ns;
	return parts;
}

/*
 * The source is frozen and has sent every page as it is now (the frames
 * before this one on the same lane): the target runs.
 */
const char *
dest_switchover(struct dest *d, struct conn *c, const Uffdd__Switchover *sw)
{
	uint64_t t0 = now_ns();
	size_t kept =
		sw->rounds < MIG_ROUNDS_KEPT ? sw->rounds : MIG_ROUNDS_KEPT;

	/*
	 * After a resume the source sends it again, as it cannot know
	 * whether the first one arrived: here it did, and the target runs.
	 */
	if (!d->held.precopy && d->m->pre.rounds && c == d->bulk) {
		log_debug("migration %s: SWITCHOVER again, ignored",
			  log_id(d->m->id));
		ack_switchover(d, sw);
		return NULL;
	}
	if (!d->held.precopy || c != d->bulk || d->m->state != MIG_RUNNING ||
	    !d->held.on || sw->rounds == 0 || sw->n_round_bytes != kept)
		return "unexpected or malformed SWITCHOVER";
	d->held.precopy = 0;
	d->m->pre.on = 0;
	d->m->pre.rounds = sw->rounds;
	d->m->pre.bytes = sw->bytes;
	memcpy(d->m->pre.round_bytes, sw->round_bytes, kept * sizeof(uint64_t));
	dest_release_held(d);
	d->m->pre.downtime_ns = downtime(sw, t0);
	log_info("migration %s: pre-copy over after %u rounds, %llu bytes; "
		 "target %d ran %.1f ms after the source froze; %llu of %llu "
		 "pages present",
		 log_id(d->m->id), sw->rounds, (unsigned long long)sw->bytes,
		 (int)d->m->pid, (double)d->m->pre.downtime_ns / 1e6,
		 (unsigned long long)dest_present_total(d),
		 (unsigned long long)d->m->cnt.pages_total);
	dest_persist_dirty(d);
	d->m->cnt.pages_present = dest_present_total(d);
	ack_switchover(d, sw);
	dest_run_hold_clock(d);
	dest_maybe_complete(d);
	return NULL;
}

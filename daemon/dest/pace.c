/*
 * The bulk lane's pace: held while one thread waits for a demand answer,
 * and from the start of an attach --record-working-set until the
 * recording is over. Calls nothing of the destination's.
 */
#include "config.h"

#include <event2/event.h>

#include "daemon/conn.h"
#include "daemon/dest/installer.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/migration.h"

/*
 * Pages the source keeps in flight on the bulk lane past what we took:
 * its socket is kept up to 4 MiB full (source/serve.c, BULK_HIGH).
 */
#define FRONT_BYTES (4u << 20)

/*
 * Whether page is in a bulk frame taken and not yet installed: the one
 * going in pieces, or one with the installing thread (offload.c).
 */
static int
being_installed(const struct dest *d, const struct dst_region *dr,
		uint64_t page)
{
	const Uffdd__PageData *p = &d->in.pend;
	const struct dest_ring *r = d->in.ring;

	if (d->in.pending && p->region == dr->r.index && page >= p->page &&
	    page < p->page + p->npages)
		return 1;
	for (unsigned i = r ? r->head : 0; r != NULL && i != r->tail; i++) {
		const struct inst_job *j = &r->jobs[i % INST_RING];

		if (j->region == dr->r.index && page >= j->page &&
		    page < j->page + j->npages)
			return 1;
	}
	return 0;
}

/* Whether a bulk frame was taken: the front means something. */
static int
front_known(const struct dest *d, const struct dst_region *dr)
{
	return (d->in.pbuf != NULL || d->in.ring != NULL) &&
	       d->in.front_reg == dr->r.index;
}

/*
 * Whether page is where the bulk stream is about to install: in a frame
 * being installed, or within FRONT_BYTES past the last one taken, in its
 * region. A target that reads in order and has caught up with the stream
 * faults there, on pages already on their way.
 */
int
dest_at_bulk_front(const struct dest *d, const struct dst_region *dr,
		   uint64_t page)
{
	uint64_t span = FRONT_BYTES / dr->r.page_size;

	if (being_installed(d, dr, page))
		return 1;
	return front_known(d, dr) && page >= d->in.front_page &&
	       page - d->in.front_page < span;
}

/*
 * The span past the last frame taken that the stream's next frame covers:
 * a source sends at most this much data a frame (source/serve.c,
 * BULK_DATA_PAGES of 4 KiB).
 */
#define NEXT_FRAME_BYTES (256u << 10)

/* Whether the bulk lane is held here: a recording, or the run hold. */
static int
held_here(const struct dest *d)
{
	return (d->m->ws != NULL && !migration_ws_closed(d->m)) ||
	       d->bh.run_hold == 1;
}

/* An answer's time before one was measured: a loopback round trip's. */
#define ANSWER_NS_FIRST 250000ull

void
dest_ewma(uint64_t *avg, uint64_t x)
{
	*avg = *avg ? (*avg * 7 + x) / 8 : x;
}

/* A bulk frame was taken: the stream's pace, for dest_stream_brings(). */
void
dest_stream_taken(struct dest *d)
{
	uint64_t t = now_ns();

	if (d->in.take_ns)
		dest_ewma(&d->in.gap_ns, t - d->in.take_ns);
	d->in.take_ns = t;
	d->bh.frame_owed = 0;
}

/*
 * Whether the bulk stream is about to install page, with nothing holding
 * the lane: in the frame being installed, or in the next frame's span
 * past it when, at the stream's pace, that frame is due before a
 * request's answer would come. A thread that reads in order and caught
 * up with the stream faults there, once a frame or more, and a request
 * would only bring the page a second time, on the other lane (fault.c
 * leaves such a fault to the stream, and asks if it did not come). A
 * stream held to a trickle (--bulk-rate), or overdue, is not waited for.
 */
int
dest_stream_brings(const struct dest *d, const struct dst_region *dr,
		   uint64_t page)
{
	uint64_t span = NEXT_FRAME_BYTES / dr->r.page_size, since, due;

	if (d->bulk == NULL || held_here(d) || dest_bulk_waits(d))
		return 0;
	if (being_installed(d, dr, page))
		return 1;
	if (!front_known(d, dr) || page < d->in.front_page ||
	    page - d->in.front_page >= (span ? span : 1) || d->in.gap_ns == 0)
		return 0;
	since = now_ns() - d->in.take_ns;
	if (since >= 2 * d->in.gap_ns)
		return 0; /* overdue: the stream paused, or went elsewhere */
	due = d->in.gap_ns > since ? d->in.gap_ns - since : 0;
	return due <= dest_answer_ns(d);
}

uint64_t
dest_answer_ns(const struct dest *d)
{
	return d->fr.answer_ns ? d->fr.answer_ns : ANSWER_NS_FIRST;
}

/*
 * Whether one thread waits for a demand answer, for a page the bulk
 * stream is not about to bring. Then the bulk lane waits: on a busy
 * machine the daemons share CPUs, and installing bulk frames kept the
 * source from running to answer. Only for one: with several requests in
 * flight (threads faulting back to back) holding the lane starved it, and
 * every page came on demand at half the speed. Nor for a page at the bulk
 * front: the stream brings it as soon as the answer would, and holding it
 * made a reader that keeps up with the stream wait for a round trip at
 * every frame. Nor until a frame was taken since the last answer: a
 * thread that faults again as soon as it is answered, from the start,
 * would keep exactly one request in flight and the lane held for good
 * (a reader in order beside the destination got every page on demand).
 */
int
dest_bulk_waits(const struct dest *d)
{
	return d->fr.nrequests == 1 && d->fr.nfront == 0 && !d->bh.frame_owed;
}

void
dest_bulk_hold(struct dest *d)
{
	/* Every job of the installing thread's taken: offload.c. */
	int full = d->in.ring != NULL && d->in.ring->stalled;

	if (d->bulk)
		conn_pause(d->bulk, dest_bulk_waits(d) || held_here(d) || full);
	if (d->in.pending && !dest_bulk_waits(d))
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

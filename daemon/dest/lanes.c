/*
 * The two lanes to the source: the demand lane (faults' requests and their
 * answers, at the fault priority) and the bulk lane (the rest of the pages,
 * in the background). A lost lane pauses the migration and is reconnected
 * with backoff until the pause deadline; a resume tells the source which
 * pages we hold (HAVE bitmaps) and asks again for what threads wait on.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "daemon/conffile.h"
#include "daemon/conn.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/loop.h"
#include "daemon/migration.h"
#include "daemon/peer.h"
#include "daemon/stats.h"

/* Frames of the bulk lane handled before the loop looks at faults again. */
#define BULK_BUDGET 2
#define HANDSHAKE_TIMEOUT 15
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
/*
 * attach --wait-export: a source that does not know the ID yet is asked
 * again this often. Short: the export it waits for is made just before
 * the source's guest stops, and everything up to the attach is done
 * before that stop (docs/qemu-two-hosts.md).
 */
#define EXPORT_POLL_MS 200

/*
 * Whether every forked child needs nothing more of a page: the source
 * sends no page again that HAVE names, and a child lacks what its parent
 * got after the fork.
 */
static int
kids_have(const struct dest *d, uint32_t idx, uint64_t page)
{
	for (size_t k = 0; k < d->kin.nkids; k++) {
		struct dst_region *kr =
			dest_region_by_index(d->kin.kids[k], idx);

		if (kr && page < kr->npages &&
		    pagestate_get(&kr->ps, page) < PAGE_PRESENT)
			return 0;
	}
	return 1;
}

/* Tells the source which pages of a region we hold, in bounded frames. */
static void
send_have(struct dest *d, const struct dst_region *dr)
{
	const uint64_t chunk = 1ULL << 21; /* pages a frame: 256 KiB of bits */

	for (uint64_t first = 0; first < dr->npages; first += chunk) {
		Uffdd__PageBitmap b = UFFDD__PAGE_BITMAP__INIT;
		uint64_t n =
			dr->npages - first < chunk ? dr->npages - first : chunk;
		uint8_t *bits = xcalloc((n + 7) / 8, 1);

		for (uint64_t i = 0; i < n; i++)
			if (pagestate_get(&dr->ps, first + i) == PAGE_PRESENT &&
			    kids_have(d, dr->r.index, first + i))
				bits[i / 8] |= (uint8_t)(1u << (i % 8));
		b.region = dr->r.index;
		b.first_page = first;
		b.npages = n;
		b.bits.len = (n + 7) / 8;
		b.bits.data = bits;
		conn_send(d->demand, FRAME_HAVE, &b.base);
		free(bits);
	}
}

/*
 * Names the regions we take and the pages we hold in them: the source
 * forgets what it sent before and sends everything else (again).
 */
static void
send_holdings(struct dest *d)
{
	Uffdd__RegionTable acc = UFFDD__REGION_TABLE__INIT;
	Uffdd__Region *rb = xcalloc(d->nregs, sizeof(*rb));
	Uffdd__Region **rp = xcalloc(d->nregs, sizeof(*rp));

	for (size_t i = 0; i < d->nregs; i++) {
		const struct region *r = &d->regs[i].r;

		uffdd__region__init(&rb[i]);
		rb[i].index = r->index;
		rb[i].name = (char *)r->name;
		rb[i].start = d->regs[i].src_start;
		rb[i].length = r->length;
		rb[i].page_size = r->page_size;
		rb[i].kind = (Uffdd__RegionKind)r->kind;
		rp[i] = &rb[i];
	}
	acc.n_regions = d->nregs;
	acc.regions = rp;
	conn_send(d->demand, FRAME_REGIONS, &acc.base);
	free(rb);
	free(rp);
	for (size_t i = 0; i < d->nregs; i++)
		send_have(d, &d->regs[i]);
}

/* Asks again for every page a thread waits on; the old requests died. */
static void
rerequest(struct dest *d)
{
	struct conn *lane = d->root ? d->root->demand : d->demand;

	for (size_t k = 0; k < d->kin.nkids; k++)
		rerequest(d->kin.kids[k]);
	for (size_t i = 0; i < d->nregs; i++) {
		struct dst_region *dr = &d->regs[i];

		for (uint64_t p = 0; dr->ps.requested && p < dr->npages; p++) {
			Uffdd__PageRequest pr = UFFDD__PAGE_REQUEST__INIT;

			if (pagestate_get(&dr->ps, p) != PAGE_REQUESTED)
				continue;
			pr.region = dr->r.index;
			pr.page = p;
			pr.npages = 1;
			conn_send(lane, FRAME_PAGE_REQUEST, &pr.base);
		}
	}
}

/*
 * The source stayed away for pause-deadline seconds. A committed
 * destination is whole, only the source's process may stay stopped;
 * one whose pages all came but were never vouched for is stopped; any
 * other fails loudly, with the reason its resumes were refused if any.
 */
static void
deadline(struct dest *d)
{
	if (d->cm.committed) {
		log_warnx("migration %s: source %s unreachable for %d s after "
			  "the COMMIT: its acknowledgement was not delivered, "
			  "and the source may hold its process stopped",
			  log_id(d->m->id), d->from, conf.pause_deadline);
		dest_end(d);
	} else if (d->m->ph.committing) {
		dest_fail_stop(d,
			       "every page arrived, but source %s never "
			       "vouched for them (no COMMIT within "
			       "pause-deadline, %d s%s%s)",
			       d->from, conf.pause_deadline,
			       d->ln.refused[0] ? ": " : "", d->ln.refused);
	} else if (d->ln.refused[0]) {
		dest_fail(d, "%s (for pause-deadline, %d s)", d->ln.refused,
			  conf.pause_deadline);
	} else {
		dest_fail(d, "source %s unreachable for %d s (pause deadline)",
			  d->from, conf.pause_deadline);
	}
}

/*
 * The backoff is over: reopen the bulk lane, or both lanes (a resume),
 * unless the pause deadline has passed.
 */
static void
retry_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct dest *d = arg;
	char err[256];

	/* attach --wait-export: ask again whether the export is there. */
	if (d->m->state == MIG_CONNECTING && d->demand == NULL) {
		if (dest_connect_demand(d, 0, err, sizeof(err)) < 0)
			dest_attach_fail(d, ERR_UNREACHABLE, "%s", err);
		return;
	}
	if (d->m->state == MIG_RUNNING && d->demand && d->bulk == NULL &&
	    !d->cm.complete_sent) {
		if (dest_open_bulk(d) < 0)
			dest_schedule_retry(d);
		return;
	}
	if ((d->m->state != MIG_PAUSED && !d->cm.committed) || d->demand)
		return;
	if (now_ns() - d->ln.t_pause >
	    (uint64_t)conf.pause_deadline * 1000000000ULL) {
		deadline(d);
		return;
	}
	log_debug("migration %s: reconnecting to %s", log_id(d->m->id),
		  d->from);
	if (dest_connect_demand(d, 1, err, sizeof(err)) < 0) {
		log_warnx("migration %s: %s", log_id(d->m->id), err);
		dest_schedule_retry(d);
	}
}

/* The next try, after a backoff that doubles up to BACKOFF_MAX_MS. */
void
dest_schedule_retry(struct dest *d)
{
	struct timeval tv;

	if (d->ln.retry_ev == NULL)
		d->ln.retry_ev = evtimer_new(base, retry_cb, d);

	d->ln.backoff_ms =
		d->ln.backoff_ms ? d->ln.backoff_ms * 2 : BACKOFF_MIN_MS;
	if (d->ln.backoff_ms > BACKOFF_MAX_MS)
		d->ln.backoff_ms = BACKOFF_MAX_MS;
	tv.tv_sec = d->ln.backoff_ms / 1000;
	tv.tv_usec = (d->ln.backoff_ms % 1000) * 1000;
	evtimer_add(d->ln.retry_ev, &tv);
}

/*
 * A lane broke: the migration pauses, faulting threads keep waiting (their
 * requests stay marked and go out again on reconnect), and the destination
 * reconnects with backoff until the pause deadline.
 */
void
dest_lanes_down(struct dest *d, const char *why)
{
	/* Before the region table nothing waits to resume: the attach fails. */
	if (d->m->state == MIG_CONNECTING) {
		dest_attach_fail(d, ERR_PROTOCOL, "source %s: %s", d->from,
				 why);
		return;
	}
	if (d->demand && d->m->state != MIG_COMPLETE)
		metrics.lane_failures[ROLE_DEST]++;
	conn_free(d->demand);
	conn_free(d->bulk);
	d->demand = d->bulk = NULL;
	d->ln.resuming = 0;
	d->in.pending = 0;
	/* A COMPLETE in flight may be lost: a resume sends it again. */
	d->cm.complete_sent = 0;
	if (d->cm.committed) {
		log_warnx("migration %s: source lost (%s) before it echoed our "
			  "COMMIT_ACK; resuming to deliver it",
			  log_id(d->m->id), why);
		if (d->ln.t_pause == 0)
			d->ln.t_pause = now_ns();
		d->ln.backoff_ms = 0;
		dest_schedule_retry(d);
		return;
	}
	if (d->m->state == MIG_RUNNING) {
		log_warnx("migration %s: source lost (%s); faulting threads "
			  "wait",
			  log_id(d->m->id), why);
		migration_set_state(d->m, MIG_PAUSED);
		d->ln.t_pause = now_ns();
		d->ln.backoff_ms = 0;
		dest_persist_dirty(d);
	}
	if (d->m->state == MIG_PAUSED)
		dest_schedule_retry(d);
}

/*
 * What a frame's handler returned: NULL, or why the lanes go down. The
 * handlers (install, pre-copy, commit) never take the lanes down
 * themselves: the lanes drive them, not the other way round.
 */
static void
down_if(struct dest *d, const char *why)
{
	if (why != NULL)
		dest_lanes_down(d, why);
}

/*
 * attach --wait-export: the source does not know the ID (yet). Within the
 * time given from the attach, the demand lane goes and is opened again
 * after EXPORT_POLL_MS: 1. Else 0, and the attach fails as without it.
 */
static int
wait_export(struct dest *d)
{
	struct timeval tv = {0, EXPORT_POLL_MS * 1000};

	if (d->ln.export_wait == 0 ||
	    now_ns() - d->m->t.start >= d->ln.export_wait * 1000000000ULL)
		return 0;
	if (d->ln.retry_ev == NULL) {
		d->ln.retry_ev = evtimer_new(base, retry_cb, d);
		log_info("migration %s: source %s has no export with this ID "
			 "yet; asking again for up to %u s",
			 log_id(d->m->id), d->from, d->ln.export_wait);
	}
	conn_free(d->demand);
	d->demand = NULL;
	evtimer_add(d->ln.retry_ev, &tv);
	return 1;
}

/* A frame on the bulk lane: pages, or the source's word that it broke. */
static void
bulk_frame(struct conn *c, const struct frame_hdr *h, ProtobufCMessage *msg,
	   void *arg)
{
	struct dest *d = arg;
	const char *why = NULL;

	/*
	 * The daemon takes the reading over at a record's end, which may be
	 * a read or two after the HELLO (tls_read_ahead()): said once then.
	 */
	if (!d->ln.bulk_opened && conn_tls_opened(c)) {
		d->ln.bulk_opened = 1;
		log_info(
			"migration %s: bulk lane's TLS records opened by uffdd",
			log_id(d->m->id));
	}
	if (h->type == FRAME_PAGE_DATA) {
		if (d->m->state == MIG_RUNNING)
			why = dest_page_data(d, c, h,
					     (const Uffdd__PageData *)msg);
	} else if (h->type == FRAME_SWITCHOVER) {
		why = dest_switchover(d, c, (const Uffdd__Switchover *)msg);
	} else if (h->type == FRAME_ROUND_SYNC) {
		why = dest_precopy_sync(d, c, (const Uffdd__Ping *)msg);
	} else if (h->type == FRAME_ERROR) {
		dest_lanes_down(d, ((const Uffdd__Error *)msg)->message);
	} else if (h->type == FRAME_HELLO) {
		/*
		 * Established: read the socket ourselves, one readv a round,
		 * not the bufferevent's FIONREAD and small read before
		 * conn_fill()'s (a plaintext lane; TLS stays with it).
		 */
		conn_read_direct(c);
		d->ln.bulk_opened = 0;
	} else if (h->type != FRAME_PING) {
		why = "unexpected frame on the bulk lane";
	}
	down_if(d, why);
}

/*
 * The bulk lane alone broke: the demand lane goes on serving faults and the
 * bulk lane is opened again after a backoff. What was queued or in flight
 * on it is gone, though the source counts it sent: tell the source what we
 * hold, as a resume does, so that it sends the rest again (and drops the
 * lane if it still holds it open). (The source closes bulk first when it
 * fails, with its reason queued on the demand lane.)
 */
static void
bulk_close(struct conn *c, const char *why, void *arg)
{
	struct dest *d = arg;

	conn_free(d->bulk);
	d->bulk = NULL;
	d->in.pending = 0; /* its pages are not ours: send_holdings() says so */
	if (d->cm.complete_sent)
		return; /* nothing more to come on it */
	if (d->demand && d->m->state == MIG_RUNNING) {
		metrics.lane_failures[ROLE_DEST]++;
		log_warnx("migration %s: bulk lane lost (%s); %llu of %llu "
			  "pages present, the source sends the rest again",
			  log_id(d->m->id), why,
			  (unsigned long long)dest_present_total(d),
			  (unsigned long long)d->m->cnt.pages_total);
		send_holdings(d);
		dest_schedule_retry(d);
	} else {
		dest_lanes_down(d, why);
	}
}

/* The benchmark's delay is over: the bulk lane opens now. */
static void
bulk_delay_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct dest *d = arg;

	if (d->m->state == MIG_RUNNING && dest_open_bulk(d) < 0)
		dest_lanes_down(d, "bulk lane unreachable");
}

/* Opens the bulk lane and says hello; the rest is in bulk_frame. */
int
dest_open_bulk(struct dest *d)
{
	Uffdd__Hello h = UFFDD__HELLO__INIT;
	char err[256], name[300];
	const char *delay = getenv("UFFDD_BENCH_BULK_DELAY_MS");

	/*
	 * Benchmark knob (tests/bench): hold the bulk lane back so that demand
	 * faults can be timed on an idle path. Never set in production.
	 */
	if (delay && d->ln.bulk_delay == NULL) {
		struct timeval tv = {atoi(delay) / 1000,
				     atoi(delay) % 1000 * 1000};

		d->ln.bulk_delay = evtimer_new(base, bulk_delay_cb, d);
		evtimer_add(d->ln.bulk_delay, &tv);
		return 0;
	}
	snprintf(name, sizeof(name), "source %s bulk", d->from);
	d->bulk = peer_connect(d->from, d->pin, name, bulk_frame, bulk_close, d,
			       err, sizeof(err));
	if (d->bulk == NULL) {
		log_warnx("migration %s: bulk lane: %s", log_id(d->m->id), err);
		return -1;
	}
	conn_set_priority(d->bulk, PRIO_BULK);
	conn_set_budget(d->bulk, BULK_BUDGET);
	conn_set_timeout(d->bulk, LANE_TIMEOUT);
	dest_bulk_hold(d); /* held while a working set is recorded */
	h.version = UFFDD_PROTO_VERSION;
	h.lane = UFFDD__LANE__LANE_BULK;
	h.migration_id = d->m->id;
	return conn_send(d->bulk, FRAME_HELLO, &h.base);
}

/*
 * The source answered a resume: check that its regions are still the ones
 * we hold, tell it what we hold (it sends nothing else), ask again for what
 * threads wait on, and reopen the bulk lane.
 */
static void
resume(struct dest *d, const Uffdd__RegionTable *t)
{
	for (size_t i = 0; i < d->nregs; i++) {
		const struct region *r = &d->regs[i].r;
		const Uffdd__Region *s = NULL;

		for (size_t k = 0; k < t->n_regions; k++)
			if (t->regions[k]->index == r->index)
				s = t->regions[k];
		if (s == NULL || s->start != d->regs[i].src_start ||
		    s->length != r->length || s->page_size != r->page_size) {
			dest_fail(d,
				  "source %s: region 0x%llx changed across "
				  "the reconnect",
				  d->from, (unsigned long long)r->start);
			return;
		}
	}
	send_holdings(d);
	rerequest(d);
	d->ln.resuming = 0;
	d->ln.backoff_ms = 0;
	d->m->reconnects++;
	if (d->ln.refused[0]) {
		d->ln.refused[0] = '\0';
		d->m->reason[0] = '\0';
	}
	log_info("migration %s: resumed after %.1f s paused; %llu of %llu "
		 "pages present",
		 log_id(d->m->id), (double)(now_ns() - d->ln.t_pause) / 1e9,
		 (unsigned long long)dest_present_total(d),
		 (unsigned long long)d->m->cnt.pages_total);
	migration_set_state(d->m, MIG_RUNNING);
	dest_persist_dirty(d);
	/* A pre-copy's pages are all present, yet SWITCHOVER is to come. */
	if (!d->held.precopy &&
	    dest_present_total(d) == d->m->cnt.pages_total &&
	    d->kin.nkids == 0) {
		dest_maybe_complete(d);
		return;
	}
	if (dest_open_bulk(d) < 0)
		dest_lanes_down(d, "bulk lane unreachable");
}

/*
 * The source speaks another protocol version: an attach fails saying so;
 * a resume pauses on, and its pause deadline fails with that reason.
 */
static void
other_version(struct dest *d, uint32_t v)
{
	snprintf(d->ln.refused, sizeof(d->ln.refused),
		 "source %.200s speaks protocol version %u, this destination "
		 "%u: %s",
		 d->from, v, UFFDD_PROTO_VERSION, UFFDD_PROTO_UPGRADE);
	if (d->m->state == MIG_CONNECTING) {
		dest_attach_fail(d, ERR_PROTOCOL, "%s", d->ln.refused);
		return;
	}
	snprintf(d->m->reason, sizeof(d->m->reason), "%s", d->ln.refused);
	dest_lanes_down(d, d->ln.refused);
}

/*
 * The source's ERROR. Attaching: the attach fails with its code (a
 * protocol version refused says what to do). Once attached: its pages
 * gone (SOURCE, UNKNOWN_ID) fail the migration loudly; its process run
 * (SOURCE_RAN) stops the target; a resume refused for its version keeps
 * the migration paused with that reason; anything else breaks the lanes.
 */
static void
source_error(struct dest *d, const Uffdd__Error *e)
{
	int version = e->code == ERR_PROTOCOL &&
		      strstr(e->message, "protocol version") != NULL;
	const char *hint =
		version && strstr(e->message, UFFDD_PROTO_UPGRADE) == NULL
			? ": " UFFDD_PROTO_UPGRADE
			: "";

	if (d->m->state == MIG_CONNECTING && e->code == ERR_UNKNOWN_ID &&
	    wait_export(d))
		return;
	if (d->m->state == MIG_CONNECTING) {
		char waited[80] = "";

		if (e->code == ERR_UNKNOWN_ID && d->ln.export_wait)
			snprintf(waited, sizeof(waited),
				 " (no export with it came within the %u s the "
				 "attach waits)",
				 d->ln.export_wait);
		dest_attach_fail(d,
				 e->code == ERR_UNKNOWN_ID ||
						 e->code == ERR_PROTOCOL ||
						 e->code == ERR_SOURCE_RAN
					 ? e->code
					 : ERR_SOURCE,
				 "source %s: %.300s%s%s", d->from, e->message,
				 hint, waited);
	} else if (e->code == ERR_SOURCE_RAN) {
		dest_fail_stop(d, "source %s: %.350s", d->from, e->message);
	} else if (e->code == ERR_SOURCE || e->code == ERR_UNKNOWN_ID) {
		dest_fail(d, "source %s: %.350s", d->from, e->message);
	} else if (version) {
		snprintf(d->ln.refused, sizeof(d->ln.refused),
			 "source %.200s: %.200s%s", d->from, e->message, hint);
		snprintf(d->m->reason, sizeof(d->m->reason), "%s",
			 d->ln.refused);
		dest_lanes_down(d, d->ln.refused);
	} else {
		dest_lanes_down(d, e->message);
	}
}

/*
 * A frame on the demand lane: the handshake and region table of an attach
 * or a resume, the answers to requests, COMMIT, or the source's error.
 */
static void
demand_frame(struct conn *c, const struct frame_hdr *h, ProtobufCMessage *msg,
	     void *arg)
{
	struct dest *d = arg;

	if (d->cm.committed) {
		dest_committed_frame(d, h, msg);
		return;
	}
	switch (h->type) {
	case FRAME_HELLO:
		if (((const Uffdd__Hello *)msg)->version ==
		    UFFDD_PROTO_VERSION) {
			dest_precopy_hello(d, (const Uffdd__Hello *)msg);
			dest_run_hold_hello(d, (const Uffdd__Hello *)msg);
			break;
		}
		other_version(d, ((const Uffdd__Hello *)msg)->version);
		break;
	case FRAME_REGIONS:
		if (d->m->state == MIG_CONNECTING) {
			if (dest_attach_regions(
				    d, (const Uffdd__RegionTable *)msg) &&
			    dest_open_bulk(d) < 0)
				dest_lanes_down(d, "bulk lane unreachable");
		} else if (d->ln.resuming)
			resume(d, (const Uffdd__RegionTable *)msg);
		else
			dest_lanes_down(d, "second region table");
		break;
	case FRAME_PAGE_DATA:
		if (d->m->state == MIG_RUNNING)
			down_if(d,
				dest_page_data(d, c, h,
					       (const Uffdd__PageData *)msg));
		break;
	case FRAME_PING:
		break;
	case FRAME_COMMIT:
		down_if(d, dest_commit(d, (const Uffdd__Commit *)msg));
		break;
	case FRAME_ERROR:
		source_error(d, (const Uffdd__Error *)msg);
		break;
	default:
		dest_lanes_down(d, "unexpected frame on the demand lane");
		break;
	}
}

/* The demand lane broke: an attach fails, a migration pauses. */
static void
demand_close(struct conn *c, const char *why, void *arg)
{
	struct dest *d = arg;

	if (d->m->state == MIG_CONNECTING)
		dest_attach_fail(d, ERR_UNREACHABLE,
				 "source %s unreachable: %s", d->from, why);
	else
		dest_lanes_down(d, why);
}

/* Opens the demand lane and says hello; the rest is in demand_frame. */
int
dest_connect_demand(struct dest *d, int resuming, char *err, size_t errlen)
{
	char *feat[3];
	Uffdd__Hello h = UFFDD__HELLO__INIT;
	char name[300];

	snprintf(name, sizeof(name), "source %s demand", d->from);
	d->demand = peer_connect(d->from, d->pin, name, demand_frame,
				 demand_close, d, err, errlen);
	if (d->demand == NULL)
		return -1;
	conn_set_priority(d->demand, PRIO_FAULT);
	conn_set_timeout(d->demand,
			 resuming ? LANE_TIMEOUT : HANDSHAKE_TIMEOUT);
	peer_set_nodelay(d->demand);
	d->ln.resuming = resuming;
	h.version = UFFDD_PROTO_VERSION;
	h.lane = UFFDD__LANE__LANE_DEMAND;
	h.migration_id = d->m->id;
	h.resume = resuming;
	h.committed = d->cm.committed;
	h.commit_seq = d->cm.commit_seq;
	/*
	 * We know SWITCHOVER: a pre-copy's source may go on with us; we
	 * echo it once our target may run (a source answers go then); and
	 * whether the bulk stream waits for our target to run (runhold.c).
	 * Appended one by one: a count cut from a fixed list once left the
	 * echo out of every HELLO.
	 */
	h.features = feat;
	feat[h.n_features++] = FEATURE_PRECOPY;
	feat[h.n_features++] = FEATURE_SWITCHOVER_ACK;
	if (d->bh.run_hold == 1)
		feat[h.n_features++] = FEATURE_BULK_HOLD;
	return conn_send(d->demand, FRAME_HELLO, &h.base);
}

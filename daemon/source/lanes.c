/*
 * The destination's two lanes (demand and bulk): its HELLO, the frames it
 * sends, a lane lost; and every end of a migration: failure, a run of
 * the process, teardown, and completion once commit.c says the COMMIT was
 * acted on. The parts below end a migration only through source_fail()
 * and the others (owner.c), which export.c points here.
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/compat.h"
#include "daemon/conn.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/loop.h"
#include "daemon/migration.h"
#include "daemon/pagemap.h"
#include "daemon/peer.h"
#include "daemon/procref.h"
#include "daemon/stats.h"
#include "daemon/source/internal.h"

/*
 * Status says whether the destination has attached: both lanes up and
 * the regions it takes named. A deferred export's tool waits for it
 * before it stops the process.
 */
static void
note_attached(struct source *s)
{
	s->m->ph.attached = s->demand && s->bulk && s->m->state == MIG_RUNNING;
}

/*
 * The migration fails with why: the destination is told (code), and one
 * that comes back later is told the same when it says hello.
 */
static void
fail(struct source *s, uint32_t code, const char *why)
{
	/*
	 * Before the switchover the destination's target has not run: the
	 * process goes on where it was (frozen for the last round only),
	 * unless it ran on its own, which it holds the newest bytes of.
	 */
	source_precopy_go_failed(s, code, why); /* in any phase */
	if (source_precopy_running(s)) {
		source_precopy_untrack(s);
		if (s->pc->phase == PC_FINAL && code != ERR_SOURCE_RAN)
			source_precopy_thaw(s);
		if (code != ERR_SOURCE_RAN)
			log_warnx("migration %s: pre-copy ends; process %d "
				  "runs on",
				  log_id(s->m->id), (int)s->m->pid);
	}
	if (s->df.prepared)
		source_defer_unprepare(s);
	else if (s->m->ph.deferred)
		log_warnx("migration %s: ends before go; process %d was never "
			  "touched",
			  log_id(s->m->id), (int)s->m->pid);
	s->m->fail_code = code == ERR_SOURCE ? 0 : code;
	migration_fail(s->m, "%s", why);
	if (s->demand)
		conn_send_error(s->demand, code, "%s", s->m->reason);
	source_lanes_teardown(s);
}

/*
 * The source's pages can no longer be had: fail, and tell the destination,
 * which poisons what it lacks (source_fail(), owner.c, from the parts
 * below).
 */
void
source_lanes_fail(struct source *s, const char *why)
{
	if (s->m->state == MIG_COMPLETE || s->m->state == MIG_FAILED)
		return;
	fail(s, ERR_SOURCE, why);
}

/* source_fail_ran() (internal.h), from the parts below. */
void
source_lanes_fail_ran(struct source *s, const char *why)
{
	char full[512];

	if (s->m->state == MIG_COMPLETE || s->m->state == MIG_FAILED)
		return;
	/* It holds the newest bytes: stopped, neither killed nor thawed. */
	if (s->img == NULL)
		procref_signal(&s->t, SIGSTOP);
	snprintf(full, sizeof(full),
		 "%s: the destination may hold pages of two moments; source "
		 "process %d left stopped",
		 why, (int)s->m->pid);
	log_event(LOG_MSGID_SOURCE_CONTINUED, NULL, "migration %s: %s",
		  log_id(s->m->id), why);
	fail(s, ERR_SOURCE_RAN, full);
}

/*
 * The process's pidfd is readable: it exited, and its pages with it.
 * After a COMMIT nothing more is wanted of it (its ACK ends the
 * migration). Before, the destination's present pages were read before
 * the last check that passed but for those read since (at most one check
 * period, CHECK_MS): nothing can be looked at any more, and the missing
 * pages are lost (docs/design.md, "The freeze check").
 */
static void
exit_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct source *s = arg;

	event_del(s->exit_ev);
	if (s->m->ph.committing) {
		log_warnx("migration %s: source process %d exited after the "
			  "COMMIT; waiting for its acknowledgement",
			  log_id(s->m->id), (int)s->m->pid);
		return;
	}
	source_fail(s, "source process %d exited", (int)s->m->pid);
}

/* Each PING_SECS: pings the lanes (the bulk one only when idle). */
static void
ping_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct source *s = arg;
	Uffdd__Ping p = UFFDD__PING__INIT;

	if (s->demand)
		conn_send(s->demand, FRAME_PING, &p.base);
	if (s->bulk && conn_output_len(s->bulk) == 0)
		conn_send(s->bulk, FRAME_PING, &p.base);
}

/*
 * Both lanes are gone (closed, or dropped for a protocol error): a running
 * migration pauses, with the process still frozen, until the destination
 * resumes.
 */
static void
lanes_down(struct source *s, const char *why)
{
	if (s->demand && s->m->state != MIG_COMPLETE)
		metrics.lane_failures[ROLE_SOURCE]++;
	conn_free(s->demand);
	conn_free(s->bulk);
	s->demand = s->bulk = NULL;
	event_del(s->bulk_ev);
	s->m->ph.attached = 0;
	/* Before go nothing was served: wait for a destination again. */
	if (s->m->ph.deferred && s->m->state == MIG_RUNNING) {
		log_warnx("migration %s: destination lost before go (%s); "
			  "waiting for it again",
			  log_id(s->m->id), why);
		source_defer_lanes_down(s);
		for (size_t i = 0; i < s->nregs; i++)
			s->regs[i].accepted = 0;
		migration_set_state(s->m, MIG_WAITING);
		return;
	}
	/* Before the switchover the process runs on (source_precopy_lost()). */
	if (source_precopy_running(s) && s->m->state == MIG_RUNNING) {
		source_precopy_lost(s, why);
		return;
	}
	if (s->m->state == MIG_RUNNING && s->m->ph.committing) {
		log_warnx("migration %s: destination lost (%s) after the "
			  "COMMIT, before its acknowledgement; process %d "
			  "stays stopped until the destination resumes",
			  log_id(s->m->id), why, (int)s->m->pid);
		migration_set_state(s->m, MIG_PAUSED);
		source_persist_dirty(s);
	} else if (s->m->state == MIG_RUNNING) {
		log_warnx("migration %s: destination lost (%s); the process "
			  "stays frozen",
			  log_id(s->m->id), why);
		migration_set_state(s->m, MIG_PAUSED);
		source_persist_dirty(s);
	} else if (s->m->state == MIG_WAITING && s->img && s->img->local) {
		/* The attach --image it was made for gave up. */
		migration_fail(s->m, "the attach from this image failed (%s)",
			       why);
		source_lanes_teardown(s);
	} else if (s->m->state == MIG_WAITING) {
		for (size_t i = 0; i < s->nregs; i++)
			s->regs[i].accepted = 0;
	}
}

/*
 * The end, either way: lanes, events, state file (a tombstone stays for a
 * run of the process nobody was told of), then the role's memory.
 */
void
source_lanes_teardown(struct source *s)
{
	int told = s->demand != NULL;

	source_check_report(s);
	if (s->demand)
		conn_finish(s->demand);
	if (s->bulk)
		conn_finish(s->bulk);
	s->demand = s->bulk = NULL;
	event_del(s->bulk_ev);
	event_del(s->ping_ev);
	event_del(s->rate_ev);
	if (s->cm.check_ev)
		event_del(s->cm.check_ev);
	if (s->cm.commit_ev)
		event_del(s->cm.commit_ev);
	if (s->exit_ev)
		event_del(s->exit_ev);
	if (s->m->fail_code == ERR_SOURCE_RAN && !told)
		source_persist_tombstone(s);
	else
		source_persist_remove(s);
	migration_release(s->m);
}

/*
 * The destination names the regions it takes. Whatever was sent before is
 * forgotten: on a resume, or after the destination lost its bulk lane, the
 * HAVE bitmaps that follow say exactly what it holds, and everything else
 * goes again. A bulk lane still open here is the one the destination gave
 * up: whatever goes into it from now on would be lost, so it goes too.
 */
static void
accept_regions(struct source *s, const Uffdd__RegionTable *t)
{
	if (s->m->state == MIG_COMPLETE || s->m->state == MIG_FAILED)
		return;
	if (s->pc && s->m->state != MIG_WAITING)
		source_precopy_resumed(s);
	if (s->bulk) {
		log_info("migration %s: destination lost its bulk lane; "
			 "sending again what it lacks",
			 log_id(s->m->id));
		conn_free(s->bulk);
		s->bulk = NULL;
		event_del(s->bulk_ev);
	}
	for (size_t i = 0; i < s->nregs; i++) {
		s->regs[i].accepted = 0;
		memset(s->regs[i].sent, 0,
		       bit_words(s->regs[i].npages) * sizeof(uint64_t));
	}
	for (size_t i = 0; i < t->n_regions; i++) {
		uint32_t idx = t->regions[i]->index;

		if (idx >= s->nregs) {
			conn_send_error(s->demand, ERR_PROTOCOL, "no region %u",
					idx);
			lanes_down(s, "bad region index");
			return;
		}
		s->regs[idx].accepted = 1;
	}
	s->m->cnt.pages_total = s->m->cnt.pages_present = 0;
	for (size_t i = 0; i < s->nregs; i++)
		if (s->regs[i].accepted)
			s->m->cnt.pages_total += s->regs[i].npages;
	s->cur_reg = 0;
	s->cur_page = 0;
	s->hint_left = 0;
	s->hint_win = 0;
	/*
	 * A destination that resumes without having acted on a COMMIT sent
	 * (Hello.committed) never got it: its next COMPLETE is checked and
	 * answered anew.
	 */
	s->cm.completing = 0;
	s->m->ph.committing = 0;
	if (s->resume_pending)
		s->m->reconnects++;
	s->resume_pending = 0;
	migration_set_state(s->m, MIG_RUNNING);
	note_attached(s);
	source_persist_dirty(s);
}

/* A resuming destination's HAVE bitmap: these pages need not go again. */
static int
have_pages(struct source *s, const Uffdd__PageBitmap *b)
{
	struct src_region *sr =
		b->region < s->nregs ? &s->regs[b->region] : NULL;

	if (sr == NULL || !sr->accepted || b->first_page >= sr->npages ||
	    b->npages > sr->npages - b->first_page ||
	    b->bits.len != (b->npages + 7) / 8)
		return -1;
	for (uint64_t i = 0; i < b->npages; i++) {
		uint64_t p = b->first_page + i;

		if ((b->bits.data[i / 8] >> (i % 8) & 1) &&
		    !bit_test(sr->sent, p) &&
		    source_precopy_vouched(s, sr, p)) {
			bit_set(sr->sent, p);
			s->m->cnt.pages_present++;
		}
	}
	return 0;
}

/* Whether a HELLO says feature f. */
static int
hello_says(const Uffdd__Hello *h, const char *f)
{
	for (size_t i = 0; i < h->n_features; i++)
		if (strcmp(h->features[i], f) == 0)
			return 1;
	return 0;
}

/* BULK_GO: the destination's target runs; the bulk stream may start. */
static void
bulk_go(struct source *s)
{
	if (!s->peer_held)
		return;
	s->peer_held = 0;
	log_info("migration %s: the destination lets the bulk stream start",
		 log_id(s->m->id));
	if (s->m->state == MIG_RUNNING)
		source_hold_changed(s);
}

/*
 * The destination's ERROR: its target gone or its migration failed end
 * this one, the process left stopped; anything else breaks the lanes.
 */
static void
dest_error(struct source *s, const Uffdd__Error *e)
{
	log_warnx("migration %s: destination says: %s", log_id(s->m->id),
		  e->message);
	if (e->code != ERR_TARGET_GONE && e->code != ERR_DEST_FAILED) {
		lanes_down(s, e->message);
		return;
	}
	if (s->img)
		migration_fail(s->m, "destination: %.400s", e->message);
	else
		migration_fail(s->m,
			       "destination: %.400s; source process %d left "
			       "stopped",
			       e->message, (int)s->m->pid);
	source_lanes_teardown(s);
}

/* A frame on the demand lane, by its type. */
static void
demand_frame(struct conn *c, const struct frame_hdr *h, ProtobufCMessage *msg,
	     void *arg)
{
	struct source *s = arg;

	switch (h->type) {
	case FRAME_REGIONS:
		accept_regions(s, (const Uffdd__RegionTable *)msg);
		break;
	case FRAME_PAGE_REQUEST:
		/* A pre-copy's target is held: nothing of it faults yet. */
		if (source_precopy_running(s) && s->m->state == MIG_RUNNING) {
			log_warnx("%s: page request during a pre-copy",
				  conn_name(c));
			lanes_down(s, "protocol error");
		} else if (s->m->ph.deferred && s->m->state == MIG_RUNNING) {
			if (source_defer_request(
				    s, (const Uffdd__PageRequest *)msg) < 0)
				lanes_down(s, "too many page requests before "
					      "go");
		} else if (s->m->state == MIG_RUNNING)
			source_demand_request(s,
					      (const Uffdd__PageRequest *)msg);
		break;
	case FRAME_COMPLETE:
		/* Its target ran before the switchover: not a pre-copy's. */
		if (source_precopy_running(s))
			source_fail(s, "destination completed before the "
				       "pre-copy's switchover");
		else if (s->m->ph.deferred)
			source_fail(s, "destination completed before go "
				       "(nothing was sent)");
		else if (s->m->state == MIG_RUNNING)
			source_complete_requested(s);
		break;
	case FRAME_COMMIT_ACK:
		if (s->m->state == MIG_RUNNING &&
		    source_commit_ack(s, (const Uffdd__Commit *)msg) == 1)
			source_lanes_teardown(s);
		break;
	case FRAME_HAVE:
		if (have_pages(s, (const Uffdd__PageBitmap *)msg) < 0) {
			log_warnx("%s: HAVE out of bounds", conn_name(c));
			lanes_down(s, "bad HAVE bitmap");
		}
		break;
	case FRAME_PING:
		break;
	case FRAME_BULK_GO:
		bulk_go(s);
		break;
	case FRAME_SWITCHOVER: /* its echo: the destination switched */
		source_precopy_switched(s);
		break;
	case FRAME_ROUND_SYNC:
		if (source_precopy_synced(s, (const Uffdd__Ping *)msg) < 0) {
			log_warnx("%s: ROUND_SYNC outside a pre-copy",
				  conn_name(c));
			lanes_down(s, "protocol error");
		}
		break;
	case FRAME_ERROR:
		dest_error(s, (const Uffdd__Error *)msg);
		break;
	default:
		log_warnx("%s: unexpected %s", conn_name(c),
			  frame_type_name(h->type));
		lanes_down(s, "protocol error");
		break;
	}
}

/* The demand lane closed: both lanes go down. */
static void
lane_close(struct conn *c, const char *why, void *arg)
{
	lanes_down(arg, why);
}

/*
 * The bulk lane alone going down leaves the demand lane serving: the
 * destination closes bulk first at completion, and the two sockets' closes
 * may arrive in either order.
 */
static void
bulk_close(struct conn *c, const char *why, void *arg)
{
	struct source *s = arg;

	conn_free(s->bulk);
	s->bulk = NULL;
	event_del(s->bulk_ev);
	note_attached(s);
	if (s->demand == NULL || source_precopy_running(s))
		lanes_down(s, why);
}

/* The bulk lane carries nothing back: any frame on it is an error. */
static void
bulk_frame(struct conn *c, const struct frame_hdr *h, ProtobufCMessage *msg,
	   void *arg)
{
	log_warnx("%s: unexpected %s on the bulk lane", conn_name(c),
		  frame_type_name(h->type));
	lanes_down(arg, "protocol error");
}

/*
 * A HELLO for an ID this daemon does not know, logged once a minute for
 * the same ID: a destination waiting for its export (attach
 * --wait-export) asks again every 200 ms. Each other ID is logged.
 */
static void
warn_unknown_id(struct conn *c, const char *id)
{
	static char last[MIG_ID_LEN + 1];
	static uint64_t last_ns;
	static unsigned quiet;
	uint64_t now = now_ns();

	if (strlen(id) == MIG_ID_LEN && strcmp(last, id) == 0 &&
	    now - last_ns < 60000000000ull) {
		quiet++;
		return;
	}
	if (quiet && strcmp(last, id) == 0)
		log_event(LOG_MSGID_PEER_REFUSED, conn_name(c),
			  "%s: unknown migration ID %s (asked %u times more "
			  "in the minute before)",
			  conn_name(c), log_id(id), quiet);
	else
		log_event(LOG_MSGID_PEER_REFUSED, conn_name(c),
			  "%s: unknown migration ID %s", conn_name(c),
			  log_id(id));
	snprintf(last, sizeof(last), "%s", id);
	last_ns = now;
	quiet = 0;
}

/*
 * The migration a HELLO names, if a lane may join it: the version spoken,
 * a known ID, not ended. Else the peer is told why and NULL.
 */
static struct source *
hello_source(struct conn *c, const Uffdd__Hello *hello)
{
	struct migration *m;

	if (hello->version != UFFDD_PROTO_VERSION) {
		conn_send_error(c, ERR_PROTOCOL,
				"protocol version %u, this source speaks %u: "
				"%s",
				hello->version, UFFDD_PROTO_VERSION,
				UFFDD_PROTO_UPGRADE);
		conn_finish(c);
		return NULL;
	}
	m = migration_find(hello->migration_id, ROLE_SOURCE);
	if (m == NULL) {
		warn_unknown_id(c, hello->migration_id);
		conn_send_error(c, ERR_UNKNOWN_ID, "unknown migration ID");
		conn_finish(c);
		return NULL;
	}
	/* A committed destination whose ACK was lost is answered in kind. */
	if (hello->committed && hello->lane == UFFDD__LANE__LANE_DEMAND &&
	    (m->state == MIG_COMPLETE || m->state == MIG_FAILED)) {
		source_commit_echo(c, m, hello);
		return NULL;
	}
	if (m->state == MIG_COMPLETE || m->state == MIG_FAILED) {
		conn_send_error(c, m->fail_code ? m->fail_code : ERR_SOURCE,
				"migration is %s%s%s",
				migration_state_name(m->state),
				m->reason[0] ? ": " : "", m->reason);
		if (m->fail_code == ERR_SOURCE_RAN &&
		    hello->lane == UFFDD__LANE__LANE_DEMAND)
			source_persist_told(m);
		conn_finish(c);
		return NULL;
	}
	return m->impl;
}

/* A bulk lane joins a running migration that has its demand lane. */
static int
bulk_hello(struct source *s, struct conn *c)
{
	Uffdd__Hello me = UFFDD__HELLO__INIT;

	if (s->demand == NULL || s->m->state != MIG_RUNNING || s->bulk) {
		conn_send_error(c, ERR_BUSY,
				s->bulk ? "bulk lane already open"
					: "bulk lane before the demand "
					  "lane");
		conn_finish(c);
		return -1;
	}
	s->bulk = c;
	note_attached(s);
	conn_set_owner(c, bulk_frame, bulk_close, s);
	source_bulk_lane(s, c);
	conn_send(c, FRAME_HELLO, &me.base);
	source_bulk_produce(s);
	return 0;
}

/* The region table, sent after the demand lane's HELLO. */
static void
send_regions(struct source *s, struct conn *c)
{
	Uffdd__RegionTable t = UFFDD__REGION_TABLE__INIT;
	Uffdd__Region *rp = xcalloc(s->nregs, sizeof(*rp));
	Uffdd__Region **pp = xcalloc(s->nregs, sizeof(*pp));

	for (size_t i = 0; i < s->nregs; i++) {
		const struct region *r = &s->regs[i].r;

		uffdd__region__init(&rp[i]);
		rp[i].index = r->index;
		rp[i].name = (char *)r->name;
		rp[i].start = r->start;
		rp[i].length = r->length;
		rp[i].page_size = r->page_size;
		rp[i].kind = (Uffdd__RegionKind)r->kind;
		rp[i].data_pages = r->data_pages;
		rp[i].zero_pages = r->zero_pages;
		if (r->kind == REGION_FILE_PRIVATE)
			rp[i].file_offset = r->file_off;
		pp[i] = &rp[i];
	}
	t.n_regions = s->nregs;
	t.regions = pp;
	conn_send(c, FRAME_REGIONS, &t.base);
	free(pp);
	free(rp);
}

/*
 * A demand lane: the migration's destination, new or resuming. It is
 * answered with HELLO and the region table.
 */
static int
demand_hello(struct source *s, struct conn *c, const Uffdd__Hello *hello)
{
	char *feat[3];
	Uffdd__Hello me = UFFDD__HELLO__INIT;
	int was_held;

	if (hello->lane == UFFDD__LANE__LANE_DEMAND && hello->resume &&
	    s->demand) {
		/* The destination saw the old lanes die; we have not yet. */
		log_info("migration %s: destination resumes; dropping its old "
			 "lanes",
			 log_id(s->m->id));
		conn_free(s->demand);
		conn_free(s->bulk);
		s->demand = s->bulk = NULL;
		event_del(s->bulk_ev);
	}
	if (hello->lane == UFFDD__LANE__LANE_DEMAND && hello->committed) {
		source_commit_resume(s, c, hello);
		source_lanes_teardown(s);
		return -1;
	}
	if (hello->lane != UFFDD__LANE__LANE_DEMAND || s->demand) {
		conn_send_error(c, ERR_BUSY,
				s->demand
					? "migration already has a destination"
					: "unknown lane");
		conn_finish(c);
		return -1;
	}
	if (source_precopy_hello(s, c, hello) < 0)
		return -1;
	s->demand = c;
	s->resume_pending = hello->resume;
	migration_set_peer(s->m, conn_name(c));
	conn_set_owner(c, demand_frame, lane_close, s);
	conn_set_priority(c, PRIO_FAULT);
	peer_set_nodelay(c);
	conn_read_direct(c);
	me.version = UFFDD_PROTO_VERSION;
	me.lane = UFFDD__LANE__LANE_DEMAND;
	me.features = feat;
	if (source_precopy_running(s)) {
		feat[me.n_features++] = FEATURE_PRECOPY;
		peer_set_user_timeout(c, PRECOPY_LINK_SECS);
	}
	was_held = s->peer_held;
	/* A pre-copy's rounds come before its target runs: never held. */
	s->peer_held = hello_says(hello, FEATURE_BULK_HOLD) &&
		       !source_precopy_running(s);
	if (s->peer_held)
		feat[me.n_features++] = FEATURE_BULK_HOLD;
	if ((s->peer_acks = source_precopy_wants_ack(s, hello)))
		feat[me.n_features++] = FEATURE_SWITCHOVER_ACK;
	conn_send(c, FRAME_HELLO, &me.base);
	send_regions(s, c);
	if (was_held && !s->peer_held)
		source_hold_changed(s);
	return 0;
}

/* A peer's HELLO (role.h, hello): a lane joins its migration. */
int
source_hello(struct conn *c, const Uffdd__Hello *hello)
{
	struct source *s = hello_source(c, hello);

	if (s == NULL)
		return -1;
	if (!source_image_lane_ok(s, c)) {
		log_warnx("%s: migration ID %s is this daemon's own restore",
			  conn_name(c), log_id(hello->migration_id));
		conn_send_error(c, ERR_UNKNOWN_ID, "unknown migration ID");
		conn_finish(c);
		return -1;
	}
	if (hello->lane == UFFDD__LANE__LANE_BULK)
		return bulk_hello(s, c);
	return demand_hello(s, c, hello);
}

/* The exit of the process, the pings and the checks, for a live export. */
void
source_lanes_start(struct source *s)
{
	struct timeval tv = {PING_SECS, 0};

	if (s->img == NULL) {
		s->exit_ev = event_new(base, s->t.pidfd, EV_READ | EV_PERSIST,
				       exit_cb, s);
		event_priority_set(s->exit_ev, PRIO_CONTROL);
		event_add(s->exit_ev, NULL);
	}
	s->ping_ev = event_new(base, -1, EV_PERSIST, ping_cb, s);
	event_add(s->ping_ev, &tv);
	source_check_start(s);
}

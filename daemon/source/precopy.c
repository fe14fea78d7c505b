/*
 * export --precopy: the process keeps running while rounds of its pages go
 * to the destination. Writes are tracked with an async write-protecting
 * userfaultfd (wptrack.h); each round sends the pages written since the
 * round before, read again. When a round's dirty set is small enough, or
 * the rounds stop shrinking it, or --max-rounds is reached, one last round
 * sends that set while the process still runs; once the destination says
 * it has installed it all (ROUND_SYNC), the process is frozen, what it
 * wrote meanwhile goes, and SWITCHOVER tells the destination that its
 * target may run. From then on the export is like any other.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/compat.h"
#include "daemon/conffile.h"
#include "daemon/conn.h"
#include "daemon/control.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/migration.h"
#include "daemon/pagemap.h"
#include "daemon/peer.h"
#include "daemon/proc.h"
#include "daemon/source/internal.h"
#include "daemon/wptrack.h"

/* Wall-clock time, ns since the epoch (SWITCHOVER's freeze_unix_ns). */
static uint64_t
wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Rounds a request may ask for at most. */
#define PRECOPY_ROUNDS_LIMIT 1000

/*
 * A sync tracker's round (docs/design.md, "Write tracking before 6.7"):
 * the write faults it answered and the process took, for the logs and the
 * kernel VM test.
 */
static void
log_sync_round(struct source *s, int64_t dirty)
{
	struct precopy *pc = s->pc;
	long long mi, ma;

	if (!s->wp.sync)
		return;
	proc_faults(s->m->pid, &mi, &ma);
	log_info("migration %s: pre-copy round %u (synchronous uffd-wp): "
		 "%lld pages written, %llu write faults answered, process "
		 "faults %lld minor %lld major",
		 log_id(s->m->id), s->m->pre.rounds,
		 (long long)(dirty / sysconf(_SC_PAGESIZE)),
		 (unsigned long long)(s->wp.faults - pc->faults_at),
		 mi >= 0 && pc->minflt_at >= 0 ? mi - pc->minflt_at : -1,
		 ma >= 0 && pc->majflt_at >= 0 ? ma - pc->majflt_at : -1);
	pc->faults_at = s->wp.faults;
	pc->minflt_at = mi;
	pc->majflt_at = ma;
}

/* The sync tracker's write faults are readable on its descriptor. */
static void
wp_fault_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct source *s = arg;

	(void)fd;
	(void)ev;
	if (wptrack_serve(&s->wp) < 0)
		source_fail(s,
			    "pre-copy: answering the write faults of "
			    "process %d: %s",
			    (int)s->m->pid, strerror(errno));
}

/*
 * Tracking ends: the process is frozen for good (after its last dirty set
 * was taken) or the pre-copy failed and it runs on. A sync tracker must
 * not leave it protected with nobody to answer its faults.
 */
void
source_precopy_untrack(struct source *s)
{
	if (s->pc == NULL)
		return;
	if (s->pc->wp_ev) {
		event_free(s->pc->wp_ev);
		s->pc->wp_ev = NULL;
	}
	wptrack_frozen(&s->wp);
	wptrack_frozen(&s->pc->track_wp);
}

void
source_precopy_free(struct source *s)
{
	source_precopy_untrack(s);
	if (s->pc)
		source_track_free(s->pc);
	if (s->pc && s->pc->pause_ev)
		event_free(s->pc->pause_ev);
	if (s->pc && s->pc->pace_ev)
		event_free(s->pc->pace_ev);
	for (size_t i = 0; i < s->nregs; i++)
		free(s->regs[i].final);
	free(s->pc);
	s->pc = NULL;
}

static void sent_all(struct source *);

/* The export s pre-copies, its writes tracked by wp (taken over). */
void
source_precopy_init(struct source *s, struct wptrack *wp,
		    const Uffdd__ExportRequest *req)
{
	s->wp = *wp;
	*wp = (struct wptrack)WPTRACK_NONE;
	s->pc = xcalloc(1, sizeof(*s->pc));
	s->pc->sent_all = sent_all;
	s->pc->track = (struct procref)PROCREF_NONE;
	s->pc->track_wp = (struct wptrack)WPTRACK_NONE;
	s->pc->track_switches = -1;
	if (s->wp.sync) {
		s->pc->wp_ev = event_new(base, s->wp.uffd, EV_READ | EV_PERSIST,
					 wp_fault_cb, s);
		event_priority_set(s->pc->wp_ev, PRIO_FAULT);
		event_add(s->pc->wp_ev, NULL);
		proc_faults(s->m->pid, &s->pc->minflt_at, &s->pc->majflt_at);
		log_info("migration %s: writes of process %d tracked with "
			 "synchronous uffd-wp (no UFFD_FEATURE_WP_ASYNC%s): "
			 "each write to a protected block waits for the daemon",
			 log_id(s->m->id), (int)s->m->pid,
			 wptrack_usable() ? "" : " or PAGEMAP_SCAN");
	}
	s->pc->phase = PC_ROUNDS;
	s->pc->max_rounds =
		req->max_rounds ? req->max_rounds : PRECOPY_MAX_ROUNDS;
	if (s->pc->max_rounds > PRECOPY_ROUNDS_LIMIT)
		s->pc->max_rounds = PRECOPY_ROUNDS_LIMIT;
	s->pc->threshold =
		req->threshold_bytes ? req->threshold_bytes : PRECOPY_THRESHOLD;
	s->pc->best = UINT64_MAX;
	s->m->pre.on = 1;
}

/*
 * Pages [start, end) were written since the last scan: they go again, as
 * data (a page first written after it was classified has some now).
 */
void
source_precopy_mark(void *arg, uint64_t start, uint64_t end)
{
	struct source *s = arg;

	for (size_t i = 0; i < s->nregs; i++) {
		struct src_region *sr = &s->regs[i];
		uint64_t rend = sr->r.start + sr->r.length,
			 ps = sr->r.page_size;
		uint64_t a = start > sr->r.start ? start : sr->r.start;
		uint64_t b = end < rend ? end : rend;

		if (a >= b)
			continue;
		for (uint64_t p = (a - sr->r.start) / ps;
		     p < (b - sr->r.start + ps - 1) / ps; p++) {
			int was_data = bit_test(sr->data, p);

			bit_set(sr->data, p);
			if (bit_test(sr->sent, p)) {
				/* Counted again when it goes again. */
				bit_clear(sr->sent, p);
				s->m->cnt.pages_present--;
				s->m->cnt.prefetched_pages--;
				s->m->cnt.zero_pages -= (uint64_t)!was_data;
			}
			if (s->pc->phase == PC_FINAL && sr->accepted)
				s->pc->final_pages++;
		}
	}
}

/* A round's end: a mapping no tracker covers fails the migration. */
static int
mapped_past(struct source *s)
{
	char why[384];
	int r = source_bypass_mapped(s, 1, 1, why, sizeof(why));

	if (r < 0)
		snprintf(why, sizeof(why), "reading the maps: %s",
			 strerror(errno));
	if (r != 0)
		source_fail(s, "pre-copy: %s", why);
	return r != 0 ? -1 : 0;
}

/*
 * The writes since the last scan, of the process and of a tracked one
 * (--track), marked to go again and protected again. Their bytes (a page
 * both wrote counts twice), or -1 with the migration failed (also when a
 * mapping no tracker covers could write the memory: bypass.c).
 */
static int64_t
collect(struct source *s)
{
	int64_t own, other;

	if ((own = wptrack_collect(&s->wp, source_precopy_mark, s)) < 0 ||
	    (other = source_track_collect(s, source_precopy_mark)) < 0) {
		source_fail(s, "pre-copy: PAGEMAP_SCAN of process %d: %s%s",
			    own < 0 ? (int)s->m->pid : (int)s->pc->track.pid,
			    strerror(errno),
			    errno == EPERM ? SRC_REMAPPED : "");
		return -1;
	}
	/* At the freeze the checks before the COMMIT look (commit.c). */
	if (s->pc->phase == PC_ROUNDS && mapped_past(s) < 0)
		return -1;
	/* Holes punched meanwhile go as ZERO markers in this round. */
	if (s->pc->phase == PC_ROUNDS && source_mark_dropped(s, 0) < 0) {
		source_fail(s, "pre-copy: classifying again: %s",
			    strerror(errno));
		return -1;
	}
	return own + other;
}

/* The bulk stream sweeps every region again for the pages marked. */
void
source_precopy_sweep(struct source *s)
{
	s->cur_reg = 0;
	s->cur_page = 0;
	s->hint_left = 0;
	s->hint_win = 0;
	event_active(s->bulk_ev, EV_TIMEOUT, 0);
}

/*
 * The pages the frozen round is about to send (all others were sent, and
 * not written since): what a resume after the switchover sends again.
 */
static void
mark_final(struct source *s)
{
	for (size_t i = 0; i < s->nregs; i++) {
		struct src_region *sr = &s->regs[i];
		size_t words = bit_words(sr->npages);

		if (sr->final == NULL)
			sr->final = xcalloc(words, sizeof(uint64_t));
		for (size_t w = 0; w < words; w++)
			sr->final[w] = ~sr->sent[w];
	}
}

/*
 * GO's client, once the switch is done: the destination took SWITCHOVER
 * (its echo: every page of the freeze in, its target free to run), or, a
 * destination that does not echo it, SWITCHOVER is sent.
 */
static void
answer_go(struct source *s)
{
	Uffdd__GoReply rep = UFFDD__GO_REPLY__INIT;

	if (s->pc->go_serial == 0)
		return;
	rep.id = s->m->id;
	rep.work_us = (now_ns() - s->pc->go_at) / 1000;
	control_reply(s->pc->go_serial, FRAME_CTL_GO_REPLY, &rep.base);
	s->pc->go_serial = 0;
}

void
source_precopy_switched(struct source *s)
{
	if (s->pc != NULL && s->pc->phase == PC_DONE)
		answer_go(s);
}

/*
 * The rounds are over: the process is frozen, the pages written since the
 * last round are found (and protected again: a write from now on is a run
 * of the frozen process, as for any export) and sent.
 */
void
source_precopy_freeze(struct source *s)
{
	struct precopy *pc = s->pc;
	char err[256];
	int64_t dirty, dropped;
	uint64_t t[4]; /* stopped, scanned, classified, settled */

	pc->t_freeze = now_ns();
	pc->wall_freeze = wall_ns();
	/* The other writer first (--track): the process holds still anyway. */
	if (source_track_freeze(s, err, sizeof(err)) < 0) {
		source_fail(s, "pre-copy: freezing for the switchover: %s",
			    err);
		return;
	}
	if (source_stop_prepared(s, err, sizeof(err)) < 0) {
		source_track_thaw(s);
		source_fail(s, "pre-copy: freezing for the switchover: %s",
			    err);
		return;
	}
	pc->phase = PC_FINAL;
	t[0] = now_ns();
	if ((dirty = collect(s)) < 0)
		return;
	t[1] = now_ns();
	if ((dropped = source_mark_dropped(s, 1)) < 0) {
		source_fail(s, "pre-copy: classifying process %d again: %s",
			    (int)s->m->pid, strerror(errno));
		return;
	}
	pc->final_pages += (uint64_t)dropped;
	mark_final(s);
	log_sync_round(s, dirty);
	t[2] = now_ns();
	source_precopy_untrack(s);
	s->switches = source_settled_switches(s->m->pid);
	t[3] = now_ns();
	log_info("migration %s: process %d frozen after %u pre-copy rounds "
		 "(in %.1f ms: stop %.1f, last scan %.1f, classification "
		 "%.1f, threads settled %.1f); %llu pages written since the "
		 "last",
		 log_id(s->m->id), (int)s->m->pid, s->m->pre.rounds,
		 (double)(t[3] - pc->t_freeze) / 1e6,
		 (double)(t[0] - pc->t_freeze) / 1e6,
		 (double)(t[1] - t[0]) / 1e6, (double)(t[2] - t[1]) / 1e6,
		 (double)(t[3] - t[2]) / 1e6,
		 (unsigned long long)pc->final_pages);
	source_precopy_sweep(s);
}

/*
 * SWITCHOVER, behind the frozen round's pages on the bulk lane: every page
 * is sent as it was at the freeze, the destination's target may run.
 */
static void
send_switchover(struct source *s)
{
	struct precopy *pc = s->pc;
	Uffdd__Switchover sw = UFFDD__SWITCHOVER__INIT;

	sw.rounds = s->m->pre.rounds;
	sw.bytes = s->m->pre.bytes;
	sw.frozen_us = (now_ns() - pc->t_freeze) / 1000;
	sw.final_pages = pc->final_pages;
	sw.freeze_unix_ns = pc->wall_freeze;
	sw.n_round_bytes = s->m->pre.rounds < MIG_ROUNDS_KEPT ? s->m->pre.rounds
							      : MIG_ROUNDS_KEPT;
	sw.round_bytes = s->m->pre.round_bytes;
	conn_send(s->bulk, FRAME_SWITCHOVER, &sw.base);
}

/* The frozen round is sent: the switchover, and the export goes on as any. */
static void
switchover(struct source *s)
{
	struct precopy *pc = s->pc;
	uint64_t t0 = now_ns(), check_ns;

	/* The target runs from SWITCHOVER on: never on pages of two moments. */
	if (source_check_or_fail(s) < 0)
		return;
	check_ns = now_ns() - t0;
	migration_round(s->m, s->m->cnt.bytes - pc->round_start);
	send_switchover(s);
	/* Go is answered when the destination took it, or now. */
	if (!s->peer_acks)
		answer_go(s);
	/* From here a silent link is the destination's to notice. */
	if (s->demand)
		peer_set_user_timeout(s->demand, 0);
	pc->phase = PC_DONE;
	s->m->pre.on = 0;
	s->m->pre.downtime_ns = now_ns() - pc->t_freeze;
	log_info("migration %s: switchover after %u rounds, %llu bytes; "
		 "frozen %.1f ms for the last %llu pages (the check that "
		 "nothing ran since %.1f of it; the freeze's own above)",
		 log_id(s->m->id), s->m->pre.rounds,
		 (unsigned long long)s->m->pre.bytes,
		 (double)s->m->pre.downtime_ns / 1e6,
		 (unsigned long long)pc->final_pages, (double)check_ns / 1e6);
	/* From here a restart takes the export up as any other. */
	if (source_persist_now(s) < 0)
		log_warnx("migration %s: the state file could not be written: "
			  "a restart would forget this export",
			  log_id(s->m->id));
}

/* The last round is on the wire: ask the destination to say when it is in. */
static void
send_sync(struct source *s)
{
	Uffdd__Ping p = UFFDD__PING__INIT;

	p.seq = s->m->pre.rounds;
	s->pc->phase = PC_SYNC;
	conn_send(s->bulk, FRAME_ROUND_SYNC, &p.base);
}

/*
 * The bulk stream has sent every page marked (source_bulk_produce()): the
 * round is over. Another one, the freeze, or (frozen) the switchover.
 */
static void
round_end(struct source *s)
{
	struct precopy *pc = s->pc;
	int64_t dirty;
	int converged;

	if (pc->phase == PC_FINAL) {
		switchover(s);
		return;
	}
	if (pc->phase == PC_SYNC)
		return; /* source_precopy_synced() goes on */
	/* Paced (a bulk lane's ping drains it too): the timer goes on. */
	if (pc->pace_ev && evtimer_pending(pc->pace_ev, NULL))
		return;
	/*
	 * The round is over once its pages are on the wire, not just queued
	 * here (up to 4 MiB): the writes made while they wait belong to it,
	 * and a freeze now would also wait for their sending.
	 */
	if (s->bulk && conn_output_len(s->bulk) > 0) {
		source_bulk_drain_at(s, 1);
		return;
	}
	source_bulk_drain_at(s, 0);
	migration_round(s->m, s->m->cnt.bytes - pc->round_start);
	pc->round_start = s->m->cnt.bytes;
	if (pc->phase == PC_LAST) {
		send_sync(s);
		return;
	}
	/* Go came: the switch now, with what was written since (one scan). */
	if (pc->went) {
		source_precopy_freeze(s);
		return;
	}
	if ((dirty = collect(s)) < 0)
		return;
	log_debug("migration %s: pre-copy round %u done; %lld bytes written "
		  "meanwhile",
		  log_id(s->m->id), s->m->pre.rounds, (long long)dirty);
	log_sync_round(s, dirty);
	if ((uint64_t)dirty < pc->best) {
		pc->best = (uint64_t)dirty;
		pc->since_best = 0;
	} else {
		pc->since_best++;
	}
	/*
	 * The rounds are over when the dirty set is small enough, the rounds
	 * stopped shrinking it (the process writes as fast as we send), or
	 * the rounds asked for are done. One more, still running, sends it:
	 * the freeze is left only what the process writes meanwhile.
	 */
	converged = (uint64_t)dirty <= pc->threshold ||
		    s->m->pre.rounds >= pc->max_rounds ||
		    pc->since_best >= PRECOPY_STALL_ROUNDS;
	if (converged && !s->m->pre.wait_go) {
		pc->phase = PC_LAST;
	} else if (converged) {
		/* The switch is GO's: rounds paced until it comes. */
		struct timeval tv = {0, PRECOPY_PACE_MS * 1000};

		if (!s->m->pre.ready)
			log_info("migration %s: pre-copy converged after %u "
				 "rounds; ready for go",
				 log_id(s->m->id), s->m->pre.rounds);
		s->m->pre.ready = 1;
		evtimer_add(pc->pace_ev, &tv);
		return;
	}
	source_precopy_sweep(s);
}

/*
 * The destination echoes ROUND_SYNC once it has installed every page of
 * the rounds (it takes bulk frames in order): the freeze comes then, not
 * while the destination still works through megabytes in flight, which
 * the frozen process would wait out. Returns -1 for one it never asked
 * for (the lanes go down), 0 otherwise (a stale echo is ignored).
 */
int
source_precopy_synced(struct source *s, const Uffdd__Ping *p)
{
	if (!source_precopy_running(s))
		return -1;
	if (s->pc->phase == PC_SYNC && p->seq == s->m->pre.rounds)
		source_precopy_freeze(s);
	return 0;
}

/*
 * A destination's demand HELLO for a pre-copy: it must know pre-copy (an
 * older one would run its target at once and keep the first copy of every
 * page). Returns 0, or -1 once it was told why.
 */
int
source_precopy_hello(struct source *s, struct conn *c, const Uffdd__Hello *h)
{
	if (!source_precopy_running(s))
		return 0;
	for (size_t i = 0; i < h->n_features; i++)
		if (strcmp(h->features[i], FEATURE_PRECOPY) == 0)
			return 0;
	log_warnx("%s: destination does not know pre-copy; refused",
		  conn_name(c));
	conn_send_error(c, ERR_PROTOCOL,
			"migration is exported with --precopy, which this "
			"destination's uffdd does not support: upgrade it, or "
			"export without --precopy");
	conn_finish(c);
	return -1;
}

/* The destination did not come back within pause-deadline: it ends here. */
static void
pause_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct source *s = arg;

	source_fail(s,
		    "pre-copy: the destination did not come back within "
		    "%d s (pause-deadline)",
		    conf.pause_deadline);
}

/*
 * Both lanes went down before the switchover (a cut link, or the
 * destination's daemon gone). The process runs on, its writes still
 * tracked (thawed, if the last round had frozen it); the destination has
 * pause-deadline seconds to resume, and the rounds start again then.
 */
void
source_precopy_lost(struct source *s, const char *why)
{
	struct precopy *pc = s->pc;
	struct timeval tv = {conf.pause_deadline, 0};

	/* Paced rounds stop; ready again only once the rounds converge. */
	if (pc->pace_ev)
		evtimer_del(pc->pace_ev);
	s->m->pre.ready = 0;

	/*
	 * Frozen for the last round: let go while its writes are still
	 * tracked (async). A sync tracker ended at the freeze, and writes
	 * made now would go unseen: the process stays frozen, and the
	 * resume sends every page as it is, then SWITCHOVER.
	 */
	if (pc->phase == PC_FINAL && s->wp.uffd < 0) {
		log_warnx("migration %s: destination lost in the last round "
			  "(%s); process %d stays frozen for up to %d s",
			  log_id(s->m->id), why, (int)s->m->pid,
			  conf.pause_deadline);
	} else {
		if (pc->phase == PC_FINAL)
			source_precopy_thaw(s);
		pc->phase = PC_ROUNDS;
		log_warnx("migration %s: destination lost during pre-copy "
			  "(%s); process %d runs on, the rounds start again if "
			  "it comes back within %d s",
			  log_id(s->m->id), why, (int)s->m->pid,
			  conf.pause_deadline);
	}
	migration_set_state(s->m, MIG_PAUSED);
	if (pc->pause_ev == NULL &&
	    (pc->pause_ev = evtimer_new(base, pause_cb, s)) == NULL)
		fatalx("evtimer_new");
	evtimer_add(pc->pause_ev, &tv);
}

/*
 * Every page counted sent is counted out again: all go once more
 * (source_precopy_resumed()), and are counted as they go.
 */
static void
uncount_sent(struct source *s)
{
	for (size_t i = 0; i < s->nregs; i++) {
		struct src_region *sr = &s->regs[i];

		for (uint64_t p = 0; p < sr->npages; p++) {
			if (!bit_test(sr->sent, p))
				continue;
			s->m->cnt.prefetched_pages--;
			s->m->cnt.zero_pages -=
				(uint64_t)!bit_test(sr->data, p);
		}
	}
}

/*
 * The destination named its regions again: a resume, or a new bulk lane.
 * Before the switchover, which of its copies are current nobody can say
 * (a page sent again may have been lost on the way, with an older copy
 * there), so the rounds start over and every page goes again, replacing
 * what it holds; HAVE is not trusted (source_precopy_vouched()). After
 * the switchover, the frozen round's pages go again, then SWITCHOVER: a
 * destination that never saw the first one is still holding its target.
 * Called before accept_regions() forgets what was sent.
 */
void
source_precopy_resumed(struct source *s)
{
	struct precopy *pc = s->pc;

	if (pc->pause_ev)
		evtimer_del(pc->pause_ev);
	if (pc->pace_ev)
		evtimer_del(pc->pace_ev);
	s->m->pre.ready = 0;
	if (pc->phase == PC_DONE) {
		pc->again = 1;
		return;
	}
	uncount_sent(s);
	if (pc->phase == PC_FINAL) {
		/* Still frozen (source_precopy_lost()): all of it is final. */
		for (size_t i = 0; i < s->nregs; i++)
			memset(s->regs[i].final, 0xff,
			       bit_words(s->regs[i].npages) * sizeof(uint64_t));
		log_info("migration %s: destination back in the last round; "
			 "every page goes again, then SWITCHOVER",
			 log_id(s->m->id));
		return;
	}
	pc->phase = PC_ROUNDS;
	pc->best = UINT64_MAX;
	pc->since_best = 0;
	pc->round_start = s->m->cnt.bytes;
	log_info("migration %s: destination back during pre-copy; every page "
		 "goes again",
		 log_id(s->m->id));
}

/*
 * Whether a resuming destination's HAVE may be believed for page p of sr:
 * never during the rounds, and not for the frozen round's pages after.
 */
int
source_precopy_vouched(const struct source *s, const struct src_region *sr,
		       uint64_t p)
{
	if (s->pc == NULL)
		return 1;
	if (source_precopy_running(s))
		return 0;
	return sr->final == NULL || !bit_test(sr->final, p);
}

/* The bulk stream found nothing left to send (outside the rounds). */
static void
swept(struct source *s)
{
	if (s->pc == NULL || !s->pc->again || s->bulk == NULL)
		return;
	if (source_check_or_fail(s) < 0)
		return;
	s->pc->again = 0;
	send_switchover(s);
	log_info("migration %s: SWITCHOVER sent again after the resume",
		 log_id(s->m->id));
}

/* s->pc->sent_all: the bulk stream sent every page (struct precopy). */
static void
sent_all(struct source *s)
{
	if (source_precopy_running(s))
		round_end(s);
	else
		swept(s);
}

/*
 * Completion is a commit (docs/design.md, "Completion"). The destination's
 * COMPLETE says it holds every page; the source answers with COMMIT only
 * after a freeze check that covers every page it read: the process was
 * frozen from the export (a pre-copy's: from its freeze) until after the
 * last read. The destination acts on COMMIT and says COMMIT_ACK; only then
 * is the process killed (or kept), and the ACK echoed as the last frame.
 * A check that fails fails the migration on both sides (ERR_SOURCE_RAN):
 * the destination stops its target, the process is left stopped.
 *
 * The same check runs on a timer during the stream, so that a torn
 * destination is found early: every CHECK_MS, or less often when a check
 * costs more than 1/CHECK_SHARE of the loop.
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/conn.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/migration.h"
#include "daemon/procref.h"
#include "daemon/stats.h"
#include "daemon/source/internal.h"

/*
 * Test knobs (tests/integration/t_commit.sh), never set in production:
 * UFFDD_TEST_COMMIT_DELAY_MS holds the COMMIT back that long after
 * COMPLETE (a link can be cut in between); UFFDD_TEST_EXIT_AT=commit
 * makes the engine die (once) as a COMMIT_ACK arrives, before acting on it.
 */
static int
knob_delay_ms(void)
{
	const char *v = getenv("UFFDD_TEST_COMMIT_DELAY_MS");

	return v ? atoi(v) : 0;
}

static void
knob_exit_at_commit(void)
{
	const char *v = getenv("UFFDD_TEST_EXIT_AT");

	if (v && strcmp(v, "commit") == 0) {
		log_warnx("UFFDD_TEST_EXIT_AT=commit: exiting before the "
			  "COMMIT_ACK is acted on");
		_exit(9);
	}
}

/* CPU time of the daemon's thread, ns: a check's cost without the waits. */
static uint64_t
cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * The freeze check (source_continued()), with what it covers: a pass
 * vouches for every read made before it began. 1 (why filled) if the
 * process ran, -1 if it is dying, else 0. Its cost sets the timer's next
 * period.
 */
int
source_check(struct source *s, char *why, size_t len)
{
	uint64_t reads = s->cm.reads, t0 = now_ns(), c0 = cpu_ns();
	int ran = source_continued(s, why, len);

	/* A hole punched in an exported file is a change as a run is. */
	if (ran == 0)
		ran = source_files_changed(s, why, len);
	/*
	 * So is a mapping of it that no tracker covers (bypass.c). The
	 * frozen process's maps once, in the check before SWITCHOVER (a run
	 * of it after is a run); an unstopped tracked one's (QEMU's: its
	 * hundreds of mappings take milliseconds) in the checks after,
	 * before the COMMIT, out of the guest's stop. Unreadable maps are a
	 * process gone, which source_continued() tells.
	 */
	if (ran == 0 && s->pc != NULL) {
		int after = s->pc->phase == PC_DONE;

		ran = source_bypass_mapped(s, !after, after, why, len) > 0;
	}

	s->cm.check_cpu_ns += cpu_ns() - c0;
	s->cm.check_ns = now_ns() - t0;
	s->cm.checks++;
	s->cm.check_sum_ns += s->cm.check_ns;
	if (s->cm.check_ns > s->cm.check_max_ns)
		s->cm.check_max_ns = s->cm.check_ns;
	if (!ran)
		s->cm.reads_checked = reads;
	return ran;
}

/*
 * The check where a run must end the migration: 0 when the process
 * stayed frozen, else -1 and the migration failed: a run with
 * ERR_SOURCE_RAN, the process dying with ERR_SOURCE (as its exit would).
 */
int
source_check_or_fail(struct source *s)
{
	char why[384];
	int r = source_check(s, why, sizeof(why));

	if (r > 0)
		source_fail_ran(s, "%s", why);
	else if (r < 0)
		source_fail(s, "source process %d exited", (int)s->m->pid);
	return r == 0 ? 0 : -1;
}

/* When the check is due: CHECK_MS, or CHECK_SHARE times its last cost. */
static void
check_again(struct source *s)
{
	uint64_t us = s->cm.check_ns / 1000 * CHECK_SHARE;
	struct timeval tv;

	if (us < CHECK_MS * 1000)
		us = CHECK_MS * 1000;
	tv.tv_sec = (time_t)(us / 1000000);
	tv.tv_usec = (suseconds_t)(us % 1000000);
	evtimer_add(s->cm.check_ev, &tv);
}

/*
 * The timer: a run of the process fails the migration now rather than at
 * COMPLETE. Not while the process runs as it should (a pre-copy's rounds,
 * before go), nor after a COMMIT (it vouched for every page; a run after
 * it is looked at when the ACK comes).
 */
static void
check_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct source *s = arg;

	(void)fd;
	(void)ev;
	if (s->m->state == MIG_COMPLETE || s->m->state == MIG_FAILED)
		return;
	if ((s->pc == NULL || s->pc->phase >= PC_FINAL) && !s->m->ph.deferred &&
	    !s->m->ph.committing && source_check_or_fail(s) < 0)
		return;
	check_again(s);
}

/* The check's timer, for a live export (an image's never runs). */
void
source_check_start(struct source *s)
{
	if (s->img)
		return;
	s->cm.check_ev = evtimer_new(base, check_cb, s);
	if (s->cm.check_ev == NULL)
		fatalx("evtimer_new");
	check_again(s);
}

/* At the end: what the checks cost (docs/design.md, "The freeze check"). */
void
source_check_report(const struct source *s)
{
	if (s->cm.checks == 0 || s->img)
		return;
	log_info("migration %s: %llu freeze checks of process %d (%s), "
		 "%.3f ms each on average (%.3f ms of CPU), %.3f ms at most",
		 log_id(s->m->id), (unsigned long long)s->cm.checks,
		 (int)s->m->pid,
		 s->wp.uffd >= 0 ? "writes and switches" : "switches",
		 (double)s->cm.check_sum_ns / (double)s->cm.checks / 1e6,
		 (double)s->cm.check_cpu_ns / (double)s->cm.checks / 1e6,
		 (double)s->cm.check_max_ns / 1e6);
}

/* What the COMMIT's check looked at, for the logs and the frame. */
static const char *
checked_by(const struct source *s)
{
	if (s->img)
		return "image";
	return s->wp.uffd >= 0 ? "writes+switches" : "switches";
}

/* COMMIT: every page sent was read before a check that passed. */
static void
send_commit(struct source *s)
{
	Uffdd__Commit c = UFFDD__COMMIT__INIT;

	if (!s->cm.completing || s->demand == NULL ||
	    s->m->state != MIG_RUNNING || s->m->ph.committing)
		return;
	if (source_check_or_fail(s) < 0)
		return;
	if (s->cm.reads_checked != s->cm.reads)
		fatalx("migration %s: COMMIT with reads unchecked",
		       log_id(s->m->id));
	c.seq = ++s->cm.commit_seq;
	c.pages = s->m->cnt.pages_present;
	c.checked_by = (char *)checked_by(s);
	s->m->ph.committing = 1;
	conn_send(s->demand, FRAME_COMMIT, &c.base);
	source_persist_dirty(s);
	if (s->img)
		log_info("migration %s: COMMIT %llu sent (an image's)",
			 log_id(s->m->id), (unsigned long long)c.seq);
	else
		log_info("migration %s: COMMIT %llu sent (%s checked %.2f ms, "
			 "%llu checks); process %d stays stopped until it is "
			 "acknowledged",
			 log_id(s->m->id), (unsigned long long)c.seq,
			 c.checked_by, (double)s->cm.check_ns / 1e6,
			 (unsigned long long)s->cm.checks, (int)s->m->pid);
}

/* The test knob's delayed COMMIT (knob_delay_ms()). */
static void
delayed_commit_cb(evutil_socket_t fd, short ev, void *arg)
{
	(void)fd;
	(void)ev;
	send_commit(arg);
}

/*
 * COMPLETE: the destination holds every page. Nothing more is read for
 * the bulk stream (a page the target discarded itself is never counted
 * sent, and would be read after the check); the check runs, and COMMIT
 * or ERR_SOURCE_RAN answers.
 */
void
source_complete_requested(struct source *s)
{
	struct timeval tv;
	int ms = knob_delay_ms();

	if (s->m->ph.committing)
		return; /* a COMMIT is out already */
	s->cm.completing = 1;
	if (ms <= 0) {
		send_commit(s);
		return;
	}
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	log_warnx("UFFDD_TEST_COMMIT_DELAY_MS: COMMIT in %d ms", ms);
	if (s->cm.commit_ev == NULL &&
	    (s->cm.commit_ev = evtimer_new(base, delayed_commit_cb, s)) == NULL)
		fatalx("evtimer_new");
	evtimer_add(s->cm.commit_ev, &tv);
}

/*
 * The destination acted on the COMMIT (or says so on a resume): the
 * process is killed, or kept. One that ran since the COMMIT holds bytes
 * the destination does not: it is left stopped instead, and said so (the
 * destination is whole as committed: every page it has was read before
 * the check).
 */
static void
finish(struct source *s)
{
	char why[384];

	s->m->ph.committing = 0;
	migration_set_state(s->m, MIG_COMPLETE);
	if (s->img) {
		log_info("migration %s complete: the image is restored",
			 log_id(s->m->id));
	} else if (source_continued(s, why, sizeof(why)) > 0) {
		procref_signal(&s->t, SIGSTOP);
		snprintf(s->m->reason, sizeof(s->m->reason),
			 "%.400s, after the COMMIT: process %d left stopped, "
			 "not killed",
			 why, (int)s->m->pid);
		log_event(LOG_MSGID_SOURCE_CONTINUED, NULL,
			  "migration %s complete; %s", log_id(s->m->id),
			  s->m->reason);
	} else if (s->keep_source) {
		log_info("migration %s complete; process %d left stopped",
			 log_id(s->m->id), (int)s->m->pid);
	} else {
		log_info("migration %s complete; killing source process %d",
			 log_id(s->m->id), (int)s->m->pid);
		procref_signal(&s->t, SIGKILL);
	}
}

/* The ACK's echo: the source's last frame on lane c. */
static void
send_echo(struct conn *c, uint64_t seq)
{
	Uffdd__Commit a = UFFDD__COMMIT__INIT;

	a.seq = seq;
	conn_send(c, FRAME_COMMIT_ACK, &a.base);
}

/*
 * COMMIT_ACK: the destination acted on our COMMIT. A stale one is dropped.
 * 1: the migration is complete, for the caller to end (lanes.c); else 0.
 */
int
source_commit_ack(struct source *s, const Uffdd__Commit *a)
{
	if (!s->m->ph.committing || a->seq != s->cm.commit_seq) {
		log_warnx("migration %s: COMMIT_ACK %llu for no COMMIT out "
			  "(last %llu); ignored",
			  log_id(s->m->id), (unsigned long long)a->seq,
			  (unsigned long long)s->cm.commit_seq);
		return 0;
	}
	knob_exit_at_commit();
	finish(s);
	send_echo(s->demand, a->seq);
	return 1;
}

/*
 * A destination resumes saying it acted on a COMMIT (Hello.committed):
 * its ACK was lost with the lanes, or this daemon restarted in between.
 * It is taken as the ACK: HELLO and the echo; the caller (lanes.c) ends
 * the migration, complete. Only a destination that persisted a COMMIT
 * says it.
 */
void
source_commit_resume(struct source *s, struct conn *c, const Uffdd__Hello *h)
{
	Uffdd__Hello me = UFFDD__HELLO__INIT;

	if (s->cm.commit_seq && h->commit_seq != s->cm.commit_seq)
		log_warnx("migration %s: destination acted on COMMIT %llu, "
			  "the last sent is %llu",
			  log_id(s->m->id), (unsigned long long)h->commit_seq,
			  (unsigned long long)s->cm.commit_seq);
	log_info("migration %s: destination resumes committed; its "
		 "acknowledgement",
		 log_id(s->m->id));
	knob_exit_at_commit();
	conn_free(s->demand);
	conn_free(s->bulk);
	s->demand = s->bulk = NULL;
	finish(s);
	me.version = UFFDD_PROTO_VERSION;
	me.lane = UFFDD__LANE__LANE_DEMAND;
	conn_send(c, FRAME_HELLO, &me.base);
	send_echo(c, h->commit_seq);
	conn_finish(c);
}

/*
 * A committed destination resumes to an export that has ended here (its
 * ACK came, and the echo was lost; or it failed after the COMMIT): the
 * destination is whole as committed, and is answered so.
 */
void
source_commit_echo(struct conn *c, const struct migration *m,
		   const Uffdd__Hello *h)
{
	Uffdd__Hello me = UFFDD__HELLO__INIT;

	log_info("migration %s (%s): destination resumes committed; "
		 "acknowledged again",
		 log_id(m->id), migration_state_name(m->state));
	me.version = UFFDD_PROTO_VERSION;
	me.lane = UFFDD__LANE__LANE_DEMAND;
	conn_send(c, FRAME_HELLO, &me.base);
	send_echo(c, h->commit_seq);
	conn_finish(c);
}

/*
 * Completion is a commit (docs/design.md, "Completion"). Once every page
 * is present the destination says COMPLETE and keeps its target as it is
 * (registered, its faults served, its state file as running) until the
 * source's COMMIT vouches for every page it sent. On COMMIT it persists
 * that it acted on it, acknowledges (COMMIT_ACK), is complete, and lets
 * the target go; the source kills (or keeps) its process then and echoes
 * the ACK. A COMMIT_ACK lost with the lanes, or to a restart of either
 * daemon, is delivered by a resume that says Hello.committed. Here the
 * COMMIT and what follows it; the COMPLETE is complete.c's.
 */
#include "config.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/conffile.h"
#include "daemon/conn.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/migration.h"
#include "daemon/stats.h"

/*
 * Test knob (tests/integration/t_commit.sh), never set in production:
 * UFFDD_TEST_EXIT_AT=commit makes the engine die (once: the parent
 * starts the next one without it) once the COMMIT is
 * persisted, before it is acknowledged or acted on.
 */
static void
knob_exit_at_commit(void)
{
	const char *v = getenv("UFFDD_TEST_EXIT_AT");

	if (v && strcmp(v, "commit") == 0) {
		log_warnx("UFFDD_TEST_EXIT_AT=commit: exiting before the "
			  "COMMIT is acknowledged");
		_exit(9);
	}
}

/* COMMIT_ACK: we acted on COMMIT seq (commit.c's protocol). */
static void
send_ack(struct dest *d)
{
	Uffdd__Commit a = UFFDD__COMMIT__INIT;

	a.seq = d->cm.commit_seq;
	conn_send(d->demand, FRAME_COMMIT_ACK, &a.base);
}

/*
 * COMMIT: the source vouches for every page it sent. The record that we
 * act on it is on disk first (a restart then delivers the ACK), then the
 * ACK goes, the migration is complete and the target let go: registration
 * and both copies of the uffd. The demand lane stays for the echo.
 * NULL, or why the lanes must go down.
 */
const char *
dest_commit(struct dest *d, const Uffdd__Commit *c)
{
	if (!d->cm.complete_sent || d->held.precopy ||
	    d->m->state != MIG_RUNNING)
		return "COMMIT before COMPLETE";
	d->cm.committed = 1;
	d->cm.commit_seq = c->seq;
	d->ln.t_pause = 0; /* the echo's own deadline, from its lanes' loss */
	/* Forked after COMPLETE and still lacking pages: none will come. */
	dest_fail_kids(d, "forked after every page had arrived, and lacked "
			  "pages that no longer come");
	if (dest_persist_now(d) < 0)
		log_warnx("migration %s: the COMMIT could not be recorded: a "
			  "restart before the source's echo would leave its "
			  "process stopped",
			  log_id(d->m->id));
	knob_exit_at_commit();
	send_ack(d);
	d->m->ph.committing = 0;
	migration_set_state(d->m, MIG_COMPLETE);
	dest_done_kids_end(d, NULL);
	/*
	 * Right after the switchover of a target not held during its
	 * pre-copy (a guest, which starts as the device state loads): later
	 * (LATE_CLOSE_MS). A held one runs from the switchover on, as any.
	 */
	dest_release_target(d, d->m->pre.rounds && d->held.no_hold
				       ? RELEASE_CLOSE_LATER
				       : RELEASE_CLOSE);
	d->cm.released = 1;
	dest_persist_now(d);
	log_info("migration %s complete: COMMIT %llu (%s checked by the "
		 "source); target %d let go",
		 log_id(d->m->id), (unsigned long long)c->seq,
		 c->checked_by[0] ? c->checked_by : "?", (int)d->m->pid);
	return NULL;
}

/*
 * A frame on the demand lane once committed: the source's echo of our ACK
 * (or, resuming, its HELLO first) ends it; an ERROR from a source that no
 * longer knows the migration does too, the commit standing.
 */
void
dest_committed_frame(struct dest *d, const struct frame_hdr *h,
		     ProtobufCMessage *msg)
{
	if (h->type == FRAME_HELLO || h->type == FRAME_PING ||
	    h->type == FRAME_COMMIT)
		return;
	if (h->type == FRAME_COMMIT_ACK) {
		log_info("migration %s: the source acknowledged the commit",
			 log_id(d->m->id));
	} else if (h->type == FRAME_ERROR) {
		log_warnx("migration %s: committed; the source says: %s",
			  log_id(d->m->id),
			  ((const Uffdd__Error *)msg)->message);
	} else {
		return;
	}
	dest_end(d);
}

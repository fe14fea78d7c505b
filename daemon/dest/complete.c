/*
 * The COMPLETE side of completion as a commit (commit.c has the COMMIT):
 * once every page of the root and of its forked children is in, the
 * source is told COMPLETE; a child that holds every page waits for the
 * root's COMMIT, and ends with it. Calls nothing of the destination's
 * above it.
 */
#include "config.h"

#include <signal.h>
#include <stdlib.h>

#include "daemon/conn.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/migration.h"

/*
 * Every page of the root and of every forked child is in: COMPLETE, and
 * the bulk lane goes (it has nothing more to bring, and is not opened
 * again). Not before a pre-copy's switchover: every page is present
 * after its first round, and later ones still replace them. Nor, attached
 * with hold_bulk, before the target runs (runhold.c): after a pre-copy
 * every page is in at the switchover, and the completion's work on both
 * hosts (the source's last checks, its COMMIT, its process's end) would
 * take the CPUs of the stop window, in which the target starts.
 */
void
dest_maybe_complete(struct dest *d)
{
	Uffdd__Complete c = UFFDD__COMPLETE__INIT;

	if (d->root || d->held.precopy || d->bh.complete_held ||
	    d->cm.complete_sent || d->demand == NULL ||
	    d->m->state != MIG_RUNNING || d->kin.nkids > 0 ||
	    dest_present_total(d) != d->m->cnt.pages_total)
		return;
	c.pages = dest_present_total(d);
	conn_send(d->demand, FRAME_COMPLETE, &c.base);
	d->cm.complete_sent = 1;
	d->m->ph.committing = 1;
	if (d->bulk)
		conn_finish(d->bulk);
	d->bulk = NULL;
	log_info("migration %s: every page in (%llu; %llu faults, %llu of "
		 "them left to the bulk stream, which was bringing the page, "
		 "%llu asked for when it did not; %llu bulk frames by the "
		 "installer thread); COMPLETE sent, waiting for the source's "
		 "COMMIT",
		 log_id(d->m->id), (unsigned long long)c.pages,
		 (unsigned long long)d->m->cnt.demand_faults,
		 (unsigned long long)d->fr.stream_brought,
		 (unsigned long long)d->fr.stream_late,
		 (unsigned long long)d->in.offloaded);
}

/* A forked child holds every page: it waits for the root's COMMIT. */
void
dest_kid_waits(struct dest *root, struct dest *k)
{
	root->cm.done_kids = realloc(root->cm.done_kids,
				     (root->cm.ndone_kids + 1) *
					     sizeof(*root->cm.done_kids));
	if (root->cm.done_kids == NULL)
		fatal("children");
	root->cm.done_kids[root->cm.ndone_kids++] = k;
	k->m->ph.committing = 1;
}

/*
 * The children that waited for the root end with it: whole (complete),
 * or, when stopped_why is set, stopped and failed with it (their pages
 * are of the same moments as the root's).
 */
void
dest_done_kids_end(struct dest *d, const char *stopped_why)
{
	for (size_t i = 0; i < d->cm.ndone_kids; i++) {
		struct dest *k = d->cm.done_kids[i];

		k->m->ph.committing = 0;
		if (stopped_why != NULL) {
			procref_signal(&k->t, SIGSTOP);
			migration_fail(k->m,
				       "%.400s; forked process %d stopped",
				       stopped_why, (int)k->m->pid);
		} else {
			migration_set_state(k->m, MIG_COMPLETE);
		}
		migration_release(k->m);
	}
	d->cm.ndone_kids = 0;
}

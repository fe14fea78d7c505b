/*
 * The destination's state file (state.h): what a restarted daemon needs
 * to take the migration up again (restore.c). One file a migration, the
 * root's, which names its forked children too. Written by this part only,
 * in three ways:
 *
 * - dest_persist_now() writes it before the caller goes on, where what
 *   follows depends on it: an attach writes it before it touches the
 *   target (no file, no attach), and again once the target's uffd is
 *   taken (the file then names the target's copy, which a restart takes
 *   up); a restart writes it once it has taken the migration up.
 * - dest_persist_dirty() is all the rest of the destination does: a uffd
 *   event that changed the page map (the target discarded or moved pages,
 *   or forked), a forked child found or done, the lanes lost or resumed,
 *   the private file hold ended, the target gone. The caller only marks
 *   the migration; one event at PRIO_BULK, made active then, writes the
 *   file once the callback that marked it has returned and the loop has
 *   no fault or control work ready: once, however many changes that
 *   callback made (a read of 64 events used to write 64 times).
 * - dest_persist_remove() removes it when the migration ends (teardown)
 *   or its attach fails, and the record of installed pages with it
 *   (record.c). A write still pending is dropped, and none is
 *   done for an ended migration: its file never comes back.
 *
 * A write that fails after an earlier one succeeded removes the file
 * (save()): restored, a file that no longer says what the target did would
 * put the source's bytes where the target has none.
 *
 * Why later is no weaker. The file never followed the target any closer:
 * reading a uffd event is what lets the target's madvise, munmap, mremap
 * or fork go on, and the write always came after that read, so a daemon
 * that died in between lost the record then, as it does now. What the deferral adds to that window is the rest of the
 * callback, and the fault and control callbacks ready at its end: none of
 * them depends on the file (the page map in memory already has the
 * change, and every page is installed by it), and nothing reaches the
 * source or the control client from the file. The daemon's own shutdown
 * (SIGTERM) does not wait for the event: dest_persist_free() writes what
 * is pending as the migration's memory goes, so an orderly restart finds
 * all of it.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/migration.h"
#include "daemon/state.h"
#include "daemon/statefmt.h"

/*
 * Runs of pages of d the target discarded (or the source said are zero)
 * and nobody touched since: a restart cannot tell them from missing ones
 * in the pagemap, and must never fetch the source's bytes there. A forked
 * child's records name its pid first; *n counts the records of the kind.
 */
static void
save_discarded(struct state_out *o, const struct dest *d, size_t *n)
{
	char key[STATE_KEY_MAX];

	for (size_t i = 0; i < d->nregs; i++) {
		const struct pagestate *ps = &d->regs[i].ps;

		for (uint64_t p = 0; ps->discarded && p < ps->npages;) {
			uint64_t q = p;

			while (q < ps->npages &&
			       pagestate_get(ps, q) == PAGE_DISCARDED)
				q++;
			if (q > p && d->root)
				state_put_u64s(
					o,
					state_key(key, "child_discarded",
						  (*n)++),
					(const uint64_t[]){(uint64_t)d->m->pid,
							   i, p, q},
					4);
			else if (q > p)
				state_put_u64s(
					o, state_key(key, "discarded", (*n)++),
					(const uint64_t[]){i, p, q}, 3);
			p = q + 1;
		}
	}
}

/* Forked children that hold a copy of their uffd, for a restart. */
static int
saved_kid(const struct dest *k)
{
	return k->m->pid > 0 && k->target_fd >= 0 && k->ps.start != 0;
}

/* The regions as matched, and the moves of their pages, for a restart. */
static void
save_regions(struct state_out *o, const struct dest *d)
{
	char key[STATE_KEY_MAX];
	size_t n = 0;

	for (size_t i = 0; i < d->nregs; i++) {
		const struct dst_region *dr = &d->regs[i];

		state_put_u64s(o, state_key(key, "region", i),
			       (const uint64_t[]){dr->r.index, dr->r.start,
						  dr->r.length, dr->r.page_size,
						  (uint64_t)dr->r.kind,
						  dr->src_start},
			       6);
		/* The source's word, whatever bytes it holds: escaped. */
		state_put_str(o, state_key(key, "region_name", i), dr->r.name);
	}
	/* Pages the target moved (mremap): region (in the order above). */
	for (size_t i = 0; i < d->nregs; i++)
		for (size_t k = 0; k < d->regs[i].nmoves; k++)
			state_put_u64s(
				o, state_key(key, "move", n++),
				(const uint64_t[]){i, d->regs[i].moves[k].p0,
						   d->regs[i].moves[k].p1,
						   d->regs[i].moves[k].base},
				4);
}

/* The destination's own records (state.h: state_write() calls it). */
static int
save_more(struct state_out *o, const struct migration *m)
{
	const struct dest *d = m->impl;
	char key[STATE_KEY_MAX];
	size_t n = 0;

	state_put_u64(o, "start", d->ps.start);
	if (d->sole)
		state_put_u64(o, "sole", 1);
	/* Whose the migration is: every process it acts on must be theirs. */
	state_put_u64s(o, "owner",
		       (const uint64_t[]){d->owner.uid, d->owner.gid,
					  (uint64_t)d->owner.privileged, 0},
		       4);
	state_put_str(o, "from", d->from);
	/* None yet: the daemon died in the attach; not to be taken up. */
	if (d->target_fd >= 0)
		state_put_u64(o, "target_fd", (uint64_t)d->target_fd);
	if (d->gone)
		state_put_u64(o, "gone", 1);
	/* ID.destination.installed (record.c): a restart must find it. */
	if (d->ps.rec)
		state_put_u64(o, "installed", 1);
	/* A COMMIT acted on, its ACK not echoed yet (restore.c). */
	if (d->cm.committed)
		state_put_u64(o, "committed", d->cm.commit_seq);
	if (d->cm.released)
		state_put_u64(o, "released", 1);
	if (d->held.on)
		state_put_u64(o, "held", 1);
	for (size_t i = 0; i < d->kin.nkids; i++)
		if (saved_kid(d->kin.kids[i]))
			state_put_u64s(
				o, state_key(key, "child", n++),
				(const uint64_t[]){
					(uint64_t)d->kin.kids[i]->m->pid,
					d->kin.kids[i]->ps.start,
					(uint64_t)d->kin.kids[i]->target_fd},
				3);
	if (d->pin[0])
		state_put_str(o, "pin", d->pin);
	for (size_t i = 0; i < d->req.nranges; i++)
		state_put_u64s(o, state_key(key, "range", i),
			       (const uint64_t[]){d->req.ranges[i].start,
						  d->req.ranges[i].end},
			       2);
	save_regions(o, d);
	n = 0;
	save_discarded(o, d, &n);
	n = 0;
	for (size_t i = 0; i < d->kin.nkids; i++)
		if (saved_kid(d->kin.kids[i]))
			save_discarded(o, d->kin.kids[i], &n);
	return 0;
}

/*
 * The start times of the target and its children, as their procrefs
 * were opened: a restart finds a reused pid by them.
 * -1 with errno set when the target is gone.
 */
static int
take_starts(struct dest *d)
{
	for (size_t i = 0; i < d->kin.nkids; i++) {
		struct dest *k = d->kin.kids[i];

		if (k->ps.start == 0 && k->t.pidfd >= 0)
			k->ps.start = k->t.start;
	}
	if (d->ps.start == 0 && !d->gone && (d->ps.start = d->m->start) == 0) {
		errno = ESRCH;
		return -1;
	}
	return 0;
}

/*
 * Writes the root's state file, children included, whoever changed: 0,
 * or -1 with errno set.
 */
static int
save(struct dest *d)
{
	/*
	 * Ended: teardown removed the file, which must not come back; but
	 * for a COMMIT acted on, whose ACK a restart must still deliver.
	 */
	if ((d->m->state == MIG_COMPLETE && !d->cm.committed) ||
	    d->m->state == MIG_FAILED)
		return 0;
	if (take_starts(d) == 0 && state_write(d->m, save_more) == 0) {
		d->ps.saved = 1;
		return 0;
	}
	if (d->ps.saved) {
		/*
		 * The file left is older than what the target has done since
		 * (moves, discards, forks): restored, it would put the
		 * source's bytes where the target has none, or pages at
		 * addresses it left. None is better. The next save that
		 * succeeds writes all of it again.
		 */
		state_remove(d->m);
		d->ps.saved = 0;
		log_warnx("migration %s: its state file could not be brought "
			  "up to date and is removed: a restart of this "
			  "daemon would not take the migration up",
			  log_id(d->m->id));
	}
	return -1;
}

/* The deferred write: the callback that marked the migration returned. */
static void
save_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct dest *d = arg;

	d->ps.dirty = 0;
	save(d);
}

/*
 * d (a root or a child) changed what a restart must know: the root's file
 * is written once the current callback has returned.
 */
void
dest_persist_dirty(struct dest *d)
{
	if (d->root)
		d = d->root;
	if (d->m->state == MIG_COMPLETE || d->m->state == MIG_FAILED)
		return;
	if (d->ps.save_ev == NULL) {
		d->ps.save_ev = event_new(base, -1, 0, save_cb, d);
		if (d->ps.save_ev == NULL)
			fatalx("event_new");
		event_priority_set(d->ps.save_ev, PRIO_BULK);
	}
	d->ps.dirty = 1;
	event_active(d->ps.save_ev, EV_TIMEOUT, 0);
}

/* A pending write is not wanted: done now, or not to be done at all. */
static void
unmark(struct dest *d)
{
	d->ps.dirty = 0;
	if (d->ps.save_ev)
		event_del(d->ps.save_ev);
}

/* Writes the file now, pending changes included: 0, or -1 with errno. */
int
dest_persist_now(struct dest *d)
{
	if (d->root)
		d = d->root;
	unmark(d);
	return save(d);
}

/*
 * The attach's first file with regions, before the target is touched:
 * the record of installed pages made (record.c), then the state file
 * that names it. 0, or -1 with err saying why.
 */
int
dest_persist_first(struct dest *d, char *err, size_t errlen)
{
	if (dest_record_make(d, err, errlen) < 0)
		return -1;
	if (dest_persist_now(d) < 0) {
		snprintf(err, errlen, "%s", strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * The migration ended, or its attach failed: the file goes for good, an
 * ended record of the outcome in its place (state_end()).
 */
void
dest_persist_remove(struct dest *d)
{
	unmark(d);
	state_end(d->m);
	dest_record_remove(d);
}

/*
 * The role's memory goes (dest_free()). A migration that still runs is
 * freed only as the daemon shuts down: what is pending is written now,
 * so that the restart finds it.
 */
void
dest_persist_free(struct dest *d)
{
	if (d->root)
		return; /* the root's file, and the root may be freed already */
	if (d->ps.dirty &&
	    (d->m->state == MIG_RUNNING || d->m->state == MIG_PAUSED))
		save(d);
	d->ps.dirty = 0;
	if (d->ps.save_ev)
		event_free(d->ps.save_ev);
	d->ps.save_ev = NULL;
}

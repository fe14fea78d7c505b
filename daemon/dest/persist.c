/*
 * The destination's state file (state.h): what a restarted daemon needs
 * to take the migration up again (restore.c). One file a migration, the
 * root's, which names its forked children too. Written by this part
 * only: dest_persist_now() where the caller must know that it is on disk
 * (an attach, before it touches the target and once it has taken it; a
 * restart, once it has taken the migration up), dest_persist_dirty()
 * wherever else the destination changed what a restart must know, and
 * removed by dest_persist_remove() when the migration ends.
 */
#include "config.h"

#include <errno.h>

#include "daemon/dest/internal.h"
#include "daemon/log.h"
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
	return k->m->pid > 0 && k->target_fd >= 0 && k->start != 0;
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

	state_put_u64(o, "start", d->start);
	if (d->sole)
		state_put_u64(o, "sole", 1);
	/* Whose the migration is: every process it acts on must be theirs. */
	state_put_u64s(o, "owner",
		       (const uint64_t[]){d->owner.uid, d->owner.gid,
					  (uint64_t)d->owner.privileged,
					  d->owner.capprm},
		       4);
	state_put_str(o, "from", d->from);
	/* None yet: the daemon died in the attach; not to be taken up. */
	if (d->target_fd >= 0)
		state_put_u64(o, "target_fd", (uint64_t)d->target_fd);
	if (d->gone)
		state_put_u64(o, "gone", 1);
	if (d->hold)
		state_put_u64(o, "held", 1);
	for (size_t i = 0; i < d->nkids; i++)
		if (saved_kid(d->kids[i]))
			state_put_u64s(o, state_key(key, "child", n++),
				       (const uint64_t[]){
					       (uint64_t)d->kids[i]->m->pid,
					       d->kids[i]->start,
					       (uint64_t)d->kids[i]->target_fd},
				       3);
	if (d->pin[0])
		state_put_str(o, "pin", d->pin);
	for (size_t i = 0; i < d->nranges; i++)
		state_put_u64s(o, state_key(key, "range", i),
			       (const uint64_t[]){d->ranges[i].start,
						  d->ranges[i].end},
			       2);
	save_regions(o, d);
	n = 0;
	save_discarded(o, d, &n);
	n = 0;
	for (size_t i = 0; i < d->nkids; i++)
		if (saved_kid(d->kids[i]))
			save_discarded(o, d->kids[i], &n);
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
	for (size_t i = 0; i < d->nkids; i++) {
		struct dest *k = d->kids[i];

		if (k->start == 0 && k->t.pidfd >= 0)
			k->start = k->t.start;
	}
	if (d->start == 0 && !d->gone && (d->start = d->m->start) == 0) {
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
	/* Ended: teardown removed the file, which must not come back. */
	if (d->m->state == MIG_COMPLETE || d->m->state == MIG_FAILED)
		return 0;
	if (take_starts(d) == 0 && state_write(d->m, save_more) == 0) {
		d->saved = 1;
		return 0;
	}
	if (d->saved) {
		/*
		 * The file left is older than what the target has done since
		 * (moves, discards, forks): restored, it would put the
		 * source's bytes where the target has none, or pages at
		 * addresses it left. None is better. The next save that
		 * succeeds writes all of it again.
		 */
		state_remove(d->m);
		d->saved = 0;
		log_warnx("migration %s: its state file could not be brought "
			  "up to date and is removed: a restart of this "
			  "daemon would not take the migration up",
			  log_id(d->m->id));
	}
	return -1;
}

/* Writes the file now: 0, or -1 with errno set. */
int
dest_persist_now(struct dest *d)
{
	if (d->root)
		d = d->root;
	return save(d);
}

/* d (a root or a child) changed what a restart must know. */
void
dest_persist_dirty(struct dest *d)
{
	dest_persist_now(d);
}

/* The migration ended, or its attach failed: the file goes for good. */
void
dest_persist_remove(struct dest *d)
{
	state_remove(d->m);
}

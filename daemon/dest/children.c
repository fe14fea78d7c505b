/*
 * The processes the target forks (UFFD_EVENT_FORK): each child is a
 * destination of its own (its uffd, page map, migration record) served
 * from the root's lanes and frames. It gets a copy of its uffd, as the
 * target has, or is held as its parent is (tracee.h); the root completes
 * once every child has. Which process a fork's child is: find.c.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <event2/event.h>

#include "daemon/authz.h"
#include "daemon/compat.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/migration.h"
#include "daemon/pagemap.h"

/*
 * A forked child of root's target (pid, its uffd ufd): regions copied from
 * its parent, every page missing; the caller fills in what it holds and
 * then calls dest_child_start().
 */
struct dest *
dest_child_new(struct dest *root, const struct dest *parent, pid_t pid, int ufd)
{
	struct dest *k = dest_new(root->m->id, pid, root->from, root->pin);
	struct migration *m = k->m;

	memcpy(m->peer, root->m->peer, sizeof(m->peer));
	k->root = root;
	k->uffd = ufd;
	k->have_poison = parent->have_poison;
	k->sole = parent->sole;
	k->hints = parent->hints;
	k->regs = xcalloc(parent->nregs, sizeof(*k->regs));
	for (size_t i = 0; i < parent->nregs; i++) {
		const struct dst_region *pr = &parent->regs[i];
		struct dst_region *kr = &k->regs[k->nregs++];

		kr->r = pr->r;
		kr->src_start = pr->src_start;
		kr->npages = pr->npages;
		kr->shared = pr->shared;
		if (pagestate_init(&kr->ps, kr->npages) < 0)
			fatal("page state");
		if (pr->nmoves) {
			kr->moves = xcalloc(pr->nmoves, sizeof(*kr->moves));
			memcpy(kr->moves, pr->moves,
			       pr->nmoves * sizeof(*kr->moves));
			kr->nmoves = pr->nmoves;
		}
		m->cnt.pages_total += kr->npages;
	}
	dest_record_share(k, root);
	return k;
}

/* The child's page map is filled in: serve it, or let it go if complete. */
void
dest_child_start(struct dest *root, struct dest *k)
{
	struct migration *m = k->m;

	m->cnt.pages_present = dest_present_total(k);
	dest_fault_watch(k);
	dest_exit_watch(k);
	migration_set_state(m, MIG_RUNNING);
	root->kin.kids = realloc(root->kin.kids, (root->kin.nkids +
						  1) * sizeof(*root->kin.kids));
	if (root->kin.kids == NULL)
		fatal("children");
	root->kin.kids[root->kin.nkids++] = k;
	/*
	 * What an injection read from its uffd while the child was built
	 * (give_uffd()): the kernel let those events go on when they were
	 * read, so the page map must follow before any frame goes in.
	 */
	if (k->fr.nbacklog) {
		dest_read_faults(k);
		if (m->state != MIG_RUNNING)
			return;
		m->cnt.pages_present = dest_present_total(k);
	}
	if (m->cnt.pages_present == m->cnt.pages_total)
		dest_child_done(k);
	else
		dest_persist_dirty(root); /* with the child, for a restart */
}

/*
 * Only we hold a child's uffd. Should the daemon die, the kernel would
 * unregister the child's ranges and its missing pages would read as zeros:
 * give the child a copy, as every target has (and a restart takes it up),
 * or, where its parent held none, have it held: by its grant (bygrant.c).
 */
static void
give_uffd(struct dest *k)
{
	if (dest_by_grant(k)) {
		dest_grant_child(k);
		return;
	}
	log_warnx("migration %s: forked process %d has no grant: it holds no "
		  "copy of its uffd, and would not survive a restart of the "
		  "daemon",
		  log_id(k->root->m->id), (int)k->m->pid);
}

/*
 * The fork event is read while the parent is still inside fork(): the
 * child is linked to its parent only after that, so it is usually not in
 * /proc/PID/task/TID/children yet. Look again shortly after, for up to a
 * second; a child never found is still served, but has no exit event and
 * no copy of its uffd (a daemon restart would lose it).
 */
#define FIND_TRIES 100

/* Looks for a forked child whose pid its fork event did not tell. */
static void
find_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct dest *k = arg;
	struct timeval tv = {0, 10000};
	pid_t pid;

	if (k->m->state != MIG_RUNNING)
		return;
	if ((pid = dest_claim_child(k->kin.parent_pid, k->root, 0)) <= 0 &&
	    dest_proc_gone(k->kin.parent_pid))
		pid = dest_claim_orphan(k);
	if (pid <= 0) {
		if (k->kin.find_tries++ < FIND_TRIES)
			evtimer_add(k->kin.find_ev, &tv);
		else
			log_warnx("migration %s: forked process of %d not "
				  "found; it would not survive a restart",
				  log_id(k->root->m->id),
				  (int)k->kin.parent_pid);
		return;
	}
	k->m->pid = pid;
	dest_child_open(k, pid);
	dest_exit_watch(k);
	log_info("migration %s: forked process of %d is %d",
		 log_id(k->root->m->id), (int)k->kin.parent_pid, (int)pid);
	give_uffd(k);
	if (k->fr.nbacklog) /* as in dest_child_start() */
		dest_read_faults(k);
	dest_persist_dirty(k); /* the child's pid and uffd, for a restart */
}

/* The child's pid is looked for shortly, as its fork completes. */
static void
find_later(struct dest *k)
{
	struct timeval tv = {0, 1000};

	k->kin.find_ev = evtimer_new(base, find_cb, k);
	evtimer_add(k->kin.find_ev, &tv);
}

/*
 * What the child k (of parent, process pid) holds at its fork: private
 * memory as its own pagemap says, shared memory as its parent (one page
 * cache), private file pages all (the parent had them before it ran).
 * Pages its parent got between the fork and the event, it asks for.
 */
static void
inherit(struct dest *k, const struct dest *parent, pid_t pid)
{
	for (size_t i = 0; i < k->nregs; i++) {
		const struct dst_region *pr = &parent->regs[i];
		struct dst_region *kr = &k->regs[i];
		uint64_t *held = NULL;

		if (!region_kind_shmem(kr->r.kind) &&
		    kr->r.kind != REGION_FILE_PRIVATE && pid > 0 &&
		    kr->nmoves == 0) {
			held = xcalloc(bit_words(kr->npages), sizeof(uint64_t));
			if (pagemap_classify(pid, kr->r.start, kr->npages,
					     kr->r.page_size, held,
					     PAGEMAP_READ) < 0) {
				free(held);
				held = NULL;
			}
		}
		for (uint64_t p = 0; p < kr->npages; p++) {
			enum page_state st = pagestate_get(&pr->ps, p);

			if (kr->r.kind == REGION_FILE_PRIVATE)
				/* The parent had them all before it ran. */
				st = PAGE_PRESENT;
			else if (region_kind_shmem(kr->r.kind))
				/* One page cache: what the parent has. */
				st = st == PAGE_REQUESTED ? PAGE_MISSING : st;
			else if (held)
				st = bit_test(held, p)	    ? PAGE_PRESENT
				     : st == PAGE_DISCARDED ? PAGE_DISCARDED
							    : PAGE_MISSING;
			else if (st == PAGE_REQUESTED)
				st = PAGE_MISSING;
			pagestate_set(&kr->ps, p, st);
			/* Present in the parent, not here: ask for it. */
			if (st == PAGE_MISSING &&
			    !region_kind_shmem(kr->r.kind) &&
			    pagestate_get(&pr->ps, p) == PAGE_PRESENT)
				dest_request_page(k, kr, p);
		}
		free(held);
	}
}

/*
 * UFFD_EVENT_FORK: the target forked, and the child's copy of the
 * migrated ranges is registered with a new uffd, given to us. The child
 * holds what its parent held at the fork (inherit()), and gets the rest
 * from the same frames as its parent.
 */
void
dest_fork_child(struct dest *parent, int ufd)
{
	struct dest *root = parent->root ? parent->root : parent, *k;
	pid_t pid = dest_claim_child(parent->m->pid, root, 0);
	char who[32] = "a process (pid not known yet)";

	k = dest_child_new(root, parent, pid, ufd);
	k->kin.parent_pid = parent->m->pid;
	dest_child_open(k, pid);
	k->kin.fork_ticks = dest_boot_ticks();
	if (pid > 0)
		give_uffd(k);
	else
		find_later(k);
	inherit(k, parent, pid);
	if (pid > 0)
		snprintf(who, sizeof(who), "%d", (int)pid);
	log_info("migration %s: process %d forked %s; %llu of its %llu pages "
		 "still to come",
		 log_id(root->m->id), (int)parent->m->pid, who,
		 (unsigned long long)(k->m->cnt.pages_total -
				      dest_present_total(k)),
		 (unsigned long long)k->m->cnt.pages_total);
	dest_child_start(root, k);
}

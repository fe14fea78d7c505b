/*
 * After a daemon restart: a destination migration taken up again from its
 * state file (saved.c reads it), by the grant the privileged part kept for
 * it (docs/privsep.md). The target's uffd is copied again from the target
 * by the privileged part (it kept its copy: docs/design.md), the page
 * states are rebuilt from its pagemap and the saved discards, the forked
 * children the file names are taken up likewise, and the lanes reconnect
 * (a resume).
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/compat.h"
#include "daemon/dest.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/migration.h"
#include "daemon/pagemap.h"
#include "daemon/proc.h"
#include "daemon/probe.h"
#include "daemon/state.h"
#include "daemon/stats.h"
#include "daemon/statefmt.h"

/*
 * A restarted daemon's page map of a region: a page is there exactly when
 * the target's pagemap says so (attach discarded everything first).
 */
static int
held_from_pagemap(pid_t pid, struct dst_region *dr)
{
	uint64_t *held = xcalloc(bit_words(dr->npages), sizeof(uint64_t));

	/* Run by run of consecutive addresses: the target may move some. */
	for (uint64_t p = 0; p < dr->npages;) {
		uint64_t n = dest_addr_run(dr, p, dr->npages - p);

		memset(held, 0, bit_words(n) * sizeof(uint64_t));
		if (pagemap_classify(pid, dest_page_addr(dr, p), n,
				     dr->r.page_size, held,
				     pagemap_method()) < 0) {
			free(held);
			return -1;
		}
		for (uint64_t i = 0; i < n; i++)
			if (bit_test(held, i))
				pagestate_set(&dr->ps, p + i, PAGE_PRESENT);
		p += n;
	}
	free(held);
	return 0;
}

/* Discarded and not touched since: still nothing to fetch. */
static void
mark_gone(struct dst_region *dr, size_t reg, const struct gone *gone,
	  size_t ngone, int pid)
{
	for (size_t k = 0; k < ngone; k++)
		for (uint64_t p = gone[k].p0;
		     gone[k].reg == reg && gone[k].pid == pid && p < gone[k].p1;
		     p++)
			if (pagestate_get(&dr->ps, p) != PAGE_PRESENT)
				pagestate_set(&dr->ps, p, PAGE_DISCARDED);
}

/*
 * A file this daemon wrote, of a migration that cannot be taken up: it had
 * ended, or the daemon died in the attach before it took the uffd.
 */
static int
saved_usable(const char *file, const struct saved *sv)
{
	if (strcmp(sv->state, "running") != 0 &&
	    strcmp(sv->state, "paused") != 0) {
		log_warnx("%s: migration %s was %s", file, log_id(sv->id),
			  sv->state);
		return 0;
	}
	if (sv->sole) {
		/* It died with the daemon that held it (tracee.h). */
		log_warnx("%s: migration into process %d ended with the "
			  "daemon: the process held no copy of its userfaultfd "
			  "and was killed with it",
			  file, (int)sv->pid);
		return 0;
	}
	if (sv->tfd < 0 && !sv->gone) {
		log_warnx("%s: the daemon died attaching to process %d, "
			  "before it took a userfaultfd there",
			  file, (int)sv->pid);
		return 0;
	}
	return 1;
}

/* The migration record and its dest, from the file; no process yet. */
static struct dest *
restore_new(struct saved *sv)
{
	struct dest *d = dest_new(sv->id, sv->pid, sv->from, sv->pin);
	struct migration *m = d->m;

	m->start = sv->start;
	d->owner = sv->owner;
	d->target_fd = sv->tfd;
	d->ps.start = sv->start;
	snprintf(m->peer, sizeof(m->peer), "%.*s", (int)sizeof(m->peer) - 1,
		 sv->from);
	d->req.ranges = sv->ranges;
	d->req.nranges = sv->nranges;
	sv->ranges = NULL;
	if (posix_memalign((void **)&d->in.buf, 4096, FRAME_DATA_MAX) != 0)
		fatal("page buffer");
	d->have_poison = (kfeat.uffd_features & UFFD_FEATURE_POISON) != 0 &&
			 dest_poison_usable();
	d->hints = kfeat.access_likely; /* dropped at the first EINVAL */
	return d;
}

/*
 * The target as the file names it: pid and start time both, or it is
 * another process, never touched. Its pidfd and uffd go into d. 0 to go on
 * (d->gone when it exited and its forked children are left to serve), or
 * -1, said why.
 */
static int
restore_target(struct dest *d, const struct saved *sv, const char *file)
{
	unsigned long long now = 0;
	pid_t pid = sv->pid;
	char err[256];

	d->gone = sv->gone;
	/* By the grant the privileged part kept, when it kept one. */
	if (!d->gone && procref_restore(&d->t, ROLE_DEST, sv->id, pid,
					sv->start, err, sizeof(err)) == 0)
		now = d->t.start;
	else if (!d->gone) {
		int e = errno;

		log_warnx("%s: %s", file, err);
		/*
		 * Its forked children are taken up without it only if it is
		 * gone, not for a target that lives on without its grant.
		 */
		if (e == EPERM || sv->nkids == 0 ||
		    proc_start(pid) == sv->start)
			return -1;
	}
	if (!d->gone && now != 0 && now != sv->start) {
		log_warnx("%s: pid %d now names another process (started at "
			  "tick %llu, the target at %llu): the target exited "
			  "and its pid was reused; process %d not touched",
			  file, (int)pid, now, sv->start, (int)pid);
		procref_close(&d->t);
		now = 0;
		if (sv->nkids == 0)
			return -1;
	}
	/* Nor may it run, since, what the attach's caller may not touch. */
	if (now != 0 && !authz_allows(&d->owner, &d->t)) {
		log_warnx("%s: process %d changed credentials or program while "
			  "no daemon watched it; not touched",
			  file, (int)pid);
		return -1;
	}
	/* A process of its own is the engine's by its grant only. */
	if (now != 0 && dest_by_grant(d)) {
		d->uffd = dest_grant_retake(d->t.grant, sv->tfd, err,
					    sizeof(err));
		if (d->uffd < 0)
			log_warnx("%s: process %d: %s", file, (int)pid, err);
	}
	if (!d->gone && d->uffd < 0 && sv->nkids > 0 &&
	    (now == 0 || dest_proc_gone(pid))) {
		/* It exited while no daemon ran: as root_gone(). */
		log_info("%s: process %d exited; taking up the processes it "
			 "forked",
			 file, (int)pid);
		procref_close(&d->t);
		d->gone = 1;
	}
	if (d->gone) {
		dest_gone_reason(d);
		return 0;
	}
	if (now == 0) {
		log_warnx("%s: target process %d is gone", file, (int)pid);
		return -1;
	}
	if (d->uffd < 0) {
		log_warnx("%s: fd %d of process %d is not its userfaultfd any "
			  "more",
			  file, sv->tfd, (int)pid);
		return -1;
	}
	return 0;
}

/*
 * The dead daemon held the target for its private file pages; the ptrace
 * hold ended with it and the target ran on the file's stale pages there.
 * That cannot be made right: stop the target and say so.
 */
static void
stop_let_go(struct dest *d, const char *file)
{
	procref_signal(&d->t, SIGSTOP);
	log_warnx("%s: process %d was let go before the pages it wrote in "
		  "private file mappings arrived (the daemon died); migration "
		  "%s failed, process stopped",
		  file, (int)d->m->pid, log_id(d->m->id));
}

/* The regions as the file names them, every page missing. */
static int
restore_layout(struct dest *d, struct saved *sv, const char *file)
{
	d->regs = xcalloc(sv->nregs, sizeof(*d->regs));
	for (size_t i = 0; i < sv->nregs; i++) {
		struct dst_region *dr = &d->regs[d->nregs++];

		dr->r = sv->regs[i];
		dr->src_start = sv->regs[i].vma_start;
		dr->npages = dr->r.length / dr->r.page_size;
		/* The file's sizes: no memory for them is no reason to die. */
		if (pagestate_init(&dr->ps, dr->npages) < 0) {
			d->nregs--;
			log_warnx("%s: region %zu: no memory for the states of "
				  "its %llu pages",
				  file, i, (unsigned long long)dr->npages);
			return -1;
		}
		for (size_t k = 0; k < sv->nmoves; k++)
			if (sv->moves[k].reg == i)
				dest_add_move(dr, sv->moves[k].mv.p0,
					      sv->moves[k].mv.p1,
					      sv->moves[k].mv.base);
		d->m->cnt.pages_total += dr->npages;
	}
	dest_record_regions(d);
	return 0;
}

/*
 * The regions' page states: the target's pagemap, the record of
 * installed pages, the saved discards.
 */
static int
restore_regions(struct dest *d, struct saved *sv, const char *file)
{
	if (restore_layout(d, sv, file) < 0)
		return -1;
	for (size_t i = 0; i < d->nregs; i++) {
		struct dst_region *dr = &d->regs[i];

		if (dr->r.kind == REGION_FILE_PRIVATE || d->gone) {
			/*
			 * Saved unheld: every page of it was written. Or no
			 * process is left (root_gone()).
			 */
			pagestate_set_present(&dr->ps, 0, dr->npages);
			continue;
		}
		if (held_from_pagemap(d->m->pid, dr) < 0) {
			log_warn("%s: pagemap of %d", file, (int)d->m->pid);
			return -1;
		}
		/* Installed once, a hole punched since: still installed. */
		dest_record_apply(dr);
		mark_gone(dr, i, sv->runs, sv->nruns, 0);
	}
	d->m->cnt.pages_present = dest_present_total(d);
	return 0;
}

/* Faults and the exit of a live target again; the threads waiting woken. */
static void
restore_watch(struct dest *d)
{
	if (d->gone)
		return;
	dest_fault_watch(d);
	dest_exit_watch(d);
	for (size_t i = 0; i < d->nregs; i++) {
		const struct dst_region *dr = &d->regs[i];

		uffd_wake(d->uffd, dr->r.start, dr->r.length);
		for (size_t k = 0; k < dr->nmoves; k++)
			uffd_wake(d->uffd, dr->moves[k].base,
				  (dr->moves[k].p1 - dr->moves[k].p0) *
					  dr->r.page_size);
	}
}

/*
 * After a restart, a forked child of root's target that kept its copy of
 * its uffd: taken again like the root, if its pid still names it; it holds
 * what its pagemap shows (shared memory: what the root has, while the
 * root's target lives), and gets the rest from the root's frames: the
 * resume's HAVE names only pages that the root and every child hold
 * (kids_have()).
 */
static void
restore_child(struct dest *root, const char *file, const struct saved_kid *sk,
	      const struct gone *gone, size_t ngone)
{
	struct procref t = PROCREF_NONE;
	unsigned long long now;
	char err[256] = "";
	struct dest *k;
	int ufd = -1;

	/*
	 * The root's grant opens a child of its process as a grant of its
	 * own; one that is not (a grandchild, an orphan) the privileged part
	 * finds by its registration (procref_orphan()).
	 */
	if ((dest_by_grant(root) &&
	     procref_child(&t, root->t.grant, sk->pid) == 0) ||
	    procref_orphan(&t, root->t.grant, root->m->id, sk->pid, sk->start,
			   0, dest_orphan_addr(root)) == 0)
		now = t.start;
	else
		now = proc_start(sk->pid);
	if (now != 0 && now != sk->start)
		log_warnx("%s: pid %d now names another process (started at "
			  "tick %llu, the forked one at %llu); not restored, "
			  "not touched",
			  file, (int)sk->pid, now, sk->start);
	if (now == sk->start && t.grant != 0 &&
	    (ufd = dest_grant_retake(t.grant, sk->tfd, err, sizeof(err))) < 0)
		log_warnx("%s: forked process %d: %s", file, (int)sk->pid, err);
	if (ufd < 0) {
		procref_close(&t);
		if (now == 0 || now == sk->start)
			log_warnx("%s: forked process %d is gone, not the "
				  "attach caller's, or holds no uffd at fd %d; "
				  "not restored",
				  file, (int)sk->pid, sk->tfd);
		return;
	}
	k = dest_child_new(root, root, sk->pid, ufd);
	procref_move(&k->t, &t);
	k->target_fd = sk->tfd;
	k->ps.start = sk->start;
	for (size_t i = 0; i < k->nregs; i++) {
		struct dst_region *kr = &k->regs[i];
		const struct dst_region *rr = &root->regs[i];

		if (kr->r.kind == REGION_FILE_PRIVATE)
			pagestate_set_present(&kr->ps, 0, kr->npages);
		else if (region_kind_shmem(kr->r.kind) && !root->gone)
			for (uint64_t p = 0; p < kr->npages; p++)
				pagestate_set(&kr->ps, p,
					      pagestate_get(&rr->ps, p));
		else if (held_from_pagemap(sk->pid, kr) < 0)
			log_warn("%s: pagemap of forked process %d", file,
				 (int)sk->pid);
		else
			/* Shared memory: the root's record (record.c). */
			dest_record_apply(kr);
		if (!region_kind_shmem(kr->r.kind) &&
		    kr->r.kind != REGION_FILE_PRIVATE)
			mark_gone(kr, i, gone, ngone, sk->pid);
		uffd_wake(ufd, kr->r.start, kr->r.length);
	}
	log_info("restored forked process %d of migration %s: %llu of %llu "
		 "pages present",
		 (int)sk->pid, log_id(root->m->id),
		 (unsigned long long)dest_present_total(k),
		 (unsigned long long)k->m->cnt.pages_total);
	dest_child_start(root, k);
}

/* Says what was taken up, and that the lanes are reconnecting. */
static void
restored_log(const struct dest *d)
{
	if (d->gone)
		log_info("restored migration %s for the processes that "
			 "process %d forked before it exited; reconnecting to "
			 "%s",
			 log_id(d->m->id), (int)d->m->pid, d->from);
	else
		log_info("restored migration %s into process %d: %llu of %llu "
			 "pages present; reconnecting to %s",
			 log_id(d->m->id), (int)d->m->pid,
			 (unsigned long long)d->m->cnt.pages_present,
			 (unsigned long long)d->m->cnt.pages_total, d->from);
}

/*
 * The daemon died after it acted on a COMMIT, before the source echoed
 * its ACK: the migration is complete. A target not let go yet (the daemon
 * died in between) is let go now, as the COMMIT would have; then a resume
 * that says committed delivers the ACK, so that the source kills (or
 * keeps) its process.
 */
static int
restore_committed(const char *file, struct saved *sv)
{
	struct dest *d = restore_new(sv);

	d->cm.committed = 1;
	d->cm.commit_seq = sv->committed;
	if (!sv->released && !sv->sole && !sv->gone &&
	    restore_target(d, sv, file) == 0 && !d->gone &&
	    restore_regions(d, sv, file) == 0) {
		log_info("%s: migration %s was committed; letting target %d "
			 "go",
			 file, log_id(sv->id), (int)sv->pid);
		dest_release_target(d, 1);
	}
	d->cm.released = 1;
	migration_set_state(d->m, MIG_COMPLETE);
	d->ln.t_pause = now_ns();
	dest_persist_now(d);
	dest_schedule_retry(d);
	log_info("restored migration %s, committed: its acknowledgement goes "
		 "to %s",
		 log_id(sv->id), d->from);
	return 0;
}

/*
 * A migration not taken up after a restart (its target gone, changed, or
 * let go while no daemon held it: a pre-copy's held target dies with its
 * daemon) stays listed as failed, so that a wait that rejoins is told it
 * failed and why, not that its ID is unknown. Its state file goes for an
 * ended record (state_end(): a further restart lists it too); the source
 * learns of it at its pause deadline.
 */
static void
restore_failed(const struct saved *sv)
{
	struct migration *m = migration_new(ROLE_DEST, sv->id);

	m->pid = sv->pid;
	m->start = sv->start;
	migration_set_peer(m, sv->from);
	migration_fail(m,
		       "not taken up after the daemon restarted: target "
		       "process %d is gone, or was changed or let go while no "
		       "daemon held it (the log says which)",
		       (int)sv->pid);
	state_end(m);
}

/*
 * After a daemon restart: takes the target's userfaultfd again (the target
 * kept its copy: docs/design.md), rebuilds the page states from the
 * target's pagemap (a page is there exactly when it was installed, because
 * attach discarded everything and registered before any thread ran), wakes
 * threads whose faults the dead daemon had read, and resumes.
 */
int
dest_restore(struct state_tbl *t)
{
	const char *file = state_name(t);
	char err[320];
	struct saved sv;
	struct dest *d;
	int rc = -1;

	if (dest_saved_read(t, &sv) < 0)
		goto out;
	if (sv.committed) {
		rc = restore_committed(file, &sv);
		goto out;
	}
	if (!saved_usable(file, &sv))
		goto out;
	d = restore_new(&sv);
	/* Checked before any process is looked at, as the file itself. */
	if (sv.installed &&
	    dest_record_take(d, sv.regs, sv.nregs, err, sizeof(err)) < 0) {
		state_bad(t, "installed", "%s", err);
		migration_free(d->m);
		goto out;
	}
	if (!sv.installed && !sv.gone)
		log_warnx("%s: no record of installed pages (written by an "
			  "older uffdd): a hole the target punched in shared "
			  "memory would get the source's bytes",
			  file);
	if (restore_target(d, &sv, file) < 0)
		goto fail;
	if (sv.held && !d->gone) {
		stop_let_go(d, file);
		goto fail;
	}
	if (restore_regions(d, &sv, file) < 0)
		goto fail;
	restore_watch(d);
	migration_set_state(d->m, MIG_PAUSED);
	d->ln.t_pause = now_ns();
	restored_log(d);
	for (size_t i = 0; i < sv.nkids; i++)
		restore_child(d, file, &sv.kids[i], sv.runs, sv.nruns);
	if (d->gone && d->kin.nkids == 0) {
		/* Completing would kill the source, which holds it all. */
		log_warnx("%s: no process that process %d forked was "
			  "restored; the source keeps its process",
			  file, (int)d->m->pid);
		goto fail;
	}
	/* As at attach: the children there are now are not forks to come. */
	if (!d->gone)
		dest_claim_child(d->m->pid, d, 1);
	for (size_t i = 0; i < d->kin.nkids; i++)
		dest_claim_child(d->kin.kids[i]->m->pid, d, 1);
	dest_persist_now(d);
	dest_schedule_retry(d);
	rc = 0;
	goto out;
fail:
	migration_free(d->m);
	restore_failed(&sv);
out:
	dest_saved_free(&sv);
	return rc;
}

/*
 * How a destination is made, and how it ends: complete (every page in),
 * failed (the missing pages poisoned, or the target stopped), or its
 * target gone; then teardown lets go of the target, the lanes and the
 * state file, and the memory goes once the current callback returns.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/compat.h"
#include "daemon/conn.h"
#include "daemon/control.h"
#include "daemon/dest.h"
#include "daemon/dest/installer.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/migration.h"
#include "daemon/privop.h"

/* The events of every part, those that were made. */
static void
free_events(struct dest *d)
{
	struct event *evs[] = {
		d->fr.uffd_ev,	  d->exit_ev,	     d->ln.retry_ev,
		d->ln.bulk_delay, d->kin.find_ev,    d->in.piece_ev,
		d->bh.ws_ev,	  d->bh.run_hold_ev, d->fr.stream_ev};

	for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
		if (evs[i]) /* event_free() takes no NULL */
			event_free(evs[i]);
}

/*
 * The role's memory (migration.h, impl_free): once the migration ended,
 * or as the daemon shuts down. A write of the state file still pending
 * is done first (persist.c).
 */
static void
dest_free(struct migration *m)
{
	struct dest *d = m->impl;

	if (d == NULL)
		return;
	dest_release_held(d);
	dest_late_close_free(d);
	dest_persist_free(d);
	conn_free(d->demand);
	conn_free(d->bulk);
	free_events(d);
	dest_installer_ring_free(d);
	free(d->in.pbuf);
	free(d->kin.seen);
	free(d->fr.zretry);
	for (size_t i = 0; i < d->fr.nbacklog; i++)
		if (d->fr.backlog[i].event == UFFD_EVENT_FORK)
			close((int)d->fr.backlog[i].arg.fork.ufd);
	free(d->fr.backlog);
	if (d->uffd >= 0)
		close(d->uffd);
	procref_close(&d->t);
	dest_record_drop(d);
	for (size_t i = 0; i < d->nregs; i++) {
		pagestate_free(&d->regs[i].ps);
		free(d->regs[i].moves);
	}
	free(d->regs);
	free(d->req.ranges);
	free(d->req.maps);
	free(d->req.map_names);
	free(d->in.buf);
	if (d->fr.waiters)
		dest_waiters_drop(d);
	free(d->fr.waiters);
	free(d->kin.kids);
	free(d->cm.done_kids);
	free(d);
	m->impl = NULL;
}

/* One place makes a destination: attach, a fork, and a restart use it. */
struct dest *
dest_new(const char *id, pid_t pid, const char *from, const char *pin)
{
	struct migration *m = migration_new(ROLE_DEST, id);
	struct dest *d = xcalloc(1, sizeof(*d));

	m->impl = d;
	m->impl_free = dest_free;
	m->pid = pid;
	d->m = m;
	d->uffd = d->target_fd = -1;
	d->t = (struct procref)PROCREF_NONE;
	snprintf(d->from, sizeof(d->from), "%s", from);
	snprintf(d->pin, sizeof(d->pin), "%s", pin);
	d->fr.waiters = xcalloc(INFLIGHT_MAX, sizeof(*d->fr.waiters));
	return d;
}

/* Attach failed before the target was touched: answer and forget. */
void
dest_attach_fail(struct dest *d, uint32_t code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_warnx("attach %d: %s", (int)d->m->pid, msg);
	control_reply_error(d->req.serial, code, "attach: %s", msg);
	if (d->demand) {
		conn_finish(d->demand); /* what it queued still goes out */
		d->demand = NULL;
	}
	dest_persist_remove(d);
	migration_free(d->m);
}

/* What a failed migration does with a target it cannot poison. */
static const char *
fate(const struct dest *d)
{
	return d->sole ? "killed (it held no copy of its userfaultfd)"
		       : "stopped";
}

/* The target's process is gone (its pidfd is readable). */
static void
exit_cb(evutil_socket_t fd, short ev, void *arg)
{
	dest_target_exited(arg);
}

/* The target's exit is an event, once its process is known (a pidfd). */
void
dest_exit_watch(struct dest *d)
{
	if (d->t.pidfd < 0 || d->exit_ev != NULL)
		return;
	d->exit_ev =
		event_new(base, d->t.pidfd, EV_READ | EV_PERSIST, exit_cb, d);
	event_priority_set(d->exit_ev, PRIO_CONTROL);
	event_add(d->exit_ev, NULL);
}

/* No more faults and events of the target, nor its exit: our uffd goes. */
static void
unwatch(struct dest *d)
{
	if (d->fr.uffd_ev)
		event_del(d->fr.uffd_ev);
	if (d->exit_ev)
		event_del(d->exit_ev);
	dest_installer_forget(d, 0);
	if (d->uffd >= 0)
		close(d->uffd);
	d->uffd = -1;
}

/*
 * d's target is none of ours any more: one held with no copy of its uffd
 * (sole, tracee.h) is let go, or killed first when kill is set; its faults,
 * events and exit are no longer watched, and our uffd goes.
 */
void
dest_drop_target(struct dest *d, int kill)
{
	if (d->sole && kill)
		procref_signal(&d->t, SIGKILL);
	if (d->sole && dest_by_grant(d))
		dest_grant_end(d, PRIVOP_DEST_RELEASE, NULL, 0);
	unwatch(d);
}

/*
 * A guest's device state loads and its vCPUs start 10-20 ms after the
 * switchover, which a pre-copy's commit follows at once: this is well
 * after. Only for a target not held during its pre-copy (attach
 * --precopy-no-hold: QEMU); any other's copy goes at the commit, so that
 * nothing of the migration is left in it once it is complete.
 */
#define LATE_CLOSE_MS 500

static void
late_close_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dest *d = arg;

	(void)fd;
	(void)what;
	dest_close_target_fd(d);
	if (d->cm.end_waits)
		migration_release(d->m);
}

void
dest_close_target_later(struct dest *d)
{
	struct timeval tv = {LATE_CLOSE_MS / 1000,
			     (LATE_CLOSE_MS % 1000) * 1000};

	if (d->target_fd < 0)
		return;
	if (d->cm.late_close_ev == NULL &&
	    (d->cm.late_close_ev = evtimer_new(base, late_close_cb, d)) ==
		    NULL) {
		dest_close_target_fd(d); /* now, then */
		return;
	}
	evtimer_add(d->cm.late_close_ev, &tv);
}

void
dest_late_close_free(struct dest *d)
{
	if (d->cm.late_close_ev == NULL)
		return;
	if (evtimer_pending(d->cm.late_close_ev, NULL))
		dest_close_target_fd(d);
	event_free(d->cm.late_close_ev);
	d->cm.late_close_ev = NULL;
}

/*
 * The target is none of ours any more: held threads let go, registration
 * and both copies of the uffd gone (the target's only when close_target
 * is set; a target with no copy of its own is killed otherwise).
 */
void
dest_release_target(struct dest *d, int close_target)
{
	dest_release_held(d);
	if (close_target && d->uffd >= 0) {
		for (size_t i = 0; i < d->nregs; i++)
			if (d->regs[i].r.kind != REGION_FILE_PRIVATE &&
			    uffd_unregister(d->uffd, d->regs[i].r.start,
					    d->regs[i].r.length) < 0 &&
			    errno != ESRCH)
				log_warn(
					"migration %s: unregister 0x%llx",
					log_id(d->m->id),
					(unsigned long long)d->regs[i].r.start);
		if (close_target == RELEASE_CLOSE_LATER)
			dest_close_target_later(d);
		else
			dest_close_target_fd(d);
	}
	/*
	 * A target with no copy of its own loses its registration with ours:
	 * left stopped (no UFFDIO_POISON here), it would read zeros once
	 * continued. It goes, as it would with the daemon (tracee.h).
	 */
	dest_drop_target(d, !close_target);
}

/*
 * The migration's end once its target is dealt with: lanes, the retries,
 * the state file, and the role's memory once the current callback
 * returns. Children waiting for the commit end with it, whole.
 */
void
dest_end(struct dest *d)
{
	dest_done_kids_end(d, NULL);
	if (d->demand)
		conn_finish(d->demand);
	if (d->bulk)
		conn_finish(d->bulk);
	d->demand = d->bulk = NULL;
	if (d->ln.retry_ev)
		event_del(d->ln.retry_ev);
	dest_persist_remove(d);
	if (d->cm.late_close_ev && evtimer_pending(d->cm.late_close_ev, NULL))
		d->cm.end_waits = 1; /* late_close_cb() releases it */
	else
		migration_release(d->m);
}

/* The end of a migration, either way: the target, then the rest. */
static void
teardown(struct dest *d, int close_target)
{
	dest_release_target(d, close_target);
	dest_end(d);
}

/*
 * Marks every page that is not present as lost: UFFDIO_POISON where the
 * kernel has it, so a thread touching one gets SIGBUS instead of a zero page
 * or an endless wait. Returns 0, or -1 when poisoning is impossible.
 */
static int
poison_missing(struct dest *d)
{
	uint64_t poisoned = 0;

	d->failing = 1;
	for (size_t i = 0; i < d->nregs; i++) {
		struct dst_region *dr = &d->regs[i];
		uint64_t p = 0, ps = dr->r.page_size;

		while (p < dr->npages) {
			uint64_t n;

			p += pagestate_present_run(&dr->ps, p, dr->npages - p);
			if (p >= dr->npages)
				break;
			n = pagestate_missing_run(&dr->ps, p, dr->npages - p);
			n = dest_addr_run(dr, p, n);
			/* Never registered: dest_release_held() stops it. */
			if (d->have_poison &&
			    dr->r.kind != REGION_FILE_PRIVATE) {
				struct uffdio_poison up = {
					.range = {dest_page_addr(dr, p),
						  n * ps}};
				int tries = 0;

				poisoned += n;
				while (ioctl(d->uffd, UFFDIO_POISON, &up) < 0 &&
				       errno == EAGAIN && tries++ < RETRY_MAX) {
					dest_read_faults(d);
					if (up.updated > 0) {
						up.range.start +=
							(uint64_t)up.updated;
						up.range.len -=
							(uint64_t)up.updated;
					}
					up.updated = 0;
				}
			}
			migration_lost(d->m, dest_page_addr(dr, p),
				       dest_page_addr(dr, p) + n * ps, n);
			p += n;
		}
	}
	if (poisoned > 0)
		log_event(LOG_MSGID_PAGES_POISONED, NULL,
			  "migration %s: %llu missing pages of target %d "
			  "poisoned: SIGBUS on access",
			  log_id(d->m->id), (unsigned long long)poisoned,
			  (int)d->m->pid);
	return d->have_poison ? 0 : -1;
}

/*
 * A target that keeps its registration after a failure (no UFFDIO_POISON,
 * or held for its private file pages) would wait forever on a page that
 * nobody installs any more. The pages that are zeros, left unpopulated as
 * ZERO or discarded by the target itself, get their zero page now, so that
 * only the lost ones are missing.
 */
static void
fill_discarded(struct dest *d)
{
	for (size_t i = 0; i < d->nregs; i++) {
		struct dst_region *dr = &d->regs[i];
		uint64_t ps = dr->r.page_size, max = FRAME_DATA_MAX / ps, p = 0;

		if (dr->r.kind == REGION_FILE_PRIVATE)
			continue;
		while (p < dr->npages) {
			uint64_t n = 0, done = 0;

			while (p + n < dr->npages && n < max &&
			       pagestate_get(&dr->ps, p + n) == PAGE_DISCARDED)
				n++;
			if (n == 0) {
				p++;
				continue;
			}
			n = dest_addr_run(dr, p, n);
			if (dest_install_zero(d, dr, dest_page_addr(dr, p),
					      n * ps, 0, &done) == UFFD_GONE)
				return;
			/* Past a page that failed (it exists, or an event). */
			p += done / ps < n ? done / ps + 1 : n;
		}
	}
}

/* Forked children still migrating lose the same pages and fail too. */
void
dest_fail_kids(struct dest *d, const char *why)
{
	while (d->kin.nkids > 0) {
		struct dest *k = d->kin.kids[0];

		if (poison_missing(k) < 0)
			fill_discarded(k);
		migration_fail(k->m, "%s", why);
		dest_child_done(k);
	}
}

/*
 * Loud failure (docs/design.md): the pages that are still missing can no
 * longer be had. They are poisoned and the target goes on with SIGBUS on a
 * lost page; without UFFDIO_POISON the target is stopped instead and keeps
 * its registration, so that no missing page ever reads as zeros.
 */
void
dest_fail(struct dest *d, const char *fmt, ...)
{
	char why[512];
	va_list ap;
	int poisoned;

	if (d->m->state == MIG_COMPLETE || d->m->state == MIG_FAILED)
		return;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	poisoned = poison_missing(d) == 0;
	dest_fail_kids(d, why);
	if (d->held.on && (dest_private_missing(d) > 0 || d->held.precopy)) {
		/*
		 * dest_release_held() (in teardown) stops it, poisoned or
		 * not; it keeps its uffd, as a stopped target does (no
		 * injection into a process with a stop pending), but for a
		 * pre-copy's, closed while it is still held.
		 */
		poisoned = 0;
		migration_fail(d->m, "%s; %llu pages lost; target %d %s (%s)",
			       why, (unsigned long long)d->m->loss.pages,
			       (int)d->m->pid, fate(d),
			       d->held.precopy
				       ? "the pre-copy ended before its "
					 "switchover"
				       : "pages it wrote in private file "
					 "mappings never arrived");
	} else if (!poisoned) {
		procref_signal(&d->t, SIGSTOP);
		migration_fail(d->m,
			       "%s; %llu pages lost; target %d %s (this "
			       "kernel has no UFFDIO_POISON)",
			       why, (unsigned long long)d->m->loss.pages,
			       (int)d->m->pid, fate(d));
	} else {
		migration_fail(d->m,
			       "%s; %llu pages lost and poisoned (SIGBUS on "
			       "access)%s",
			       why, (unsigned long long)d->m->loss.pages,
			       d->m->ph.committing
				       ? "; every page had arrived, "
					 "the source never committed"
				       : "");
	}
	if (!poisoned)
		fill_discarded(d);
	if (d->demand)
		conn_send_error(d->demand, ERR_DEST_FAILED, "%s", d->m->reason);
	teardown(d, poisoned);
}

void
dest_fail_stop(struct dest *d, const char *fmt, ...)
{
	char why[512];
	va_list ap;
	int poisoned;

	if (d->m->state == MIG_COMPLETE || d->m->state == MIG_FAILED)
		return;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	/* First of all: no thread of its runs on from here. */
	if (!d->gone)
		procref_signal(&d->t, SIGSTOP);
	for (size_t i = 0; i < d->kin.nkids; i++)
		procref_signal(&d->kin.kids[i]->t, SIGSTOP);
	dest_done_kids_end(d, why);
	poisoned = poison_missing(d) == 0;
	dest_fail_kids(d, why);
	if (!poisoned)
		fill_discarded(d);
	if (d->gone)
		migration_fail(d->m, "%s; target %d had exited", why,
			       (int)d->m->pid);
	else if (d->sole && !poisoned)
		migration_fail(d->m, "%s; target %d %s", why, (int)d->m->pid,
			       fate(d));
	else
		migration_fail(d->m,
			       "%s; target %d stopped: continuing it "
			       "(SIGCONT) is the operator's call",
			       why, (int)d->m->pid);
	/*
	 * Poisoned, the ranges are unregistered and its copy of the uffd
	 * closed (an injection into the stopped process, whose group stop
	 * holds after it), as for a loud failure: continued by hand, it gets
	 * SIGBUS on a lost page, never a wait on a uffd nobody reads. Else
	 * it keeps them, stopped, so that no missing page reads as zeros;
	 * one held with no copy of its own is killed then.
	 */
	teardown(d, poisoned);
}

/* Fails d's migration now, as its pause deadline would (dest.h). */
void
dest_cancel(struct migration *m, const char *why)
{
	if (m->role == ROLE_DEST && m->impl != NULL)
		dest_fail(m->impl, "%s", why);
}

/* What status says of a root whose target exited (root_gone()). */
void
dest_gone_reason(struct dest *d)
{
	snprintf(d->m->reason, sizeof(d->m->reason),
		 "target process %d exited; the processes it forked migrate "
		 "on",
		 (int)d->m->pid);
}

/*
 * The target exited while processes it forked still migrate, as a daemon
 * does when it detaches (it forks, and the parent exits): they go on, on
 * the root's lanes. Nothing of the root's own is wanted any more, so its
 * pages count as present; the migration completes with its last child.
 */
static void
root_gone(struct dest *d)
{
	log_info("migration %s: target process %d exited; %zu process%s it "
		 "forked go%s on migrating",
		 log_id(d->m->id), (int)d->m->pid, d->kin.nkids,
		 d->kin.nkids == 1 ? "" : "es", d->kin.nkids == 1 ? "es" : "");
	d->gone = 1;
	dest_gone_reason(d);
	unwatch(d);
	d->target_fd = -1;
	dest_waiters_drop(d);
	d->fr.nzretry = 0;
	dest_bulk_hold(d);
	for (size_t i = 0; i < d->nregs; i++)
		pagestate_set_present(&d->regs[i].ps, 0, d->regs[i].npages);
	d->m->cnt.pages_present = dest_present_total(d);
	dest_persist_dirty(d);
}

/*
 * Takes a finished or dead child off its root's list and lets it go; one
 * that holds every page waits for the root's COMMIT (commit.c).
 */
void
dest_child_done(struct dest *k)
{
	struct dest *root = k->root;
	int waits = 0;

	for (size_t i = 0; i < root->kin.nkids; i++) {
		if (root->kin.kids[i] == k) {
			root->kin.kids[i] = root->kin.kids[--root->kin.nkids];
			break;
		}
	}
	if (k->m->state != MIG_FAILED) {
		if (dest_present_total(k) == k->m->cnt.pages_total) {
			waits = 1; /* complete with the root's COMMIT */
		} else {
			migration_fail(
				k->m,
				"forked process %d gone with "
				"%llu pages still missing",
				(int)k->m->pid,
				(unsigned long long)(k->m->cnt.pages_total -
						     dest_present_total(k)));
		}
	}
	/* Its ranges unregister when both copies of its uffd are closed. */
	if (k->target_fd >= 0 && procref_alive(&k->t) &&
	    dest_present_total(k) == k->m->cnt.pages_total)
		dest_close_target_fd(k);
	/* Held with no copy: as teardown() does with its root. */
	dest_drop_target(k, k->m->state == MIG_FAILED && !k->have_poison);
	if (k->kin.find_ev)
		event_del(k->kin.find_ev);
	if (waits)
		dest_kid_waits(root, k);
	else
		migration_release(k->m);
	dest_persist_dirty(root); /* without the child */
	dest_maybe_complete(root);
}

/*
 * The target exited, or an install found its memory gone: a child is
 * done, a root with children goes on for them (root_gone()), any other
 * migration fails.
 */
void
dest_target_exited(struct dest *d)
{
	if (d->root) {
		dest_child_done(d);
		return;
	}
	if (d->m->state == MIG_COMPLETE || d->m->state == MIG_FAILED)
		return;
	/* A fork's event it left unread, or one an injection read, first. */
	dest_read_faults(d);
	/*
	 * It had every page and ran to its end: what it did stands or falls
	 * with the source's COMMIT, still awaited.
	 */
	if (d->m->ph.committing && !d->gone &&
	    (d->m->state == MIG_RUNNING || d->m->state == MIG_PAUSED)) {
		log_info("migration %s: target process %d exited; waiting for "
			 "the source's COMMIT",
			 log_id(d->m->id), (int)d->m->pid);
		d->gone = 1;
		unwatch(d);
		d->target_fd = -1;
		dest_persist_dirty(d);
		return;
	}
	if (d->kin.nkids > 0 &&
	    (d->m->state == MIG_RUNNING || d->m->state == MIG_PAUSED)) {
		root_gone(d);
		return;
	}
	if (d->m->state == MIG_COMPLETE || d->m->state == MIG_FAILED)
		return;
	migration_fail(d->m, "target process %d exited", (int)d->m->pid);
	if (d->demand)
		conn_send_error(d->demand, ERR_TARGET_GONE, "%s", d->m->reason);
	d->target_fd = -1;
	teardown(d, 0);
}

/*
 * Destination role: take a userfaultfd inside the target process, register
 * the migrated regions, fetch faulted pages on the demand lane and install
 * the bulk stream behind them, each page exactly once.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "daemon/authz.h"
#include "daemon/compat.h"
#include "daemon/conffile.h"
#include "daemon/conn.h"
#include "daemon/control.h"
#include "daemon/dest.h"
#include "daemon/inject.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/pagemap.h"
#include "daemon/pagestate.h"
#include "daemon/peer.h"
#include "daemon/probe.h"
#include "daemon/proc.h"
#include "daemon/procref.h"
#include "daemon/region.h"
#include "daemon/role.h"
#include "daemon/state.h"
#include "daemon/statefmt.h"
#include "daemon/tls.h"
#include "daemon/tracee.h"
#include "daemon/uffd.h"

/* Frames of the bulk lane handled before the loop looks at faults again. */
#define BULK_BUDGET 2
#define HANDSHAKE_TIMEOUT 15
#define INFLIGHT_MAX 4096
/* Input-buffer extents one frame's data may span and be used in place. */
#define PEEK_MAX 16
/* EAGAIN retries of one install before the migration is declared broken. */
#define RETRY_MAX 10000
/*
 * A lane silent this long is dead: the source pings every second, so this
 * notices a cut link (whose TCP connection may linger for minutes) quickly.
 */
#define LANE_TIMEOUT 3
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
/*
 * Pages of a private file mapping asked for in one request: what every
 * source answers (its max-request-pages is at least this).
 */
#define PRIVATE_RUN REQUEST_PAGES_MIN

/* Pages [p0, p1) of a region that the target moved to base (mremap). */
struct move {
	uint64_t p0, p1, base;
};

struct dst_region {
	struct region r;    /* r.index: the source's index; r.start: ours */
	uint64_t src_start; /* where the region is in the source */
	uint64_t npages;
	struct pagestate ps;
	struct move *moves; /* later entries win */
	size_t nmoves;
	int shared; /* the target maps it MAP_SHARED (hugetlb: a page cache) */
};

/*
 * A target thread blocked on a missing page: its wait is its blocktime;
 * the wait of the fault that sent the request is a latency sample.
 */
struct waiter {
	uint32_t reg;
	uint64_t page;
	uint64_t t0;
	pid_t tid;
	int first;
};

struct dest {
	struct migration *m;
	uint64_t serial; /* control client awaiting the attach reply */
	char from[256];
	char pin[96]; /* attach --pin: the source certificate's SHA-256 */
	struct range *ranges;
	size_t nranges;
	struct range *maps; /* attach --map: start = source's, end = ours */
	size_t nmaps;
	struct dst_region *regs;
	size_t nregs;
	struct conn *demand, *bulk;
	int uffd, target_fd;
	/*
	 * The target as checked (procref.h): its pidfd for signals, events
	 * and pidfd_getfd; procref_same() before each injection.
	 */
	struct procref t;
	/*
	 * Who asked for the attach: every process the migration acts on
	 * (the target after it is stopped, a forked child before it gets a
	 * copy of its uffd) must be one this caller could ptrace. In the
	 * root; a child's is unused.
	 */
	struct authz_caller owner;
	/*
	 * The daemon holds the only copy of the uffd, and the target is held
	 * so that it dies with the daemon (tracee.h): it could not have made
	 * this kind of userfaultfd itself. Its forked children likewise.
	 */
	int sole;
	struct event *uffd_ev, *exit_ev;
	struct event *bulk_delay; /* UFFDD_BENCH_BULK_DELAY_MS */
	uint8_t *buf;
	struct waiter *waiters;
	size_t nwaiters;
	/*
	 * Faults answered with a zero page that the kernel refused (EAGAIN:
	 * an event was pending): the fault is read, so nothing else would
	 * wake the thread. Tried again once read_faults() has read the event.
	 */
	uint64_t *zretry;
	size_t nzretry;
	/*
	 * Messages read from the uffd while an injection waited for a thread
	 * to stop (drain_uffd()), handled by the next read_faults().
	 */
	struct uffd_msg *backlog;
	size_t nbacklog;
	int read_err;	  /* a failed read of the uffd was logged */
	size_t nrequests; /* waiters that sent their page's request */
	int resuming;	  /* the demand lane is in a resume handshake */
	int failing;	  /* poisoning: faults are no longer requested */
	int have_poison;  /* UFFDIO_POISON offered on every region */
	int hints;	  /* ACCESS_LIKELY negotiated on this uffd */
	uint64_t t_pause; /* ns: when the lanes went down */
	int backoff_ms;
	struct event *retry_ev;
	/*
	 * Forked children of the target (UFFD_EVENT_FORK): each is a dest of
	 * its own (its uffd, page map, move table, migration record) that
	 * shares the root's lanes; the root completes when they all have.
	 */
	struct dest *root;  /* set in a child */
	struct dest **kids; /* in the root */
	size_t nkids;
	/*
	 * In the root: its target exited while children it forked were still
	 * migrating (root_gone()). It stays for their sake, with no process,
	 * no uffd, and every page counted as present.
	 */
	int gone;
	int saved; /* the state file on disk is up to date */
	/* m->pid's start time (proc.h), taken at the first save. */
	unsigned long long start;
	/*
	 * A bulk frame being installed in pieces (bulk_pieces()): its pages
	 * [pend.page + pdone, pend.page + pend.npages) are still to go in,
	 * from pbuf + pdone pages; the bulk lane hands no frame meanwhile.
	 */
	Uffdd__PageData pend;
	uint64_t pdone;
	int pending;
	uint8_t *pbuf;
	struct event *piece_ev;
	/*
	 * Private file mappings cannot be registered (userfaultfd has no
	 * MISSING mode for a regular file mapped privately), so nothing would
	 * stop a thread from reading the file's stale page where the source
	 * had written its own. Every thread stays in ptrace-stop (the attach
	 * injection is kept open) until each such page is written through
	 * /proc/PID/mem (memfd); release_held() lets them go.
	 */
	struct inject *hold;
	int memfd;
	struct event *find_ev; /* a child whose pid was not known yet */
	pid_t parent_pid;      /* a child's parent, to find it by */
	int find_tries;
	unsigned long long fork_ticks; /* when its fork event came */
	/*
	 * In the root: the processes no fork event may be matched with,
	 * by pid and start time (a pid is reused): children the target had
	 * when we attached or restored, and every child matched since.
	 */
	struct proc_id {
		pid_t pid;
		unsigned long long start;
	} * seen;
	size_t nseen;
};

static void dest_free(struct migration *);
static void fault_cb(evutil_socket_t, short, void *);
static void read_faults(struct dest *);
static void bulk_hold(struct dest *);
static void drain_uffd(void *);
static void child_done(struct dest *);
static void release_held(struct dest *);
static void let_go(struct dest *, struct inject *);
static uint64_t private_missing(const struct dest *);
struct dst_region;
static uint64_t page_addr(const struct dst_region *, uint64_t);
static uint64_t addr_run(const struct dst_region *, uint64_t, uint64_t);

/* What a failed migration does with a target it cannot poison. */
static const char *
fate(const struct dest *d)
{
	return d->sole ? "killed (it held no copy of its userfaultfd)"
		       : "stopped";
}

/* Attach failed before the target was touched: answer and forget. */
static void attach_fail(struct dest *d, uint32_t code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void
attach_fail(struct dest *d, uint32_t code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_warnx("attach %d: %s", (int)d->m->pid, msg);
	control_reply_error(d->serial, code, "attach: %s", msg);
	if (d->demand) {
		conn_finish(d->demand); /* what it queued still goes out */
		d->demand = NULL;
	}
	state_remove(d->m);
	migration_free(d->m);
}

static void
dest_free(struct migration *m)
{
	struct dest *d = m->impl;

	if (d == NULL)
		return;
	conn_free(d->demand);
	conn_free(d->bulk);
	if (d->uffd_ev)
		event_free(d->uffd_ev);
	if (d->exit_ev)
		event_free(d->exit_ev);
	if (d->retry_ev)
		event_free(d->retry_ev);
	if (d->bulk_delay)
		event_free(d->bulk_delay);
	if (d->find_ev)
		event_free(d->find_ev);
	if (d->piece_ev)
		event_free(d->piece_ev);
	free(d->pbuf);
	release_held(d);
	free(d->seen);
	free(d->zretry);
	for (size_t i = 0; i < d->nbacklog; i++)
		if (d->backlog[i].event == UFFD_EVENT_FORK)
			close((int)d->backlog[i].arg.fork.ufd);
	free(d->backlog);
	if (d->uffd >= 0)
		close(d->uffd);
	procref_close(&d->t);
	for (size_t i = 0; i < d->nregs; i++) {
		pagestate_free(&d->regs[i].ps);
		free(d->regs[i].moves);
	}
	free(d->regs);
	free(d->ranges);
	free(d->maps);
	free(d->buf);
	free(d->waiters);
	free(d->kids);
	free(d);
	m->impl = NULL;
}

static uint64_t
present_total(const struct dest *d)
{
	uint64_t n = 0;

	for (size_t i = 0; i < d->nregs; i++)
		n += pagestate_done(&d->regs[i].ps);
	return n;
}

/*
 * A thread an injection gave up on (it did not stop in time) stays seized
 * until it stops: looked for each second while there is one.
 */
static struct event *reap_ev;

static void
reap_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct timeval tv = {1, 0};

	if (inject_reap() > 0)
		evtimer_add(reap_ev, &tv);
}

/* After an injection that failed. */
static void
reap_later(void)
{
	if (reap_ev == NULL)
		reap_ev = evtimer_new(base, reap_cb, NULL);
	reap_cb(-1, 0, NULL);
}

/* Closes the target's own copy of the uffd, by injection. */
static void
close_target_fd(struct dest *d)
{
	struct inject inj;
	long rc;

	if (d->target_fd < 0)
		return;
	/*
	 * Never inject into a process that merely inherited the pid, nor
	 * into another program the target ran since (its copy of the uffd
	 * closed with the exec anyway: it is O_CLOEXEC).
	 */
	if (!procref_same(&d->t)) {
		d->target_fd = -1;
		return;
	}
	if (inject_begin_draining(&inj, d->m->pid, 0, d->uffd, drain_uffd, d) <
	    0) {
		reap_later();
		log_warnx("migration %s: %s (target's uffd fd %d stays open)",
			  log_id(d->m->id), inj.err, d->target_fd);
		return;
	}
	log_debug("migration %s: closing fd %d in process %d", log_id(d->m->id),
		  d->target_fd, (int)d->m->pid);
	rc = inject_syscall(&inj, SYS_close, (unsigned long)d->target_fd, 0, 0,
			    0, 0, 0);
	inject_end(&inj);
	if (rc < 0)
		log_warnx("migration %s: close(%d) in process %d: %s",
			  log_id(d->m->id), d->target_fd, (int)d->m->pid,
			  strerror((int)-rc));
	d->target_fd = -1;
}

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

/* The state file is the root's, children included, whoever changed. */
static int
save(struct dest *d)
{
	if (d->root)
		d = d->root;
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

/* No more faults and events of the target, nor its exit: our uffd goes. */
static void
unwatch(struct dest *d)
{
	if (d->uffd_ev)
		event_del(d->uffd_ev);
	if (d->exit_ev)
		event_del(d->exit_ev);
	if (d->uffd >= 0)
		close(d->uffd);
	d->uffd = -1;
}

/*
 * The end of a migration, either way: lanes, registration and both copies
 * of the uffd go (the target's only when close_target is set), the state
 * file too, and the role's memory once the current callback returns.
 */
static void
teardown(struct dest *d, int close_target)
{
	release_held(d);
	if (d->demand)
		conn_finish(d->demand);
	if (d->bulk)
		conn_finish(d->bulk);
	d->demand = d->bulk = NULL;
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
		close_target_fd(d);
	}
	/*
	 * A target with no copy of its own loses its registration with ours:
	 * left stopped (no UFFDIO_POISON here), it would read zeros once
	 * continued. It goes, as it would with the daemon (tracee.h).
	 */
	if (d->sole && !close_target)
		procref_signal(&d->t, SIGKILL);
	if (d->sole)
		tracee_release(d->m->pid);
	unwatch(d);
	if (d->retry_ev)
		event_del(d->retry_ev);
	state_remove(d->m);
	migration_release(d->m);
}

/*
 * Every page is in: tell the source, unregister, and close both copies of
 * the uffd. Only now may the target's copy go (DESIGN section 5).
 */
static void
dest_complete(struct dest *d)
{
	Uffdd__Complete c = UFFDD__COMPLETE__INIT;

	c.pages = present_total(d);
	if (d->demand)
		conn_send(d->demand, FRAME_COMPLETE, &c.base);
	migration_set_state(d->m, MIG_COMPLETE);
	teardown(d, 1);
}

/*
 * Marks every page that is not present as lost: UFFDIO_POISON where the
 * kernel has it, so a thread touching one gets SIGBUS instead of a zero page
 * or an endless wait. Returns 0, or -1 when poisoning is impossible.
 */
static int
poison_missing(struct dest *d)
{
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
			n = addr_run(dr, p, n);
			/* Never registered: release_held() stops the target. */
			if (d->have_poison &&
			    dr->r.kind != REGION_FILE_PRIVATE) {
				struct uffdio_poison up = {
					.range = {page_addr(dr, p), n * ps}};
				int tries = 0;

				while (ioctl(d->uffd, UFFDIO_POISON, &up) < 0 &&
				       errno == EAGAIN && tries++ < RETRY_MAX) {
					read_faults(d);
					if (up.updated > 0) {
						up.range.start +=
							(uint64_t)up.updated;
						up.range.len -=
							(uint64_t)up.updated;
					}
					up.updated = 0;
				}
			}
			migration_lost(d->m, page_addr(dr, p),
				       page_addr(dr, p) + n * ps, n);
			p += n;
		}
	}
	return d->have_poison ? 0 : -1;
}

/*
 * Test knob (tests/integration): behave as on a kernel without
 * UFFDIO_POISON (before 6.6), so that the fallback is tested on kernels
 * that have it. Never set in production.
 */
static int
poison_usable(void)
{
	const char *no = getenv("UFFDD_TEST_NO_POISON");

	return no == NULL || *no == '\0';
}

static enum uffd_res install_zero(struct dest *, const struct dst_region *,
				  uint64_t, uint64_t, uint64_t, uint64_t *);

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
			n = addr_run(dr, p, n);
			if (install_zero(d, dr, page_addr(dr, p), n * ps, 0,
					 &done) == UFFD_GONE)
				return;
			/* Past a page that failed (it exists, or an event). */
			p += done / ps < n ? done / ps + 1 : n;
		}
	}
}

/*
 * Loud failure (DESIGN section 6): the pages that are still missing can no
 * longer be had. They are poisoned and the target goes on with SIGBUS on a
 * lost page; without UFFDIO_POISON the target is stopped instead and keeps
 * its registration, so that no missing page ever reads as zeros.
 */
static void dest_fail(struct dest *d, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void
dest_fail(struct dest *d, const char *fmt, ...)
{
	char why[256];
	va_list ap;
	int poisoned;

	if (d->m->state == MIG_COMPLETE || d->m->state == MIG_FAILED)
		return;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	poisoned = poison_missing(d) == 0;
	/* Forked children lose the same pages. */
	while (d->nkids > 0) {
		struct dest *k = d->kids[0];

		if (poison_missing(k) < 0)
			fill_discarded(k);
		migration_fail(k->m, "%s", why);
		child_done(k);
	}
	if (d->hold && private_missing(d) > 0) {
		/*
		 * release_held() (in teardown) stops it, poisoned or not; it
		 * keeps its uffd, as a stopped target does (no injection into
		 * a process with a stop pending).
		 */
		poisoned = 0;
		migration_fail(d->m,
			       "%s; %llu pages lost; target %d %s (pages "
			       "it wrote in private file mappings never "
			       "arrived)",
			       why, (unsigned long long)d->m->pages_lost,
			       (int)d->m->pid, fate(d));
	} else if (!poisoned) {
		procref_signal(&d->t, SIGSTOP);
		migration_fail(d->m,
			       "%s; %llu pages lost; target %d %s (this "
			       "kernel has no UFFDIO_POISON)",
			       why, (unsigned long long)d->m->pages_lost,
			       (int)d->m->pid, fate(d));
	} else {
		migration_fail(d->m,
			       "%s; %llu pages lost and poisoned (SIGBUS on "
			       "access)",
			       why, (unsigned long long)d->m->pages_lost);
	}
	if (!poisoned)
		fill_discarded(d);
	if (d->demand)
		conn_send_error(d->demand, ERR_DEST_FAILED, "%s", d->m->reason);
	teardown(d, poisoned);
}

static void retry_cb(evutil_socket_t, short, void *);
static int open_bulk(struct dest *);

static void
schedule_retry(struct dest *d)
{
	struct timeval tv;

	d->backoff_ms = d->backoff_ms ? d->backoff_ms * 2 : BACKOFF_MIN_MS;
	if (d->backoff_ms > BACKOFF_MAX_MS)
		d->backoff_ms = BACKOFF_MAX_MS;
	tv.tv_sec = d->backoff_ms / 1000;
	tv.tv_usec = (d->backoff_ms % 1000) * 1000;
	evtimer_add(d->retry_ev, &tv);
}

/*
 * A lane broke: the migration pauses, faulting threads keep waiting (their
 * requests stay marked and go out again on reconnect), and the destination
 * reconnects with backoff until the pause deadline.
 */
static void
lanes_down(struct dest *d, const char *why)
{
	/* Before the region table nothing waits to resume: the attach fails. */
	if (d->m->state == MIG_CONNECTING) {
		attach_fail(d, ERR_PROTOCOL, "source %s: %s", d->from, why);
		return;
	}
	conn_free(d->demand);
	conn_free(d->bulk);
	d->demand = d->bulk = NULL;
	d->resuming = 0;
	d->pending = 0;
	if (d->m->state == MIG_RUNNING) {
		log_warnx("migration %s: source lost (%s); faulting threads "
			  "wait",
			  log_id(d->m->id), why);
		migration_set_state(d->m, MIG_PAUSED);
		d->t_pause = now_ns();
		d->backoff_ms = 0;
		save(d);
	}
	if (d->m->state == MIG_PAUSED)
		schedule_retry(d);
}

/*
 * The target exited while processes it forked still migrate, as a daemon
 * does when it detaches (it forks, and the parent exits): they go on, on
 * the root's lanes. Nothing of the root's own is wanted any more, so its
 * pages count as present; the migration completes with its last child.
 */
/* What status says of a root whose target exited (root_gone()). */
static void
gone_reason(struct dest *d)
{
	snprintf(d->m->reason, sizeof(d->m->reason),
		 "target process %d exited; the processes it forked migrate "
		 "on",
		 (int)d->m->pid);
}

static void
root_gone(struct dest *d)
{
	log_info("migration %s: target process %d exited; %zu process%s it "
		 "forked go%s on migrating",
		 log_id(d->m->id), (int)d->m->pid, d->nkids,
		 d->nkids == 1 ? "" : "es", d->nkids == 1 ? "es" : "");
	d->gone = 1;
	gone_reason(d);
	unwatch(d);
	d->target_fd = -1;
	d->nwaiters = d->nrequests = d->nzretry = 0;
	bulk_hold(d);
	for (size_t i = 0; i < d->nregs; i++)
		pagestate_set_present(&d->regs[i].ps, 0, d->regs[i].npages);
	d->m->pages_present = present_total(d);
	save(d);
}

static void
target_exited(struct dest *d)
{
	if (d->root) {
		child_done(d);
		return;
	}
	if (d->m->state == MIG_COMPLETE || d->m->state == MIG_FAILED)
		return;
	/* A fork's event it left unread, or one an injection read, first. */
	read_faults(d);
	if (d->nkids > 0 &&
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

static void
exit_cb(evutil_socket_t fd, short ev, void *arg)
{
	target_exited(arg);
}

/* Where page p of a region is in the target now (it may have moved). */
static uint64_t
page_addr(const struct dst_region *dr, uint64_t p)
{
	for (size_t i = dr->nmoves; i-- > 0;)
		if (p >= dr->moves[i].p0 && p < dr->moves[i].p1)
			return dr->moves[i].base +
			       (p - dr->moves[i].p0) * dr->r.page_size;
	return dr->r.start + p * dr->r.page_size;
}

/* How many pages from p (at most max) sit at consecutive addresses. */
static uint64_t
addr_run(const struct dst_region *dr, uint64_t p, uint64_t max)
{
	uint64_t a = page_addr(dr, p), n = 1;

	while (n < max && page_addr(dr, p + n) == a + n * dr->r.page_size)
		n++;
	return n;
}

/* The region and page an address of the target belongs to, or NULL. */
static struct dst_region *
locate(struct dest *d, uint64_t addr, uint64_t *page)
{
	for (size_t i = 0; i < d->nregs; i++) {
		struct dst_region *dr = &d->regs[i];
		uint64_t ps = dr->r.page_size, pa = addr - addr % ps;

		for (size_t k = dr->nmoves; k-- > 0;) {
			const struct move *mv = &dr->moves[k];
			uint64_t p = mv->p0 + (pa - mv->base) / ps;

			if (pa >= mv->base && p < mv->p1 &&
			    page_addr(dr, p) == pa) {
				*page = p;
				return dr;
			}
		}
		if (pa >= dr->r.start && pa - dr->r.start < dr->r.length &&
		    page_addr(dr, (pa - dr->r.start) / ps) == pa) {
			*page = (pa - dr->r.start) / ps;
			return dr;
		}
	}
	return NULL;
}

static struct dst_region *
region_by_index(struct dest *d, uint32_t idx)
{
	for (size_t i = 0; i < d->nregs; i++)
		if (d->regs[i].r.index == idx)
			return &d->regs[i];
	return NULL;
}

/*
 * While one thread waits for a demand answer, the bulk lane waits: on a
 * busy machine the daemons share CPUs, and installing bulk frames kept the
 * source from running to answer. Only for one: with several requests in
 * flight (threads faulting back to back) holding the lane starved it, and
 * every page came on demand at half the speed.
 */
static void
bulk_hold(struct dest *d)
{
	if (d->bulk)
		conn_pause(d->bulk, d->nrequests == 1);
	if (d->pending && d->nrequests != 1)
		event_active(d->piece_ev, EV_TIMEOUT, 0);
}

static uint64_t frame_pages(struct dest *, const struct evbuffer_iovec *, int,
			    uint64_t, uint64_t, uint64_t, const uint8_t **);
static void
request_page(struct dest *d, struct dst_region *dr, uint64_t page)
{
	Uffdd__PageRequest pr = UFFDD__PAGE_REQUEST__INIT;
	struct conn *lane;

	pagestate_set(&dr->ps, page, PAGE_REQUESTED);
	lane = d->root ? d->root->demand : d->demand;
	if (lane == NULL)
		return; /* paused: the request goes out on reconnect */
	pr.region = dr->r.index;
	pr.page = page;
	pr.npages = 1;
	conn_send(lane, FRAME_PAGE_REQUEST, &pr.base);
	bulk_hold(d);
	/* The answer is due in microseconds; for one, nothing else moves. */
	if (d->nrequests == 1)
		loop_poll_now();
	else
		loop_poll();
}

/* Pages of private file mappings that have not been written yet. */
static uint64_t
private_missing(const struct dest *d)
{
	uint64_t n = 0;

	for (size_t i = 0; i < d->nregs; i++)
		if (d->regs[i].r.kind == REGION_FILE_PRIVATE)
			n += d->regs[i].npages - pagestate_done(&d->regs[i].ps);
	return n;
}

/*
 * Asks for every page of the private file mappings at once, in runs the
 * source answers in one frame each: the target is held until they are in.
 * Pages the source has as the file's own come back as ZERO markers.
 */
static void
request_private(struct dest *d)
{
	for (size_t i = 0; d->demand && i < d->nregs; i++) {
		struct dst_region *dr = &d->regs[i];
		uint64_t p = 0;

		if (dr->r.kind != REGION_FILE_PRIVATE)
			continue;
		while (p < dr->npages) {
			Uffdd__PageRequest pr = UFFDD__PAGE_REQUEST__INIT;
			uint64_t n;

			p += pagestate_present_run(&dr->ps, p, dr->npages - p);
			if (p >= dr->npages)
				break;
			n = pagestate_missing_run(&dr->ps, p, dr->npages - p);
			if (n > PRIVATE_RUN)
				n = PRIVATE_RUN;
			for (uint64_t k = 0; k < n; k++)
				pagestate_set(&dr->ps, p + k, PAGE_REQUESTED);
			pr.region = dr->r.index;
			pr.page = p;
			pr.npages = (uint32_t)n;
			conn_send(d->demand, FRAME_PAGE_REQUEST, &pr.base);
			p += n;
		}
	}
	if (d->demand)
		conn_flush(d->demand);
}

/*
 * The hold ends. On success every private file page is in; otherwise the
 * target is stopped (SIGSTOP, queued before the threads are let go) rather
 * than left to run on the file's stale pages where the source had its own.
 */
static void
release_held(struct dest *d)
{
	uint64_t missing;

	if (d->hold == NULL)
		return;
	missing = private_missing(d);
	if (missing > 0 && procref_signal(&d->t, SIGSTOP) == 0)
		log_warnx("migration %s: process %d left stopped: %llu pages "
			  "of its private file mappings never arrived",
			  log_id(d->m->id), (int)d->m->pid,
			  (unsigned long long)missing);
	let_go(d, d->hold);
	free(d->hold);
	d->hold = NULL;
	close(d->memfd);
	d->memfd = -1;
	if (missing == 0) {
		log_info("migration %s: private file pages in; process %d "
			 "runs",
			 log_id(d->m->id), (int)d->m->pid);
		if (d->m->state != MIG_COMPLETE && d->m->state != MIG_FAILED)
			save(d);
	}
}

/*
 * Writes the pages of one frame into a private file mapping of the held
 * target. A write through /proc/PID/mem makes the anonymous copy the source
 * had (and goes through read-only protection, as RELRO needs); a ZERO
 * marker is the file's own page, which the target already maps: nothing to
 * do. Returns -1 when the migration failed.
 */
static int
write_private(struct dest *d, struct dst_region *dr, const Uffdd__PageData *pd,
	      const struct evbuffer_iovec *v, int nv)
{
	uint64_t ps = dr->r.page_size;

	for (uint64_t p = pd->page; p < pd->page + pd->npages; p++) {
		enum page_state st = pagestate_get(&dr->ps, p);
		const uint8_t *src;

		/* In already, or unmapped by the target after the release. */
		if (st == PAGE_PRESENT || st == PAGE_DISCARDED)
			continue;
		if (!pd->zero) {
			frame_pages(d, v, nv, (p - pd->page) * ps, ps, 1, &src);
			if (d->hold == NULL ||
			    pwrite(d->memfd, src, ps,
				   (off_t)page_addr(dr, p)) != (ssize_t)ps) {
				dest_fail(d,
					  "writing the private file page at "
					  "0x%llx of process %d: %s",
					  (unsigned long long)page_addr(dr, p),
					  (int)d->m->pid,
					  d->hold ? strerror(errno)
						  : "target not held");
				return -1;
			}
			if (pd->demand)
				d->m->demand_pages++;
			else
				d->m->prefetched_pages++;
		}
		pagestate_set(&dr->ps, p, PAGE_PRESENT);
	}
	if (d->hold && private_missing(d) == 0)
		release_held(d);
	d->m->pages_present = present_total(d);
	return 0;
}

/*
 * The target discarded [start, end) itself (madvise DONTNEED or REMOVE,
 * munmap): those pages must never receive the source's bytes.
 */
static void
discard_range(struct dest *d, uint64_t start, uint64_t end)
{
	uint64_t n = 0;
	int waited = 0;

	for (size_t i = 0; i < d->nregs; i++) {
		struct dst_region *dr = &d->regs[i];

		for (uint64_t p = 0; p < dr->npages; p++) {
			uint64_t a = page_addr(dr, p);

			if (a >= start && a < end &&
			    pagestate_get(&dr->ps, p) != PAGE_DISCARDED) {
				waited |= pagestate_set(&dr->ps, p,
							PAGE_DISCARDED) ==
					  PAGE_REQUESTED;
				n++;
			}
		}
	}
	/*
	 * A thread that waited on one of them would wait for data that is
	 * never installed now: wake it, and its fault comes again, for a
	 * zero page.
	 */
	if (waited && d->uffd >= 0)
		uffd_wake(d->uffd, start, end - start);
	log_debug("migration %s: target discarded 0x%llx-0x%llx (%llu pages)",
		  log_id(d->m->id), (unsigned long long)start,
		  (unsigned long long)end, (unsigned long long)n);
}

/* Pages [p0, p1) of a region are at `at` on now. */
static void
add_move(struct dst_region *dr, uint64_t p0, uint64_t p1, uint64_t at)
{
	dr->moves = realloc(dr->moves, (dr->nmoves + 1) * sizeof(*dr->moves));
	if (dr->moves == NULL)
		fatal("page moves");
	dr->moves[dr->nmoves++] = (struct move){p0, p1, at};
}

/*
 * The target moved [from, from + len) to `to` (mremap): the pages there
 * keep their identity (region, index) and get a new address. A scan over
 * every page is fine: mremap of migrating memory is rare.
 */
static void
remap_range(struct dest *d, uint64_t from, uint64_t to, uint64_t len)
{
	for (size_t i = 0; i < d->nregs; i++) {
		struct dst_region *dr = &d->regs[i];
		uint64_t p = 0;

		while (p < dr->npages) {
			uint64_t a = page_addr(dr, p), n;

			if (a < from || a >= from + len) {
				p++;
				continue;
			}
			n = addr_run(dr, p, dr->npages - p);
			if (a + n * dr->r.page_size > from + len)
				n = (from + len - a) / dr->r.page_size;
			add_move(dr, p, p + n, to + (a - from));
			p += n;
		}
	}
	log_debug("migration %s: target moved 0x%llx+0x%llx to 0x%llx",
		  log_id(d->m->id), (unsigned long long)from,
		  (unsigned long long)len, (unsigned long long)to);
}

static void zero_discarded(struct dest *, struct dst_region *, uint64_t page);
static void zero_outside(struct dest *, uint64_t addr);
static void zero_later(struct dest *, uint64_t addr);
static void zero_retry(struct dest *);
static void fork_child(struct dest *parent, int ufd);

/* A thread waits on a page; first: its fault sends the request. */
static void
add_waiter(struct dest *d, const struct dst_region *dr, uint64_t page,
	   pid_t tid, int first)
{
	if (d->nwaiters < INFLIGHT_MAX) {
		d->waiters[d->nwaiters++] = (struct waiter){
			dr->r.index, page, now_ns(), tid, first};
		d->nrequests += first != 0;
	}
}

/*
 * Threads waiting on [page, page+n) are free: charge their wait to their
 * blocktime, and each request's wait to the latency histogram.
 */
static void
settle(struct dest *d, uint32_t idx, uint64_t page, uint64_t n)
{
	uint64_t t = now_ns();

	for (size_t i = 0; i < d->nwaiters;) {
		struct waiter *w = &d->waiters[i];

		if (w->reg == idx && w->page >= page && w->page < page + n) {
			migration_blocked(d->m, w->tid, t - w->t0);
			if (w->first) {
				hist_add(&d->m->latency, t - w->t0);
				d->nrequests--;
			}
			*w = d->waiters[--d->nwaiters];
			continue;
		}
		i++;
	}
	bulk_hold(d);
}

/* One message read from a uffd: a fault, or an event of the target. */
static void
handle_msg(struct dest *d, const struct uffd_msg *msg)
{
	struct dst_region *dr;
	uint64_t addr, page;

	switch (msg->event) {
	case UFFD_EVENT_PAGEFAULT:
		break;
	case UFFD_EVENT_REMOVE:
	case UFFD_EVENT_UNMAP:
		discard_range(d, msg->arg.remove.start, msg->arg.remove.end);
		save(d); /* a restart must know */
		return;
	case UFFD_EVENT_REMAP:
		remap_range(d, msg->arg.remap.from, msg->arg.remap.to,
			    msg->arg.remap.len);
		save(d); /* a restart must know */
		return;
	case UFFD_EVENT_FORK:
		fork_child(d, (int)msg->arg.fork.ufd);
		return;
	default:
		log_debug("uffd event %u ignored", msg->event);
		return;
	}
	addr = msg->arg.pagefault.address;
	if ((dr = locate(d, addr, &page)) == NULL) {
		log_debug("migration %s: fault at 0x%llx outside every region",
			  log_id(d->m->id), (unsigned long long)addr);
		zero_outside(d, addr);
		return;
	}
	if (d->failing)
		return; /* it will be poisoned and woken */
	d->m->demand_faults++;
	switch (pagestate_get(&dr->ps, page)) {
	case PAGE_MISSING:
		add_waiter(d, dr, page, (pid_t)msg->arg.pagefault.feat.ptid, 1);
		request_page(d, dr, page);
		break;
	case PAGE_REQUESTED:
		/* Merged with the request in flight. */
		add_waiter(d, dr, page, (pid_t)msg->arg.pagefault.feat.ptid, 0);
		break;
	case PAGE_PRESENT:
		/*
		 * Installed after the fault was queued. In a child the map
		 * may be a parent's guess: ask, and an EEXIST will settle it.
		 */
		if (d->root) {
			add_waiter(d, dr, page,
				   (pid_t)msg->arg.pagefault.feat.ptid, 1);
			request_page(d, dr, page);
		} else {
			/*
			 * Or gone again with no event: a hole punched in
			 * shared memory, a page MADV_FREE let go. A wake
			 * alone would make the thread fault for good; a zero
			 * page is what it reads without a migration (EEXIST:
			 * it was a race, and the thread is woken).
			 */
			zero_discarded(d, dr, page);
		}
		break;
	case PAGE_DISCARDED:
		zero_discarded(d, dr, page);
		break;
	}
}

/*
 * An injection into d's target waits for a thread that waits for one of
 * d's uffd events to be read: read them now, handle them once d is built
 * (child_start(), find_cb(); at teardown they are dropped).
 */
/*
 * A failed read of the uffd other than "nothing pending" is worth a line,
 * once: a fork event needs a descriptor, and without one (EMFILE) the
 * kernel keeps it, and the forking thread, waiting.
 */
static void
uffd_read_failed(struct dest *d)
{
	if (errno == EAGAIN || d->read_err)
		return;
	d->read_err = 1;
	log_warn("migration %s: reading the userfaultfd", log_id(d->m->id));
}

static void
drain_uffd(void *arg)
{
	struct dest *d = arg;
	struct uffd_msg msgs[64];
	ssize_t r;

	while ((r = read(d->uffd, msgs, sizeof(msgs))) > 0 ||
	       (r < 0 && errno == EINTR)) {
		size_t n;

		if (r < 0)
			continue; /* EINTR */
		n = (size_t)r / sizeof(msgs[0]);
		d->backlog = realloc(d->backlog,
				     (d->nbacklog + n) * sizeof(*d->backlog));
		if (d->backlog == NULL)
			fatal("uffd messages");
		memcpy(d->backlog + d->nbacklog, msgs, n * sizeof(msgs[0]));
		d->nbacklog += n;
	}
	if (r < 0)
		uffd_read_failed(d);
}

/*
 * Reads every pending uffd message: page faults become requests, and the
 * target's own changes to its memory (DESIGN section 4, non-cooperative
 * events) update the page map before any page is installed again.
 */
static void
read_faults(struct dest *d)
{
	struct uffd_msg msgs[64];

	/* First what an injection's wait read, in the order it came. */
	if (d->nbacklog) {
		struct uffd_msg *q = d->backlog;
		size_t n = d->nbacklog;

		d->backlog = NULL;
		d->nbacklog = 0;
		for (size_t i = 0; i < n; i++)
			handle_msg(d, &q[i]);
		free(q);
	}

	for (;;) {
		ssize_t r =
			d->uffd >= 0 ? read(d->uffd, msgs, sizeof(msgs)) : 0;

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			uffd_read_failed(d);
		if (r <= 0)
			break;
		for (size_t i = 0; i < (size_t)r / sizeof(msgs[0]); i++)
			handle_msg(d, &msgs[i]);
		if ((size_t)r < sizeof(msgs))
			break; /* a short read took every pending message */
	}
	if (d->nzretry)
		zero_retry(d);
	if (d->demand)
		conn_flush(d->demand);
}

static void
fault_cb(evutil_socket_t fd, short ev, void *arg)
{
	read_faults(arg);
}

/*
 * hugetlb has no UFFDIO_ZEROPAGE: a zero huge page is copied from here,
 * an untouched mapping that reads as zeros, ZERO_SOURCE_LEN bytes long
 * (a whole number of every page size a region may have: frame.h).
 */
#define ZERO_SOURCE_LEN FRAME_DATA_MAX

static const uint8_t *
zero_source(void)
{
	static void *z;

	if (z == NULL) {
		z = mmap(NULL, ZERO_SOURCE_LEN, PROT_READ,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (z == MAP_FAILED)
			fatal("zero buffer");
	}
	return z;
}

/*
 * Installs zeros at addr, the way the region's kind allows. hugetlb copies
 * them from the zero source, at most its length at a time: a longer copy
 * would put the daemon's own memory past its end into the target.
 */
static enum uffd_res
install_zero(struct dest *d, const struct dst_region *dr, uint64_t addr,
	     uint64_t len, uint64_t mode, uint64_t *done)
{
	enum uffd_res res = UFFD_OK;

	if (dr->r.kind != REGION_HUGETLB)
		return uffd_zeropage(d->uffd, addr, len, mode, done);
	if (dr->r.page_size > ZERO_SOURCE_LEN)
		fatalx("zero huge page of %u bytes at 0x%llx: larger than "
		       "the zero source (region_table_check() lets none in)",
		       dr->r.page_size, (unsigned long long)addr);
	*done = 0;
	while (res == UFFD_OK && *done < len) {
		uint64_t want = len - *done, got;

		if (want > ZERO_SOURCE_LEN)
			want = ZERO_SOURCE_LEN;
		res = uffd_copy(d->uffd, addr + *done, zero_source(), want,
				mode, &got);
		*done += got;
	}
	return res;
}

/*
 * Installs a run of missing pages, handling each outcome the way DESIGN
 * section 4 says. Returns the pages this call installed, or -1 when the
 * migration can no longer go on (failed).
 */
static int64_t
install_run(struct dest *d, struct dst_region *dr, uint64_t page, uint64_t n,
	    const uint8_t *src, int zero, int likely)
{
	uint64_t ps = dr->r.page_size, len = n * ps, off = 0, done;
	uint64_t addr = page_addr(dr, page);
	int64_t installed = 0;
	int piecewise = 0;

	while (off < len) {
		/*
		 * A page a thread waits on will be touched at once: young PTE;
		 * a prefetched one may never be: old PTE, reclaimed first
		 * (DESIGN section 4). Only where the patched kernel has it.
		 */
		uint64_t mode =
			likely && d->hints ? UFFDIO_COPY_MODE_ACCESS_LIKELY : 0;
		uint64_t want = piecewise ? ps : len - off;
		enum uffd_res res =
			zero ? install_zero(d, dr, addr + off, want, mode,
					    &done)
			     : uffd_copy(d->uffd, addr + off, src + off, want,
					 mode, &done);

		if (res == UFFD_FAIL && errno == EINVAL && mode) {
			/* This uffd was made without the feature: go on. */
			d->hints = 0;
			continue;
		}
		/*
		 * One install must stay inside one mapping, and the target
		 * may have split a region since (mprotect, madvise with
		 * flags: no event tells us): page by page, then.
		 */
		if (res == UFFD_FAIL && errno == ENOENT && done == 0 &&
		    !piecewise && want > ps) {
			piecewise = 1;
			continue;
		}
		if (mode && done)
			d->m->hinted_pages += done / ps;

		done -= done % ps;
		pagestate_set_present(&dr->ps, page + off / ps, done / ps);
		installed += (int64_t)(done / ps);
		off += done;
		switch (res) {
		case UFFD_OK:
			break;
		case UFFD_EXISTS:
			/* Present already: keep it, wake whoever waits. */
			pagestate_set_present(&dr->ps, page + off / ps, 1);
			uffd_wake(d->uffd, addr + off, ps);
			off += ps;
			break;
		case UFFD_RETRY:
			/*
			 * A partial install goes on; otherwise an event is
			 * pending: read it, and let the caller look at the
			 * page map again, which the event may have changed.
			 */
			if (done == 0) {
				read_faults(d);
				return installed;
			}
			break;
		case UFFD_GONE:
			target_exited(d);
			return -1;
		case UFFD_FAIL:
			/*
			 * Refused for good: the migration fails as a lost
			 * source fails it (missing pages poisoned, or the
			 * target stopped; the source told), never with
			 * threads left waiting on pages that cannot come. A
			 * forked child's failure is its root's.
			 */
			dest_fail(d->root ? d->root : d, "%s at 0x%llx: %s",
				  zero ? "UFFDIO_ZEROPAGE" : "UFFDIO_COPY",
				  (unsigned long long)(addr + off),
				  strerror(errno));
			return -1;
		}
	}
	return installed;
}

/*
 * A thread touches a page the target had discarded: it gets what it would
 * have got without a migration, a zero page.
 */
static void
zero_discarded(struct dest *d, struct dst_region *dr, uint64_t page)
{
	uint64_t done, ps = dr->r.page_size, addr = page_addr(dr, page);
	enum uffd_res res = install_zero(
		d, dr, addr, ps,
		d->hints ? UFFDIO_ZEROPAGE_MODE_ACCESS_LIKELY : 0, &done);

	if (res == UFFD_OK || res == UFFD_EXISTS) {
		pagestate_set(&dr->ps, page, PAGE_PRESENT);
		if (res == UFFD_EXISTS)
			uffd_wake(d->uffd, addr, ps);
		else
			d->m->zero_pages++;
	} else if (res == UFFD_GONE) {
		target_exited(d);
	} else if (res == UFFD_RETRY) {
		zero_later(d, addr);
	} else {
		log_warn("migration %s: zero page at 0x%llx", log_id(d->m->id),
			 (unsigned long long)addr);
	}
}

/*
 * A fault outside every region: memory the target added to a registered
 * mapping without an event we follow (mremap growing it in place). None of
 * it comes from the source: a zero page, as without a migration.
 */
static void
zero_outside(struct dest *d, uint64_t addr)
{
	uint64_t done, ps = (uint64_t)sysconf(_SC_PAGESIZE);
	enum uffd_res res =
		uffd_zeropage(d->uffd, addr - addr % ps, ps, 0, &done);

	if (res == UFFD_EXISTS)
		uffd_wake(d->uffd, addr - addr % ps, ps);
	else if (res == UFFD_RETRY)
		zero_later(d, addr);
	else if (res == UFFD_GONE)
		target_exited(d);
	else if (res != UFFD_OK)
		log_warn("migration %s: zero page at 0x%llx outside every "
			 "region",
			 log_id(d->m->id), (unsigned long long)addr);
}

static void
zero_later(struct dest *d, uint64_t addr)
{
	d->zretry = realloc(d->zretry, (d->nzretry + 1) * sizeof(*d->zretry));
	if (d->zretry == NULL)
		fatal("zero page retries");
	d->zretry[d->nzretry++] = addr;
}

/* The zero pages refused while an event was pending, once it is read. */
static void
zero_retry(struct dest *d)
{
	uint64_t *addrs = d->zretry, page;
	size_t n = d->nzretry;

	d->zretry = NULL;
	d->nzretry = 0;
	for (size_t i = 0; i < n && d->uffd >= 0; i++) {
		struct dst_region *dr = locate(d, addrs[i], &page);

		if (dr == NULL)
			zero_outside(d, addrs[i]);
		else if (pagestate_get(&dr->ps, page) == PAGE_DISCARDED ||
			 pagestate_get(&dr->ps, page) == PAGE_PRESENT)
			zero_discarded(d, dr, page);
	}
	free(addrs);
}

/*
 * Where pages from byte off of a frame's data can be installed from: in
 * place, as many whole pages (at most max) as one extent of the input
 * buffer holds, or a page split between two extents gathered into d->buf.
 * Sets *src; returns the number of pages.
 */
static uint64_t
frame_pages(struct dest *d, const struct evbuffer_iovec *v, int nv,
	    uint64_t off, uint64_t ps, uint64_t max, const uint8_t **src)
{
	uint64_t at = 0, got = 0;
	int i;

	for (i = 0; i < nv && off >= at + v[i].iov_len; i++)
		at += v[i].iov_len;
	if (i == nv)
		fatalx("frame_pages: offset %llu past the frame",
		       (unsigned long long)off);
	if (at + v[i].iov_len - off >= ps) {
		uint64_t k = (at + v[i].iov_len - off) / ps;

		*src = (const uint8_t *)v[i].iov_base + (off - at);
		return k < max ? k : max;
	}
	for (uint64_t from = off - at; i < nv && got < ps; i++, from = 0) {
		uint64_t l = v[i].iov_len - from;

		if (l > ps - got)
			l = ps - got;
		memcpy(d->buf + got, (const uint8_t *)v[i].iov_base + from, l);
		got += l;
	}
	*src = d->buf;
	return 1;
}

/*
 * Installs what one PAGE_DATA frame brings into target t (the root or one
 * of its forked children): every page t does not have yet. The data is
 * read from the frame in place (frame_pages() gathers into root->buf what
 * straddles two extents). Returns -1 when t can take no more.
 */
static int
install_frame(struct dest *t, struct dest *root, const Uffdd__PageData *pd,
	      const struct evbuffer_iovec *v, int nv)
{
	struct dst_region *dr = region_by_index(t, pd->region);
	uint64_t p = pd->page, end = pd->page + pd->npages;
	const uint8_t *src;
	int retries = 0;

	if (dr == NULL)
		return 0;
	if (dr->r.kind == REGION_FILE_PRIVATE)
		/* A child inherited these at its fork, after the release. */
		return t->root ? 0 : write_private(t, dr, pd, v, nv);
	/*
	 * A ZERO run of the bulk stream is not installed: the page is none
	 * (attach discarded it), reads as zeros once the migration is over,
	 * and a thread that touches it before gets a zero page then, as for a
	 * page the target discarded itself (zero_discarded()). Installing
	 * them would give shared memory and hugetlb a real page each, for
	 * guest RAM most of it. A page a thread waits on is installed.
	 */
	if (pd->zero && !pd->demand) {
		for (uint64_t q = p; q < end; q++) {
			if (pagestate_get(&dr->ps, q) == PAGE_MISSING) {
				pagestate_set(&dr->ps, q, PAGE_DISCARDED);
				t->m->zero_pages++;
				t->m->prefetched_pages++;
			}
		}
	}
	if (t->root && !root->gone && region_kind_shmem(dr->r.kind)) {
		/*
		 * Shared memory has one page cache: what the root just
		 * installed the child has too. Mark it, and wake the child's
		 * threads, whose faults wait on the child's own uffd. A page
		 * the root left none is one here too: a child's thread that
		 * waits on it gets a zero page through the child's uffd.
		 * Once the root's target is gone, the child installs itself.
		 */
		struct dst_region *rr = region_by_index(root, pd->region);

		for (; rr && p < end; p++) {
			enum page_state rs = pagestate_get(&rr->ps, p);
			enum page_state ks = pagestate_get(&dr->ps, p);

			if (rs == PAGE_PRESENT && ks < PAGE_PRESENT) {
				pagestate_set(&dr->ps, p, PAGE_PRESENT);
				uffd_wake(t->uffd, page_addr(dr, p),
					  dr->r.page_size);
			} else if (rs == PAGE_DISCARDED && ks == PAGE_MISSING) {
				pagestate_set(&dr->ps, p, PAGE_DISCARDED);
			} else if (rs == PAGE_DISCARDED &&
				   ks == PAGE_REQUESTED) {
				zero_discarded(t, dr, p);
			}
		}
		p = pd->page;
		end = p; /* nothing to install through the child's uffd */
	}
	while (p < end) {
		uint64_t n = pagestate_present_run(&dr->ps, p, end - p);
		int64_t got;

		p += n;
		if (p >= end)
			break;
		n = pagestate_missing_run(&dr->ps, p, end - p);
		n = addr_run(dr, p, n);
		if (!pd->zero) {
			/* Install from the input buffer, extent by extent. */
			n = frame_pages(root, v, nv,
					(p - pd->page) * dr->r.page_size,
					dr->r.page_size, n, &src);
			got = install_run(t, dr, p, n, src, 0, pd->demand);
		} else {
			got = install_run(t, dr, p, n, NULL, 1, pd->demand);
		}
		if (got < 0)
			return -1;
		if (got == 0 && ++retries > RETRY_MAX) {
			dest_fail(t->root ? t->root : t,
				  "install at 0x%llx keeps failing with "
				  "EAGAIN",
				  (unsigned long long)page_addr(dr, p));
			return -1;
		}
		if (pd->zero)
			t->m->zero_pages += (uint64_t)got;
		if (pd->demand)
			t->m->demand_pages += (uint64_t)got;
		else
			t->m->prefetched_pages += (uint64_t)got;
		/* The page map is looked at again from p: see install_run. */
	}
	if (t->nwaiters)
		settle(t, pd->region, pd->page, pd->npages);
	t->m->pages_present = present_total(t);
	return 0;
}

/* Takes a finished or dead child off its root's list and lets it go. */
static void
child_done(struct dest *k)
{
	struct dest *root = k->root;

	for (size_t i = 0; i < root->nkids; i++) {
		if (root->kids[i] == k) {
			root->kids[i] = root->kids[--root->nkids];
			break;
		}
	}
	if (k->m->state != MIG_FAILED) {
		if (present_total(k) == k->m->pages_total) {
			migration_set_state(k->m, MIG_COMPLETE);
		} else {
			migration_fail(k->m,
				       "forked process %d gone with "
				       "%llu pages still missing",
				       (int)k->m->pid,
				       (unsigned long long)(k->m->pages_total -
							    present_total(k)));
		}
	}
	/* Its ranges unregister when both copies of its uffd are closed. */
	if (k->target_fd >= 0 && procref_alive(&k->t) &&
	    present_total(k) == k->m->pages_total)
		close_target_fd(k);
	/* Held with no copy: as teardown() does with its root. */
	if (k->sole && k->m->state == MIG_FAILED && !k->have_poison)
		procref_signal(&k->t, SIGKILL);
	if (k->sole)
		tracee_release(k->m->pid);
	unwatch(k);
	if (k->find_ev)
		event_del(k->find_ev);
	migration_release(k->m);
	if (root->m->state == MIG_RUNNING || root->m->state == MIG_PAUSED)
		save(root); /* without the child */
	if (root->m->state == MIG_RUNNING &&
	    present_total(root) == root->m->pages_total && root->nkids == 0)
		dest_complete(root);
}

static int
seen_has(const struct dest *root, pid_t pid, unsigned long long start)
{
	for (size_t i = 0; i < root->nseen; i++)
		if (root->seen[i].pid == pid && root->seen[i].start == start)
			return 1;
	return 0;
}

static void
seen_add(struct dest *root, pid_t pid, unsigned long long start)
{
	if (seen_has(root, pid, start))
		return;
	root->seen =
		realloc(root->seen, (root->nseen + 1) * sizeof(*root->seen));
	if (root->seen == NULL)
		fatal("children");
	root->seen[root->nseen].pid = pid;
	root->seen[root->nseen++].start = start;
}

/*
 * The children of parent (of all its threads) not yet seen: with mark set,
 * all of them become seen; else the one forked first is returned, and
 * becomes seen. The fork event is read while the parent is still inside
 * fork(), and events come in fork order, so the first child forked that
 * no event has claimed is this event's: a child the target had before the
 * migration, or one already matched, never is.
 */
static pid_t
claim_child(pid_t parent, struct dest *root, int mark)
{
	char path[320], buf[4096];
	unsigned long long best_start = 0;
	pid_t best = 0;
	struct dirent *e;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)parent);
	if ((dir = opendir(path)) == NULL)
		return 0;
	while ((e = readdir(dir)) != NULL) {
		char *tok, *save;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/children",
			 (int)parent, e->d_name);
		if ((f = fopen(path, "re")) == NULL)
			continue;
		if (fgets(buf, sizeof(buf), f) == NULL)
			buf[0] = '\0';
		fclose(f);
		for (tok = strtok_r(buf, " \n", &save); tok;
		     tok = strtok_r(NULL, " \n", &save)) {
			pid_t c = (pid_t)atoi(tok);
			unsigned long long st = c > 0 ? proc_start(c) : 0;

			if (st == 0 || seen_has(root, c, st))
				continue;
			if (mark)
				seen_add(root, c, st);
			else if (best == 0 || st < best_start ||
				 (st == best_start && c < best)) {
				best = c;
				best_start = st;
			}
		}
	}
	closedir(dir);
	if (best > 0)
		seen_add(root, best, best_start);
	return best;
}

/*
 * A child found by pid is the process claimed only if its start time says
 * so (claim_child(), claim_orphan() marked it seen): the pid may have gone
 * to another process since. Else k has no process to act on.
 */
static void
child_open(struct dest *k, pid_t pid)
{
	char err[128];

	if (pid > 0 && procref_open(&k->t, pid, err, sizeof(err)) == 0 &&
	    !seen_has(k->root, pid, k->t.start))
		procref_close(&k->t);
}

/* A child's exit is an event, when its process is known. */
static void
child_watch(struct dest *k)
{
	if (k->t.pidfd < 0 || k->exit_ev != NULL)
		return;
	k->exit_ev =
		event_new(base, k->t.pidfd, EV_READ | EV_PERSIST, exit_cb, k);
	event_priority_set(k->exit_ev, PRIO_CONTROL);
	event_add(k->exit_ev, NULL);
}

/*
 * A forked child of root's target (pid, its uffd ufd): regions copied from
 * its parent, every page missing; the caller fills in what it holds and
 * then calls child_start().
 */
static struct dest *
child_new(struct dest *root, const struct dest *parent, pid_t pid, int ufd)
{
	struct migration *m = migration_new(ROLE_DEST, root->m->id);
	struct dest *k = xcalloc(1, sizeof(*k));

	m->impl = k;
	m->impl_free = dest_free;
	m->pid = pid;
	memcpy(m->peer, root->m->peer, sizeof(m->peer));
	k->m = m;
	k->root = root;
	k->uffd = ufd;
	k->target_fd = -1;
	k->t = (struct procref)PROCREF_NONE;
	k->have_poison = parent->have_poison;
	k->sole = parent->sole;
	k->hints = parent->hints;
	snprintf(k->from, sizeof(k->from), "%s", root->from);
	snprintf(k->pin, sizeof(k->pin), "%s", root->pin);
	k->waiters = xcalloc(INFLIGHT_MAX, sizeof(*k->waiters));
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
		m->pages_total += kr->npages;
	}
	return k;
}

/* The child's page map is filled in: serve it, or let it go if complete. */
static void
child_start(struct dest *root, struct dest *k)
{
	struct migration *m = k->m;

	m->pages_present = present_total(k);
	k->uffd_ev =
		event_new(base, k->uffd, EV_READ | EV_PERSIST, fault_cb, k);
	event_priority_set(k->uffd_ev, PRIO_FAULT);
	event_add(k->uffd_ev, NULL);
	child_watch(k);
	migration_set_state(m, MIG_RUNNING);
	root->kids =
		realloc(root->kids, (root->nkids + 1) * sizeof(*root->kids));
	if (root->kids == NULL)
		fatal("children");
	root->kids[root->nkids++] = k;
	/*
	 * What an injection read from its uffd while the child was built
	 * (give_uffd()): the kernel let those events go on when they were
	 * read, so the page map must follow before any frame goes in.
	 */
	if (k->nbacklog) {
		read_faults(k);
		if (m->state != MIG_RUNNING)
			return;
		m->pages_present = present_total(k);
	}
	if (m->pages_present == m->pages_total)
		child_done(k);
	else
		save(root); /* with the child, for a restart */
}

/*
 * Only we hold a child's uffd. Should the daemon die, the kernel would
 * unregister the child's ranges and its missing pages would read as zeros:
 * give the child a copy, as every target has (and a restart takes it up).
 */
static void
give_uffd(struct dest *k)
{
	struct inject inj = {.err = "no such process"};
	pid_t pid = k->m->pid;
	uint32_t code;
	char path[64];
	struct stat st;

	/* Its parent held no copy: neither does it; held instead. */
	if (k->sole) {
		if (!procref_same(&k->t) ||
		    !authz_allows(&k->root->owner, &k->t) ||
		    tracee_seize(pid) < 0)
			log_warnx("migration %s: forked process %d cannot be "
				  "held: should the daemon die, its missing "
				  "pages would read as zeros",
				  log_id(k->root->m->id), (int)pid);
		return;
	}

	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	if (procref_same(&k->t) && stat(path, &st) == 0 &&
	    inject_begin_draining(&inj, pid, 1, k->uffd, drain_uffd, k) == 0) {
		/*
		 * Stopped, it can change no more: only a process the caller
		 * of the attach could ptrace gets anything from us (a child
		 * that ran a setuid program since the fork does not).
		 */
		if (authz_may_ptrace(&k->root->owner, &k->t, &code, inj.err,
				     sizeof(inj.err)) == 0)
			k->target_fd = inject_pass_fd(&inj, k->uffd, st.st_uid,
						      st.st_gid);
		inject_end(&inj);
	} else {
		reap_later();
	}
	if (k->target_fd < 0)
		log_warnx("migration %s: forked process %d holds no copy of "
			  "its uffd: %s",
			  log_id(k->root->m->id), (int)pid, inj.err);
}

/*
 * The fork event is read while the parent is still inside fork(): the
 * child is linked to its parent only after that, so it is usually not in
 * /proc/PID/task/TID/children yet. Look again shortly after, for up to a
 * second; a child never found is still served, but has no exit event and
 * no copy of its uffd (a daemon restart would lose it).
 */
#define FIND_TRIES 100

/* Clock ticks since boot, as /proc/PID/stat counts a start time. */
static unsigned long long
boot_ticks(void)
{
	struct timespec ts;
	long hz = sysconf(_SC_CLK_TCK);

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (unsigned long long)ts.tv_sec * (unsigned long long)hz +
	       (unsigned long long)ts.tv_nsec /
		       (1000000000ULL / (unsigned long long)hz);
}

/* A process that is gone or a zombie: its children went to another. */
static int
proc_gone(pid_t pid)
{
	char path[64], buf[512], *p;
	int gone = 1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((f = fopen(path, "re")) == NULL)
		return 1;
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')) && p[1])
		gone = p[2] == 'Z' || p[2] == 'X';
	fclose(f);
	return gone;
}

/* Whether one of our destination migrations knows the process already. */
static int
proc_known(pid_t pid, unsigned long long start)
{
	struct migration *m;

	TAILQ_FOREACH (m, &migrations, link) {
		const struct dest *d = m->impl;

		if (m->role != ROLE_DEST || d == NULL)
			continue;
		if (m->pid == pid ||
		    (d->root == NULL && seen_has(d, pid, start)))
			return 1;
	}
	return 0;
}

/* Whether the mapping at addr in process pid is registered with a uffd. */
static int
uffd_mapped(pid_t pid, uint64_t addr)
{
	char path[64], line[512];
	unsigned long long s, e;
	int in = 0, yes = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	if ((f = fopen(path, "re")) == NULL)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%llx-%llx ", &s, &e) == 2) {
			in = addr >= s && addr < e;
		} else if (in && strncmp(line, "VmFlags:", 8) == 0) {
			yes = strstr(line, " um") != NULL;
			break;
		}
	}
	fclose(f);
	return yes;
}

/*
 * Only a process the attach's caller could ptrace may be taken for its
 * target's child: /proc holds every user's processes, and one of them may
 * have a uffd at the same address.
 */
static int
may_claim(const struct dest *root, pid_t pid, unsigned long long start)
{
	struct procref t;
	char err[128];
	int ok;

	if (procref_open(&t, pid, err, sizeof(err)) < 0)
		return 0;
	ok = t.start == start && authz_allows(&root->owner, &t);
	procref_close(&t);
	return ok;
}

/*
 * The child of a parent that exited before the child was found (a daemon
 * that detaches forks and exits at once): it went to another parent, so
 * it is looked for by what it has. A process started since the fork event
 * that none of our migrations knows, whose mapping of the first region is
 * registered with a userfaultfd; the earliest such.
 */
static pid_t
claim_orphan(struct dest *k)
{
	unsigned long long best_start = 0,
			   hz = (unsigned long long)sysconf(_SC_CLK_TCK);
	const struct dst_region *dr = NULL;
	struct dirent *e;
	pid_t best = 0;
	DIR *dir;

	for (size_t i = 0; dr == NULL && i < k->nregs; i++)
		if (k->regs[i].r.kind != REGION_FILE_PRIVATE)
			dr = &k->regs[i];
	if (dr == NULL || (dir = opendir("/proc")) == NULL)
		return 0;
	while ((e = readdir(dir)) != NULL) {
		pid_t pid = (pid_t)atoi(e->d_name);
		unsigned long long st = pid > 1 ? proc_start(pid) : 0;

		if (st == 0 || st + hz < k->fork_ticks || proc_known(pid, st) ||
		    (best && st >= best_start) ||
		    !uffd_mapped(pid, page_addr(dr, 0)) ||
		    !may_claim(k->root, pid, st))
			continue;
		best = pid;
		best_start = st;
	}
	closedir(dir);
	if (best > 0)
		seen_add(k->root, best, best_start);
	return best;
}

static void
find_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct dest *k = arg;
	struct timeval tv = {0, 10000};
	pid_t pid;

	if (k->m->state != MIG_RUNNING)
		return;
	if ((pid = claim_child(k->parent_pid, k->root, 0)) <= 0 &&
	    proc_gone(k->parent_pid))
		pid = claim_orphan(k);
	if (pid <= 0) {
		if (k->find_tries++ < FIND_TRIES)
			evtimer_add(k->find_ev, &tv);
		else
			log_warnx("migration %s: forked process of %d not "
				  "found; it would not survive a restart",
				  log_id(k->root->m->id), (int)k->parent_pid);
		return;
	}
	k->m->pid = pid;
	child_open(k, pid);
	child_watch(k);
	log_info("migration %s: forked process of %d is %d",
		 log_id(k->root->m->id), (int)k->parent_pid, (int)pid);
	give_uffd(k);
	if (k->nbacklog) /* as in child_start() */
		read_faults(k);
	save(k->root);
}

static void
find_later(struct dest *k)
{
	struct timeval tv = {0, 1000};

	k->find_ev = evtimer_new(base, find_cb, k);
	evtimer_add(k->find_ev, &tv);
}

/*
 * UFFD_EVENT_FORK: the target forked, and the child's copy of the
 * migrated ranges is registered with a new uffd, given to us. The child
 * holds what its parent held at the fork (its own pagemap says exactly
 * what, for private memory; shared memory is the parent's), and gets the
 * rest from the same frames as its parent; pages the parent got between
 * the fork and this event, the child asks for.
 */
static void
fork_child(struct dest *parent, int ufd)
{
	struct dest *root = parent->root ? parent->root : parent, *k;
	pid_t pid = claim_child(parent->m->pid, root, 0);

	k = child_new(root, parent, pid, ufd);
	child_open(k, pid);
	k->parent_pid = parent->m->pid;
	k->fork_ticks = boot_ticks();
	if (pid > 0)
		give_uffd(k);
	else
		find_later(k);
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
				request_page(k, kr, p);
		}
		free(held);
	}
	char who[32] = "a process (pid not known yet)";

	if (pid > 0)
		snprintf(who, sizeof(who), "%d", (int)pid);
	log_info("migration %s: process %d forked %s; %llu of its %llu pages "
		 "still to come",
		 log_id(root->m->id), (int)parent->m->pid, who,
		 (unsigned long long)(k->m->pages_total - present_total(k)),
		 (unsigned long long)k->m->pages_total);
	child_start(root, k);
}

static void page_done(struct dest *, const Uffdd__PageData *,
		      const struct evbuffer_iovec *, int);

static void
pieces_stop(struct dest *d)
{
	d->pending = 0;
	if (d->bulk)
		conn_stall(d->bulk, 0);
}

/*
 * Installs the pending bulk frame a piece at a time, reading the uffd in
 * between: a fault that comes meanwhile is requested at once, and its
 * answer goes in before the rest of the frame (the loop serves the demand
 * lane and the uffd first; bulk_hold() brings us back). A whole 256 KiB
 * frame takes tens of microseconds to install, which a fault would
 * otherwise wait out twice: before its request and before its answer.
 */
static void
bulk_pieces(struct dest *d)
{
	while (d->pending) {
		struct dst_region *dr = region_by_index(d, d->pend.region);
		Uffdd__PageData sub = d->pend;
		struct evbuffer_iovec v;
		uint64_t ps, piece;

		if (d->m->state != MIG_RUNNING || d->bulk == NULL ||
		    dr == NULL) {
			pieces_stop(d); /* send_holdings() will say */
			return;
		}
		if (d->nrequests == 1)
			return; /* bulk_hold() lets it go on */
		ps = dr->r.page_size;
		piece = DEMAND_STEP_BYTES / ps ? DEMAND_STEP_BYTES / ps : 1;
		sub.page += d->pdone;
		sub.npages = (uint32_t)(d->pend.npages - d->pdone < piece
						? d->pend.npages - d->pdone
						: piece);
		v.iov_base = d->pbuf + d->pdone * ps;
		v.iov_len = sub.npages * ps;
		d->pdone += sub.npages;
		if (install_frame(d, d, &sub, &v, 1) < 0) {
			pieces_stop(d); /* as page_data() gives up a frame */
			return;
		}
		if (d->pdone == d->pend.npages) {
			v.iov_base = d->pbuf;
			v.iov_len = d->pend.npages * ps;
			pieces_stop(d);
			page_done(d, &d->pend, &v, 1);
			return;
		}
		read_faults(d);
		if (d->nrequests > 0 && d->nrequests != 1) {
			/* Several wait: their answers first, then on. */
			event_active(d->piece_ev, EV_TIMEOUT, 0);
			return;
		}
	}
}

static void
piece_cb(evutil_socket_t fd, short ev, void *arg)
{
	bulk_pieces(arg);
}

static void
page_data(struct dest *d, struct conn *c, const struct frame_hdr *h,
	  const Uffdd__PageData *pd)
{
	struct dst_region *dr = region_by_index(d, pd->region);
	struct evbuffer_iovec v[PEEK_MAX];
	int nv = 0;

	if (dr == NULL || pd->npages == 0 || pd->page >= dr->npages ||
	    pd->npages > dr->npages - pd->page ||
	    h->data_len !=
		    (pd->zero ? 0 : (uint64_t)pd->npages * dr->r.page_size)) {
		log_warnx("%s: PAGE_DATA out of bounds (region %u page "
			  "%llu+%u, %u bytes)",
			  conn_name(c), pd->region,
			  (unsigned long long)pd->page, pd->npages,
			  h->data_len);
		lanes_down(d, "malformed PAGE_DATA");
		return;
	}
	/*
	 * No source sends more (frame.h): the data would not fit our
	 * buffers, nor a ZERO run of huge pages the zero source.
	 */
	if (frame_pages_fit(dr->r.page_size, pd->npages) != pd->npages) {
		log_warnx("%s: PAGE_DATA of %u pages of %u bytes (region %u "
			  "page %llu%s): more than one frame covers (%u "
			  "bytes); closing the lane",
			  conn_name(c), pd->npages, dr->r.page_size, pd->region,
			  (unsigned long long)pd->page,
			  pd->zero ? ", ZERO" : "", FRAME_DATA_MAX);
		lanes_down(d, "PAGE_DATA larger than a frame");
		return;
	}
	/*
	 * The page bytes are copied out of the input buffer before anything
	 * is installed. Installing in place from the buffer lost pages: an
	 * install can read uffd events and send requests, which may make a
	 * lane read or write, and an evbuffer that grows can move the bytes
	 * we pointed into (seen with TLS and plaintext lanes alike).
	 */
	if (c == d->bulk && h->data_len && !pd->demand &&
	    dr->r.kind != REGION_FILE_PRIVATE) {
		if (d->pbuf == NULL) {
			if (posix_memalign((void **)&d->pbuf, 4096,
					   FRAME_DATA_MAX) != 0)
				fatal("page buffer");
			d->piece_ev = event_new(base, -1, 0, piece_cb, d);
			if (d->piece_ev == NULL)
				fatalx("event_new");
			event_priority_set(d->piece_ev, PRIO_BULK);
		}
		if (conn_take_data(c, d->pbuf, h->data_len) < 0) {
			lanes_down(d, "short PAGE_DATA");
			return;
		}
		d->m->bytes += h->data_len;
		/* Reads in small steps too while faults come. */
		conn_set_io_max(c,
				loop_demand_recent() ? DEMAND_STEP_BYTES : 0);
		loop_bulk();
		/* The fields alone: msg and what it points to go after us. */
		d->pend = (Uffdd__PageData)UFFDD__PAGE_DATA__INIT;
		d->pend.region = pd->region;
		d->pend.page = pd->page;
		d->pend.npages = pd->npages;
		d->pdone = 0;
		d->pending = 1;
		conn_stall(c, 1);
		bulk_pieces(d);
		return;
	}
	if (h->data_len) {
		if (conn_take_data(c, d->buf, h->data_len) < 0) {
			lanes_down(d, "short PAGE_DATA");
			return;
		}
		v[0].iov_base = d->buf;
		v[0].iov_len = h->data_len;
		nv = 1;
	}
	d->m->bytes += h->data_len;
	if (pd->demand)
		loop_poll(); /* the thread's next fault may follow */
	else
		loop_bulk();
	if (install_frame(d, d, pd, v, nv) < 0)
		return;
	if (pd->demand && d->bulk)
		loop_yield_woken(); /* before the bulk work goes on */
	page_done(d, pd, v, nv);
}

/*
 * The root has what frame pd brings: its children take their part, and
 * the migration completes once every page is in.
 */
static void
page_done(struct dest *d, const Uffdd__PageData *pd,
	  const struct evbuffer_iovec *v, int nv)
{
	for (size_t i = 0; i < d->nkids;) {
		struct dest *k = d->kids[i];

		if (install_frame(k, d, pd, v, nv) < 0) {
			/* Gone (child_done ran) or failed: off the list. */
			if (i < d->nkids && d->kids[i] == k)
				child_done(k);
			continue;
		}
		if (present_total(k) == k->m->pages_total) {
			child_done(k); /* removes it from kids */
			continue;
		}
		i++;
	}
	d->m->pages_present = present_total(d);
	if (d->m->state == MIG_RUNNING &&
	    d->m->pages_present == d->m->pages_total && d->nkids == 0)
		dest_complete(d);
}

static void
bulk_frame(struct conn *c, const struct frame_hdr *h, ProtobufCMessage *msg,
	   void *arg)
{
	struct dest *d = arg;

	if (h->type == FRAME_PAGE_DATA) {
		if (d->m->state == MIG_RUNNING)
			page_data(d, c, h, (const Uffdd__PageData *)msg);
	} else if (h->type == FRAME_ERROR) {
		lanes_down(d, ((const Uffdd__Error *)msg)->message);
	} else if (h->type != FRAME_HELLO && h->type != FRAME_PING) {
		lanes_down(d, "unexpected frame on the bulk lane");
	}
}

static void send_holdings(struct dest *);

/*
 * The bulk lane alone broke: the demand lane goes on serving faults and the
 * bulk lane is opened again after a backoff. What was queued or in flight
 * on it is gone, though the source counts it sent: tell the source what we
 * hold, as a resume does, so that it sends the rest again (and drops the
 * lane if it still holds it open). (The source closes bulk first when it
 * fails, with its reason queued on the demand lane.)
 */
static void
bulk_close(struct conn *c, const char *why, void *arg)
{
	struct dest *d = arg;

	conn_free(d->bulk);
	d->bulk = NULL;
	d->pending = 0; /* its pages are not ours: send_holdings() says so */
	if (d->demand && d->m->state == MIG_RUNNING) {
		log_warnx("migration %s: bulk lane lost (%s); %llu of %llu "
			  "pages present, the source sends the rest again",
			  log_id(d->m->id), why,
			  (unsigned long long)present_total(d),
			  (unsigned long long)d->m->pages_total);
		send_holdings(d);
		schedule_retry(d);
	} else {
		lanes_down(d, why);
	}
}

static void match_and_attach(struct dest *, const Uffdd__RegionTable *);
static void resume(struct dest *, const Uffdd__RegionTable *);

static void
demand_frame(struct conn *c, const struct frame_hdr *h, ProtobufCMessage *msg,
	     void *arg)
{
	struct dest *d = arg;

	switch (h->type) {
	case FRAME_HELLO:
		if (((const Uffdd__Hello *)msg)->version == UFFDD_PROTO_VERSION)
			break;
		if (d->m->state == MIG_CONNECTING)
			attach_fail(d, ERR_PROTOCOL,
				    "source %s speaks protocol version %u, "
				    "we speak %u",
				    d->from,
				    ((const Uffdd__Hello *)msg)->version,
				    UFFDD_PROTO_VERSION);
		else
			lanes_down(d, "protocol version changed");
		break;
	case FRAME_REGIONS:
		if (d->m->state == MIG_CONNECTING)
			match_and_attach(d, (const Uffdd__RegionTable *)msg);
		else if (d->resuming)
			resume(d, (const Uffdd__RegionTable *)msg);
		else
			lanes_down(d, "second region table");
		break;
	case FRAME_PAGE_DATA:
		if (d->m->state == MIG_RUNNING)
			page_data(d, c, h, (const Uffdd__PageData *)msg);
		break;
	case FRAME_PING:
		break;
	case FRAME_ERROR: {
		const Uffdd__Error *e = (const Uffdd__Error *)msg;

		if (d->m->state == MIG_CONNECTING)
			attach_fail(d,
				    e->code == ERR_UNKNOWN_ID ? ERR_UNKNOWN_ID
							      : ERR_SOURCE,
				    "source %s: %s", d->from, e->message);
		else if (e->code == ERR_SOURCE || e->code == ERR_UNKNOWN_ID)
			dest_fail(d, "source %s: %s", d->from, e->message);
		else
			lanes_down(d, e->message);
		break;
	}
	default:
		lanes_down(d, "unexpected frame on the demand lane");
		break;
	}
}

static void
demand_close(struct conn *c, const char *why, void *arg)
{
	struct dest *d = arg;

	if (d->m->state == MIG_CONNECTING)
		attach_fail(d, ERR_UNREACHABLE, "source %s unreachable: %s",
			    d->from, why);
	else
		lanes_down(d, why);
}

/* Opens the demand lane and says hello; the rest is in demand_frame. */
static int
connect_demand(struct dest *d, int resuming, char *err, size_t errlen)
{
	Uffdd__Hello h = UFFDD__HELLO__INIT;
	char name[300];

	snprintf(name, sizeof(name), "source %s demand", d->from);
	d->demand = peer_connect(d->from, d->pin, name, demand_frame,
				 demand_close, d, err, errlen);
	if (d->demand == NULL)
		return -1;
	conn_set_priority(d->demand, PRIO_FAULT);
	conn_set_timeout(d->demand,
			 resuming ? LANE_TIMEOUT : HANDSHAKE_TIMEOUT);
	peer_set_nodelay(d->demand);
	d->resuming = resuming;
	h.version = UFFDD_PROTO_VERSION;
	h.lane = UFFDD__LANE__LANE_DEMAND;
	h.migration_id = d->m->id;
	h.resume = resuming;
	return conn_send(d->demand, FRAME_HELLO, &h.base);
}

static void
retry_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct dest *d = arg;
	char err[256];

	if (d->m->state == MIG_RUNNING && d->demand && d->bulk == NULL) {
		if (open_bulk(d) < 0)
			schedule_retry(d);
		return;
	}
	if (d->m->state != MIG_PAUSED || d->demand)
		return;
	if (now_ns() - d->t_pause >
	    (uint64_t)conf.pause_deadline * 1000000000ULL) {
		dest_fail(d, "source %s unreachable for %d s (pause deadline)",
			  d->from, conf.pause_deadline);
		return;
	}
	log_debug("migration %s: reconnecting to %s", log_id(d->m->id),
		  d->from);
	if (connect_demand(d, 1, err, sizeof(err)) < 0) {
		log_warnx("migration %s: %s", log_id(d->m->id), err);
		schedule_retry(d);
	}
}

static int open_bulk(struct dest *);

static void
bulk_delay_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct dest *d = arg;

	if (d->m->state == MIG_RUNNING && open_bulk(d) < 0)
		lanes_down(d, "bulk lane unreachable");
}

static int
open_bulk(struct dest *d)
{
	Uffdd__Hello h = UFFDD__HELLO__INIT;
	char err[256], name[300];
	const char *delay = getenv("UFFDD_BENCH_BULK_DELAY_MS");

	/*
	 * Benchmark knob (tests/bench): hold the bulk lane back so that demand
	 * faults can be timed on an idle path. Never set in production.
	 */
	if (delay && d->bulk_delay == NULL) {
		struct timeval tv = {atoi(delay) / 1000,
				     atoi(delay) % 1000 * 1000};

		d->bulk_delay = evtimer_new(base, bulk_delay_cb, d);
		evtimer_add(d->bulk_delay, &tv);
		return 0;
	}
	snprintf(name, sizeof(name), "source %s bulk", d->from);
	d->bulk = peer_connect(d->from, d->pin, name, bulk_frame, bulk_close, d,
			       err, sizeof(err));
	if (d->bulk == NULL) {
		log_warnx("migration %s: bulk lane: %s", log_id(d->m->id), err);
		return -1;
	}
	conn_set_priority(d->bulk, PRIO_BULK);
	conn_set_budget(d->bulk, BULK_BUDGET);
	conn_set_timeout(d->bulk, LANE_TIMEOUT);
	h.version = UFFDD_PROTO_VERSION;
	h.lane = UFFDD__LANE__LANE_BULK;
	h.migration_id = d->m->id;
	return conn_send(d->bulk, FRAME_HELLO, &h.base);
}

/*
 * A target that may not call userfaultfd() itself (not root, and
 * vm.unprivileged_userfaultfd=0; the user-mode-only kind would break the
 * target's system calls on missing pages) gets a full one from
 * /dev/userfaultfd: we open the device, hand the target a copy and have
 * it ask the device for a userfaultfd of its own (DESIGN section 5).
 */
static long
uffd_via_device(struct dest *d, struct inject *inj, char *err, size_t errlen)
{
	int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC), tdev;
	char path[64];
	struct stat st;
	long rc;

	err[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d", (int)d->m->pid);
	if (dev < 0 || stat(path, &st) < 0) {
		if (dev >= 0)
			close(dev);
		return -EPERM;
	}
	tdev = inject_pass_fd(inj, dev, st.st_uid, st.st_gid);
	close(dev);
	if (tdev < 0) {
		snprintf(err, errlen, "/dev/userfaultfd for process %d: %s",
			 (int)d->m->pid, inj->err);
		return -EPERM;
	}
	rc = inject_syscall(inj, SYS_ioctl, (unsigned long)tdev,
			    USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK, 0, 0,
			    0);
	inject_syscall(inj, SYS_close, (unsigned long)tdev, 0, 0, 0, 0, 0);
	if (rc < 0)
		snprintf(err, errlen, "USERFAULTFD_IOC_NEW in process %d: %s",
			 (int)d->m->pid, strerror((int)-rc));
	else
		log_info("process %d may not call userfaultfd(); it got one "
			 "from /dev/userfaultfd",
			 (int)d->m->pid);
	return rc;
}

/*
 * Nothing but the target's own threads may run while it is injected into:
 * another process sharing its file table could take the descriptors we
 * hand it (the /dev/userfaultfd one above all), one sharing its memory
 * could rewrite the instruction our calls go through or touch a page
 * between its discard and the registration. Refused, naming them.
 */
static int
alone(struct dest *d, char *err, size_t errlen)
{
	char who[192];
	int n = proc_sharers(d->m->pid, PROC_SHARE_VM | PROC_SHARE_FILES, who,
			     sizeof(who));

	if (n == 0)
		return 1;
	if (n < 0)
		snprintf(err, errlen,
			 "process %d: this kernel cannot tell which processes "
			 "share its memory or files (no kcmp(2))",
			 (int)d->m->pid);
	else
		snprintf(err, errlen,
			 "process %d shares its memory or files with %s, "
			 "which an attach cannot stop: refused",
			 (int)d->m->pid, who);
	return 0;
}

/*
 * Makes the target create a userfaultfd and copies it out (d->uffd, and
 * d->target_fd the target's copy). A target that may not make one itself
 * gets one from /dev/userfaultfd, and keeps no copy (d->sole, tracee.h).
 */
static int
make_uffd(struct dest *d, struct inject *inj, char *err, size_t errlen,
	  uint32_t *code)
{
	long rc = inject_syscall(inj, SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK,
				 0, 0, 0, 0, 0);

	if (rc == -EPERM && kfeat.dev_userfaultfd) {
		rc = uffd_via_device(d, inj, err, errlen);
		d->sole = rc >= 0;
	}
	*code = ERR_PERMISSION;
	if (rc < 0 && err[0])
		return -1;
	if (rc == -EPERM) {
		snprintf(err, errlen,
			 "userfaultfd in process %d: EPERM: set "
			 "vm.unprivileged_userfaultfd=1 or give the "
			 "process access to /dev/userfaultfd",
			 (int)d->m->pid);
		return -1;
	}
	*code = ERR_KERNEL;
	if (rc < 0) {
		snprintf(err, errlen, "userfaultfd in process %d: %s",
			 (int)d->m->pid, strerror((int)-rc));
		return -1;
	}
	d->target_fd = (int)rc;
	d->uffd = (int)syscall(SYS_pidfd_getfd, d->t.pidfd, d->target_fd, 0);
	if (d->uffd < 0) {
		snprintf(err, errlen, "pidfd_getfd: %s", strerror(errno));
		return -1;
	}
	if (d->sole) {
		inject_syscall(inj, SYS_close, (unsigned long)d->target_fd, 0,
			       0, 0, 0, 0);
		d->target_fd = -1;
	}
	return 0;
}

/* UFFDIO_API with what the migration uses on this kernel. */
static int
negotiate(struct dest *d, char *err, size_t errlen)
{
	/*
	 * Shared memory needs its feature bit. The event features make the
	 * kernel tell us when the target itself discards or moves migrating
	 * memory, so that no stale source page lands there later. THREAD_ID
	 * names the faulting thread, for blocktime.
	 */
	if (uffd_api(d->uffd,
		     (kfeat.uffd_features &
		      (UFFD_FEATURE_MISSING_SHMEM |
		       UFFD_FEATURE_MISSING_HUGETLBFS |
		       UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_UNMAP |
		       UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_EVENT_FORK |
		       UFFD_FEATURE_THREAD_ID)) |
			     (kfeat.access_likely ? UFFD_FEATURE_ACCESS_HINTS
						  : 0),
		     NULL) < 0) {
		snprintf(err, errlen, "UFFDIO_API: %s", strerror(errno));
		return -1;
	}
	d->have_poison = 1;
	d->hints = kfeat.access_likely;
	return 0;
}

/*
 * Discards what is resident in region reg and registers it. For shared
 * memory MADV_DONTNEED would only drop the mapping: the page cache keeps
 * the data and no MISSING fault would ever fire. Punch a hole instead;
 * shared hugetlb has a page cache too (hugetlbfs punches holes). A private
 * file mapping is only discarded (back to the file's pages); the source's
 * copies are written while the target is held (struct dest).
 */
static int
take_region(struct dest *d, struct inject *inj, size_t reg, char *err,
	    size_t errlen)
{
	struct region *r = &d->regs[reg].r;
	int shm = region_kind_shmem(r->kind) ||
		  (r->kind == REGION_HUGETLB && d->regs[reg].shared);
	uint64_t ioctls;
	long rc = inject_syscall(inj, SYS_madvise, r->start, r->length,
				 shm ? MADV_REMOVE : MADV_DONTNEED, 0, 0, 0);

	if (rc < 0) {
		snprintf(err, errlen, "madvise(%s) 0x%llx in process %d: %s",
			 shm ? "REMOVE" : "DONTNEED",
			 (unsigned long long)r->start, (int)d->m->pid,
			 strerror((int)-rc));
		return -1;
	}
	if (r->kind == REGION_FILE_PRIVATE)
		return 0;
	if (uffd_register(d->uffd, r->start, r->length,
			  UFFDIO_REGISTER_MODE_MISSING, &ioctls) < 0) {
		snprintf(err, errlen, "UFFDIO_REGISTER 0x%llx+0x%llx: %s",
			 (unsigned long long)r->start,
			 (unsigned long long)r->length, strerror(errno));
		return -1;
	}
	if (!(ioctls & (1ULL << 8)) || /* _UFFDIO_POISON, 6.6+ */
	    !poison_usable())
		d->have_poison = 0;
	if (!(ioctls & (1ULL << _UFFDIO_COPY)) ||
	    (!(ioctls & (1ULL << _UFFDIO_ZEROPAGE)) &&
	     r->kind != REGION_HUGETLB)) {
		uffd_unregister(d->uffd, r->start, r->length);
		snprintf(err, errlen,
			 "region 0x%llx: kernel offers no UFFDIO_COPY/ZEROPAGE "
			 "there",
			 (unsigned long long)r->start);
		return -1;
	}
	return 0;
}

/*
 * Every thread stays in ptrace-stop until the pages the target wrote in
 * private file mappings are in (struct dest): the injection is kept open.
 */
static int
hold_target(struct dest *d, struct inject *inj, char *err, size_t errlen)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/mem", (int)d->m->pid);
	if ((d->memfd = open(path, O_RDWR | O_CLOEXEC)) < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (inject_restore(inj) < 0) {
		snprintf(err, errlen, "holding process %d: %s", (int)d->m->pid,
			 strerror(errno));
		close(d->memfd);
		return -1;
	}
	d->hold = xmalloc(sizeof(*d->hold));
	*d->hold = *inj;
	log_info("process %d held until the pages it wrote in private file "
		 "mappings are in",
		 (int)d->m->pid);
	return 0;
}

/*
 * The injection is over: the target's threads go, but for one held with
 * the only copy of its uffd (tracee.h).
 */
static void
let_go(struct dest *d, struct inject *inj)
{
	if (!d->sole) {
		inject_end(inj);
	} else if (tracee_keep(inj) < 0) {
		/* Not held: a daemon that dies would leave it reading zeros. */
		log_warnx("migration %s: process %d cannot be held (%s); it "
			  "is stopped instead",
			  log_id(d->m->id), (int)d->m->pid, strerror(errno));
		procref_signal(&d->t, SIGSTOP);
	}
}

/*
 * Makes the target create a userfaultfd, copies it out, discards what is
 * resident in the matched regions and registers them, all while every thread
 * of the target is stopped, so no thread can touch a page in between.
 */
static int
setup_target(struct dest *d, char *err, size_t errlen, uint32_t *code)
{
	struct inject inj;
	size_t reg = 0;

	*code = ERR_KERNEL;
	err[0] = '\0';
	if (inject_begin(&inj, d->m->pid, 1) < 0) {
		*code = errno == EPERM ? ERR_PERMISSION : ERR_NO_PROCESS;
		snprintf(err, errlen, "%s", inj.err);
		reap_later();
		return -1;
	}
	/*
	 * Every thread stopped: the target can neither exec nor exit now.
	 * It must still be the process checked when the attach came, and
	 * one its caller may act on (it may have run a setuid program
	 * since, or exited and left its pid to another).
	 */
	if (authz_may_ptrace(&d->owner, &d->t, code, err, errlen) < 0) {
		inject_end(&inj);
		return -1;
	}
	if (!alone(d, err, errlen)) {
		*code = ERR_INVALID;
		inject_end(&inj);
		return -1;
	}
	if (make_uffd(d, &inj, err, errlen, code) < 0 ||
	    negotiate(d, err, errlen) < 0)
		goto undo;
	*code = ERR_KERNEL;
	for (reg = 0; reg < d->nregs; reg++)
		if (take_region(d, &inj, reg, err, errlen) < 0)
			goto undo;
	if (private_missing(d) > 0) {
		if (hold_target(d, &inj, err, errlen) == 0)
			return 0;
		goto undo;
	}
	let_go(d, &inj);
	return 0;
undo:
	while (reg-- > 0)
		uffd_unregister(d->uffd, d->regs[reg].r.start,
				d->regs[reg].r.length);
	if (d->target_fd >= 0)
		inject_syscall(&inj, SYS_close, (unsigned long)d->target_fd, 0,
			       0, 0, 0, 0);
	inject_end(&inj);
	d->target_fd = -1;
	d->sole = 0;
	if (d->uffd >= 0)
		close(d->uffd);
	d->uffd = -1;
	return -1;
}

static Uffdd__Region *
pb_region(Uffdd__Region *out, const Uffdd__Region *in)
{
	*out = *in;
	return out;
}

/*
 * Where a source region goes in the target: the same address, or where
 * an attach --map says (0: nowhere, with maps given and none for it).
 */
static uint64_t
target_start(const struct dest *d, uint64_t src_start)
{
	if (d->nmaps == 0)
		return src_start;
	for (size_t i = 0; i < d->nmaps; i++)
		if (d->maps[i].start == src_start)
			return d->maps[i].end;
	return 0;
}

/*
 * A path too long for a region's name arrives cut on either side; two
 * different files could then look the same, and the target would run on
 * the wrong file's pages. Such a mapping never matches.
 */
static int
name_cut(const Uffdd__Region *r)
{
	return strlen(r->name) >= REGION_NAME_MAX - 1;
}

/*
 * A private file mapping matches only the same file at the same offset:
 * the clean pages the destination keeps must be the ones the source has.
 * (Files are told apart by path, as /proc/PID/maps shows it.)
 */
static int
same_file(const struct vma *v, size_t nv, uint64_t at, const Uffdd__Region *r)
{
	const struct vma *e = region_vma_at(v, nv, at);

	return e && !e->name_cut && !name_cut(r) &&
	       strcmp(e->name, r->name) == 0 &&
	       e->offset + (at - e->start) == r->file_offset;
}

/*
 * A source region whose written private file pages would have nowhere to
 * go: the target would run on the file's stale bytes there. Refused before
 * anything is touched, saying what the target has at that address.
 */
static int
private_unmatched(struct dest *d, const struct vma *v, size_t nv,
		  const Uffdd__Region *r, uint64_t at)
{
	const struct vma *e = region_vma_at(v, nv, at);
	char there[REGION_NAME_MAX + 160];

	if (r->kind != UFFDD__REGION_KIND__KIND_FILE_PRIVATE ||
	    r->data_pages == 0)
		return 0;
	if (name_cut(r) || (e && e->name_cut)) {
		conn_send_error(d->demand, ERR_NO_MATCH, "attach failed");
		attach_fail(d, ERR_NO_MATCH,
			    "source region 0x%llx-0x%llx with %llu written "
			    "pages maps a file privately whose path (%.48s...) "
			    "is %d characters or longer on one side: a path "
			    "this long cannot be matched safely",
			    (unsigned long long)r->start,
			    (unsigned long long)(r->start + r->length),
			    (unsigned long long)r->data_pages,
			    name_cut(r) ? r->name : e->name,
			    REGION_NAME_MAX - 1);
		return 1;
	}
	if (e == NULL)
		snprintf(there, sizeof(there), "nothing mapped there");
	else
		snprintf(there, sizeof(there),
			 "0x%llx-0x%llx %s %s (%s) at offset 0x%llx",
			 (unsigned long long)e->start,
			 (unsigned long long)e->end, e->perms,
			 e->name[0] ? e->name : "[anon]",
			 region_kind_name(e->kind),
			 (unsigned long long)e->offset);
	conn_send_error(d->demand, ERR_NO_MATCH, "attach failed");
	attach_fail(d, ERR_NO_MATCH,
		    "source region 0x%llx-0x%llx, %s mapped privately at "
		    "offset 0x%llx with %llu written pages, has no match in "
		    "process %d (%s); map the same file privately at the same "
		    "address and length",
		    (unsigned long long)r->start,
		    (unsigned long long)(r->start + r->length), r->name,
		    (unsigned long long)r->file_offset,
		    (unsigned long long)r->data_pages, (int)d->m->pid, there);
	return 1;
}

static void
match_and_attach(struct dest *d, const Uffdd__RegionTable *t)
{
	Uffdd__AttachReply rep = UFFDD__ATTACH_REPLY__INIT;
	Uffdd__RegionTable acc = UFFDD__REGION_TABLE__INIT;
	Uffdd__Region *mbuf, *ubuf, **mp, **up;
	uint32_t ps = (uint32_t)sysconf(_SC_PAGESIZE), code;
	struct vma *v;
	size_t nv;
	char err[512];

	/* Untrusted input: checked before anything is sized from it. */
	if (region_table_check(t->regions, t->n_regions, err, sizeof(err)) <
	    0) {
		attach_fail(d, ERR_PROTOCOL, "source %s: bad region table: %s",
			    d->from, err);
		return;
	}
	if (region_read_maps(d->m->pid, &v, &nv) < 0) {
		attach_fail(d, ERR_NO_PROCESS, "process %d: %s", (int)d->m->pid,
			    strerror(errno));
		return;
	}
	mbuf = xcalloc(t->n_regions, sizeof(*mbuf));
	ubuf = xcalloc(t->n_regions, sizeof(*ubuf));
	mp = xcalloc(t->n_regions, sizeof(*mp));
	up = xcalloc(t->n_regions, sizeof(*up));
	d->regs = xcalloc(t->n_regions, sizeof(*d->regs));
	for (size_t i = 0; i < t->n_regions; i++) {
		const Uffdd__Region *r = t->regions[i];
		uint64_t at = target_start(d, r->start), end = at + r->length;
		int ok = at != 0 &&
			 (r->page_size == ps ||
			  (r->kind == UFFDD__REGION_KIND__KIND_HUGETLB &&
			   r->page_size == region_huge_page_size())) &&
			 r->length > 0 && r->length % r->page_size == 0 &&
			 at % r->page_size == 0 && end > at &&
			 region_in_ranges(d->ranges, d->nranges, at, end) &&
			 region_covered(v, nv, at, end,
					(enum region_kind)r->kind) &&
			 (r->kind != UFFDD__REGION_KIND__KIND_FILE_PRIVATE ||
			  same_file(v, nv, at, r));

		/* A target mapping we could not tell: refuse, not skip. */
		if (!ok && at != 0 &&
		    region_in_ranges(d->ranges, d->nranges, at, at + 1) &&
		    region_denied(v, nv, at, end, err, sizeof(err))) {
			conn_send_error(d->demand, ERR_PERMISSION,
					"attach failed");
			attach_fail(d, ERR_PERMISSION, "process %d: %s",
				    (int)d->m->pid, err);
			free(v);
			goto out;
		}
		if (!ok && at != 0 &&
		    region_in_ranges(d->ranges, d->nranges, at, at + 1) &&
		    private_unmatched(d, v, nv, r, at)) {
			free(v);
			goto out;
		}
		if (!ok) {
			up[rep.n_unmatched++] = pb_region(&ubuf[i], r);
			continue;
		}
		mp[rep.n_matched++] = pb_region(&mbuf[i], r);
		struct dst_region *dr = &d->regs[d->nregs++];

		dr->r.index = r->index;
		snprintf(dr->r.name, sizeof(dr->r.name), "%s", r->name);
		dr->r.start = at;
		dr->src_start = r->start;
		dr->r.length = r->length;
		dr->r.page_size = r->page_size;
		dr->r.kind = (enum region_kind)r->kind;
		dr->npages = r->length / r->page_size;
		dr->shared = region_vma_at(v, nv, at)->perms[3] == 's';
		if (pagestate_init(&dr->ps, dr->npages) < 0)
			fatal("page state of %llu pages",
			      (unsigned long long)dr->npages);
		/* Nothing written there: the file's pages are all it holds. */
		if (dr->r.kind == REGION_FILE_PRIVATE && r->data_pages == 0)
			pagestate_set_present(&dr->ps, 0, dr->npages);
		d->m->pages_total += dr->npages;
	}
	free(v);
	if (rep.n_matched == 0) {
		conn_send_error(d->demand, ERR_NO_MATCH, "no matching region");
		attach_fail(
			d, ERR_NO_MATCH,
			"no region of process %d matches the %zu region(s) "
			"of the source (first: 0x%llx-0x%llx %s); regions "
			"match by start, length and kind",
			(int)d->m->pid, t->n_regions,
			t->n_regions ? (unsigned long long)t->regions[0]->start
				     : 0,
			t->n_regions
				? (unsigned long long)(t->regions[0]->start +
						       t->regions[0]->length)
				: 0,
			t->n_regions
				? region_kind_name(
					  (enum region_kind)t->regions[0]->kind)
				: "");
		goto out;
	}
	/* With --map, two source regions could be put in one place. */
	for (size_t i = 0; i < d->nregs; i++)
		for (size_t k = i + 1; k < d->nregs; k++) {
			const struct region *a = &d->regs[i].r;
			const struct region *b = &d->regs[k].r;

			if (a->start >= b->start + b->length ||
			    b->start >= a->start + a->length)
				continue;
			conn_send_error(d->demand, ERR_NO_MATCH,
					"attach failed");
			attach_fail(
				d, ERR_INVALID,
				"source regions 0x%llx and 0x%llx would "
				"both go to 0x%llx-0x%llx of process %d "
				"(--map)",
				(unsigned long long)d->regs[i].src_start,
				(unsigned long long)d->regs[k].src_start,
				(unsigned long long)(a->start > b->start
							     ? a->start
							     : b->start),
				(unsigned long long)(a->start + a->length <
								     b->start +
									     b->length
							     ? a->start +
								       a->length
							     : b->start +
								       b->length),
				(int)d->m->pid);
			goto out;
		}
	/*
	 * Without a state file a restart would forget the target it holds
	 * (its threads would wait for good): find out before touching it.
	 */
	if (save(d) < 0) {
		int e = errno;

		conn_send_error(d->demand, ERR_NO_MATCH, "attach failed");
		attach_fail(d, ERR_INVALID,
			    "cannot save its state in %s: %s; process %d left "
			    "as it was",
			    conf.state_dir, strerror(e), (int)d->m->pid);
		goto out;
	}
	if (setup_target(d, err, sizeof(err), &code) < 0) {
		conn_send_error(d->demand, ERR_NO_MATCH, "attach failed");
		attach_fail(d, code, "%s", err);
		goto out;
	}
	/*
	 * Children it has now are not forks we follow. Marked after the
	 * registration: a child forked in between is then missed (served
	 * without its pid, as one never found), never taken for another.
	 */
	claim_child(d->m->pid, d, 1);
	d->uffd_ev =
		event_new(base, d->uffd, EV_READ | EV_PERSIST, fault_cb, d);
	event_priority_set(d->uffd_ev, PRIO_FAULT);
	event_add(d->uffd_ev, NULL);
	d->exit_ev =
		event_new(base, d->t.pidfd, EV_READ | EV_PERSIST, exit_cb, d);
	event_priority_set(d->exit_ev, PRIO_CONTROL);
	event_add(d->exit_ev, NULL);
	conn_set_timeout(d->demand, LANE_TIMEOUT);
	conn_read_direct(d->demand);

	acc.n_regions = rep.n_matched;
	acc.regions = mp;
	conn_send(d->demand, FRAME_REGIONS, &acc.base);
	migration_set_state(d->m, MIG_RUNNING);
	request_private(d);
	log_info("attached to process %d for %s: %zu regions, %llu pages from "
		 "%s",
		 (int)d->m->pid, log_id(d->m->id), d->nregs,
		 (unsigned long long)d->m->pages_total, d->from);
	rep.id = d->m->id;
	rep.matched = mp;
	rep.unmatched = up;
	control_reply(d->serial, FRAME_CTL_ATTACH_REPLY, &rep.base);
	d->serial = 0;
	save(d);
	if (present_total(d) == d->m->pages_total) {
		dest_complete(d); /* only unwritten private file pages */
		goto out;
	}
	if (open_bulk(d) < 0)
		lanes_down(d, "bulk lane unreachable");
out:
	free(mbuf);
	free(ubuf);
	free(mp);
	free(up);
}

void
dest_attach(uint64_t serial, const struct authz_caller *who, struct procref *t,
	    const Uffdd__AttachRequest *req)
{
	struct migration *m;
	struct dest *d;
	char err[256];
	unsigned char fp[32];
	pid_t pid = t->pid;

	if (strlen(req->id) != MIG_ID_LEN ||
	    strspn(req->id, "0123456789abcdef") != MIG_ID_LEN) {
		control_reply_error(serial, ERR_UNKNOWN_ID,
				    "attach: malformed "
				    "migration ID (want the %d hex digits that "
				    "export printed)",
				    MIG_ID_LEN);
		procref_close(t);
		return;
	}
	/* A pin replaces the name check, so it must be one, and TLS on. */
	if (req->pin[0] && (strlen(req->pin) >= sizeof(d->pin) ||
			    tls_parse_pin(req->pin, fp) < 0)) {
		control_reply_error(serial, ERR_INVALID,
				    "attach: --pin: want the 64 hex digits of "
				    "the source certificate's SHA-256 "
				    "fingerprint");
		procref_close(t);
		return;
	}
	if (req->pin[0] && !tls_enabled()) {
		control_reply_error(serial, ERR_INVALID,
				    "attach: --pin needs TLS, and this daemon "
				    "runs plaintext (insecure)");
		procref_close(t);
		return;
	}
	TAILQ_FOREACH (m, &migrations, link) {
		if (m->role == ROLE_DEST && m->pid == pid &&
		    m->state != MIG_COMPLETE && m->state != MIG_FAILED) {
			control_reply_error(serial, ERR_BUSY,
					    "attach: process "
					    "%d is already a migration target",
					    (int)pid);
			procref_close(t);
			return;
		}
	}
	m = migration_new(ROLE_DEST, req->id);
	d = xcalloc(1, sizeof(*d));
	m->impl = d;
	m->impl_free = dest_free;
	m->pid = pid;
	m->start = t->start;
	d->m = m;
	procref_move(&d->t, t);
	d->owner = *who;
	d->serial = serial;
	d->uffd = d->target_fd = -1;
	snprintf(d->from, sizeof(d->from), "%s", req->from);
	snprintf(d->pin, sizeof(d->pin), "%s", req->pin);
	migration_set_peer(m, req->from);
	d->nranges = req->n_ranges;
	d->ranges = xcalloc(req->n_ranges, sizeof(*d->ranges));
	for (size_t i = 0; i < req->n_ranges; i++) {
		d->ranges[i].start = req->ranges[i]->start;
		d->ranges[i].end = req->ranges[i]->end;
	}
	d->nmaps = req->n_maps;
	d->maps = xcalloc(req->n_maps, sizeof(*d->maps));
	for (size_t i = 0; i < req->n_maps; i++) {
		d->maps[i].start = req->maps[i]->src_start;
		d->maps[i].end = req->maps[i]->dst_start;
	}
	d->waiters = xcalloc(INFLIGHT_MAX, sizeof(*d->waiters));
	d->retry_ev = evtimer_new(base, retry_cb, d);
	if (posix_memalign((void **)&d->buf, 4096, FRAME_DATA_MAX) != 0)
		fatal("page buffer");
	if (connect_demand(d, 0, err, sizeof(err)) < 0) {
		attach_fail(d, ERR_UNREACHABLE, "%s", err);
		return;
	}
}

void
dest_cancel(struct migration *m, const char *why)
{
	if (m->role == ROLE_DEST && m->impl != NULL)
		dest_fail(m->impl, "%s", why);
}

/* Tells the source which pages of a region we hold, in bounded frames. */
/*
 * Whether every forked child needs nothing more of a page: the source
 * sends no page again that HAVE names, and a child lacks what its parent
 * got after the fork.
 */
static int
kids_have(const struct dest *d, uint32_t idx, uint64_t page)
{
	for (size_t k = 0; k < d->nkids; k++) {
		struct dst_region *kr = region_by_index(d->kids[k], idx);

		if (kr && page < kr->npages &&
		    pagestate_get(&kr->ps, page) < PAGE_PRESENT)
			return 0;
	}
	return 1;
}

static void
send_have(struct dest *d, const struct dst_region *dr)
{
	const uint64_t chunk = 1ULL << 21; /* pages a frame: 256 KiB of bits */

	for (uint64_t first = 0; first < dr->npages; first += chunk) {
		Uffdd__PageBitmap b = UFFDD__PAGE_BITMAP__INIT;
		uint64_t n =
			dr->npages - first < chunk ? dr->npages - first : chunk;
		uint8_t *bits = xcalloc((n + 7) / 8, 1);

		for (uint64_t i = 0; i < n; i++)
			if (pagestate_get(&dr->ps, first + i) == PAGE_PRESENT &&
			    kids_have(d, dr->r.index, first + i))
				bits[i / 8] |= (uint8_t)(1u << (i % 8));
		b.region = dr->r.index;
		b.first_page = first;
		b.npages = n;
		b.bits.len = (n + 7) / 8;
		b.bits.data = bits;
		conn_send(d->demand, FRAME_HAVE, &b.base);
		free(bits);
	}
}

/*
 * Names the regions we take and the pages we hold in them: the source
 * forgets what it sent before and sends everything else (again).
 */
static void
send_holdings(struct dest *d)
{
	Uffdd__RegionTable acc = UFFDD__REGION_TABLE__INIT;
	Uffdd__Region *rb = xcalloc(d->nregs, sizeof(*rb));
	Uffdd__Region **rp = xcalloc(d->nregs, sizeof(*rp));

	for (size_t i = 0; i < d->nregs; i++) {
		const struct region *r = &d->regs[i].r;

		uffdd__region__init(&rb[i]);
		rb[i].index = r->index;
		rb[i].name = (char *)r->name;
		rb[i].start = d->regs[i].src_start;
		rb[i].length = r->length;
		rb[i].page_size = r->page_size;
		rb[i].kind = (Uffdd__RegionKind)r->kind;
		rp[i] = &rb[i];
	}
	acc.n_regions = d->nregs;
	acc.regions = rp;
	conn_send(d->demand, FRAME_REGIONS, &acc.base);
	free(rb);
	free(rp);
	for (size_t i = 0; i < d->nregs; i++)
		send_have(d, &d->regs[i]);
}

/* Asks again for every page a thread waits on; the old requests died. */
static void
rerequest(struct dest *d)
{
	struct conn *lane = d->root ? d->root->demand : d->demand;

	for (size_t k = 0; k < d->nkids; k++)
		rerequest(d->kids[k]);
	for (size_t i = 0; i < d->nregs; i++) {
		struct dst_region *dr = &d->regs[i];

		for (uint64_t p = 0; dr->ps.requested && p < dr->npages; p++) {
			Uffdd__PageRequest pr = UFFDD__PAGE_REQUEST__INIT;

			if (pagestate_get(&dr->ps, p) != PAGE_REQUESTED)
				continue;
			pr.region = dr->r.index;
			pr.page = p;
			pr.npages = 1;
			conn_send(lane, FRAME_PAGE_REQUEST, &pr.base);
		}
	}
}

/*
 * The source answered a resume: check that its regions are still the ones
 * we hold, tell it what we hold (it sends nothing else), ask again for what
 * threads wait on, and reopen the bulk lane.
 */
static void
resume(struct dest *d, const Uffdd__RegionTable *t)
{
	for (size_t i = 0; i < d->nregs; i++) {
		const struct region *r = &d->regs[i].r;
		const Uffdd__Region *s = NULL;

		for (size_t k = 0; k < t->n_regions; k++)
			if (t->regions[k]->index == r->index)
				s = t->regions[k];
		if (s == NULL || s->start != d->regs[i].src_start ||
		    s->length != r->length || s->page_size != r->page_size) {
			dest_fail(d,
				  "source %s: region 0x%llx changed across "
				  "the reconnect",
				  d->from, (unsigned long long)r->start);
			return;
		}
	}
	send_holdings(d);
	rerequest(d);
	d->resuming = 0;
	d->backoff_ms = 0;
	d->m->reconnects++;
	log_info("migration %s: resumed after %.1f s paused; %llu of %llu "
		 "pages present",
		 log_id(d->m->id), (double)(now_ns() - d->t_pause) / 1e9,
		 (unsigned long long)present_total(d),
		 (unsigned long long)d->m->pages_total);
	migration_set_state(d->m, MIG_RUNNING);
	save(d);
	if (present_total(d) == d->m->pages_total && d->nkids == 0) {
		dest_complete(d);
		return;
	}
	if (open_bulk(d) < 0)
		lanes_down(d, "bulk lane unreachable");
}

/*
 * The userfaultfd at fd tfd of a process (pidfd), copied here, or -1: a
 * descriptor of any other kind there is never used.
 */
static int
take_uffd(int pidfd, int tfd)
{
	char path[64], link[64];
	ssize_t ll;
	int fd;

	if (tfd < 0 || (fd = (int)syscall(SYS_pidfd_getfd, pidfd, tfd, 0)) < 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ll = readlink(path, link, sizeof(link) - 1);
	if (ll < 0 ||
	    (link[ll] = '\0', strcmp(link, "anon_inode:[userfaultfd]") != 0)) {
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * A restarted daemon's page map of a region: a page is there exactly when
 * the target's pagemap says so (attach discarded everything first).
 */
static int
held_from_pagemap(pid_t pid, struct dst_region *dr)
{
	uint64_t *held = xcalloc(bit_words(dr->npages), sizeof(uint64_t));

	/* Run by run of consecutive addresses: the target may have moved some. */
	for (uint64_t p = 0; p < dr->npages;) {
		uint64_t n = addr_run(dr, p, dr->npages - p);

		memset(held, 0, bit_words(n) * sizeof(uint64_t));
		if (pagemap_classify(pid, page_addr(dr, p), n, dr->r.page_size,
				     held, pagemap_method()) < 0) {
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

/* A saved run of discarded pages: the root's (pid 0) or a child's. */
struct gone {
	int pid;
	size_t reg;
	uint64_t p0, p1;
};

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

/* A forked child as a state file names it. */
struct saved_kid {
	pid_t pid;
	unsigned long long start;
	int tfd;
};

/* Pages [mv.p0, mv.p1) of region reg moved (save_regions()). */
struct saved_move {
	size_t reg;
	struct move mv;
};

/* What a destination's state file says (save_more()). */
struct saved {
	char id[MIG_ID_LEN + 1], from[256], pin[96], state[16];
	pid_t pid;
	unsigned long long start;
	struct authz_caller owner;
	int tfd; /* -1: the attach had not taken the uffd yet */
	int held, gone;
	int sole;	     /* the daemon held the only uffd (tracee.h) */
	struct region *regs; /* vma_start: the source's start */
	size_t nregs;
	struct range *ranges;
	size_t nranges;
	struct saved_move *moves;
	size_t nmoves;
	struct gone *runs;
	size_t nruns;
	struct saved_kid *kids;
	size_t nkids;
};

/* No user address reaches this, with 5-level page tables too. */
#define ADDR_END (1ULL << 57)

static void
saved_free(struct saved *sv)
{
	free(sv->regs);
	free(sv->ranges);
	free(sv->moves);
	free(sv->runs);
	free(sv->kids);
}

/* An optional 0/1 record: absent is 0. */
static int
saved_flag(struct state_tbl *t, const char *key, int *v)
{
	uint64_t x = 0;

	if (state_has(t, key) && state_u64(t, key, 0, 1, &x) < 0)
		return -1;
	*v = (int)x;
	return 0;
}

/* HOST:PORT as attach took it: printable, no blanks. */
static int
printable(const char *s)
{
	for (; *s; s++)
		if (*s <= ' ' || *s > '~')
			return 0;
	return 1;
}

/* owner: UID GID PRIVILEGED CAPPRM, the attach's caller (authz.h). */
static int
saved_owner(struct state_tbl *t, struct authz_caller *c)
{
	uint64_t v[4];

	if (state_u64s(t, "owner", v, 4) < 0)
		return -1;
	if (v[0] > UINT32_MAX || v[1] > UINT32_MAX || v[2] > 1)
		return state_bad(t, "owner",
				 "owner: want UID GID PRIVILEGED CAPPRM");
	*c = (struct authz_caller){.uid = (uid_t)v[0],
				   .gid = (gid_t)v[1],
				   .privileged = (int)v[2],
				   .capprm = v[3]};
	return 0;
}

static int
saved_head(struct state_tbl *t, struct saved *sv)
{
	unsigned char fp[32];
	char role[16];
	uint64_t v;

	if (state_str(t, "role", role, sizeof(role)) < 0)
		return -1;
	if (strcmp(role, "destination") != 0)
		return state_bad(t, "role", "role %s: not a destination's file",
				 role);
	if (state_str(t, "id", sv->id, sizeof(sv->id)) < 0 ||
	    state_u64(t, "pid", 2, INT32_MAX, &v) < 0)
		return -1;
	sv->pid = (pid_t)v;
	if (state_u64(t, "start", 1, UINT64_MAX, &v) < 0)
		return -1;
	sv->start = v;
	if (saved_owner(t, &sv->owner) < 0 ||
	    state_str(t, "state", sv->state, sizeof(sv->state)) < 0)
		return -1;
	if (strcmp(sv->state, "connecting") && strcmp(sv->state, "running") &&
	    strcmp(sv->state, "paused") && strcmp(sv->state, "complete") &&
	    strcmp(sv->state, "failed"))
		return state_bad(t, "state", "state %s: not a destination's",
				 sv->state);
	if (state_str(t, "from", sv->from, sizeof(sv->from)) < 0)
		return -1;
	if (!sv->from[0] || !printable(sv->from))
		return state_bad(t, "from", "from: want HOST:PORT");
	sv->tfd = -1;
	if (state_has(t, "target_fd")) {
		if (state_u64(t, "target_fd", 0, INT32_MAX, &v) < 0)
			return -1;
		sv->tfd = (int)v;
	}
	if (saved_flag(t, "held", &sv->held) < 0 ||
	    saved_flag(t, "gone", &sv->gone) < 0 ||
	    saved_flag(t, "sole", &sv->sole) < 0)
		return -1;
	if (state_has(t, "pin") &&
	    (state_str(t, "pin", sv->pin, sizeof(sv->pin)) < 0 ||
	     (tls_parse_pin(sv->pin, fp) < 0 &&
	      state_bad(t, "pin", "pin: not a SHA-256 fingerprint") < 0)))
		return -1;
	return 0;
}

/* region.I: INDEX START LENGTH PAGE_SIZE KIND SOURCE_START, and its name. */
static int
saved_region(struct state_tbl *t, size_t i, struct region *r)
{
	uint64_t ps = (uint64_t)sysconf(_SC_PAGESIZE),
		 huge = region_huge_page_size(), v[6];
	char key[STATE_KEY_MAX], nkey[STATE_KEY_MAX];

	if (state_u64s(t, state_key(key, "region", i), v, 6) < 0 ||
	    state_str(t, state_key(nkey, "region_name", i), r->name,
		      sizeof(r->name)) < 0)
		return -1;
	/* The page size first: the others are divided by it. */
	if (v[0] > UINT32_MAX || v[4] < REGION_ANON_PRIVATE ||
	    v[4] > REGION_FILE_PRIVATE ||
	    !(v[3] == ps || (v[4] == REGION_HUGETLB && huge && v[3] == huge)) ||
	    v[2] == 0 || v[2] % v[3] || v[1] % v[3] || v[5] % v[3] ||
	    v[1] >= ADDR_END || v[2] > ADDR_END - v[1] || v[5] >= ADDR_END ||
	    v[2] > ADDR_END - v[5])
		return state_bad(t, key,
				 "%s: not a region this host can have "
				 "(INDEX START LENGTH PAGE_SIZE KIND "
				 "SOURCE_START)",
				 key);
	r->index = (uint32_t)v[0];
	r->start = v[1];
	r->length = v[2];
	r->page_size = (uint32_t)v[3];
	r->kind = (enum region_kind)v[4];
	r->vma_start = v[5]; /* the source's start, for resume */
	return 0;
}

/* As attach took them: 1 to REGION_TABLE_MAX, distinct, no overlaps. */
static int
saved_regions(struct state_tbl *t, struct saved *sv)
{
	Uffdd__Region *pb, **pp;
	char err[256];
	int rc = 0;

	sv->nregs = state_count(t, "region");
	if (sv->nregs == 0 || sv->nregs > REGION_TABLE_MAX)
		return state_bad(t, NULL,
				 "%zu regions (region.0 on), want 1 to %d",
				 sv->nregs, REGION_TABLE_MAX);
	sv->regs = xcalloc(sv->nregs, sizeof(*sv->regs));
	for (size_t i = 0; i < sv->nregs; i++)
		if (saved_region(t, i, &sv->regs[i]) < 0)
			return -1;
	pb = xcalloc(sv->nregs, sizeof(*pb));
	pp = xcalloc(sv->nregs, sizeof(*pp));
	for (size_t i = 0; i < sv->nregs; i++) {
		uffdd__region__init(&pb[i]);
		pb[i].index = sv->regs[i].index;
		pb[i].start = sv->regs[i].start;
		pb[i].length = sv->regs[i].length;
		pb[i].page_size = sv->regs[i].page_size;
		pp[i] = &pb[i];
	}
	if (region_table_check(pp, sv->nregs, err, sizeof(err)) < 0)
		rc = state_bad(t, "region.0", "regions: %s", err);
	free(pb);
	free(pp);
	return rc;
}

/* range.I: START END, as attach --range gave them. */
static int
saved_ranges(struct state_tbl *t, struct saved *sv)
{
	uint64_t ps = (uint64_t)sysconf(_SC_PAGESIZE), v[2];
	char key[STATE_KEY_MAX];

	sv->nranges = state_count(t, "range");
	sv->ranges = xcalloc(sv->nranges + 1, sizeof(*sv->ranges));
	for (size_t i = 0; i < sv->nranges; i++) {
		if (state_u64s(t, state_key(key, "range", i), v, 2) < 0)
			return -1;
		if (v[0] >= v[1] || v[0] % ps || v[1] % ps)
			return state_bad(t, key,
					 "%s: not a page-aligned START END "
					 "with START < END",
					 key);
		sv->ranges[i] = (struct range){v[0], v[1]};
	}
	return 0;
}

/* Pages v[1] to v[2] (not included) of region v[0]. */
static int
saved_run(struct state_tbl *t, const char *key, const struct saved *sv,
	  const uint64_t *v)
{
	if (v[0] < sv->nregs && v[1] < v[2] &&
	    v[2] <= sv->regs[v[0]].length / sv->regs[v[0]].page_size)
		return 0;
	return state_bad(t, key, "%s: not pages of one of the regions", key);
}

/* move.I: REGION P0 P1 BASE (pages [P0, P1) now at BASE). */
static int
saved_moves(struct state_tbl *t, struct saved *sv)
{
	char key[STATE_KEY_MAX];
	uint64_t v[4], ps;

	sv->nmoves = state_count(t, "move");
	sv->moves = xcalloc(sv->nmoves + 1, sizeof(*sv->moves));
	for (size_t i = 0; i < sv->nmoves; i++) {
		if (state_u64s(t, state_key(key, "move", i), v, 4) < 0 ||
		    saved_run(t, key, sv, v) < 0)
			return -1;
		ps = sv->regs[v[0]].page_size;
		if (v[3] % ps || v[3] >= ADDR_END ||
		    v[2] - v[1] > (ADDR_END - v[3]) / ps)
			return state_bad(t, key,
					 "%s: moved to where no process maps",
					 key);
		sv->moves[i] = (struct saved_move){v[0], {v[1], v[2], v[3]}};
	}
	return 0;
}

static int
by_pid(const void *a, const void *b)
{
	pid_t x = ((const struct saved_kid *)a)->pid;
	pid_t y = ((const struct saved_kid *)b)->pid;

	return (x > y) - (x < y);
}

/* child.I: PID START FD, each pid once; kept sorted by pid. */
static int
saved_kids(struct state_tbl *t, struct saved *sv)
{
	char key[STATE_KEY_MAX];
	uint64_t v[3];

	sv->nkids = state_count(t, "child");
	sv->kids = xcalloc(sv->nkids + 1, sizeof(*sv->kids));
	for (size_t i = 0; i < sv->nkids; i++) {
		if (state_u64s(t, state_key(key, "child", i), v, 3) < 0)
			return -1;
		if (v[0] < 2 || v[0] > INT32_MAX || v[0] == (uint64_t)sv->pid ||
		    v[1] == 0 || v[2] > INT32_MAX)
			return state_bad(t, key,
					 "%s: not the PID START FD of a "
					 "forked process",
					 key);
		sv->kids[i] = (struct saved_kid){(pid_t)v[0], v[1], (int)v[2]};
	}
	qsort(sv->kids, sv->nkids, sizeof(*sv->kids), by_pid);
	for (size_t i = 1; i < sv->nkids; i++)
		if (sv->kids[i].pid == sv->kids[i - 1].pid)
			return state_bad(t, "child.0", "child: pid %d twice",
					 (int)sv->kids[i].pid);
	return 0;
}

/* discarded.I: REGION P0 P1; child_discarded.I: PID REGION P0 P1. */
static int
saved_runs(struct state_tbl *t, struct saved *sv)
{
	size_t nr = state_count(t, "discarded"),
	       nk = state_count(t, "child_discarded");
	char key[STATE_KEY_MAX];
	uint64_t v[4];

	sv->runs = xcalloc(nr + nk + 1, sizeof(*sv->runs));
	for (size_t i = 0; i < nr; i++) {
		if (state_u64s(t, state_key(key, "discarded", i), v, 3) < 0 ||
		    saved_run(t, key, sv, v) < 0)
			return -1;
		sv->runs[sv->nruns++] = (struct gone){0, v[0], v[1], v[2]};
	}
	for (size_t i = 0; i < nk; i++) {
		struct saved_kid k = {.pid = 0};

		if (state_u64s(t, state_key(key, "child_discarded", i), v, 4) <
			    0 ||
		    saved_run(t, key, sv, v + 1) < 0)
			return -1;
		k.pid = v[0] <= INT32_MAX ? (pid_t)v[0] : 0;
		if (bsearch(&k, sv->kids, sv->nkids, sizeof(k), by_pid) == NULL)
			return state_bad(t, key, "%s: pid %llu is no child.N's",
					 key, (unsigned long long)v[0]);
		sv->runs[sv->nruns++] =
			(struct gone){(int)v[0], v[1], v[2], v[3]};
	}
	return 0;
}

/* Reads and checks every record of t; touches nothing. */
static int
saved_read(struct state_tbl *t, struct saved *sv)
{
	memset(sv, 0, sizeof(*sv));
	if (saved_head(t, sv) < 0 || saved_regions(t, sv) < 0 ||
	    saved_ranges(t, sv) < 0 || saved_moves(t, sv) < 0 ||
	    saved_kids(t, sv) < 0 || saved_runs(t, sv) < 0)
		return -1;
	return state_all_read(t);
}

int
dest_restore_check(struct state_tbl *t)
{
	struct saved sv;
	int rc = saved_read(t, &sv);

	saved_free(&sv);
	return rc;
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
	struct migration *m = migration_new(ROLE_DEST, sv->id);
	struct dest *d = xcalloc(1, sizeof(*d));

	m->impl = d;
	m->impl_free = dest_free;
	m->pid = sv->pid;
	m->start = sv->start;
	d->m = m;
	d->uffd = -1;
	d->t = (struct procref)PROCREF_NONE;
	d->owner = sv->owner;
	d->target_fd = sv->tfd;
	d->start = sv->start;
	snprintf(d->from, sizeof(d->from), "%s", sv->from);
	snprintf(d->pin, sizeof(d->pin), "%s", sv->pin);
	snprintf(m->peer, sizeof(m->peer), "%.*s", (int)sizeof(m->peer) - 1,
		 sv->from);
	d->ranges = sv->ranges;
	d->nranges = sv->nranges;
	sv->ranges = NULL;
	d->waiters = xcalloc(INFLIGHT_MAX, sizeof(*d->waiters));
	d->retry_ev = evtimer_new(base, retry_cb, d);
	if (posix_memalign((void **)&d->buf, 4096, FRAME_DATA_MAX) != 0)
		fatal("page buffer");
	d->have_poison = (kfeat.uffd_features & UFFD_FEATURE_POISON) != 0 &&
			 poison_usable();
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
	char err[128];

	d->gone = sv->gone;
	if (!d->gone && procref_open(&d->t, pid, err, sizeof(err)) == 0)
		now = d->t.start;
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
	if (now != 0)
		d->uffd = take_uffd(d->t.pidfd, sv->tfd);
	if (!d->gone && d->uffd < 0 && sv->nkids > 0 &&
	    (now == 0 || proc_gone(pid))) {
		/* It exited while no daemon ran: as root_gone(). */
		log_info("%s: process %d exited; taking up the processes it "
			 "forked",
			 file, (int)pid);
		procref_close(&d->t);
		d->gone = 1;
	}
	if (d->gone) {
		gone_reason(d);
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

/* The regions' page states: the target's pagemap, the saved discards. */
static int
restore_regions(struct dest *d, struct saved *sv, const char *file)
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
				add_move(dr, sv->moves[k].mv.p0,
					 sv->moves[k].mv.p1,
					 sv->moves[k].mv.base);
		d->m->pages_total += dr->npages;
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
		mark_gone(dr, i, sv->runs, sv->nruns, 0);
	}
	d->m->pages_present = present_total(d);
	return 0;
}

/* Faults and the exit of a live target again; the threads waiting woken. */
static void
restore_watch(struct dest *d)
{
	if (d->gone)
		return;
	d->uffd_ev =
		event_new(base, d->uffd, EV_READ | EV_PERSIST, fault_cb, d);
	event_priority_set(d->uffd_ev, PRIO_FAULT);
	event_add(d->uffd_ev, NULL);
	d->exit_ev =
		event_new(base, d->t.pidfd, EV_READ | EV_PERSIST, exit_cb, d);
	event_priority_set(d->exit_ev, PRIO_CONTROL);
	event_add(d->exit_ev, NULL);
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
	struct procref t;
	unsigned long long now = 0;
	char err[128];
	struct dest *k;
	int ufd = -1;

	if (procref_open(&t, sk->pid, err, sizeof(err)) == 0)
		now = t.start;
	if (now != 0 && now != sk->start)
		log_warnx("%s: pid %d now names another process (started at "
			  "tick %llu, the forked one at %llu); not restored, "
			  "not touched",
			  file, (int)sk->pid, now, sk->start);
	else if (now != 0 && authz_allows(&root->owner, &t))
		ufd = take_uffd(t.pidfd, sk->tfd);
	if (ufd < 0) {
		procref_close(&t);
		if (now == 0 || now == sk->start)
			log_warnx("%s: forked process %d is gone, not the "
				  "attach caller's, or holds no uffd at fd %d; "
				  "not restored",
				  file, (int)sk->pid, sk->tfd);
		return;
	}
	k = child_new(root, root, sk->pid, ufd);
	procref_move(&k->t, &t);
	k->target_fd = sk->tfd;
	k->start = sk->start;
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
		if (!region_kind_shmem(kr->r.kind) &&
		    kr->r.kind != REGION_FILE_PRIVATE)
			mark_gone(kr, i, gone, ngone, sk->pid);
		uffd_wake(ufd, kr->r.start, kr->r.length);
	}
	log_info("restored forked process %d of migration %s: %llu of %llu "
		 "pages present",
		 (int)sk->pid, log_id(root->m->id),
		 (unsigned long long)present_total(k),
		 (unsigned long long)k->m->pages_total);
	child_start(root, k);
}

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
			 (unsigned long long)d->m->pages_present,
			 (unsigned long long)d->m->pages_total, d->from);
}

/*
 * After a daemon restart: takes the target's userfaultfd again (the target
 * kept its copy: DESIGN section 5), rebuilds the page states from the
 * target's pagemap (a page is there exactly when it was installed, because
 * attach discarded everything and registered before any thread ran), wakes
 * threads whose faults the dead daemon had read, and resumes.
 */
int
dest_restore(struct state_tbl *t)
{
	const char *file = state_name(t);
	struct saved sv;
	struct dest *d;
	int rc = -1;

	if (saved_read(t, &sv) < 0 || !saved_usable(file, &sv))
		goto out;
	d = restore_new(&sv);
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
	d->t_pause = now_ns();
	restored_log(d);
	for (size_t i = 0; i < sv.nkids; i++)
		restore_child(d, file, &sv.kids[i], sv.runs, sv.nruns);
	if (d->gone && d->nkids == 0) {
		/* Completing would kill the source, which holds it all. */
		log_warnx("%s: no process that process %d forked was "
			  "restored; the source keeps its process",
			  file, (int)d->m->pid);
		goto fail;
	}
	/* As at attach: the children there are now are not forks to come. */
	if (!d->gone)
		claim_child(d->m->pid, d, 1);
	for (size_t i = 0; i < d->nkids; i++)
		claim_child(d->kids[i]->m->pid, d, 1);
	save(d);
	schedule_retry(d);
	rc = 0;
	goto out;
fail:
	migration_free(d->m);
out:
	saved_free(&sv);
	return rc;
}

static void
attach_request(uint64_t serial, const struct authz_caller *who,
	       struct procref *t, const ProtobufCMessage *req)
{
	dest_attach(serial, who, t, (const Uffdd__AttachRequest *)req);
}

static int
attach_pid(const ProtobufCMessage *req)
{
	return ((const Uffdd__AttachRequest *)req)->pid;
}

static const struct role_ops dest_ops = {
	.role = ROLE_DEST,
	.name = "destination",
	.request_type = FRAME_CTL_ATTACH,
	.verb = "attach",
	.request_pid = attach_pid,
	.request = attach_request,
	.restore = dest_restore,
	.restore_check = dest_restore_check,
};

void
dest_register(void)
{
	role_register(&dest_ops);
}

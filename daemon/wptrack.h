/*
 * Proof that a frozen source stays frozen, and the dirty pages of a
 * pre-copy's rounds (wptrack_collect()): its exported ranges are
 * write-protected with a userfaultfd in async mode (UFFD_FEATURE_WP_ASYNC,
 * 6.7+), which needs no fault handler: a write just clears the page's
 * protection, and PAGEMAP_SCAN finds such pages later. A page written after
 * the export is one the destination may hold an older copy of.
 *
 * Where the kernel has only synchronous write-protection (6.1 to 6.6), a
 * pre-copy of private anonymous memory is tracked with it instead
 * (WPTRACK_SYNC): a write to a protected page stops the writer on a fault
 * that the daemon answers (wptrack_serve(), from its event loop) by
 * un-protecting the page's block; pagemap's uffd-wp bit then shows which
 * pages lost their protection since the last round.
 */
#ifndef UFFDD_WPTRACK_H
#define UFFDD_WPTRACK_H

#include <stddef.h>
#include <stdint.h>

#include "proto/range.h"

struct procref;

enum wptrack_mode {
	WPTRACK_OFF,   /* this kernel cannot track a running process */
	WPTRACK_ASYNC, /* WP_ASYNC and PAGEMAP_SCAN (6.7+) */
	WPTRACK_SYNC,  /* synchronous uffd-wp and pagemap (6.1+): anon only */
};

struct wptrack {
	int uffd;	  /* ours; the process holds none. -1: not tracking */
	int pagemap;	  /* /proc/PID/pagemap, bound to the tracked mm */
	int sync;	  /* WPTRACK_SYNC: its faults come to uffd */
	uint64_t faults;  /* sync: write faults answered */
	struct range *rs; /* the ranges protected */
	size_t n;
};

#define WPTRACK_NONE                      \
	{                                 \
		.uffd = -1, .pagemap = -1 \
	}

/*
 * Which tracker a pre-copy uses on this kernel: the one place that decides
 * (from the probe, and the test knobs UFFDD_TEST_NO_WP_TRACKING=1, none,
 * and UFFDD_TEST_SYNC_WP=1, the synchronous one where both exist).
 */
enum wptrack_mode wptrack_mode(void);
/* Whether a frozen process can be watched so: the async tracker only. */
int wptrack_usable(void);
/*
 * Has the stopped process t make a userfaultfd for write tracking (sync:
 * a full one, else user-mode-only), by injection, and returns our copy;
 * -1 with why filled. The privileged part's work: the engine asks it
 * (PRIVOP_WP_UFFD) for a process it holds by grant.
 */
int wptrack_take_uffd(const struct procref *t, int sync, char *why, size_t len);
/*
 * Write-protects ranges [rs, rs + n) of the stopped process t: injects a
 * user-mode-only userfaultfd() into it (which any process may make, so
 * nothing is given to it), takes the descriptor and closes the process's
 * copy. Returns 0, or -1 with why filled (then nothing is tracked and the
 * process is as it was).
 */
int wptrack_start(struct wptrack *, const struct procref *t,
		  const struct range *rs, size_t n, enum wptrack_mode mode,
		  char *why, size_t len);
/*
 * 1 if a tracked page was written since wptrack_start() (*addr: one of
 * them), 0 if none was, -1 if it cannot be told.
 */
int wptrack_written(const struct wptrack *, uint64_t *addr);
/*
 * Pre-copy: calls fn(arg, start, end) for each run [start, end) of tracked
 * pages written since wptrack_start() or the last call, and protects them
 * again in the same PAGEMAP_SCAN (PM_SCAN_WP_MATCHING), so that a write
 * after the scan shows in the next one. Returns the bytes found, or -1
 * with errno set.
 */
int64_t wptrack_collect(const struct wptrack *,
			void (*fn)(void *arg, uint64_t start, uint64_t end),
			void *arg);
/*
 * Sync: answers the write faults waiting on w->uffd (non-blocking): each
 * un-protects the aligned block of WPTRACK_SYNC_BLOCK bytes around the
 * page written (within its range), which wakes the writer. Returns the
 * faults answered, or -1 with errno set. 0 for an async tracker.
 */
int64_t wptrack_serve(struct wptrack *);
#define WPTRACK_SYNC_BLOCK (64u << 10)
/*
 * The process is frozen and its last dirty set collected: a sync tracker
 * un-protects everything and ends (nothing would answer the faults of a
 * process let go later); an async one watches on.
 */
void wptrack_frozen(struct wptrack *);
/*
 * Ends tracking: closing our descriptor unregisters the ranges (a sync
 * tracker un-protects them first).
 */
void wptrack_stop(struct wptrack *);

#endif

/*
 * Proof that a frozen source stays frozen, and the dirty pages of a
 * pre-copy's rounds (wptrack_collect()): its exported ranges are
 * write-protected with a userfaultfd in async mode (UFFD_FEATURE_WP_ASYNC,
 * 6.7+), which needs no fault handler: a write just clears the page's
 * protection, and PAGEMAP_SCAN finds such pages later. A page written after
 * the export is one the destination may hold an older copy of.
 */
#ifndef UFFDD_WPTRACK_H
#define UFFDD_WPTRACK_H

#include <stddef.h>
#include <stdint.h>

#include "proto/range.h"

struct procref;

struct wptrack {
	int uffd;	  /* ours; the process holds none. -1: not tracking */
	int pagemap;	  /* /proc/PID/pagemap, bound to the tracked mm */
	struct range *rs; /* the ranges protected */
	size_t n;
};

#define WPTRACK_NONE                      \
	{                                 \
		.uffd = -1, .pagemap = -1 \
	}

/* Whether this kernel can track writes so (and tests have not said no). */
int wptrack_usable(void);
/*
 * Write-protects ranges [rs, rs + n) of the stopped process t: injects a
 * user-mode-only userfaultfd() into it (which any process may make, so
 * nothing is given to it), takes the descriptor and closes the process's
 * copy. Returns 0, or -1 with why filled (then nothing is tracked and the
 * process is as it was).
 */
int wptrack_start(struct wptrack *, const struct procref *t,
		  const struct range *rs, size_t n, char *why, size_t len);
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
/* Ends tracking: closing our descriptor unregisters the ranges. */
void wptrack_stop(struct wptrack *);

#endif

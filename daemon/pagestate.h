/*
 * The destination's page-state map of one region: missing, requested or
 * present, two bits a page, with counters kept in step. Pure logic, no I/O,
 * so it is unit-tested on its own.
 */
#ifndef UFFDD_PAGESTATE_H
#define UFFDD_PAGESTATE_H

#include <stdint.h>

enum page_state {
	PAGE_MISSING = 0,
	PAGE_REQUESTED = 1,
	PAGE_PRESENT = 2,
	/*
	 * The target threw the page away itself (madvise, munmap) before it
	 * arrived: the source's copy must never be installed there; a later
	 * touch gets a zero page, as it would have without migration.
	 */
	PAGE_DISCARDED = 3,
};

struct pagestate {
	uint64_t npages;
	uint64_t present;
	uint64_t requested;
	uint64_t discarded;
	uint8_t *bits; /* 2 bits a page */
};

int pagestate_init(struct pagestate *, uint64_t npages);
void pagestate_free(struct pagestate *);
enum page_state pagestate_get(const struct pagestate *, uint64_t page);
/* Sets one page's state; returns the previous one. */
enum page_state pagestate_set(struct pagestate *, uint64_t page,
			      enum page_state);
/* Pages that need nothing more: present or discarded. */
static inline uint64_t
pagestate_done(const struct pagestate *ps)
{
	return ps->present + ps->discarded;
}

/*
 * Length of the run of pages from `page` (at most max) still to install
 * (missing or requested); 0 when `page` itself is present or discarded.
 */
uint64_t pagestate_missing_run(const struct pagestate *, uint64_t page,
			       uint64_t max);
/* Length of the run of present or discarded pages from `page`, at most max. */
uint64_t pagestate_present_run(const struct pagestate *, uint64_t page,
			       uint64_t max);
/* Marks [page, page+n) present; returns how many were not present before. */
uint64_t pagestate_set_present(struct pagestate *, uint64_t page, uint64_t n);

#endif

/* Unit tests for the destination's page-state map. */
#include "config.h"

#include <stdlib.h>

#include "daemon/pagestate.h"
#include "tests/unit/unit.h"

int
main(void)
{
	struct pagestate ps;

	CHECK(pagestate_init(&ps, 1000) == 0);
	CHECK(ps.present == 0 && ps.requested == 0);
	for (uint64_t i = 0; i < 1000; i++)
		CHECK(pagestate_get(&ps, i) == PAGE_MISSING);

	/* Neighbours in one byte do not disturb each other. */
	CHECK(pagestate_set(&ps, 5, PAGE_REQUESTED) == PAGE_MISSING);
	CHECK(pagestate_get(&ps, 4) == PAGE_MISSING);
	CHECK(pagestate_get(&ps, 5) == PAGE_REQUESTED);
	CHECK(pagestate_get(&ps, 6) == PAGE_MISSING);
	CHECK(ps.requested == 1);

	/* Requested to present moves the counters. */
	CHECK(pagestate_set(&ps, 5, PAGE_PRESENT) == PAGE_REQUESTED);
	CHECK(ps.requested == 0 && ps.present == 1);
	/* Setting the same state twice counts once. */
	CHECK(pagestate_set(&ps, 5, PAGE_PRESENT) == PAGE_PRESENT);
	CHECK(ps.present == 1);

	/* Runs. */
	CHECK(pagestate_missing_run(&ps, 0, 100) == 5);
	CHECK(pagestate_missing_run(&ps, 5, 100) == 0);
	CHECK(pagestate_present_run(&ps, 5, 100) == 1);
	CHECK(pagestate_missing_run(&ps, 990, 100) == 10); /* clipped at end */
	CHECK(pagestate_set_present(&ps, 3, 4) == 3); /* 3,4,6 new; 5 not */
	CHECK(ps.present == 4);
	CHECK(pagestate_present_run(&ps, 3, 100) == 4);
	/* Requested pages are not present: a run of missing includes them. */
	pagestate_set(&ps, 8, PAGE_REQUESTED);
	CHECK(pagestate_missing_run(&ps, 7, 3) == 3);
	CHECK(pagestate_set_present(&ps, 995, 10) == 5); /* clipped at end */
	CHECK(ps.present == 9);

	/* Every page present, last page of an odd-sized map included. */
	CHECK(pagestate_set_present(&ps, 0, 1000) == 991);
	CHECK(ps.present == 1000 && ps.requested == 0);
	CHECK(pagestate_get(&ps, 999) == PAGE_PRESENT);
	pagestate_free(&ps);

	/* Discarded pages are done, never installed, and counted apart. */
	CHECK(pagestate_init(&ps, 100) == 0);
	pagestate_set(&ps, 10, PAGE_REQUESTED);
	CHECK(pagestate_set(&ps, 10, PAGE_DISCARDED) == PAGE_REQUESTED);
	CHECK(ps.requested == 0 && ps.discarded == 1);
	pagestate_set(&ps, 11, PAGE_DISCARDED);
	CHECK(pagestate_missing_run(&ps, 8, 10) == 2);	/* 8, 9 */
	CHECK(pagestate_present_run(&ps, 10, 10) == 2); /* 10, 11 */
	CHECK(pagestate_set_present(&ps, 0, 100) == 100);
	CHECK(pagestate_done(&ps) == 100 && ps.present == 100);
	CHECK(ps.discarded == 0); /* installing over a discard replaces it */
	pagestate_free(&ps);

	CHECK(pagestate_init(&ps, 1) == 0);
	CHECK(pagestate_set_present(&ps, 0, 1) == 1);
	CHECK(ps.present == 1);
	pagestate_free(&ps);
	return UNIT_DONE();
}

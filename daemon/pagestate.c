/* Two-bit page states with running counts (see pagestate.h). */
#include "config.h"

#include <stdlib.h>

#include "daemon/pagestate.h"

int
pagestate_init(struct pagestate *ps, uint64_t npages)
{
	ps->npages = npages;
	ps->present = ps->requested = ps->discarded = 0;
	ps->bits = calloc((npages + 3) / 4 + 1, 1);
	return ps->bits == NULL ? -1 : 0;
}

void
pagestate_free(struct pagestate *ps)
{
	free(ps->bits);
	ps->bits = NULL;
	ps->npages = 0;
}

enum page_state
pagestate_get(const struct pagestate *ps, uint64_t page)
{
	return (enum page_state)((ps->bits[page >> 2] >> ((page & 3) * 2)) & 3);
}

enum page_state
pagestate_set(struct pagestate *ps, uint64_t page, enum page_state st)
{
	unsigned shift = (unsigned)(page & 3) * 2;
	uint8_t *b = &ps->bits[page >> 2];
	enum page_state old = (enum page_state)((*b >> shift) & 3);

	if (old == st)
		return old;
	*b = (uint8_t)((*b & ~(3u << shift)) | ((unsigned)st << shift));
	if (old == PAGE_PRESENT)
		ps->present--;
	if (old == PAGE_REQUESTED)
		ps->requested--;
	if (old == PAGE_DISCARDED)
		ps->discarded--;
	if (st == PAGE_PRESENT)
		ps->present++;
	if (st == PAGE_REQUESTED)
		ps->requested++;
	if (st == PAGE_DISCARDED)
		ps->discarded++;
	return old;
}

uint64_t
pagestate_missing_run(const struct pagestate *ps, uint64_t page, uint64_t max)
{
	uint64_t n = 0;

	while (n < max && page + n < ps->npages &&
	       pagestate_get(ps, page + n) < PAGE_PRESENT)
		n++;
	return n;
}

uint64_t
pagestate_present_run(const struct pagestate *ps, uint64_t page, uint64_t max)
{
	uint64_t n = 0;

	while (n < max && page + n < ps->npages &&
	       pagestate_get(ps, page + n) >= PAGE_PRESENT)
		n++;
	return n;
}

uint64_t
pagestate_set_present(struct pagestate *ps, uint64_t page, uint64_t n)
{
	uint64_t added = 0;

	for (uint64_t i = 0; i < n && page + i < ps->npages; i++)
		if (pagestate_set(ps, page + i, PAGE_PRESENT) != PAGE_PRESENT)
			added++;
	return added;
}

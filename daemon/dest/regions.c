/*
 * The migrated regions as the target has them now: where each page is
 * (the target may have moved pages since: mremap), which region the
 * source's index names, and how many pages are in.
 */
#include "config.h"

#include <stdlib.h>

#include "daemon/dest/internal.h"
#include "daemon/log.h"

/* Pages present in d, over all its regions: what status shows. */
uint64_t
dest_present_total(const struct dest *d)
{
	uint64_t n = 0;

	for (size_t i = 0; i < d->nregs; i++)
		n += pagestate_done(&d->regs[i].ps);
	return n;
}

/* Where page p of a region is in the target now (it may have moved). */
uint64_t
dest_page_addr(const struct dst_region *dr, uint64_t p)
{
	for (size_t i = dr->nmoves; i-- > 0;)
		if (p >= dr->moves[i].p0 && p < dr->moves[i].p1)
			return dr->moves[i].base +
			       (p - dr->moves[i].p0) * dr->r.page_size;
	return dr->r.start + p * dr->r.page_size;
}

/* How many pages from p (at most max) sit at consecutive addresses. */
uint64_t
dest_addr_run(const struct dst_region *dr, uint64_t p, uint64_t max)
{
	uint64_t a = dest_page_addr(dr, p), n = 1;

	while (n < max && dest_page_addr(dr, p + n) == a + n * dr->r.page_size)
		n++;
	return n;
}

/* The region the source numbers idx, or NULL: the source names it so. */
struct dst_region *
dest_region_by_index(struct dest *d, uint32_t idx)
{
	for (size_t i = 0; i < d->nregs; i++)
		if (d->regs[i].r.index == idx)
			return &d->regs[i];
	return NULL;
}

/* Pages [p0, p1) of a region are at `at` on now. */
void
dest_add_move(struct dst_region *dr, uint64_t p0, uint64_t p1, uint64_t at)
{
	dr->moves = realloc(dr->moves, (dr->nmoves + 1) * sizeof(*dr->moves));
	if (dr->moves == NULL)
		fatal("page moves");
	dr->moves[dr->nmoves++] = (struct move){p0, p1, at};
}

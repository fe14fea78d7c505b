/*
 * A pre-copy of shared memory (memfd, tmpfs, shared anonymous, shared
 * hugetlb) learns of writes from the tracked mappings' page-table entries
 * alone. A store through another mapping of the same file never passes
 * through them: a page sent in a round and changed so since would never
 * go again, and the destination would complete on stale bytes. So at each
 * round's end, and in each freeze check before the COMMIT, a mapping of
 * an exported part of the file that no tracker covers fails the
 * migration. Writes through the file itself (write(), by anyone holding a
 * descriptor) are not seen (docs/design.md, "Writes that bypass the
 * tracker").
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/region.h"
#include "daemon/source/internal.h"

/* Whether [a, b) of process pid's space is tracked: at[] or the regions. */
static int
tracked(const struct source *s, const uint64_t *at, uint64_t a, uint64_t b)
{
	for (size_t j = 0; j < s->nregs; j++) {
		uint64_t start = at ? at[j] : s->regs[j].r.start;

		if (start <= a && b <= start + s->regs[j].r.length)
			return 1;
	}
	return 0;
}

/*
 * Whether process pid maps a part of a file that an exported region
 * takes (compared by device and inode, as its maps show them) where no
 * tracker covers it: at[i] is where pid maps region i's part (tracked;
 * NULL: at the region's own address). 1 with why saying where, 0, or -1
 * with errno set (its maps unreadable).
 */
static int
untracked_mapping(const struct source *s, pid_t pid, const uint64_t *at,
		  char *why, size_t len)
{
	struct vma *v = NULL;
	size_t nv = 0;
	int found = 0;

	if (region_read_maps_plain(pid, &v, &nv) < 0)
		return -1;
	for (size_t k = 0; k < nv && !found; k++) {
		for (size_t i = 0; i < s->nregs && !found; i++) {
			const struct region *r = &s->regs[i].r;
			uint64_t vend = v[k].offset + (v[k].end - v[k].start);
			uint64_t lo = v[k].offset > r->file_off ? v[k].offset
								: r->file_off;
			uint64_t hi = vend < r->file_off + r->length
					      ? vend
					      : r->file_off + r->length;
			uint64_t a = v[k].start + (lo - v[k].offset);

			if (v[k].perms[3] != 's' || r->ino == 0 ||
			    v[k].dev != r->dev || v[k].ino != r->ino ||
			    lo >= hi || tracked(s, at, a, a + (hi - lo)))
				continue;
			found = 1;
			snprintf(why, len,
				 "process %d maps the file behind 0x%llx "
				 "(%.100s) again at 0x%llx-0x%llx, where "
				 "no tracker sees its writes: export that "
				 "mapping too (--range), or unmap it",
				 (int)pid, (unsigned long long)r->start,
				 r->name, (unsigned long long)v[k].start,
				 (unsigned long long)v[k].end);
		}
	}
	free(v);
	return found;
}

int
source_bypass_mapped(const struct source *s, int own, int tracked, char *why,
		     size_t len)
{
	const struct precopy *pc = s->pc;
	int r = 0;

	if (pc == NULL || s->img)
		return 0;
	if (own)
		r = untracked_mapping(s, s->t.pid, NULL, why, len);
	if (r == 0 && tracked && pc->track.pid > 0)
		r = untracked_mapping(s, pc->track.pid, pc->track_at, why, len);
	return r;
}

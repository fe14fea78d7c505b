/*
 * The target's side of an attach: a target is set up only by its grant
 * (bygrant.c asks the privileged part to make its userfaultfd, empty its
 * regions, hold it and let it go; the engine injects into no process).
 * Here: the setup's steps in order, the regions' registration, and the
 * setup undone when a step fails.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/compat.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/migration.h"
#include "daemon/privop.h"
#include "daemon/probe.h"

/*
 * Test knob (tests/integration): behave as on a kernel without
 * UFFDIO_POISON (before 6.6), so that the fallback is tested on kernels
 * that have it. Never set in production.
 */
int
dest_poison_usable(void)
{
	const char *no = getenv("UFFDD_TEST_NO_POISON");

	return no == NULL || *no == '\0';
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
take_region(struct dest *d, size_t reg, char *err, size_t errlen)
{
	struct region *r = &d->regs[reg].r;
	int shm = region_kind_shmem(r->kind) ||
		  (r->kind == REGION_HUGETLB && d->regs[reg].shared);
	uint64_t ioctls;

	if (dest_grant_discard(d, r->start, r->length, shm, err, errlen) < 0)
		return -1;
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
	    !dest_poison_usable())
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

/* The setup undone: regions unregistered, the target let go as it was. */
static void
undo(struct dest *d, size_t nreg)
{
	while (nreg-- > 0)
		uffd_unregister(d->uffd, d->regs[nreg].r.start,
				d->regs[nreg].r.length);
	dest_grant_end(d, PRIVOP_DEST_UNDO, NULL, 0);
	d->target_fd = -1;
	d->sole = 0;
	close(d->uffd);
	d->uffd = -1;
}

/*
 * Makes the target create a userfaultfd, copies it out, discards what is
 * resident in the matched regions and registers them, all while every
 * thread of the target is stopped, so no thread can touch a page in
 * between: by its grant (bygrant.c), or not at all. Then the target is
 * held (hold.c: private file pages to write, or a pre-copy) or let go.
 */
int
dest_setup_target(struct dest *d, char *err, size_t errlen, uint32_t *code)
{
	size_t reg;

	if (!dest_by_grant(d)) {
		*code = ERR_PERMISSION;
		snprintf(err, errlen,
			 "process %d: no grant for it (the engine sets up no "
			 "process itself)",
			 (int)d->m->pid);
		return -1;
	}
	*code = ERR_KERNEL;
	err[0] = '\0';
	if (dest_grant_uffd(d, err, errlen, code) < 0)
		return -1;
	*code = ERR_KERNEL;
	for (reg = 0; reg < d->nregs; reg++)
		if (take_region(d, reg, err, errlen) < 0) {
			undo(d, reg);
			return -1;
		}
	if (dest_private_missing(d) > 0 || d->held.precopy) {
		if (dest_hold_target(d, err, errlen) == 0)
			return 0;
		undo(d, d->nregs);
		return -1;
	}
	dest_grant_end(d, PRIVOP_DEST_GO, NULL, 0);
	return 0;
}

/*
 * The target's side of an attach: a target is set up only by its grant
 * (bygrant.c asks the privileged part to make its userfaultfd, empty its
 * regions, hold it and let it go; the engine injects into no process).
 * Here: what the setup asks of the kernel, the regions' registration, and
 * the target's own copy of the uffd closed at the end.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/compat.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/migration.h"
#include "daemon/privop.h"
#include "daemon/probe.h"

/*
 * Closes the target's own copy of the uffd, by its grant. One without a
 * grant has none the engine gave it.
 */
void
dest_close_target_fd(struct dest *d)
{
	if (d->target_fd < 0)
		return;
	if (dest_by_grant(d))
		dest_grant_close(d);
	d->target_fd = -1;
}

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
 * What the migration uses on this kernel. Shared memory needs its feature
 * bit. The event features make the kernel tell us when the target itself
 * discards or moves migrating memory, so that no stale source page lands
 * there later. THREAD_ID names the faulting thread, for blocktime.
 */
uint64_t
dest_uffd_features(void)
{
	return (kfeat.uffd_features &
		(UFFD_FEATURE_MISSING_SHMEM | UFFD_FEATURE_MISSING_HUGETLBFS |
		 UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_UNMAP |
		 UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_EVENT_FORK |
		 UFFD_FEATURE_THREAD_ID)) |
	       (kfeat.access_likely ? UFFD_FEATURE_ACCESS_HINTS : 0);
}

/*
 * Discards what is resident in region reg and registers it. For shared
 * memory MADV_DONTNEED would only drop the mapping: the page cache keeps
 * the data and no MISSING fault would ever fire. Punch a hole instead;
 * shared hugetlb has a page cache too (hugetlbfs punches holes). A private
 * file mapping is only discarded (back to the file's pages); the source's
 * copies are written while the target is held (struct dest).
 */
int
dest_take_region(struct dest *d, size_t reg, char *err, size_t errlen)
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

/*
 * Makes the target create a userfaultfd, copies it out, discards what is
 * resident in the matched regions and registers them, all while every
 * thread of the target is stopped, so no thread can touch a page in
 * between: by its grant (bygrant.c), or not at all.
 */
int
dest_setup_target(struct dest *d, char *err, size_t errlen, uint32_t *code)
{
	if (dest_by_grant(d))
		return dest_grant_setup(d, err, errlen, code);
	*code = ERR_PERMISSION;
	snprintf(err, errlen,
		 "process %d: no grant for it (the engine sets up no "
		 "process itself)",
		 (int)d->m->pid);
	return -1;
}

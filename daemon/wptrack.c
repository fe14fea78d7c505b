/* Write tracking of a frozen source process (see wptrack.h). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>

#include "daemon/compat.h"
#include "daemon/inject.h"
#include "daemon/log.h"
#include "daemon/probe.h"
#include "daemon/procref.h"
#include "daemon/uffd.h"
#include "daemon/wptrack.h"

/*
 * Async write-protection: no handler; unpopulated pages protected too (a
 * page first written after the export must show); shared memory and
 * hugetlb need their own bit.
 */
#define WPTRACK_FEATURES                                       \
	(UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED | \
	 UFFD_FEATURE_WP_HUGETLBFS_SHMEM)

int
wptrack_usable(void)
{
	const char *no = getenv("UFFDD_TEST_NO_WP_TRACKING");

	if (no != NULL && strcmp(no, "1") == 0)
		return 0;
	return kfeat.pagemap_scan &&
	       (kfeat.uffd_features & WPTRACK_FEATURES) == WPTRACK_FEATURES;
}

/*
 * Has the stopped process t make a userfaultfd and copies it out. The
 * user-mode-only kind: any process may make one (whatever
 * vm.unprivileged_userfaultfd says), and async write-protection needs no
 * more (a write from the kernel clears the protection all the same).
 */
static int
take_uffd(const struct procref *t, char *why, size_t len)
{
	struct inject inj;
	long fd;
	int ours = -1;

	if (inject_begin(&inj, t->pid, 1) < 0) {
		snprintf(why, len, "%s", inj.err);
		return -1;
	}
	if (!procref_same(t)) {
		inject_end(&inj);
		snprintf(why, len, "process %d changed", (int)t->pid);
		return -1;
	}
	fd = inject_syscall(&inj, SYS_userfaultfd,
			    O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY, 0, 0,
			    0, 0, 0);
	if (fd >= 0) {
		ours = (int)syscall(SYS_pidfd_getfd, t->pidfd, (int)fd, 0);
		inject_syscall(&inj, SYS_close, (unsigned long)fd, 0, 0, 0, 0,
			       0);
	}
	inject_end(&inj);
	if (fd < 0)
		snprintf(why, len, "userfaultfd() in process %d: %s",
			 (int)t->pid, strerror((int)-fd));
	else if (ours < 0)
		snprintf(why, len, "pidfd_getfd: %s", strerror(errno));
	return ours;
}

int
wptrack_start(struct wptrack *w, const struct procref *t,
	      const struct range *rs, size_t n, char *why, size_t len)
{
	char path[64];

	*w = (struct wptrack)WPTRACK_NONE;
	snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)t->pid);
	if ((w->pagemap = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		snprintf(why, len, "%s: %s", path, strerror(errno));
		return -1;
	}
	if ((w->uffd = take_uffd(t, why, len)) < 0)
		goto fail;
	if (uffd_api(w->uffd, WPTRACK_FEATURES, NULL) < 0) {
		snprintf(why, len, "UFFDIO_API: %s", strerror(errno));
		goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t l = rs[i].end - rs[i].start;

		if (uffd_register(w->uffd, rs[i].start, l,
				  UFFDIO_REGISTER_MODE_WP, NULL) < 0 ||
		    uffd_writeprotect(w->uffd, rs[i].start, l, 1) < 0) {
			/* EBUSY: the process has a userfaultfd there itself. */
			snprintf(why, len, "write-protecting 0x%llx-0x%llx: %s",
				 (unsigned long long)rs[i].start,
				 (unsigned long long)rs[i].end,
				 strerror(errno));
			goto fail;
		}
	}
	w->rs = xcalloc(n, sizeof(*w->rs));
	memcpy(w->rs, rs, n * sizeof(*rs));
	w->n = n;
	/* Read through the file opened before: the mm checked, no other. */
	if (!procref_same(t)) {
		snprintf(why, len, "process %d changed", (int)t->pid);
		goto fail;
	}
	return 0;
fail:
	wptrack_stop(w);
	return -1;
}

int
wptrack_written(const struct wptrack *w, uint64_t *addr)
{
	for (size_t i = 0; w->uffd >= 0 && i < w->n; i++) {
		struct page_region r;
		struct pm_scan_arg a = {
			.size = sizeof(a),
			.flags = PM_SCAN_CHECK_WPASYNC,
			.start = w->rs[i].start,
			.end = w->rs[i].end,
			.vec = (uint64_t)(uintptr_t)&r,
			.vec_len = 1,
			.max_pages = 1,
			.category_mask = PAGE_IS_WRITTEN,
			.return_mask = PAGE_IS_WRITTEN,
		};
		long got = ioctl(w->pagemap, PAGEMAP_SCAN, &a);

		if (got < 0)
			return -1;
		if (got > 0) {
			*addr = r.start;
			return 1;
		}
	}
	return w->uffd >= 0 ? 0 : -1;
}

/* Runs of written pages one PAGEMAP_SCAN call reports at most. */
#define COLLECT_VEC 256

int64_t
wptrack_collect(const struct wptrack *w,
		void (*fn)(void *arg, uint64_t start, uint64_t end), void *arg)
{
	struct page_region *v = xcalloc(COLLECT_VEC, sizeof(*v));
	int64_t bytes = 0;

	for (size_t i = 0; w->uffd >= 0 && i < w->n && bytes >= 0; i++) {
		uint64_t at = w->rs[i].start;

		while (at < w->rs[i].end) {
			struct pm_scan_arg a = {
				.size = sizeof(a),
				.flags = PM_SCAN_WP_MATCHING |
					 PM_SCAN_CHECK_WPASYNC,
				.start = at,
				.end = w->rs[i].end,
				.vec = (uint64_t)(uintptr_t)v,
				.vec_len = COLLECT_VEC,
				.category_mask = PAGE_IS_WRITTEN,
				.return_mask = PAGE_IS_WRITTEN,
			};
			long got = ioctl(w->pagemap, PAGEMAP_SCAN, &a);

			if (got < 0) {
				bytes = -1;
				break;
			}
			for (long k = 0; k < got; k++) {
				fn(arg, v[k].start, v[k].end);
				bytes += (int64_t)(v[k].end - v[k].start);
			}
			/* A full vector ends the walk early: go on from there. */
			if (a.walk_end <= at)
				break;
			at = a.walk_end;
		}
	}
	free(v);
	if (w->uffd < 0) {
		errno = EBADF;
		return -1;
	}
	return bytes;
}

void
wptrack_stop(struct wptrack *w)
{
	if (w->uffd >= 0)
		close(w->uffd);
	if (w->pagemap >= 0)
		close(w->pagemap);
	free(w->rs);
	*w = (struct wptrack)WPTRACK_NONE;
}

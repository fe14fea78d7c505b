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
#include "daemon/imsg.h"
#include "daemon/inject.h"
#include "daemon/log.h"
#include "daemon/privop.h"
#include "daemon/probe.h"
#include "daemon/procfile.h"
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

/* A test knob (docs/design.md): set to "1". */
static int
knob(const char *name)
{
	const char *v = getenv(name);

	return v != NULL && strcmp(v, "1") == 0;
}

enum wptrack_mode
wptrack_mode(void)
{
	if (knob("UFFDD_TEST_NO_WP_TRACKING"))
		return WPTRACK_OFF;
	if (kfeat.pagemap_scan &&
	    (kfeat.uffd_features & WPTRACK_FEATURES) == WPTRACK_FEATURES &&
	    !knob("UFFDD_TEST_SYNC_WP"))
		return WPTRACK_ASYNC;
	return kfeat.uffd_wp_sync ? WPTRACK_SYNC : WPTRACK_OFF;
}

int
wptrack_usable(void)
{
	return wptrack_mode() == WPTRACK_ASYNC;
}

/*
 * A full userfaultfd for a process that may not call userfaultfd() itself
 * (vm.unprivileged_userfaultfd=0): the device, handed in for one call.
 */
static long
uffd_via_device(struct inject *inj, char *why, size_t len)
{
	int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC), tdev;
	long rc;

	if (dev < 0)
		return -EPERM;
	tdev = inject_pass_fd(inj, dev);
	close(dev);
	if (tdev < 0) {
		snprintf(why, len, "/dev/userfaultfd for process %d: %s",
			 (int)inj->pid, inj->err);
		return -EPERM;
	}
	rc = inject_syscall(inj, SYS_ioctl, (unsigned long)tdev,
			    USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK, 0, 0,
			    0);
	inject_syscall(inj, SYS_close, (unsigned long)tdev, 0, 0, 0, 0, 0);
	return rc;
}

/*
 * Has the stopped process t make a userfaultfd and copies it out. Async:
 * the user-mode-only kind: any process may make one (whatever
 * vm.unprivileged_userfaultfd says), and async write-protection needs no
 * more (a write from the kernel clears the protection all the same). Sync:
 * a full one, since a user-mode-only one would fail the process's system
 * calls that write to a protected page (EFAULT) instead of waiting.
 */
int
wptrack_take_uffd(const struct procref *t, int sync, char *why, size_t len)
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
			    O_CLOEXEC | O_NONBLOCK |
				    (sync ? 0 : UFFD_USER_MODE_ONLY),
			    0, 0, 0, 0, 0);
	why[0] = '\0';
	/* The device is tried where it opens (the privileged part has no
	 * kernel probe of its own). */
	if (sync && fd == -EPERM)
		fd = uffd_via_device(&inj, why, len);
	if (fd >= 0) {
		ours = (int)syscall(SYS_pidfd_getfd, t->pidfd, (int)fd, 0);
		inject_syscall(&inj, SYS_close, (unsigned long)fd, 0, 0, 0, 0,
			       0);
	}
	inject_end(&inj);
	if (fd < 0 && why[0] != '\0')
		return -1;
	if (fd < 0)
		snprintf(why, len, "userfaultfd() in process %d: %s",
			 (int)t->pid, strerror((int)-fd));
	else if (ours < 0)
		snprintf(why, len, "pidfd_getfd: %s", strerror(errno));
	return ours;
}

/*
 * The same, asked of the privileged part for a process the engine holds
 * by grant: the injection and pidfd_getfd() need the right to ptrace it.
 */
static int
take_uffd(const struct procref *t, int sync, char *why, size_t len)
{
	struct privop_wp_uffd req = {.sync = sync != 0};
	struct imsg rep;
	int fd = -1, route = privop_route(t->grant);

	if (route < 0)
		snprintf(why, len,
			 "process %d: the engine holds no grant for it",
			 (int)t->pid);
	if (route <= 0)
		return route == 0 ? wptrack_take_uffd(t, sync, why, len) : -1;
	if (privop_call(PRIVOP_WP_UFFD, t->grant, &req, sizeof(req), NULL, 0,
			&rep, NULL) == 0)
		fd = rep.nfd > 0 ? imsg_take_fd(&rep, 0) : -1;
	if (fd < 0 && rep.h.len > 0 && rep.data[rep.h.len - 1] == '\0')
		snprintf(why, len, "%s", (const char *)rep.data);
	else if (fd < 0)
		snprintf(why, len, "a userfaultfd of process %d: %s",
			 (int)t->pid, strerror(errno ? errno : EPROTO));
	imsg_clear(&rep);
	return fd;
}

/* One UFFDIO_WRITEPROTECT: 0, 1 for ENOENT (no registered mapping), -1. */
static int
wp_one(int uffd, uint64_t a, uint64_t b, int wp)
{
	if (uffd_writeprotect(uffd, a, b - a, wp) == 0)
		return 0;
	return errno == ENOENT ? 1 : -1;
}

/*
 * UFFDIO_WRITEPROTECT of [a, b), for a sync tracker. On 6.1 it takes
 * one mapping a call (ENOENT across two, as after an mprotect() that split
 * one): then block by block, and a failing block page by page; a page of
 * no registered mapping is skipped (a sync tracker counts a page without
 * the protection as written: it is sent again, never lost). 0, or -1 with
 * errno set for any other error.
 */
static int
wp_range(int uffd, uint64_t a, uint64_t b, int wp)
{
	uint64_t ps = (uint64_t)sysconf(_SC_PAGESIZE);
	int r = wp_one(uffd, a, b, wp);

	for (uint64_t x = a, y; r > 0 && x < b; x = y) {
		y = (x & ~(uint64_t)(WPTRACK_SYNC_BLOCK - 1)) +
		    WPTRACK_SYNC_BLOCK;
		y = y < b ? y : b;
		r = wp_one(uffd, x, y, wp);
		for (uint64_t p = x; r > 0 && p < y; p += ps)
			if (wp_one(uffd, p, p + ps, wp) < 0)
				return -1;
		r = r < 0 ? -1 : 1;
	}
	return r < 0 ? -1 : 0;
}

int
wptrack_start(struct wptrack *w, const struct procref *t,
	      const struct range *rs, size_t n, enum wptrack_mode mode,
	      char *why, size_t len)
{
	*w = (struct wptrack)WPTRACK_NONE;
	if ((w->pagemap = procfile_pagemap(t->pid)) < 0) {
		snprintf(why, len, "/proc/%d/pagemap: %s", (int)t->pid,
			 strerror(errno));
		return -1;
	}
	w->sync = mode == WPTRACK_SYNC;
	if (mode == WPTRACK_OFF) {
		snprintf(why, len, "this kernel cannot track writes");
		goto fail;
	}
	if ((w->uffd = take_uffd(t, w->sync, why, len)) < 0)
		goto fail;
	if (uffd_api(w->uffd, w->sync ? 0 : WPTRACK_FEATURES, NULL) < 0) {
		snprintf(why, len, "UFFDIO_API: %s", strerror(errno));
		goto fail;
	}
	w->rs = xcalloc(n, sizeof(*w->rs));
	memcpy(w->rs, rs, n * sizeof(*rs));
	w->n = n;
	for (size_t i = 0; i < n; i++) {
		uint64_t l = rs[i].end - rs[i].start;

		if (uffd_register(w->uffd, rs[i].start, l,
				  UFFDIO_REGISTER_MODE_WP, NULL) < 0 ||
		    (w->sync ? wp_range(w->uffd, rs[i].start, rs[i].end, 1)
			     : uffd_writeprotect(w->uffd, rs[i].start, l, 1)) <
			    0) {
			/* EBUSY: the process has a userfaultfd there itself. */
			snprintf(why, len, "write-protecting 0x%llx-0x%llx: %s",
				 (unsigned long long)rs[i].start,
				 (unsigned long long)rs[i].end,
				 strerror(errno));
			goto fail;
		}
	}
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

/* Pagemap entries read at once by a sync tracker's collection (64 KiB). */
#define SYNC_BATCH 8192

/*
 * Sync: the dirty pages of range r are those present or swapped without
 * the uffd-wp bit in pagemap: written since they were protected (only a
 * write clears it on a present page), or populated since (none PTEs of
 * anonymous memory keep no protection before 6.7). Each run found is
 * protected again after it is reported, and before it is read to be sent:
 * a write in between is in the copy sent, one after it shows next time.
 */
static int64_t
collect_range_sync(const struct wptrack *w, const struct range *r, uint64_t *e,
		   void (*fn)(void *, uint64_t, uint64_t), void *arg)
{
	uint64_t ps = (uint64_t)sysconf(_SC_PAGESIZE), run = 0;
	int64_t bytes = 0;

	for (uint64_t at = r->start; at < r->end;) {
		uint64_t n = (r->end - at) / ps;
		ssize_t got;

		if (n > SYNC_BATCH)
			n = SYNC_BATCH;
		got = pread(w->pagemap, e, n * sizeof(*e),
			    (off_t)(at / ps * sizeof(*e)));
		if (got < 0 || (size_t)got != n * sizeof(*e)) {
			if (got >= 0)
				errno = EIO;
			return -1;
		}
		for (uint64_t k = 0; k <= n; k++, at += ps) {
			int dirty = k < n && (e[k] & (PM_PRESENT | PM_SWAP)) &&
				    !(e[k] & PM_UFFD_WP);

			if (dirty && run == 0)
				run = at;
			if (dirty || run == 0)
				continue;
			fn(arg, run, at);
			bytes += (int64_t)(at - run);
			if (wp_range(w->uffd, run, at, 1) < 0)
				return -1;
			run = 0;
		}
		at -= ps; /* the k == n step is not a page */
	}
	return bytes;
}

static int64_t
collect_sync(const struct wptrack *w,
	     void (*fn)(void *arg, uint64_t start, uint64_t end), void *arg)
{
	uint64_t *e = xcalloc(SYNC_BATCH, sizeof(*e));
	int64_t bytes = 0, b;

	for (size_t i = 0; i < w->n; i++) {
		if ((b = collect_range_sync(w, &w->rs[i], e, fn, arg)) < 0) {
			bytes = -1;
			break;
		}
		bytes += b;
	}
	free(e);
	return bytes;
}

int64_t
wptrack_collect(const struct wptrack *w,
		void (*fn)(void *arg, uint64_t start, uint64_t end), void *arg)
{
	struct page_region *v;
	int64_t bytes = 0;

	if (w->uffd >= 0 && w->sync)
		return collect_sync(w, fn, arg);
	v = xcalloc(COLLECT_VEC, sizeof(*v));

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

int64_t
wptrack_serve(struct wptrack *w)
{
	uint64_t ps = (uint64_t)sysconf(_SC_PAGESIZE);
	struct uffd_msg msg[16];
	int64_t served = 0;
	ssize_t got;

	while (w->uffd >= 0 && w->sync &&
	       (got = read(w->uffd, msg, sizeof(msg))) != 0) {
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return errno == EAGAIN ? served : -1;
		for (size_t k = 0; k < (size_t)got / sizeof(*msg); k++) {
			uint64_t addr =
				msg[k].arg.pagefault.address & ~(ps - 1);
			uint64_t a = addr & ~(uint64_t)(WPTRACK_SYNC_BLOCK - 1);
			uint64_t b = a + WPTRACK_SYNC_BLOCK;

			if (msg[k].event != UFFD_EVENT_PAGEFAULT)
				continue;
			for (size_t i = 0; i < w->n; i++) {
				if (addr < w->rs[i].start ||
				    addr >= w->rs[i].end)
					continue;
				a = a > w->rs[i].start ? a : w->rs[i].start;
				b = b < w->rs[i].end ? b : w->rs[i].end;
			}
			/*
			 * The block may span two mappings (mprotect splits
			 * one): then the page alone. Un-protecting wakes the
			 * writer; if even that fails, wake it to fault again.
			 */
			if (uffd_writeprotect(w->uffd, a, b - a, 0) < 0 &&
			    uffd_writeprotect(w->uffd, addr, ps, 0) < 0)
				uffd_wake(w->uffd, addr, ps);
			served++;
			w->faults++;
		}
	}
	return served;
}

void
wptrack_frozen(struct wptrack *w)
{
	if (w->sync)
		wptrack_stop(w);
}

void
wptrack_stop(struct wptrack *w)
{
	/* Nothing protected stays behind a descriptor nobody reads. */
	for (size_t i = 0; w->uffd >= 0 && w->sync && i < w->n; i++)
		wp_range(w->uffd, w->rs[i].start, w->rs[i].end, 0);
	if (w->uffd >= 0)
		close(w->uffd);
	if (w->pagemap >= 0)
		close(w->pagemap);
	free(w->rs);
	*w = (struct wptrack)WPTRACK_NONE;
}

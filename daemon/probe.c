/* Kernel feature probe. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <linux/falloc.h>

#include "daemon/compat.h"
#include "daemon/log.h"
#include "daemon/pagemap.h"
#include "daemon/probe.h"
#include "daemon/procfile.h"
#include "daemon/region.h"
#include "daemon/uffd.h"

struct kfeatures kfeat;
/* Set by --no-pagemap-scan, so that the fallback is tested too. */
int pagemap_force_read;

enum pagemap_method
pagemap_method(void)
{
	return kfeat.pagemap_scan && !pagemap_force_read ? PAGEMAP_SCAN_IOCTL
							 : PAGEMAP_READ;
}

static int
new_uffd(void)
{
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);

	if (fd >= 0) {
		kfeat.uffd_syscall = 1;
		return fd;
	}
	int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);

	if (dev < 0)
		return -1;
	fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
	close(dev);
	return fd;
}

/*
 * The access hints (kernel/ patch 0001) are probed by trying them: the
 * feature bit is negotiated on a fresh uffd (an unpatched kernel refuses
 * the unknown bit with EINVAL), then a hinted copy must work on a scratch
 * registration.
 */
static void
probe_hint(void)
{
	long ps = sysconf(_SC_PAGESIZE);
	static char src[4096];
	uint64_t done;
	void *dst;
	int fd;

	if ((fd = new_uffd()) < 0)
		return;
	if (uffd_api(fd, UFFD_FEATURE_ACCESS_HINTS, NULL) < 0) {
		close(fd);
		return;
	}
	dst = mmap(NULL, (size_t)ps, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (dst != MAP_FAILED) {
		if (uffd_register(fd, (uint64_t)(uintptr_t)dst, (uint64_t)ps,
				  UFFDIO_REGISTER_MODE_MISSING, NULL) == 0 &&
		    uffd_copy(fd, (uint64_t)(uintptr_t)dst, src, (uint64_t)ps,
			      UFFDIO_COPY_MODE_ACCESS_LIKELY, &done) == UFFD_OK)
			kfeat.access_likely = 1;
		munmap(dst, (size_t)ps);
	}
	close(fd);
}

/*
 * Swapped-out shmem in pagemap (kernel/ patch 0002): a one-page memfd is
 * written, paged out and must then read as PM_SWAP. Paging out needs active
 * swap; without it the answer is no, which is safe: the backing file then
 * classifies shared memory, as on every unpatched kernel.
 */
static void
probe_shmem_pm_swap(void)
{
	size_t ps = (size_t)sysconf(_SC_PAGESIZE);
	int mfd = memfd_create("uffdd-probe", MFD_CLOEXEC);
	int pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	char *p = MAP_FAILED;
	uint64_t e = 0;

	if (mfd >= 0 && ftruncate(mfd, (off_t)ps) == 0)
		p = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (pm >= 0 && p != MAP_FAILED) {
		off_t at = (off_t)((uintptr_t)p / ps * sizeof(e));

		memset(p, 0x5a, ps);
		if (madvise(p, ps, MADV_PAGEOUT) == 0 &&
		    pread(pm, &e, sizeof(e), at) == (ssize_t)sizeof(e))
			kfeat.shmem_pm_swap = (e & PM_SWAP) != 0;
	}
	if (p != MAP_FAILED)
		munmap(p, ps);
	if (pm >= 0)
		close(pm);
	if (mfd >= 0)
		close(mfd);
}

/*
 * Synchronous write-protection of anonymous memory, the pre-copy's write
 * tracking where WP_ASYNC is missing (wptrack.h): a page of our own is
 * written, registered in WP mode and protected, and must then show
 * PM_UFFD_WP in pagemap; un-protected, it must not. Then whether the
 * un-protect left it writable (kernel/ patch 4): writing it again takes no
 * minor fault of this thread.
 */
static void
probe_wp_sync(void)
{
	size_t ps = (size_t)sysconf(_SC_PAGESIZE);
	int pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	int fd = new_uffd();
	volatile char *p = MAP_FAILED;
	uint64_t on = 0, off = PM_UFFD_WP, a;
	struct rusage r0, r1;
	off_t at;

	if (fd >= 0 && pm >= 0 &&
	    (kfeat.uffd_features & UFFD_FEATURE_PAGEFAULT_FLAG_WP) &&
	    uffd_api(fd, 0, NULL) == 0)
		p = mmap(NULL, ps, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p != MAP_FAILED) {
		a = (uint64_t)(uintptr_t)p;
		at = (off_t)(a / ps * sizeof(on));
		p[0] = 1;
		if (uffd_register(fd, a, ps, UFFDIO_REGISTER_MODE_WP, NULL) ==
			    0 &&
		    uffd_writeprotect(fd, a, ps, 1) == 0 &&
		    pread(pm, &on, sizeof(on), at) == (ssize_t)sizeof(on) &&
		    uffd_writeprotect(fd, a, ps, 0) == 0 &&
		    pread(pm, &off, sizeof(off), at) == (ssize_t)sizeof(off))
			kfeat.uffd_wp_sync =
				(on & PM_UFFD_WP) && !(off & PM_UFFD_WP);
		/* Only once un-protected: a protected write would hang us. */
		if (kfeat.uffd_wp_sync && getrusage(RUSAGE_THREAD, &r0) == 0) {
			p[0] = 2;
			if (getrusage(RUSAGE_THREAD, &r1) == 0)
				kfeat.wp_unprotect_writable =
					r1.ru_minflt == r0.ru_minflt;
		}
		munmap((void *)p, ps);
	}
	if (fd >= 0)
		close(fd);
	if (pm >= 0)
		close(pm);
}

static void
probe_pagemap_scan(void)
{
	struct pm_scan_arg a = {0};
	struct page_region r;
	long ps = sysconf(_SC_PAGESIZE);
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	void *p = mmap(NULL, (size_t)ps, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (fd >= 0 && p != MAP_FAILED) {
		a.size = sizeof(a);
		a.start = (uint64_t)(uintptr_t)p;
		a.end = a.start + (uint64_t)ps;
		a.vec = (uint64_t)(uintptr_t)&r;
		a.vec_len = 1;
		a.category_anyof_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED;
		a.return_mask = PAGE_IS_PRESENT | PAGE_IS_SWAPPED;
		kfeat.pagemap_scan = ioctl(fd, PAGEMAP_SCAN, &a) >= 0;
	}
	if (p != MAP_FAILED)
		munmap(p, (size_t)ps);
	if (fd >= 0)
		close(fd);
}

/*
 * Shared memory and private file mappings are read through their backing
 * files, /proc/PID/map_files/START-END, which the kernel opens only for
 * CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN, whoever's the process: try it on
 * our own first mapping.
 */
static void
probe_map_files(void)
{
	struct vma *v;
	size_t n;
	int fd;

	if (region_read_maps(getpid(), &v, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		if (v[i].name[0] != '/')
			continue;
		fd = region_open_backing(getpid(), v[i].start, v[i].end);
		kfeat.map_files = fd >= 0;
		if (fd >= 0)
			close(fd);
		break;
	}
	free(v);
}

/* A hole punched in file fd (two pages, the first written) is seen. */
static int
punch_seen(int fd)
{
	char page[4096] = {1}, buf[256];
	int w, seen = 0;

	if (ftruncate(fd, 2 * sizeof(page)) < 0 ||
	    pwrite(fd, page, sizeof(page), 0) != (ssize_t)sizeof(page) ||
	    (w = procfile_watch(fd)) < 0)
		return 0;
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
		      sizeof(page)) == 0)
		seen = read(w, buf, sizeof(buf)) > 0;
	close(w);
	return seen;
}

/*
 * Whether a hole punched in shared memory (fallocate, MADV_REMOVE: both
 * vfs_fallocate(), which reports IN_MODIFY) wakes an inotify watch of its
 * file: for a tmpfs file, and for a memfd, whose file is on the kernel's
 * internal mount with shared anonymous memory (6.18 reports nothing for
 * those). A pre-copy's freeze skips its search for dropped pages where a
 * watch that would have seen them saw nothing (docs/design.md, "The
 * freeze of a guest's pre-copy").
 */
static void
probe_punch_notify(void)
{
	int fd = memfd_create("uffdd-probe", MFD_CLOEXEC);
	struct stat st;

	if (fd >= 0 && fstat(fd, &st) == 0) {
		kfeat.shm_dev = st.st_dev;
		kfeat.punch_notify_shm = punch_seen(fd);
	}
	if (fd >= 0)
		close(fd);
	fd = open("/dev/shm", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0) {
		kfeat.punch_notify = punch_seen(fd);
		close(fd);
	}
}

void
probe_kernel(void)
{
	FILE *f;
	int fd, dev;

	memset(&kfeat, 0, sizeof(kfeat));
	if ((dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC)) >= 0) {
		kfeat.dev_userfaultfd = 1;
		close(dev);
	}
	if ((f = fopen("/proc/sys/vm/unprivileged_userfaultfd", "re"))) {
		if (fscanf(f, "%d", &kfeat.unprivileged_sysctl) != 1)
			kfeat.unprivileged_sysctl = 0;
		fclose(f);
	}
	if ((fd = new_uffd()) >= 0) {
		uffd_api(fd, 0, &kfeat.uffd_features);
		close(fd);
	}
	probe_hint();
	probe_pagemap_scan();
	probe_shmem_pm_swap();
	probe_map_files();
	probe_wp_sync();
	probe_punch_notify();
	log_info("kernel: %s", probe_summary());
	if (!kfeat.map_files)
		log_warnx("%s: shared memory and private file mappings cannot "
			  "migrate (exports and attaches of them are refused); "
			  "private anonymous memory and huge pages can",
			  REGION_BACKING_CAPS);
}

const char *
probe_summary(void)
{
	static char buf[320];

	snprintf(buf, sizeof(buf),
		 "uffd features 0x%llx%s, pagemap_scan %s%s, access_likely %s, "
		 "shmem_pm_swap %s, poison %s, map_files %s, uffd_wp_sync %s, "
		 "wp_unprotect_writable %s, punch_notify %s",
		 (unsigned long long)kfeat.uffd_features,
		 kfeat.dev_userfaultfd ? " (/dev/userfaultfd)" : "",
		 kfeat.pagemap_scan ? "yes" : "no",
		 kfeat.pagemap_scan && pagemap_force_read ? " (not used)" : "",
		 kfeat.access_likely ? "yes" : "no",
		 kfeat.shmem_pm_swap ? "yes" : "no",
		 (kfeat.uffd_features & UFFD_FEATURE_POISON) ? "yes" : "no",
		 kfeat.map_files ? "yes" : "no",
		 kfeat.uffd_wp_sync ? "yes" : "no",
		 kfeat.wp_unprotect_writable ? "yes" : "no",
		 kfeat.punch_notify && kfeat.punch_notify_shm ? "yes"
		 : kfeat.punch_notify			      ? "tmpfs only"
		 : kfeat.punch_notify_shm		      ? "memfd only"
							      : "no");
	return buf;
}

/* Kernel feature probe. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "daemon/compat.h"
#include "daemon/log.h"
#include "daemon/pagemap.h"
#include "daemon/probe.h"
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
	log_info("kernel: %s", probe_summary());
}

const char *
probe_summary(void)
{
	static char buf[256];

	snprintf(buf, sizeof(buf),
		 "uffd features 0x%llx%s, pagemap_scan %s%s, access_likely %s, "
		 "poison %s",
		 (unsigned long long)kfeat.uffd_features,
		 kfeat.dev_userfaultfd ? " (/dev/userfaultfd)" : "",
		 kfeat.pagemap_scan ? "yes" : "no",
		 kfeat.pagemap_scan && pagemap_force_read ? " (not used)" : "",
		 kfeat.access_likely ? "yes" : "no",
		 (kfeat.uffd_features & UFFD_FEATURE_POISON) ? "yes" : "no");
	return buf;
}

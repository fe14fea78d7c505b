/*
 * What the running kernel can do, probed once at start-up.
 * The rest of the daemon reads this struct and never probes again.
 */
#ifndef UFFDD_PROBE_H
#define UFFDD_PROBE_H

#include <stdint.h>
#include <sys/types.h>

struct kfeatures {
	int uffd_syscall;	 /* userfaultfd(2) works for the daemon */
	int dev_userfaultfd;	 /* /dev/userfaultfd can be opened */
	uint64_t uffd_features;	 /* UFFDIO_API features offered */
	int pagemap_scan;	 /* PAGEMAP_SCAN ioctl (6.7+) */
	int access_likely;	 /* UFFDIO_COPY_MODE_ACCESS_LIKELY (patched) */
	int shmem_pm_swap;	 /* shmem PM_SWAP in pagemap (patched) */
	int unprivileged_sysctl; /* vm.unprivileged_userfaultfd */
	int map_files;		 /* /proc/PID/map_files opens (capability) */
	int uffd_wp_sync;	 /* sync uffd-wp of anon memory, in pagemap */
	int wp_unprotect_writable; /* un-protect leaves it writable (patch 4) */
	/*
	 * A hole punched in a tmpfs file wakes an inotify watch of it;
	 * _shm the same for files of the kernel's internal shm mount
	 * (memfd, shared anonymous memory), device shm_dev.
	 */
	int punch_notify, punch_notify_shm;
	dev_t shm_dev;
};

extern struct kfeatures kfeat;

void probe_kernel(void);
/* A one-line summary for logs and status. */
const char *probe_summary(void);

#endif

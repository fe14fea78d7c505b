/*
 * uAPI definitions that Debian 12's linux-libc-dev (6.1) lacks, in one place
 * (portability kept out of the logic). Values checked against 6.18.
 */
#ifndef UFFDD_COMPAT_H
#define UFFDD_COMPAT_H

#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif
#ifndef UFFD_FEATURE_POISON
#define UFFD_FEATURE_POISON (1 << 14)
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif
#ifndef UFFD_FEATURE_MOVE
#define UFFD_FEATURE_MOVE (1 << 16)
#endif
#ifndef UFFDIO_POISON
struct uffdio_poison {
	struct uffdio_range range;
	__u64 mode;
	__s64 updated;
};
#define UFFDIO_POISON 0xC020AA08
#endif
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif
/* The never-merged access hints of our kernel patch set (kernel/ 0001). */
#ifndef UFFD_FEATURE_ACCESS_HINTS
#define UFFD_FEATURE_ACCESS_HINTS (1U << 30)
#endif
#ifndef UFFDIO_ZEROPAGE_MODE_ACCESS_LIKELY
#define UFFDIO_ZEROPAGE_MODE_ACCESS_LIKELY ((__u64)1 << 2)
#endif
#ifndef UFFDIO_COPY_MODE_ACCESS_LIKELY
#define UFFDIO_COPY_MODE_ACCESS_LIKELY ((__u64)1 << 2)
#endif

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif
#ifndef SYS_userfaultfd
#define SYS_userfaultfd 323
#endif

/* PAGEMAP_SCAN (6.7+). */
#ifndef PAGEMAP_SCAN
struct page_region {
	__u64 start;
	__u64 end;
	__u64 categories;
};
struct pm_scan_arg {
	__u64 size;
	__u64 flags;
	__u64 start;
	__u64 end;
	__u64 walk_end;
	__u64 vec;
	__u64 vec_len;
	__u64 max_pages;
	__u64 category_inverted;
	__u64 category_mask;
	__u64 category_anyof_mask;
	__u64 return_mask;
};
#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#define PAGE_IS_WPALLOWED (1 << 0)
#define PAGE_IS_WRITTEN (1 << 1)
#define PAGE_IS_FILE (1 << 2)
#define PAGE_IS_PRESENT (1 << 3)
#define PAGE_IS_SWAPPED (1 << 4)
#define PAGE_IS_PFNZERO (1 << 5)
#define PAGE_IS_HUGE (1 << 6)
#define PAGE_IS_SOFT_DIRTY (1 << 7)
#endif
#ifndef PM_SCAN_WP_MATCHING
#define PM_SCAN_WP_MATCHING (1 << 0)
#define PM_SCAN_CHECK_WPASYNC (1 << 1)
#endif

#define PM_PRESENT (1ULL << 63)
#define PM_SWAP (1ULL << 62)
#define PM_FILE (1ULL << 61)
/* The page is write-protected by a userfaultfd (5.13 for anonymous memory). */
#define PM_UFFD_WP (1ULL << 57)

#endif

/* Thin wrappers over the userfaultfd ioctls, and the one errno map. */
#ifndef UFFDD_UFFD_H
#define UFFDD_UFFD_H

#include <stdint.h>

/* What an install ioctl's failure means for the caller: one errno map. */
enum uffd_res {
	UFFD_OK = 0,
	UFFD_EXISTS, /* EEXIST: page already present: mark it, wake waiters */
	UFFD_RETRY,  /* EAGAIN: a non-cooperative event is pending: read it */
	UFFD_GONE,   /* ESRCH/ENOSPC: the target's mm is gone */
	UFFD_FAIL,   /* anything else: a bug or a broken kernel contract */
};

enum uffd_res uffd_classify(int err);
const char *uffd_res_name(enum uffd_res);
/* UFFDIO_API: asks for `want`; returns 0 with the granted set in *got. */
int uffd_api(int fd, uint64_t want, uint64_t *got);
int uffd_register(int fd, uint64_t start, uint64_t len, uint64_t mode,
		  uint64_t *ioctls);
int uffd_unregister(int fd, uint64_t start, uint64_t len);
/*
 * Installs len bytes at dst. *done gets the bytes installed, also on failure
 * (a run can stop half way at a page that exists).
 */
enum uffd_res uffd_copy(int fd, uint64_t dst, const void *src, uint64_t len,
			uint64_t mode, uint64_t *done);
enum uffd_res uffd_zeropage(int fd, uint64_t dst, uint64_t len, uint64_t mode,
			    uint64_t *done);
int uffd_wake(int fd, uint64_t start, uint64_t len);
/* UFFDIO_WRITEPROTECT: on (wp 1) or off (wp 0) over [start, start+len). */
int uffd_writeprotect(int fd, uint64_t start, uint64_t len, int wp);

#endif

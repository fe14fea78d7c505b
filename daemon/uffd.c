/* userfaultfd ioctl wrappers. */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/ioctl.h>

#include "daemon/compat.h"
#include "daemon/uffd.h"

enum uffd_res
uffd_classify(int err)
{
	switch (err) {
	case 0:
		return UFFD_OK;
	case EEXIST:
		return UFFD_EXISTS;
	case EAGAIN:
		return UFFD_RETRY;
	case ESRCH:
	case ENOSPC:
		return UFFD_GONE;
	default:
		return UFFD_FAIL;
	}
}

const char *
uffd_res_name(enum uffd_res r)
{
	static const char *names[] = {"ok", "exists", "retry", "gone", "fail"};

	return names[r];
}

int
uffd_api(int fd, uint64_t want, uint64_t *got)
{
	struct uffdio_api api = {.api = UFFD_API, .features = want};

	if (ioctl(fd, UFFDIO_API, &api) < 0)
		return -1;
	if (got)
		*got = api.features;
	return 0;
}

int
uffd_register(int fd, uint64_t start, uint64_t len, uint64_t mode,
	      uint64_t *ioctls)
{
	struct uffdio_register r = {.range = {start, len}, .mode = mode};

	if (ioctl(fd, UFFDIO_REGISTER, &r) < 0)
		return -1;
	if (ioctls)
		*ioctls = r.ioctls;
	return 0;
}

int
uffd_unregister(int fd, uint64_t start, uint64_t len)
{
	struct uffdio_range r = {start, len};

	return ioctl(fd, UFFDIO_UNREGISTER, &r);
}

/*
 * On failure the kernel stores the negative errno in copy/zeropage, or the
 * bytes done before it stopped; both cases are folded into *done.
 */
enum uffd_res
uffd_copy(int fd, uint64_t dst, const void *src, uint64_t len, uint64_t mode,
	  uint64_t *done)
{
	struct uffdio_copy c = {.dst = dst,
				.src = (uint64_t)(uintptr_t)src,
				.len = len,
				.mode = mode};
	int rc = ioctl(fd, UFFDIO_COPY, &c), err = errno;

	*done = c.copy > 0 ? (uint64_t)c.copy : 0;
	if (rc == 0) {
		*done = len;
		return UFFD_OK;
	}
	return uffd_classify(err);
}

enum uffd_res
uffd_zeropage(int fd, uint64_t dst, uint64_t len, uint64_t mode, uint64_t *done)
{
	struct uffdio_zeropage z = {.range = {dst, len}, .mode = mode};
	int rc = ioctl(fd, UFFDIO_ZEROPAGE, &z), err = errno;

	*done = z.zeropage > 0 ? (uint64_t)z.zeropage : 0;
	if (rc == 0) {
		*done = len;
		return UFFD_OK;
	}
	return uffd_classify(err);
}

int
uffd_wake(int fd, uint64_t start, uint64_t len)
{
	struct uffdio_range r = {start, len};

	return ioctl(fd, UFFDIO_WAKE, &r);
}

int
uffd_writeprotect(int fd, uint64_t start, uint64_t len, int wp)
{
	struct uffdio_writeprotect w = {.range = {start, len},
					.mode = wp ? UFFDIO_WRITEPROTECT_MODE_WP
						   : 0};

	return ioctl(fd, UFFDIO_WRITEPROTECT, &w);
}

/*
 * Reads of an image file ahead of their use (image_ra.h). A slot is
 * free, in flight, in flight but no longer wanted (stale: its buffer is
 * the kernel's until the read completes), or done. Nothing here blocks
 * except image_ra_get() waiting for the read it returns, and
 * image_ra_free() waiting for those the kernel still holds.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/image_ra.h"

enum { RA_FREE, RA_FLIGHT, RA_STALE, RA_DONE };

int
image_ra_init(struct image_ra *ra, int fd, unsigned depth, char *err,
	      size_t errlen)
{
	int rc;

	memset(ra, 0, sizeof(*ra));
	ra->fd = fd;
	ra->cur = -1;
	ra->depth = depth < 1			 ? 1
		    : depth > IMAGE_RA_DEPTH_MAX ? IMAGE_RA_DEPTH_MAX
						 : depth;
	if ((rc = io_uring_queue_init(ra->depth, &ra->ring, 0)) < 0) {
		snprintf(err, errlen, "io_uring_setup: %s", strerror(-rc));
		return -1;
	}
	ra->ok = 1;
	return 0;
}

/* Takes one completion: the slot it names is done, or free if stale. */
static void
reap(struct image_ra *ra, struct io_uring_cqe *cqe)
{
	struct image_ra_slot *sl = &ra->slot[io_uring_cqe_get_data64(cqe)];

	if (sl->state == RA_STALE) {
		sl->state = RA_FREE;
	} else {
		sl->state = RA_DONE;
		sl->res = cqe->res;
	}
	io_uring_cqe_seen(&ra->ring, cqe);
}

static void
reap_ready(struct image_ra *ra)
{
	struct io_uring_cqe *cqe;

	while (io_uring_peek_cqe(&ra->ring, &cqe) == 0)
		reap(ra, cqe);
}

void
image_ra_submit(struct image_ra *ra)
{
	int rc;

	/*
	 * EAGAIN and EBUSY say the kernel is short of something right now:
	 * the reads stay queued and go with the next submit, or with the
	 * one image_ra_get() makes before it waits.
	 */
	if (ra->queued && (rc = io_uring_submit(&ra->ring)) > 0)
		ra->queued -=
			(unsigned)rc < ra->queued ? (unsigned)rc : ra->queued;
}

int
image_ra_ahead(struct image_ra *ra, uint64_t key, uint64_t off, uint64_t len)
{
	struct image_ra_slot *sl = NULL;
	struct io_uring_sqe *sqe;
	unsigned i;

	for (i = 0; i < ra->depth; i++) {
		if ((ra->slot[i].state == RA_FLIGHT ||
		     ra->slot[i].state == RA_DONE) &&
		    ra->slot[i].key == key)
			return 1;
		if (sl == NULL && ra->slot[i].state == RA_FREE)
			sl = &ra->slot[i];
	}
	if (sl == NULL || (sqe = io_uring_get_sqe(&ra->ring)) == NULL)
		return 0;
	if (sl->cap < len) {
		free(sl->buf);
		sl->buf = NULL;
		if (posix_memalign((void **)&sl->buf, 4096, len) != 0) {
			sl->cap = 0;
			return 0;
		}
		sl->cap = len;
	}
	sl->key = key;
	sl->off = off;
	sl->len = len;
	sl->state = RA_FLIGHT;
	io_uring_prep_read(sqe, ra->fd, sl->buf, (unsigned)len, off);
	io_uring_sqe_set_data64(sqe, (uint64_t)(sl - ra->slot));
	ra->queued++;
	return 1;
}

/*
 * Lets go of what get no longer wants: the last slot it returned, and
 * reads for keys of another kind or behind key (the reader moved past
 * them, or jumped: its next keys are read when it asks).
 */
static void
drop_behind(struct image_ra *ra, uint64_t key)
{
	for (unsigned i = 0; i < ra->depth; i++) {
		struct image_ra_slot *sl = &ra->slot[i];
		int behind = IMAGE_RA_KIND(sl->key) != IMAGE_RA_KIND(key) ||
			     sl->key < key;

		if (sl->key == key && sl->state != RA_FREE)
			continue;
		if (sl->state == RA_DONE && (behind || (int)i == ra->cur))
			sl->state = RA_FREE;
		else if (sl->state == RA_FLIGHT && behind)
			sl->state = RA_STALE;
	}
	ra->cur = -1;
}

/* Waits for one completion (submitting what is queued first). */
static int
wait_one(struct image_ra *ra)
{
	struct io_uring_cqe *cqe;
	int rc;

	image_ra_submit(ra);
	if ((rc = io_uring_wait_cqe(&ra->ring, &cqe)) < 0)
		return rc == -EINTR ? 0 : rc;
	reap(ra, cqe);
	return 0;
}

/* The slot holding key, queued now if it was not: its index, or -1. */
static int
slot_for(struct image_ra *ra, uint64_t key, uint64_t off, uint64_t len)
{
	for (int tries = 0; tries < 2 * IMAGE_RA_DEPTH_MAX + 2; tries++) {
		unsigned i, far = ra->depth;

		reap_ready(ra);
		for (i = 0; i < ra->depth; i++)
			if (ra->slot[i].key == key &&
			    (ra->slot[i].state == RA_FLIGHT ||
			     ra->slot[i].state == RA_DONE))
				return ra->slot[i].off == off &&
						       ra->slot[i].len == len
					       ? (int)i
					       : -1;
		if (image_ra_ahead(ra, key, off, len))
			continue;
		/* No room: the read furthest ahead gives way, or one ends. */
		for (i = 0; i < ra->depth; i++)
			if (ra->slot[i].state == RA_DONE &&
			    (far == ra->depth ||
			     ra->slot[i].key > ra->slot[far].key))
				far = i;
		if (far < ra->depth)
			ra->slot[far].state = RA_FREE;
		else if (wait_one(ra) < 0)
			return -1;
	}
	return -1;
}

/* Reads what the kernel left unread of a short read, or fails. */
static int
finish_short(struct image_ra *ra, struct image_ra_slot *sl)
{
	uint64_t done = (uint64_t)sl->res;

	while (done < sl->len) {
		ssize_t r = pread(ra->fd, sl->buf + done, sl->len - done,
				  (off_t)(sl->off + done));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			sl->res = r == 0 ? -ENODATA : -errno;
			return -1;
		}
		done += (uint64_t)r;
	}
	sl->res = (int64_t)done;
	return 0;
}

const uint8_t *
image_ra_get(struct image_ra *ra, uint64_t key, uint64_t off, uint64_t len,
	     char *err, size_t errlen)
{
	struct image_ra_slot *sl;
	int i, rc;

	if (ra->cur >= 0 && ra->slot[ra->cur].key == key &&
	    ra->slot[ra->cur].off == off && ra->slot[ra->cur].len == len)
		return ra->slot[ra->cur].buf;
	drop_behind(ra, key);
	if ((i = slot_for(ra, key, off, len)) < 0) {
		snprintf(err, errlen, "reading %llu bytes at %llu: no buffer",
			 (unsigned long long)len, (unsigned long long)off);
		return NULL;
	}
	sl = &ra->slot[i];
	while (sl->state == RA_FLIGHT)
		if ((rc = wait_one(ra)) < 0) {
			snprintf(err, errlen, "io_uring: %s", strerror(-rc));
			return NULL;
		}
	if (sl->res >= 0 && (uint64_t)sl->res < len)
		(void)finish_short(ra, sl);
	if (sl->res < 0) {
		snprintf(err, errlen, "reading %llu bytes at %llu: %s",
			 (unsigned long long)len, (unsigned long long)off,
			 sl->res == -ENODATA ? "file cut short"
					     : strerror((int)-sl->res));
		sl->state = RA_FREE;
		return NULL;
	}
	ra->cur = i;
	return sl->buf;
}

void
image_ra_free(struct image_ra *ra)
{
	if (ra->ok) {
		for (unsigned i = 0; i < ra->depth; i++)
			while (ra->slot[i].state == RA_FLIGHT ||
			       ra->slot[i].state == RA_STALE)
				if (wait_one(ra) < 0)
					break;
		io_uring_queue_exit(&ra->ring);
	}
	for (unsigned i = 0; i < IMAGE_RA_DEPTH_MAX; i++)
		free(ra->slot[i].buf);
	memset(ra, 0, sizeof(*ra));
	ra->cur = -1;
}

/*
 * Reads of an image file ahead of their use, through io_uring: a reader
 * that walks the file in a known order (the bulk stream's data runs, the
 * working set's batches) queues the next extents while it works on the
 * current one, so that up to `depth` reads are in flight and the disk
 * works while the daemon checks and sends. The bytes are not checked
 * here: the caller checks them (image_run_check(), image_ws_check()).
 *
 * Extents are named by a key the caller chooses: keys of one kind grow
 * as the reader moves on (IMAGE_RA_KIND tells the kinds apart), and
 * image_ra_get() drops what was read ahead for keys behind it.
 */
#ifndef UFFDD_IMAGE_RA_H
#define UFFDD_IMAGE_RA_H

#include <stddef.h>
#include <stdint.h>

#include <liburing.h>

#define IMAGE_RA_DEPTH_MAX 32
/* The top bit of a key: its kind (runs, working-set batches). */
#define IMAGE_RA_KIND(key) ((key) >> 63)

struct image_ra_slot {
	uint64_t key, off, len;
	uint8_t *buf;
	size_t cap;
	int state;   /* RA_FREE, RA_FLIGHT, RA_STALE (in flight, unwanted),
			RA_DONE */
	int64_t res; /* what the read returned: bytes, or -errno */
};

struct image_ra {
	struct io_uring ring;
	int fd, ok; /* ok: the ring exists */
	unsigned depth, queued;
	int cur; /* the slot image_ra_get() returned last, or -1 */
	struct image_ra_slot slot[IMAGE_RA_DEPTH_MAX];
};

/*
 * Makes the ring for reads of fd, depth at most IMAGE_RA_DEPTH_MAX. 0, or
 * -1 with err saying why (io_uring missing or not allowed): the caller
 * then reads with pread.
 */
int image_ra_init(struct image_ra *, int fd, unsigned depth, char *err,
		  size_t errlen);
/*
 * Queues a read of [off, off + len) as key if a slot is free and key is
 * not there yet: 1 (queued or there), 0 (no free slot). image_ra_submit()
 * starts what was queued.
 */
int image_ra_ahead(struct image_ra *, uint64_t key, uint64_t off, uint64_t len);
void image_ra_submit(struct image_ra *);
/*
 * The bytes of key ([off, off + len) of the file), read whole: waits for
 * them if they are in flight, reads them now if they were not asked for.
 * They stay valid until the next call. NULL with err set on an error or a
 * file cut short.
 */
const uint8_t *image_ra_get(struct image_ra *, uint64_t key, uint64_t off,
			    uint64_t len, char *err, size_t errlen);
/* Whether the last image_ra_get() was for key (its bytes still there). */
static inline int
image_ra_is_current(const struct image_ra *ra, uint64_t key)
{
	return ra->ok && ra->cur >= 0 && ra->slot[ra->cur].key == key;
}
/* Waits for reads in flight, then frees everything. */
void image_ra_free(struct image_ra *);

#endif

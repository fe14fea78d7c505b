/*
 * Unit tests for reads ahead (proto/image_ra.h) on a real file: what
 * get returns is the file's bytes, read ahead or not, in order or after
 * a jump back, with more keys ahead than slots; a file cut short fails
 * the get of what is missing; io_uring's errors reach the caller.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "proto/image_ra.h"
#include "tests/unit/unit.h"

#define EXT 8192u /* one extent */
#define NEXT 64u  /* extents in the file */

/* Extent k holds bytes k * 251 + i, truncated. */
static int
ext_ok(const uint8_t *b, unsigned k)
{
	for (unsigned i = 0; i < EXT; i++)
		if (b[i] != (uint8_t)(k * 251 + i))
			return 0;
	return 1;
}

static int
make_file(void)
{
	int fd = memfd_create("ra", 0);
	uint8_t b[EXT];

	for (unsigned k = 0; k < NEXT; k++) {
		for (unsigned i = 0; i < EXT; i++)
			b[i] = (uint8_t)(k * 251 + i);
		if (pwrite(fd, b, EXT, (off_t)k * EXT) != EXT)
			return -1;
	}
	return fd;
}

/* Gets keys from..to in steps, queueing `ahead` extents after each. */
static int
walk(struct image_ra *ra, unsigned from, unsigned to, unsigned ahead)
{
	char err[128];
	int ok = 1;

	for (unsigned k = from; k < to; k++) {
		const uint8_t *b = image_ra_get(ra, k, (uint64_t)k * EXT, EXT,
						err, sizeof(err));

		ok &= b != NULL && ext_ok(b, k);
		/* The same key again: the same bytes, no new read. */
		ok &= image_ra_is_current(ra, k) &&
		      image_ra_get(ra, k, (uint64_t)k * EXT, EXT, err,
				   sizeof(err)) == b;
		for (unsigned a = k + 1; a <= k + ahead && a < NEXT; a++)
			if (!image_ra_ahead(ra, a, (uint64_t)a * EXT, EXT))
				break;
		image_ra_submit(ra);
	}
	return ok;
}

int
main(void)
{
	struct image_ra ra;
	char err[128];
	int fd = make_file();

	CHECK(fd >= 0);
	if (image_ra_init(&ra, fd, 4, err, sizeof(err)) < 0) {
		printf("SKIP-PART: io_uring read-ahead: %s\n", err);
		return UNIT_DONE();
	}
	CHECK(walk(&ra, 0, NEXT, 3)); /* fewer ahead than slots */
	CHECK(walk(&ra, 10, 30, 12)); /* more ahead than slots */
	CHECK(walk(&ra, 5, 9, 0));    /* back, nothing ahead */
	CHECK(walk(&ra, 40, 50, 2));  /* a jump forward */
	/* Another kind of key drops the first kind's reads. */
	CHECK(image_ra_ahead(&ra, 1ull << 63 | 3, 3 * EXT, EXT) == 1);
	image_ra_submit(&ra);
	CHECK(walk(&ra, 20, 24, 3));
	/* The file cut short under reads ahead: the missing part fails. */
	CHECK(ftruncate(fd, (off_t)(NEXT - 2) * EXT + 100) == 0);
	CHECK(walk(&ra, NEXT - 6, NEXT - 2, 8));
	CHECK(image_ra_get(&ra, NEXT - 2, (uint64_t)(NEXT - 2) * EXT, EXT, err,
			   sizeof(err)) == NULL &&
	      strstr(err, "file cut short") != NULL);
	CHECK(image_ra_get(&ra, NEXT - 1, (uint64_t)(NEXT - 1) * EXT, EXT, err,
			   sizeof(err)) == NULL &&
	      strstr(err, "file cut short") != NULL);
	image_ra_free(&ra);
	/* A descriptor that cannot be read: the error, not bytes. */
	CHECK(image_ra_init(&ra, -1, 2, err, sizeof(err)) == 0);
	CHECK(image_ra_get(&ra, 0, 0, EXT, err, sizeof(err)) == NULL &&
	      strstr(err, "Bad file descriptor") != NULL);
	image_ra_free(&ra);
	close(fd);
	return UNIT_DONE();
}

/*
 * Unit tests for snapshot images (proto/image.h): what the writer makes
 * reads back, and the reader refuses a file changed anywhere, cut short,
 * or with tables that contradict each other.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "proto/image.h"
#include "proto/image_fmt.h"
#include "tests/unit/unit.h"

#define PS 4096u

/* An image of two regions in a memfd: data, zeros and holes. */
static int
make(uint8_t **bytes, size_t *len)
{
	struct image_region r[2] = {{0}};
	struct image_writer w;
	uint8_t page[PS];
	int fd = memfd_create("img", 0);

	r[0].start = 0x100000;
	r[0].length = 8 * PS;
	r[0].page_size = PS;
	r[0].kind = 1;
	snprintf(r[0].name, sizeof(r[0].name), "[heap]");
	r[1].start = 0x200000;
	r[1].length = 4 * PS;
	r[1].page_size = PS;
	r[1].kind = 3;
	CHECK(image_writer_begin(&w, fd, r, 2, 42) == 0);
	for (uint64_t p = 0; p < 3; p++) {
		memset(page, (int)p + 1, PS);
		CHECK(image_write_data(&w, 0, p, 1, page) == 0);
	}
	CHECK(image_write_marker(&w, 0, 3, 2, IMAGE_ZERO) == 0);
	CHECK(image_write_marker(&w, 0, 5, 2, IMAGE_HOLE) == 0);
	/* Out of order: refused, and every later call with it. */
	CHECK(image_write_marker(&w, 1, 0, 1, IMAGE_HOLE) < 0);
	image_writer_free(&w);

	CHECK(ftruncate(fd, 0) == 0);
	CHECK(image_writer_begin(&w, fd, r, 2, 42) == 0);
	for (uint64_t p = 0; p < 3; p++) {
		memset(page, (int)p + 1, PS);
		CHECK(image_write_data(&w, 0, p, 1, page) == 0);
	}
	CHECK(image_write_marker(&w, 0, 3, 2, IMAGE_ZERO) == 0);
	CHECK(image_write_marker(&w, 0, 5, 3, IMAGE_HOLE) == 0);
	memset(page, 0xab, PS);
	CHECK(image_write_marker(&w, 1, 0, 1, IMAGE_HOLE) == 0);
	CHECK(image_write_data(&w, 1, 1, 1, page) == 0);
	/* Not every page: the end refuses. */
	CHECK(image_writer_end(&w) < 0 && errno == EINVAL);
	image_writer_free(&w);

	CHECK(ftruncate(fd, 0) == 0);
	CHECK(image_writer_begin(&w, fd, r, 2, 42) == 0);
	for (uint64_t p = 0; p < 3; p++) {
		memset(page, (int)p + 1, PS);
		CHECK(image_write_data(&w, 0, p, 1, page) == 0);
	}
	CHECK(image_write_marker(&w, 0, 3, 2, IMAGE_ZERO) == 0);
	CHECK(image_write_marker(&w, 0, 5, 3, IMAGE_HOLE) == 0);
	memset(page, 0xab, PS);
	CHECK(image_write_marker(&w, 1, 0, 1, IMAGE_HOLE) == 0);
	CHECK(image_write_data(&w, 1, 1, 3, (uint8_t[3 * PS]){0}) == 0);
	CHECK(image_writer_end(&w) == 0);
	image_writer_free(&w);

	*len = (size_t)lseek(fd, 0, SEEK_END);
	*bytes = malloc(*len);
	CHECK(pread(fd, *bytes, *len, 0) == (ssize_t)*len);
	close(fd);
	return 0;
}

/* Opens len bytes as an image: 0, or -1 with the reason in err. */
static int
try_open(const uint8_t *b, size_t len, int verify, char *err, size_t errlen)
{
	struct image im;
	int fd = memfd_create("t", 0), rc;

	CHECK(write(fd, b, len) == (ssize_t)len);
	if (image_open(&im, fd, err, errlen) < 0) {
		close(fd);
		return -1;
	}
	rc = verify ? image_verify(&im, err, errlen) : 0;
	image_close(&im);
	return rc;
}

static void
round_trip(const uint8_t *b, size_t len)
{
	struct image im;
	uint8_t buf[3 * PS];
	char err[256];
	int fd = memfd_create("t", 0);

	CHECK(write(fd, b, len) == (ssize_t)len);
	CHECK(image_open(&im, fd, err, sizeof(err)) == 0 ||
	      !fprintf(stderr, "%s\n", err));
	CHECK(im.nregions == 2 && im.pid == 42);
	CHECK(strcmp(im.regions[0].name, "[heap]") == 0);
	CHECK(im.regions[0].data_pages == 3 && im.regions[0].zero_pages == 2 &&
	      im.regions[0].hole_pages == 3);
	/* Three one-page data runs join one; zero; hole; hole; data. */
	CHECK(im.nruns == 5);
	CHECK(im.runs[0].cls == IMAGE_DATA && im.runs[0].npages == 3);
	CHECK(im.runs[0].data_off % IMAGE_ALIGN == 0);
	CHECK(image_run_read(&im, &im.runs[0], buf, err, sizeof(err)) == 0);
	CHECK(buf[0] == 1 && buf[PS] == 2 && buf[2 * PS + 7] == 3);
	CHECK(image_verify(&im, err, sizeof(err)) == 0);
	image_close(&im);
}

/* Every single byte changed, and every length cut: refused. */
static void
corruptions(const uint8_t *b, size_t len)
{
	uint8_t *c = malloc(len);
	char err[256];
	int missed = 0;

	for (size_t i = 0; i < len; i++) {
		/* Zero bytes of the header, and page data: a sample. */
		if (i >= IH_END && i < IMAGE_HDR_LEN && i % 512)
			continue;
		if (i >= IMAGE_HDR_LEN &&
		    i < len - 2 * IMAGE_REGION_LEN - 5 * IMAGE_RUN_LEN &&
		    i % 61)
			continue;
		memcpy(c, b, len);
		c[i] ^= 0x5a;
		if (try_open(c, len, 1, err, sizeof(err)) == 0) {
			fprintf(stderr, "byte %zu changed: not noticed\n", i);
			missed++;
		}
	}
	CHECK(missed == 0);
	for (size_t n = 0; n < len; n += n < IMAGE_HDR_LEN ? 1024 : 512)
		CHECK(try_open(b, n, 1, err, sizeof(err)) < 0);
	memcpy(c, b, len);
	c[IMAGE_HDR_LEN + 5] ^= 1;
	CHECK(try_open(c, len, 0, err, sizeof(err)) == 0);
	CHECK(try_open(c, len, 1, err, sizeof(err)) < 0 &&
	      strstr(err, "checksum mismatch") != NULL);
	memcpy(c, b, len);
	c[IH_VERSION] = 3;
	CHECK(try_open(c, len, 0, err, sizeof(err)) < 0 &&
	      strstr(err, "version 3") != NULL);
	free(c);
}

/*
 * Data runs stop at IMAGE_RUN_WRITE, page by page or given all at once,
 * so that a restore reads little for one page, and never past
 * IMAGE_RUN_BYTES, so that a reader's buffer is bounded.
 */
static void
long_runs(void)
{
	struct image_region r = {0};
	struct image_writer w;
	struct image im;
	static uint8_t page[PS];
	uint64_t n = 2 * IMAGE_RUN_WRITE / PS + 3;
	static uint8_t all[(2 * IMAGE_RUN_WRITE / PS + 3) * PS];
	char err[256];
	int fd = memfd_create("long", 0);

	r.start = 0x100000;
	r.length = n * PS;
	r.page_size = PS;
	r.kind = 1;
	CHECK(image_writer_begin(&w, fd, &r, 1, 1) == 0);
	for (uint64_t p = 0; p < n; p++) {
		page[0] = (uint8_t)p;
		CHECK(image_write_data(&w, 0, p, 1, page) == 0);
	}
	CHECK(image_writer_end(&w) == 0);
	image_writer_free(&w);
	CHECK(image_open(&im, fd, err, sizeof(err)) == 0);
	CHECK(im.nruns == 3);
	CHECK(im.runs[0].npages == IMAGE_RUN_WRITE / PS);
	CHECK(im.runs[2].npages == 3);
	CHECK(image_verify(&im, err, sizeof(err)) == 0);
	image_close(&im);
	/* One call for every page, after one page alone. */
	fd = memfd_create("long", 0);
	CHECK(image_writer_begin(&w, fd, &r, 1, 1) == 0);
	CHECK(image_write_data(&w, 0, 0, 1, page) == 0);
	CHECK(image_write_data(&w, 0, 1, n - 1, all) == 0);
	CHECK(image_writer_end(&w) == 0);
	image_writer_free(&w);
	CHECK(image_open(&im, fd, err, sizeof(err)) == 0);
	CHECK(im.nruns == 3);
	CHECK(im.runs[0].npages == IMAGE_RUN_WRITE / PS);
	CHECK(im.runs[1].npages == IMAGE_RUN_WRITE / PS);
	CHECK(im.runs[2].npages == 3);
	CHECK(image_verify(&im, err, sizeof(err)) == 0);
	image_close(&im);
}

int
main(void)
{
	uint8_t *b;
	size_t len;

	make(&b, &len);
	round_trip(b, len);
	corruptions(b, len);
	long_runs();
	free(b);
	return UNIT_DONE();
}

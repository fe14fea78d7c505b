/*
 * Unit tests for snapshot images (proto/image.h): what the writer makes
 * reads back, and the reader refuses a file changed anywhere, cut short,
 * with tables that contradict each other, or with regions outside the
 * user address space.
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

/*
 * A one-region image made by hand (as a hostile client would), its
 * checksums right: the region at start, length bytes of 4 KiB pages, one
 * run of cls. Into a memfd; the descriptor.
 */
static int
craft(uint64_t start, uint64_t length, uint32_t cls)
{
	struct image_region r = {0};
	struct image_run u = {0};
	struct image_fmt_hdr h = {0};
	uint8_t tables[IMAGE_REGION_LEN + IMAGE_RUN_LEN] = {0};
	uint8_t hdr[IMAGE_HDR_LEN];
	int fd = memfd_create("crafted", 0);

	r.start = start;
	r.length = length;
	r.page_size = PS;
	r.kind = 1;
	r.nruns = 1;
	u.cls = cls;
	u.npages = length / PS;
	if (cls == IMAGE_ZERO)
		r.zero_pages = u.npages;
	else
		r.hole_pages = u.npages;
	image_fmt_put_region(tables, &r);
	image_fmt_put_run(tables + IMAGE_REGION_LEN, &u);
	h.nregions = 1;
	h.nruns = 1;
	h.data_off = h.regions_off = IMAGE_HDR_LEN;
	h.runs_off = IMAGE_HDR_LEN + IMAGE_REGION_LEN;
	h.file_len = IMAGE_HDR_LEN + sizeof(tables);
	EVP_Digest(tables, sizeof(tables), h.tables_sha, NULL, EVP_sha256(),
		   NULL);
	CHECK(image_fmt_put_hdr(hdr, &h) == 0);
	CHECK(write(fd, hdr, sizeof(hdr)) == (ssize_t)sizeof(hdr));
	CHECK(write(fd, tables, sizeof(tables)) == (ssize_t)sizeof(tables));
	return fd;
}

/* Opens a crafted image: 0, or -1 with the reason in err. */
static int
open_crafted(uint64_t start, uint64_t length, uint32_t cls, char *err,
	     size_t errlen)
{
	struct image im;
	int fd = craft(start, length, cls);

	if (image_open(&im, fd, err, errlen) < 0) {
		close(fd);
		return -1;
	}
	image_close(&im);
	return 0;
}

/*
 * The shapes of security review finding 4: a region's pages cost the
 * file one record, so its address and length are what bound them. A hole
 * of 2^62 bytes, a region that ends past 2^47 or wraps, one that starts
 * there: refused, saying so. The whole user address space in one hole,
 * and a page that ends at 2^47: taken.
 */
static void
crafted_regions(void)
{
	const uint64_t base = 0x500000000000ull;
	char err[256] = "";

	CHECK(open_crafted(base, 1ull << 62, IMAGE_HOLE, err, sizeof(err)) <
		      0 &&
	      strstr(err, "user address space") != NULL);
	CHECK(open_crafted(base, 1ull << 62, IMAGE_ZERO, err, sizeof(err)) < 0);
	CHECK(open_crafted(0x7ffffff00000ull, 2 << 20, IMAGE_HOLE, err,
			   sizeof(err)) < 0 &&
	      strstr(err, "user address space") != NULL);
	/* start + length wraps to 4096. */
	CHECK(open_crafted(0x7fff00000000ull, 0 - 0x7fff00000000ull + PS,
			   IMAGE_HOLE, err, sizeof(err)) < 0 &&
	      strstr(err, "user address space") != NULL);
	CHECK(open_crafted(IMAGE_ADDR_END, PS, IMAGE_HOLE, err, sizeof(err)) <
	      0);
	CHECK(open_crafted(IMAGE_ADDR_END - PS, PS, IMAGE_ZERO, err,
			   sizeof(err)) == 0 ||
	      !fprintf(stderr, "%s\n", err));
	CHECK(open_crafted(0, IMAGE_ADDR_END, IMAGE_HOLE, err, sizeof(err)) ==
		      0 ||
	      !fprintf(stderr, "%s\n", err));
}

/*
 * Finding 5's file: a sparse image whose header is right and whose
 * tables, 64 MiB of zeros by its word, have the wrong checksum. Refused
 * for that, read a step at a time; and a reader told to stop, stops.
 */
static void
sparse_tables(void)
{
	struct image_fmt_hdr h = {0};
	uint8_t hdr[IMAGE_HDR_LEN];
	struct image im;
	atomic_int stop = 1;
	char err[256] = "";
	int fd = memfd_create("sparse", 0);

	h.nregions = 1;
	h.data_off = h.regions_off = IMAGE_HDR_LEN;
	h.runs_off = IMAGE_HDR_LEN + IMAGE_REGION_LEN;
	h.nruns = (64u << 20) / IMAGE_RUN_LEN;
	h.file_len = h.runs_off + h.nruns * IMAGE_RUN_LEN;
	CHECK(image_fmt_put_hdr(hdr, &h) == 0);
	CHECK(write(fd, hdr, sizeof(hdr)) == (ssize_t)sizeof(hdr));
	CHECK(ftruncate(fd, (off_t)h.file_len) == 0);
	CHECK(image_open(&im, fd, err, sizeof(err)) < 0 &&
	      strstr(err, "checksum mismatch") != NULL);
	CHECK(image_open_stoppable(&im, fd, &stop, err, sizeof(err)) < 0 &&
	      strcmp(err, "stopped") == 0);
	close(fd);
}

/* The writer makes no image the reader would refuse for its addresses. */
static void
writer_bounds(void)
{
	struct image_region r = {0};
	struct image_writer w;
	int fd = memfd_create("w", 0);

	r.start = IMAGE_ADDR_END - PS;
	r.length = 2 * PS;
	r.page_size = PS;
	r.kind = 1;
	CHECK(image_writer_begin(&w, fd, &r, 1, 1) < 0 && errno == EINVAL);
	close(fd);
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
	crafted_regions();
	sparse_tables();
	writer_bounds();
	free(b);
	return UNIT_DONE();
}

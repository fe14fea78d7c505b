/*
 * image info|check FILE, image dump FILE START-END: a snapshot image read
 * here in the client, with the reader the daemon uses (proto/image.h); no
 * daemon is asked. A corrupt image is reported, never trusted.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/client.h"
#include "proto/image.h"
#include "proto/range.h"

static const char *
kind_name(uint32_t k)
{
	static const char *names[] = {
		"unknown",    "anon-private", "anon-shared", "memfd",
		"shmem-file", "hugetlb",      "file-private"};

	return k < sizeof(names) / sizeof(names[0]) ? names[k] : "unknown";
}

/* Opens and checks FILE's tables; exits 1 with the reason when it cannot. */
static void
open_image(struct image *im, const char *path)
{
	char err[256];
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		fprintf(stderr, "uffd-client: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	if (image_open(im, fd, err, sizeof(err)) < 0) {
		fprintf(stderr, "uffd-client: %s: corrupt image: %s\n", path,
			err);
		close(fd);
		exit(1);
	}
}

/* The region table and the totals by class. */
static void
print_info(const struct image *im, const char *path)
{
	uint64_t tot[4] = {0}, bytes = 0;
	char b1[32], b2[32];
	time_t t = (time_t)im->created;
	char when[64] = "?";
	struct tm tm;

	if (gmtime_r(&t, &tm) != NULL)
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	printf("image %s: format %d, process %d, taken %s\n", path,
	       IMAGE_VERSION, (int)im->pid, when);
	for (uint32_t i = 0; i < im->nregions; i++) {
		const struct image_region *r = &im->regions[i];

		printf("region %u 0x%" PRIx64 "-0x%" PRIx64
		       " %s page %u: %" PRIu64 " data, %" PRIu64
		       " zero, %" PRIu64 " hole pages%s%s\n",
		       i, r->start, r->start + r->length, kind_name(r->kind),
		       r->page_size, r->data_pages, r->zero_pages,
		       r->hole_pages, r->name[0] ? " " : "", r->name);
		tot[IMAGE_DATA] += r->data_pages;
		tot[IMAGE_ZERO] += r->zero_pages;
		tot[IMAGE_HOLE] += r->hole_pages;
		bytes += r->length;
	}
	printf("total: %u regions, %s of memory; %" PRIu64 " data, %" PRIu64
	       " zero, %" PRIu64 " hole pages; %" PRIu64 " runs; %s of data\n",
	       im->nregions, human_bytes((double)bytes, b1, sizeof(b1)),
	       tot[IMAGE_DATA], tot[IMAGE_ZERO], tot[IMAGE_HOLE], im->nruns,
	       human_bytes((double)im->data_len, b2, sizeof(b2)));
}

/* Verifies every data run's checksum; exits 1 at the first bad one. */
static void
verify(const struct image *im, const char *path)
{
	char err[256];

	if (image_verify(im, err, sizeof(err)) < 0) {
		fprintf(stderr, "uffd-client: %s: corrupt image: %s\n", path,
			err);
		exit(1);
	}
}

/*
 * Writes the bytes of [lo, hi) of run u (clipped to it) to stdout: the
 * data read and checked, zeros for zero pages and holes (what a process
 * restored from the image reads there, but for a private file mapping's
 * holes, which are the file's own bytes).
 */
static int
dump_run(const struct image *im, const struct image_run *u, uint64_t lo,
	 uint64_t hi, uint8_t *buf, const char *path)
{
	const struct image_region *r = &im->regions[u->region];
	uint64_t a = r->start + u->first_page * r->page_size;
	uint64_t b = a + image_run_bytes(im, u);
	char err[256];

	if (b <= lo || a >= hi)
		return 0;
	if (u->cls == IMAGE_DATA) {
		if (image_run_read(im, u, buf, err, sizeof(err)) < 0) {
			fprintf(stderr, "uffd-client: %s: corrupt image: %s\n",
				path, err);
			return -1;
		}
	} else {
		memset(buf, 0, (size_t)(b - a));
	}
	if (a < lo)
		buf += lo - a, a = lo;
	if (b > hi)
		b = hi;
	return fwrite(buf, 1, (size_t)(b - a), stdout) == (size_t)(b - a) ? 0
									  : -1;
}

/* image dump FILE START-END: the range must be covered by the image. */
static int
dump(const struct image *im, const char *path, const char *arg, const char *u)
{
	struct range rg;
	uint64_t at;
	uint8_t *buf = malloc(IMAGE_RUN_BYTES);

	if (range_parse(arg, &rg) < 0 || buf == NULL)
		die_usage(u);
	at = rg.start;
	for (uint32_t i = 0; i < im->nregions && at < rg.end; i++) {
		const struct image_region *r = &im->regions[i];

		if (r->start + r->length <= at)
			continue;
		if (r->start > at)
			break;
		for (uint64_t k = r->first_run; k < r->first_run + r->nruns;
		     k++)
			if (dump_run(im, &im->runs[k], rg.start, rg.end, buf,
				     path) < 0)
				exit(1);
		at = r->start + r->length;
	}
	free(buf);
	if (at < rg.end) {
		fprintf(stderr,
			"uffd-client: %s: 0x%" PRIx64
			" is not in the image; dump stopped there\n",
			path, at);
		return 1;
	}
	return fflush(stdout) == 0 ? 0 : 1;
}

/* image info FILE | image check FILE | image dump FILE START-END */
int
cmd_image(const struct cmd_entry *self, int argc, char **argv)
{
	const char *u = self->usage;
	struct image im;
	int rc = 0;

	if (argc < 3)
		die_usage(u);
	if (strcmp(argv[1], "dump") == 0 ? argc != 4 : argc != 3)
		die_usage(u);
	if (strcmp(argv[1], "info") != 0 && strcmp(argv[1], "check") != 0 &&
	    strcmp(argv[1], "dump") != 0)
		die_usage(u);
	open_image(&im, argv[2]);
	if (strcmp(argv[1], "dump") == 0) {
		rc = dump(&im, argv[2], argv[3], u);
	} else {
		if (strcmp(argv[1], "info") == 0)
			print_info(&im, argv[2]);
		verify(&im, argv[2]);
		printf("%s: image ok: %" PRIu64 " runs, every checksum "
		       "verified\n",
		       argv[2], im.nruns);
	}
	image_close(&im);
	return rc;
}

/*
 * image info|check FILE, image dump FILE START-END: a snapshot image read
 * here in the client, with the reader the daemon uses (proto/image.h); no
 * daemon is asked. A corrupt image is reported, never trusted.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/client.h"
#include "proto/frame.h"
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
	printf("image %s: format %u, process %d, taken %s\n", path, im->version,
	       (int)im->pid, when);
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
	if (im->nws)
		printf("working set: %" PRIu64 " pages, %s, prefetched first "
		       "on restore\n",
		       im->nws,
		       human_bytes((double)im->ws_bytes, b2, sizeof(b2)));
	else
		printf("working set: none\n");
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

/*
 * The recorded working set of migration id, once its recording is over
 * (status every 100 ms); the keys are the caller's to free. -1 when the
 * migration is unknown or failed.
 */
static ssize_t
fetch_working_set(const char *id, uint64_t **keys)
{
	struct timespec tick = {0, 100 * 1000 * 1000};
	int fd = connect_daemon();

	for (;;) {
		Uffdd__StatusRequest req = UFFDD__STATUS_REQUEST__INIT;
		Uffdd__StatusReply *rep;
		const Uffdd__MigrationStatus *s = NULL;
		ssize_t n;

		req.id = (char *)id;
		rep = (Uffdd__StatusReply *)call(fd, FRAME_CTL_STATUS,
						 &req.base,
						 FRAME_CTL_STATUS_REPLY);
		/* The ID names the image's source too: take the target's. */
		for (size_t i = 0; i < rep->n_migrations; i++)
			if (strcmp(rep->migrations[i]->role, "destination") ==
			    0)
				s = rep->migrations[i];
		if (s == NULL || strcmp(s->state, "failed") == 0) {
			fprintf(stderr,
				"uffd-client: migration %s %s: no working "
				"set to store\n",
				id, s ? "failed" : "is gone");
			frame_free(&rep->base);
			close(fd);
			return -1;
		}
		if (s->working_set_closed) {
			n = (ssize_t)s->n_working_set;
			*keys = malloc((n ? (size_t)n : 1) * sizeof(**keys));
			if (*keys == NULL)
				exit(1);
			memcpy(*keys, s->working_set,
			       (size_t)n * sizeof(**keys));
			frame_free(&rep->base);
			close(fd);
			return n;
		}
		frame_free(&rep->base);
		nanosleep(&tick, NULL);
	}
}

/*
 * Writes path again with the working set as its section: a new file
 * beside it, checked, then renamed over it; the old one, if anything
 * fails, is left as it was. The daemon that restores from path holds its
 * own descriptor of the old file, which the rename does not touch.
 */
static int
store_working_set(const char *path, const uint64_t *keys, size_t n)
{
	size_t len = strlen(path) + 16;
	char *tmp = malloc(len), *dup = strdup(path), err[256];
	struct image im, chk;
	int out, dfd, rc = 1;
	int64_t kept;

	if (tmp == NULL || dup == NULL)
		exit(1);
	open_image(&im, path);
	snprintf(tmp, len, "%s.wsXXXXXX", path);
	if ((out = mkostemp(tmp, O_CLOEXEC)) < 0) {
		fprintf(stderr, "uffd-client: %s: %s\n", tmp, strerror(errno));
		goto out;
	}
	kept = image_ws_store(&im, out, keys, n, err, sizeof(err));
	if (kept < 0) {
		fprintf(stderr, "uffd-client: %s: working set not stored: %s\n",
			path, err);
		close(out);
		unlink(tmp);
		goto out;
	}
	/* Read back with the reader every restore uses, before the rename. */
	if (image_open(&chk, out, err, sizeof(err)) < 0) {
		fprintf(stderr, "uffd-client: %s: working set not stored: %s\n",
			path, err);
		close(out);
		unlink(tmp);
		goto out;
	}
	if (rename(tmp, path) < 0) {
		fprintf(stderr, "uffd-client: %s: working set not stored: %s\n",
			path, strerror(errno));
		image_close(&chk);
		unlink(tmp);
		goto out;
	}
	if ((dfd = open(dirname(dup), O_RDONLY | O_DIRECTORY)) >= 0) {
		fsync(dfd);
		close(dfd);
	}
	printf("working set: %" PRId64 " pages (%" PRIu64
	       " bytes) stored in %s\n",
	       kept, chk.ws_bytes, path);
	image_close(&chk);
	rc = 0;
out:
	image_close(&im);
	free(tmp);
	free(dup);
	return rc;
}

int
image_learn(const char *id, const char *path)
{
	uint64_t *keys = NULL;
	ssize_t n = fetch_working_set(id, &keys);
	int rc;

	if (n < 0)
		return 1;
	if (n == 0) {
		fprintf(stderr,
			"uffd-client: %s: no page was faulted: no "
			"working set to store\n",
			id);
		free(keys);
		return 1;
	}
	rc = store_working_set(path, keys, (size_t)n);
	free(keys);
	return rc;
}

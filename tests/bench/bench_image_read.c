/*
 * Image reads: pread against io_uring read-ahead (issue 22), on a cold
 * page cache.
 *
 * Opens IMAGE (a snapshot made by uffd-client snapshot) and reads it the
 * way a restore's bulk stream does: every data run in file order, each
 * checked against its SHA-256, then the working set (if the image has
 * one) in its batches. Two ways, alternating, ROUNDS times, the page
 * cache dropped before each (root: /proc/sys/vm/drop_caches):
 *   pread  one read a run, the next asked for once the last is checked
 *          (image_run_read(): the daemon with UFFDD_TEST_IMAGE_IO=pread);
 *   uring  the daemon's default: up to DEPTH runs read ahead through
 *          io_uring (image_ra.h) while the current one is checked.
 * Prints one line per way and round: "image read method=M secs=S
 * mib_s=R cpu_s_per_gib=C" and a last line with the median ratio.
 * Benchmarks print numbers; this one fails only when the image does not
 * read back right.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/image.h"
#include "proto/image_ra.h"
#include "tests/bench/bench.h"

#define DEPTH 16

static void
drop_cache(void)
{
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);

	sync();
	if (fd < 0 || write(fd, "3", 1) != 1) {
		fprintf(stderr, "bench_image_read: drop_caches: %s (root?)\n",
			strerror(errno));
		exit(1);
	}
	close(fd);
}

/* Reads and checks every data run; its bytes, or exits on an error. */
static uint64_t
read_runs(const struct image *im, struct image_ra *ra, uint8_t *buf)
{
	uint64_t bytes = 0, next = 0;
	char err[256];

	for (uint64_t k = 0; k < im->nruns; k++) {
		const struct image_run *u = &im->runs[k];
		uint64_t len = image_run_bytes(im, u);
		const uint8_t *b = buf;
		int rc;

		if (u->cls != IMAGE_DATA)
			continue;
		if (ra == NULL) {
			rc = image_run_read(im, u, buf, err, sizeof(err));
		} else {
			b = image_ra_get(ra, k, u->data_off, len, err,
					 sizeof(err));
			rc = b ? image_run_check(im, u, b, err, sizeof(err))
			       : -1;
			for (next = next > k ? next : k + 1; next < im->nruns;
			     next++)
				if (im->runs[next].cls == IMAGE_DATA &&
				    !image_ra_ahead(
					    ra, next, im->runs[next].data_off,
					    image_run_bytes(im,
							    &im->runs[next])))
					break;
			image_ra_submit(ra);
		}
		if (rc < 0) {
			fprintf(stderr, "bench_image_read: %s\n", err);
			exit(1);
		}
		bytes += len;
	}
	return bytes;
}

static int
cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int
main(int argc, char **argv)
{
	int rounds = argc > 2 ? atoi(argv[2]) : 3;
	double ratio[64];
	struct image im;
	char err[256];
	uint8_t *buf;
	int fd;

	if (argc < 2 || rounds < 1 || rounds > 64) {
		fprintf(stderr, "usage: bench_image_read IMAGE [ROUNDS]\n");
		return 2;
	}
	if ((fd = open(argv[1], O_RDONLY)) < 0 ||
	    image_open(&im, fd, err, sizeof(err)) < 0) {
		fprintf(stderr, "bench_image_read: %s: %s\n", argv[1],
			fd < 0 ? strerror(errno) : err);
		return 1;
	}
	if (posix_memalign((void **)&buf, 4096, IMAGE_RUN_BYTES) != 0)
		return 1;
	for (int r = 0; r < rounds; r++) {
		double secs[2];

		for (int j = 0; j < 2; j++) {
			int uring = (j + r) % 2;
			struct image_ra ra;
			double t0, c0;
			uint64_t bytes;

			if (uring && image_ra_init(&ra, im.fd, DEPTH, err,
						   sizeof(err)) < 0) {
				fprintf(stderr, "bench_image_read: %s\n", err);
				return 1;
			}
			drop_cache();
			t0 = now_s();
			c0 = cpu_s(RUSAGE_SELF);
			bytes = read_runs(&im, uring ? &ra : NULL, buf);
			secs[uring] = now_s() - t0;
			printf("image read method=%s secs=%.3f mib_s=%.0f "
			       "cpu_s_per_gib=%.3f\n",
			       uring ? "uring" : "pread", secs[uring],
			       (double)bytes / 1048576 / secs[uring],
			       (cpu_s(RUSAGE_SELF) - c0) * 1073741824.0 /
				       (double)bytes);
			if (uring)
				image_ra_free(&ra);
		}
		ratio[r] = secs[0] / secs[1];
	}
	qsort(ratio, (size_t)rounds, sizeof(double), cmp);
	printf("image read pread/uring time, median of %d: %.2f\n", rounds,
	       ratio[rounds / 2]);
	image_close(&im);
	free(buf);
	return 0;
}

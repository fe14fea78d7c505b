/*
 * A source that serves a snapshot image instead of a frozen process
 * (docs/image-format.md, "Restoring from an image"): export --image for
 * remote destinations, and the in-daemon source an attach --image pairs
 * its destination with. The region table is the image's; the page
 * classes give the data bitmap; the bytes of pages [P, P+n) of a region
 * are read from the file, each data run read whole and its SHA-256
 * checked before any of its bytes leaves (source_image_read()). Everything
 * else, lanes, requests, the bulk stream, HAVE and resume, is the source
 * role's as for a process. The file is opened and its tables checked on a
 * worker thread (image_job_run(), worker.h), as long as the file makes
 * it; the loop makes the source of what it gives back.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/conn.h"
#include "daemon/fdpass.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/migration.h"
#include "daemon/pagemap.h"
#include "daemon/source/internal.h"
#include "daemon/worker.h"
#include "proto/image.h"

#define NO_RUN UINT64_MAX

static int ws_grid(struct src_image *, char *err, size_t errlen);

/*
 * The file handed over must be one the daemon may read without harm: a
 * regular file the client opened for reading, and not on FUSE
 * (fdpass_file()).
 */
static int
check_file(int fd, char *err, size_t errlen)
{
	struct stat st;
	int fl;

	if (fdpass_file(fd, "image", &st, &fl, err, errlen) < 0)
		return -1;
	if (!S_ISREG(st.st_mode))
		snprintf(err, errlen,
			 "the image handed over is not a regular file");
	else if ((fl & O_ACCMODE) == O_WRONLY)
		snprintf(err, errlen,
			 "the image handed over is not open for reading");
	else
		return 0;
	return -1;
}

/*
 * The image's regions as the source role holds them: each one's identity
 * for the table sent, and its data bitmap from the runs, a run's bits set
 * at once. A zero page of a private file mapping is data (zeros the
 * process wrote over the file's page): on the wire a ZERO marker there
 * means "the file's own page". On the worker: calloc, not xcalloc. The
 * bitmaps take a bit a page, which the address space bounds (2^35 pages
 * of 4 KiB in all: image.h, IMAGE_ADDR_END); a hole costs untouched
 * zeros. 0, or -1 with err set.
 */
static int
image_regions(const struct image *im, struct src_region **out, char *err,
	      size_t errlen)
{
	struct src_region *regs = calloc(im->nregions, sizeof(*regs));

	*out = regs;
	for (uint32_t ri = 0; regs != NULL && ri < im->nregions; ri++) {
		const struct image_region *ir = &im->regions[ri];
		struct src_region *sr = &regs[ri];
		int file_private = ir->kind == REGION_FILE_PRIVATE;

		sr->r.index = ri;
		snprintf(sr->r.name, sizeof(sr->r.name), "%s", ir->name);
		sr->r.start = ir->start;
		sr->r.length = ir->length;
		sr->r.page_size = ir->page_size;
		sr->r.kind = (enum region_kind)ir->kind;
		sr->r.shared = (int)ir->shared;
		sr->r.file_off = ir->file_off;
		sr->npages = ir->length / ir->page_size;
		sr->cache_fd = -1;
		sr->file_fd = -2; /* an image is read, not a process */
		sr->data = calloc(bit_words(sr->npages), sizeof(uint64_t));
		sr->sent = calloc(bit_words(sr->npages), sizeof(uint64_t));
		if (sr->data == NULL || sr->sent == NULL) {
			snprintf(err, errlen,
				 "out of memory for the bitmaps of region %u "
				 "(%llu pages)",
				 ri, (unsigned long long)sr->npages);
			return -1;
		}
		for (uint64_t k = ir->first_run; k < ir->first_run + ir->nruns;
		     k++) {
			const struct image_run *u = &im->runs[k];

			if (u->cls != IMAGE_DATA &&
			    !(u->cls == IMAGE_ZERO && file_private))
				continue;
			bit_set_range(sr->data, u->first_page,
				      u->first_page + u->npages);
			sr->r.data_pages += u->npages;
		}
		sr->r.zero_pages = sr->npages - sr->r.data_pages;
	}
	if (regs == NULL)
		snprintf(err, errlen, "out of memory for %u regions",
			 im->nregions);
	return regs == NULL ? -1 : 0;
}

/* Regions as image_regions() made them, or began to. */
static void
regions_free(struct src_region *regs, uint32_t n)
{
	for (uint32_t i = 0; regs != NULL && i < n; i++) {
		free(regs[i].data);
		free(regs[i].sent);
	}
	free(regs);
}

/* Reads ahead this many runs or batches: see docs/image-format.md. */
#define IMG_RA_DEPTH 16

/*
 * Reads ahead through io_uring unless it cannot be used (then pread, and
 * the log says why) or UFFDD_TEST_IMAGE_IO=pread asks for pread (the
 * benchmark compares the two).
 */
static void
ra_start(struct src_image *si)
{
	const char *io = getenv("UFFDD_TEST_IMAGE_IO");
	char err[128];

	if (io != NULL && strcmp(io, "pread") == 0)
		log_info("image: read with pread (UFFDD_TEST_IMAGE_IO=pread)");
	else if (image_ra_init(&si->ra, si->img.fd, IMG_RA_DEPTH, err,
			       sizeof(err)) < 0)
		log_warnx("image: read with pread, not io_uring: %s", err);
}

/*
 * What the worker makes of the file handed over: the file checked, the
 * image opened and every table checked (image_open_stoppable()). It takes
 * the descriptor alone and touches nothing of the daemon's, so that it
 * can move to another process. 0, or -1 with err set (fd left open).
 */
static int
image_load(int fd, struct image *im, const atomic_int *stop, char *err,
	   size_t errlen)
{
	if (check_file(fd, err, errlen) < 0)
		return -1;
	return image_open_stoppable(im, fd, stop, err, errlen);
}

/*
 * An image opened off the loop (source_image_create()): the file handed
 * over, the caller waiting, and what the worker made: the image and the
 * regions, or err.
 */
struct image_job {
	int fd; /* until the image holds it */
	int local;
	source_image_cb done;
	void *arg;
	struct src_image *si;
	struct src_region *regs;
	char err[256];
};

/* On the worker (worker.h): everything the file's size can make long. */
static void
image_job_run(void *arg, const atomic_int *stop)
{
	struct image_job *j = arg;
	struct src_image *si = calloc(1, sizeof(*si));

	if ((j->si = si) == NULL) {
		snprintf(j->err, sizeof(j->err), "out of memory");
		return;
	}
	if (image_load(j->fd, &si->img, stop, j->err, sizeof(j->err)) < 0) {
		si->img.fd = -1; /* still j->fd's */
		return;
	}
	j->fd = -1;
	if (image_regions(&si->img, &j->regs, j->err, sizeof(j->err)) < 0 ||
	    ws_grid(si, j->err, sizeof(j->err)) < 0)
		return;
	si->local = j->local;
	for (int k = 0; k < IMG_SLOTS; k++)
		si->run[k] = NO_RUN;
}

/* Back on the loop: the source made of it, or the job undone. */
static void
image_job_done(void *arg, const char *why)
{
	struct image_job *j = arg;
	struct src_image *si = j->si;
	struct source *s = NULL;

	if (why != NULL)
		snprintf(j->err, sizeof(j->err), "%s", why);
	if (j->err[0] == '\0') {
		ra_start(si);
		s = source_new_bare(NULL);
		s->img = si;
		s->keep_source = 1; /* there is no process to end */
		s->nregs = si->img.nregions;
		s->regs = j->regs;
		for (size_t i = 0; i < s->nregs; i++)
			s->m->cnt.pages_total += s->regs[i].npages;
		source_start(s);
	} else {
		if (si != NULL) {
			regions_free(j->regs, si->img.nregions);
			free(si->ws_batch);
			image_close(&si->img);
			free(si);
		}
		if (j->fd >= 0)
			close(j->fd);
	}
	j->done(j->arg, s, s == NULL ? j->err : NULL);
	free(j);
}

void
source_image_create(int fd, int local, source_image_cb done, void *arg)
{
	struct image_job *j = xcalloc(1, sizeof(*j));

	j->fd = fd;
	j->local = local;
	j->done = done;
	j->arg = arg;
	worker_start(image_job_run, image_job_done, j);
}

/*
 * Queues reads of the data runs after k that the bulk stream will want:
 * in accepted regions, with a page not sent yet.
 */
static void
runs_ahead(struct source *s, uint64_t k)
{
	struct src_image *si = s->img;
	const struct image *im = &si->img;

	if (si->ra_next <= k || k < si->ra_last)
		si->ra_next = k + 1;
	si->ra_last = k;
	for (; si->ra_next < im->nruns; si->ra_next++) {
		const struct image_run *u = &im->runs[si->ra_next];
		const struct src_region *sr = &s->regs[u->region];
		uint64_t end = u->first_page + u->npages;

		if (u->cls != IMAGE_DATA || !sr->accepted ||
		    bit_next_clear(sr->sent, u->first_page, end) >= end)
			continue;
		if (!image_ra_ahead(&si->ra, si->ra_next, u->data_off,
				    image_run_bytes(im, u)))
			break;
	}
	image_ra_submit(&si->ra);
}

/*
 * The bulk stream's run k, checked, through the reads ahead; NULL when it
 * cannot be read whole or its checksum is wrong: the migration fails.
 */
static const uint8_t *
run_ahead(struct source *s, uint64_t k)
{
	struct src_image *si = s->img;
	const struct image_run *u = &si->img.runs[k];
	int again = image_ra_is_current(&si->ra, k);
	const uint8_t *b;
	char err[256];

	b = image_ra_get(&si->ra, k, u->data_off, image_run_bytes(&si->img, u),
			 err, sizeof(err));
	if (b != NULL && !again)
		metrics_image_read(si->ra.ok, image_run_bytes(&si->img, u));
	if (b != NULL && !again &&
	    image_run_check(&si->img, u, b, err, sizeof(err)) < 0)
		b = NULL;
	if (b == NULL) {
		source_fail(s, "image: %s", err);
		return NULL;
	}
	if (!again)
		runs_ahead(s, k);
	return b;
}

/*
 * The run k, checked, in one of the buffers (struct src_image); NULL when
 * it cannot be read whole or its checksum is wrong: the migration fails.
 */
static const uint8_t *
checked_run(struct source *s, uint64_t k, int demand)
{
	struct src_image *si = s->img;
	uint64_t need = image_run_bytes(&si->img, &si->img.runs[k]);
	char err[256];
	int slot = 0;

	if (!demand && si->ra.ok)
		return run_ahead(s, k);
	for (int j = 0; j < IMG_SLOTS; j++) {
		if (si->run[j] == k) {
			si->used[j] = ++si->tick;
			return si->buf[j];
		}
	}
	/* The bulk stream has slot 0; demand the least recently used other. */
	if (demand) {
		slot = 1;
		for (int j = 2; j < IMG_SLOTS; j++)
			if (si->used[j] < si->used[slot])
				slot = j;
	}
	if (need > IMAGE_RUN_BYTES) {
		source_fail(s, "image: a run larger than %u bytes",
			    IMAGE_RUN_BYTES);
		return NULL;
	}
	si->run[slot] = NO_RUN;
	if (si->cap[slot] < need) {
		free(si->buf[slot]);
		si->buf[slot] = NULL;
		if (posix_memalign((void **)&si->buf[slot], 4096, need) != 0)
			fatal("image buffer");
		si->cap[slot] = need;
	}
	if (image_run_read(&si->img, &si->img.runs[k], si->buf[slot], err,
			   sizeof(err)) < 0) {
		source_fail(s, "image: %s", err);
		return NULL;
	}
	si->run[slot] = k;
	si->used[slot] = ++si->tick;
	return si->buf[slot];
}

int
source_image_read(struct source *s, const struct src_region *sr, uint64_t page,
		  uint8_t *dst, uint64_t len, int demand)
{
	const struct image *im = &s->img->img;
	uint64_t ps = sr->r.page_size, end = page + len / ps;
	uint64_t lo =
		(uint64_t)(image_run_of(im, sr->r.index, page) - im->runs);

	for (uint64_t k = lo; page < end; k++) {
		const struct image_run *u = &im->runs[k];
		uint64_t from = page - u->first_page;
		uint64_t n = u->npages - from;
		const uint8_t *b;

		if (n > end - page)
			n = end - page;
		if (u->cls == IMAGE_DATA) {
			if ((b = checked_run(s, k, demand)) == NULL)
				return -1;
			memcpy(dst, b + from * ps, n * ps);
		} else {
			memset(dst, 0, n * ps);
		}
		dst += n * ps;
		page += n;
	}
	return 0;
}

/* At most this many bytes of working-set pages are read in one go. */
#define WS_BATCH_BYTES (1u << 20)
#define WS_KEY(b) (1ull << 63 | (b))

/*
 * Cuts the working set into batches of at most WS_BATCH_BYTES (one page
 * at least), once: batch b is pages [ws_batch[b], ws_batch[b + 1]). On the
 * worker: 0, or -1 with err set.
 */
static int
ws_grid(struct src_image *si, char *err, size_t errlen)
{
	const struct image *im = &si->img;
	uint64_t bytes = 0;

	if ((si->ws_batch = calloc(im->nws + 1, sizeof(uint64_t))) == NULL) {
		snprintf(err, errlen, "out of memory for the working set");
		return -1;
	}
	for (uint64_t i = 0; i < im->nws; i++) {
		uint32_t ps = im->regions[im->ws[i].region].page_size;

		if (i == 0 || bytes + ps > WS_BATCH_BYTES) {
			si->ws_batch[si->nws_batch++] = i;
			bytes = 0;
		}
		bytes += ps;
	}
	si->ws_batch[si->nws_batch] = im->nws;
	return 0;
}

/* The batch that holds working-set page i. */
static uint64_t
ws_batch_of(const struct src_image *si, uint64_t i)
{
	uint64_t lo = 0, hi = si->nws_batch;

	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (si->ws_batch[mid] <= i)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/*
 * Batch b's bytes, checked: through the reads ahead (queueing the batches
 * after it), or read into ws_buf. NULL on failure, with err set.
 */
static const uint8_t *
ws_read_batch(struct src_image *si, uint64_t b, char *err, size_t errlen)
{
	const struct image *im = &si->img;
	uint64_t first = si->ws_batch[b], n = si->ws_batch[b + 1] - first;
	int again = image_ra_is_current(&si->ra, WS_KEY(b));
	const uint8_t *p;

	if (!si->ra.ok) {
		if (si->ws_n && si->ws_first == first)
			return si->ws_buf;
		if (si->ws_buf == NULL &&
		    posix_memalign((void **)&si->ws_buf, 4096,
				   IMAGE_PAGE_MAX > WS_BATCH_BYTES
					   ? IMAGE_PAGE_MAX
					   : WS_BATCH_BYTES) != 0)
			fatal("working-set buffer");
		si->ws_n = 0;
		if (image_ws_read(im, first, n, si->ws_buf, err, errlen) < 0)
			return NULL;
		metrics_image_read(0, image_ws_bytes(im, first, n));
		si->ws_first = first;
		si->ws_n = n;
		return si->ws_buf;
	}
	p = image_ra_get(&si->ra, WS_KEY(b), im->ws[first].off,
			 image_ws_bytes(im, first, n), err, errlen);
	if (p == NULL || again)
		return p;
	metrics_image_read(si->ra.ok, image_ws_bytes(im, first, n));
	if (image_ws_check(im, first, n, p, err, errlen) < 0)
		return NULL;
	for (uint64_t a = b + 1; a < si->nws_batch; a++) {
		uint64_t f = si->ws_batch[a], m = si->ws_batch[a + 1] - f;

		if (!image_ra_ahead(&si->ra, WS_KEY(a), im->ws[f].off,
				    image_ws_bytes(im, f, m)))
			break;
	}
	image_ra_submit(&si->ra);
	return p;
}

int
source_image_ws_next(struct source *s, uint32_t *ri, uint64_t *page,
		     const uint8_t **bytes)
{
	struct src_image *si = s->img;
	const struct image *im = &si->img;
	char err[256];

	for (; si->ws_next < im->nws; si->ws_next++) {
		const struct image_ws *w = &im->ws[si->ws_next];
		const struct src_region *sr = &s->regs[w->region];
		uint64_t b = ws_batch_of(si, si->ws_next);
		const uint8_t *p;

		if (!sr->accepted)
			continue;
		if (bit_test(sr->sent, w->page)) {
			metrics.working_set[METRICS_WS_LATE]++;
			continue;
		}
		if ((p = ws_read_batch(si, b, err, sizeof(err))) == NULL) {
			source_fail(s, "image: %s", err);
			return -1;
		}
		*ri = w->region;
		*page = w->page;
		*bytes = p + (w->off - im->ws[si->ws_batch[b]].off);
		si->ws_next++;
		metrics.working_set[METRICS_WS_AHEAD]++;
		return 1;
	}
	return 0;
}

/*
 * A lane of an attach --image's source comes from this daemon only (a
 * socket pair, peer.h): its ID was never given out, and is no credential
 * for anyone else.
 */
int
source_image_lane_ok(const struct source *s, const struct conn *c)
{
	int dom = 0;
	socklen_t l = sizeof(dom);

	if (s->img == NULL || !s->img->local)
		return 1;
	return getsockopt(conn_fd(c), SOL_SOCKET, SO_DOMAIN, &dom, &l) == 0 &&
	       dom == AF_UNIX;
}

void
source_image_free(struct source *s)
{
	if (s->img == NULL)
		return;
	image_ra_free(&s->img->ra);
	image_close(&s->img->img);
	free(s->img->ws_batch);
	for (int j = 0; j < IMG_SLOTS; j++)
		free(s->img->buf[j]);
	free(s->img->ws_buf);
	free(s->img);
	s->img = NULL;
}

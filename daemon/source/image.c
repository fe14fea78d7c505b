/*
 * A source that serves a snapshot image instead of a frozen process
 * (docs/image-format.md, "Restoring from an image"): export --image for
 * remote destinations, and the in-daemon source an attach --image pairs
 * its destination with. The region table is the image's; the page
 * classes give the data bitmap; the bytes of pages [P, P+n) of a region
 * are read from the file, each data run read whole and its SHA-256
 * checked before any of its bytes leaves (source_image_read()). Everything
 * else, lanes, requests, the bulk stream, HAVE and resume, is the source
 * role's as for a process.
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
#include "daemon/migration.h"
#include "daemon/pagemap.h"
#include "daemon/source/internal.h"
#include "proto/image.h"

#define NO_RUN UINT64_MAX

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
 * Region ri of the image as the source role holds a region: its identity
 * for the table sent, its data bitmap from the runs. A zero page of a
 * private file mapping is data (zeros the process wrote over the file's
 * page): on the wire a ZERO marker there means "the file's own page".
 */
static void
image_region(struct source *s, uint32_t ri)
{
	const struct image *im = &s->img->img;
	const struct image_region *ir = &im->regions[ri];
	struct src_region *sr = &s->regs[ri];
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
	sr->data = xcalloc(bit_words(sr->npages), sizeof(uint64_t));
	sr->sent = xcalloc(bit_words(sr->npages), sizeof(uint64_t));
	sr->cache_fd = -1;
	for (uint64_t k = ir->first_run; k < ir->first_run + ir->nruns; k++) {
		const struct image_run *u = &im->runs[k];

		if (u->cls != IMAGE_DATA &&
		    !(u->cls == IMAGE_ZERO && file_private))
			continue;
		for (uint64_t p = u->first_page; p < u->first_page + u->npages;
		     p++)
			bit_set(sr->data, p);
		sr->r.data_pages += u->npages;
	}
	sr->r.zero_pages = sr->npages - sr->r.data_pages;
	s->m->pages_total += sr->npages;
}

struct source *
source_image_create(int fd, int local, uint32_t *code, char *err, size_t errlen)
{
	struct src_image *si;
	struct source *s;

	*code = ERR_INVALID;
	if (check_file(fd, err, errlen) < 0) {
		close(fd);
		return NULL;
	}
	si = xcalloc(1, sizeof(*si));
	si->local = local;
	for (int j = 0; j < IMG_SLOTS; j++)
		si->run[j] = NO_RUN;
	if (image_open(&si->img, fd, err, errlen) < 0) {
		free(si);
		return NULL;
	}
	s = source_new_bare(NULL);
	s->img = si;
	s->keep_source = 1; /* there is no process to end */
	s->nregs = si->img.nregions;
	s->regs = xcalloc(s->nregs, sizeof(*s->regs));
	for (uint32_t i = 0; i < si->img.nregions; i++)
		image_region(s, i);
	source_start(s);
	return s;
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

/*
 * Reads working-set pages from first on, as many as WS_BATCH_BYTES hold
 * (one at least), into ws_buf and checks each.
 */
static int
ws_fill(struct source *s, uint64_t first)
{
	struct src_image *si = s->img;
	const struct image *im = &si->img;
	uint64_t n = 0, bytes = 0;
	char err[256];

	while (first + n < im->nws) {
		uint32_t ps = im->regions[im->ws[first + n].region].page_size;

		if (n && bytes + ps > WS_BATCH_BYTES)
			break;
		bytes += ps;
		n++;
	}
	if (si->ws_buf == NULL && posix_memalign((void **)&si->ws_buf, 4096,
						 IMAGE_PAGE_MAX > WS_BATCH_BYTES
							 ? IMAGE_PAGE_MAX
							 : WS_BATCH_BYTES) != 0)
		fatal("working-set buffer");
	si->ws_n = 0;
	if (image_ws_read(im, first, n, si->ws_buf, err, sizeof(err)) < 0) {
		source_fail(s, "image: %s", err);
		return -1;
	}
	si->ws_first = first;
	si->ws_n = n;
	return 0;
}

int
source_image_ws_next(struct source *s, uint32_t *ri, uint64_t *page,
		     const uint8_t **bytes)
{
	struct src_image *si = s->img;
	const struct image *im = &si->img;

	for (; si->ws_next < im->nws; si->ws_next++) {
		const struct image_ws *w = &im->ws[si->ws_next];
		const struct src_region *sr = &s->regs[w->region];

		if (!sr->accepted || bit_test(sr->sent, w->page))
			continue;
		if (si->ws_next < si->ws_first ||
		    si->ws_next >= si->ws_first + si->ws_n) {
			if (ws_fill(s, si->ws_next) < 0)
				return -1;
		}
		*ri = w->region;
		*page = w->page;
		*bytes = si->ws_buf + (w->off - im->ws[si->ws_first].off);
		si->ws_next++;
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
	image_close(&s->img->img);
	for (int j = 0; j < IMG_SLOTS; j++)
		free(s->img->buf[j]);
	free(s->img->ws_buf);
	free(s->img);
	s->img = NULL;
}

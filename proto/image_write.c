/*
 * Writing a snapshot image (image.h, docs/image-format.md): page data from
 * the header's end on, each run's SHA-256 taken as its bytes go out; the
 * region table and the page index after the data, once their sizes are
 * known; the header last, then fsync. A file cut short anywhere before
 * that has no valid header, so no reader takes it.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "proto/image.h"
#include "proto/image_fmt.h"

/* Writes all of buf at off; -1 with errno set (ENOSPC, EIO...). */
static int
pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;

	while (len > 0) {
		ssize_t w = pwrite(fd, p, len, (off_t)off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			if (w == 0)
				errno = EIO;
			return -1;
		}
		p += w;
		len -= (size_t)w;
		off += (uint64_t)w;
	}
	return 0;
}

/* Records the first failure: every later call fails with it. */
static int
failed(struct image_writer *w, int e)
{
	if (w->err == 0)
		w->err = e;
	errno = w->err;
	return -1;
}

int
image_writer_begin(struct image_writer *w, int fd,
		   const struct image_region *regions, uint32_t nregions,
		   int32_t pid)
{
	memset(w, 0, sizeof(*w));
	w->fd = fd;
	w->pid = pid;
	if (nregions == 0 || nregions > IMAGE_REGIONS_MAX) {
		errno = EINVAL;
		return -1;
	}
	w->nregions = nregions;
	w->regions = calloc(nregions, sizeof(*w->regions));
	if (w->regions == NULL)
		return -1;
	for (uint32_t i = 0; i < nregions; i++) {
		struct image_region *r = &w->regions[i];

		*r = regions[i];
		r->name[IMAGE_NAME_MAX - 1] = '\0';
		r->first_run = r->nruns = 0;
		r->data_pages = r->zero_pages = r->hole_pages = 0;
		if (r->page_size < IMAGE_ALIGN ||
		    r->page_size > IMAGE_PAGE_MAX ||
		    (r->page_size & (r->page_size - 1)) ||
		    r->length % r->page_size || r->length == 0 ||
		    r->start >= IMAGE_ADDR_END ||
		    r->length > IMAGE_ADDR_END - r->start) {
			free(w->regions);
			w->regions = NULL;
			errno = EINVAL;
			return -1;
		}
	}
	w->data_end = IMAGE_HDR_LEN;
	return 0;
}

/* Ends the checksum of the last run, if it is a data run still open. */
static int
close_data(struct image_writer *w)
{
	unsigned mdlen = 0;

	if (w->ctx == NULL)
		return 0;
	if (EVP_DigestFinal_ex(w->ctx, w->runs[w->nruns - 1].sha, &mdlen) !=
		    1 ||
	    mdlen != IMAGE_SHA_LEN) {
		EVP_MD_CTX_free(w->ctx);
		w->ctx = NULL;
		return failed(w, EIO);
	}
	EVP_MD_CTX_free(w->ctx);
	w->ctx = NULL;
	return 0;
}

/*
 * The run pages [page, page + n) of region ri continue, when it is the
 * last one, of the same class and (data) still short of IMAGE_RUN_WRITE;
 * else a new run, in order: the previous one must end where it starts.
 */
static struct image_run *
run_for(struct image_writer *w, uint32_t ri, uint64_t page, uint64_t n,
	uint32_t cls, int *joined)
{
	struct image_region *r;
	struct image_run *last = w->nruns ? &w->runs[w->nruns - 1] : NULL;
	uint64_t covered;

	if (w->err)
		return NULL;
	if (ri >= w->nregions || n == 0) {
		failed(w, EINVAL);
		return NULL;
	}
	r = &w->regions[ri];
	covered = r->data_pages + r->zero_pages + r->hole_pages;
	/* Regions in order, pages in order, none left out. */
	if (page != covered || n > r->length / r->page_size - covered ||
	    (last != NULL && last->region > ri) ||
	    (ri > 0 && w->regions[ri - 1].data_pages +
				       w->regions[ri - 1].zero_pages +
				       w->regions[ri - 1].hole_pages !=
			       w->regions[ri - 1].length /
				       w->regions[ri - 1].page_size)) {
		failed(w, EINVAL);
		return NULL;
	}
	*joined = last != NULL && last->region == ri && last->cls == cls &&
		  (cls != IMAGE_DATA ||
		   (last->npages + n) * r->page_size <= IMAGE_RUN_WRITE);
	if (*joined)
		return last;
	/* The last run is complete: its checksum is final. */
	if (close_data(w) < 0)
		return NULL;
	if (w->nruns == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 256;
		struct image_run *p = realloc(w->runs, cap * sizeof(*p));

		if (p == NULL) {
			failed(w, ENOMEM);
			return NULL;
		}
		w->runs = p;
		w->cap = cap;
	}
	last = &w->runs[w->nruns++];
	memset(last, 0, sizeof(*last));
	last->region = ri;
	last->cls = cls;
	last->first_page = page;
	if (r->nruns++ == 0)
		r->first_run = w->nruns - 1;
	return last;
}

/* Pages [page, page + n) of region ri as data, in the last run or a new one. */
static int
write_data_run(struct image_writer *w, uint32_t ri, uint64_t page, uint64_t n,
	       const void *buf)
{
	int joined;
	struct image_run *run = run_for(w, ri, page, n, IMAGE_DATA, &joined);
	uint64_t len;

	if (run == NULL)
		return -1;
	len = n * w->regions[ri].page_size;
	if (!joined) {
		run->data_off = w->data_end;
		if ((w->ctx = EVP_MD_CTX_new()) == NULL ||
		    EVP_DigestInit_ex(w->ctx, EVP_sha256(), NULL) != 1)
			return failed(w, ENOMEM);
	}
	if (pwrite_all(w->fd, buf, len, w->data_end) < 0)
		return failed(w, errno);
	if (EVP_DigestUpdate(w->ctx, buf, len) != 1)
		return failed(w, EIO);
	w->data_end += len;
	run->npages += n;
	w->regions[ri].data_pages += n;
	return 0;
}

/*
 * Data pages go in runs of at most IMAGE_RUN_WRITE bytes (one page if
 * larger), however many come in one call: the last run is filled up first.
 */
int
image_write_data(struct image_writer *w, uint32_t ri, uint64_t page, uint64_t n,
		 const void *buf)
{
	const uint8_t *b = buf;
	uint64_t ps, max;

	if (w->err)
		return -1;
	if (ri >= w->nregions)
		return failed(w, EINVAL);
	ps = w->regions[ri].page_size;
	max = IMAGE_RUN_WRITE / ps ? IMAGE_RUN_WRITE / ps : 1;
	while (n > 0) {
		const struct image_run *last =
			w->nruns ? &w->runs[w->nruns - 1] : NULL;
		uint64_t k = max;

		if (last != NULL && last->region == ri &&
		    last->cls == IMAGE_DATA && last->npages < max)
			k = max - last->npages;
		if (k > n)
			k = n;
		if (write_data_run(w, ri, page, k, b) < 0)
			return -1;
		page += k;
		n -= k;
		b += k * ps;
	}
	return 0;
}

int
image_write_marker(struct image_writer *w, uint32_t ri, uint64_t page,
		   uint64_t n, enum image_class cls)
{
	int joined;
	struct image_run *run;

	if (cls != IMAGE_ZERO && cls != IMAGE_HOLE)
		return failed(w, EINVAL);
	if ((run = run_for(w, ri, page, n, cls, &joined)) == NULL)
		return -1;
	run->npages += n;
	if (cls == IMAGE_ZERO)
		w->regions[ri].zero_pages += n;
	else
		w->regions[ri].hole_pages += n;
	return 0;
}

/* The region table and the page index, encoded, in one buffer. */
static uint8_t *
encode_tables(const struct image_writer *w, size_t *len)
{
	size_t n = (size_t)w->nregions * IMAGE_REGION_LEN +
		   w->nruns * IMAGE_RUN_LEN;
	uint8_t *b = calloc(1, n ? n : 1), *p = b;

	if (b == NULL)
		return NULL;
	for (uint32_t i = 0; i < w->nregions; i++, p += IMAGE_REGION_LEN)
		image_fmt_put_region(p, &w->regions[i]);
	for (size_t i = 0; i < w->nruns; i++, p += IMAGE_RUN_LEN)
		image_fmt_put_run(p, &w->runs[i]);
	*len = n;
	return b;
}

int
image_writer_end(struct image_writer *w)
{
	uint8_t hdr[IMAGE_HDR_LEN], *tables;
	struct image_fmt_hdr h = {0};
	size_t tlen;
	int rc;

	if (w->err || close_data(w) < 0)
		return failed(w, w->err);
	for (uint32_t i = 0; i < w->nregions; i++) {
		const struct image_region *r = &w->regions[i];

		if (r->data_pages + r->zero_pages + r->hole_pages !=
		    r->length / r->page_size)
			return failed(w, EINVAL);
	}
	if ((tables = encode_tables(w, &tlen)) == NULL)
		return failed(w, ENOMEM);
	h.nregions = w->nregions;
	h.nruns = w->nruns;
	h.data_off = IMAGE_HDR_LEN;
	h.data_len = w->data_end - IMAGE_HDR_LEN;
	h.regions_off = w->data_end;
	h.runs_off = w->data_end + (uint64_t)w->nregions * IMAGE_REGION_LEN;
	h.file_len = w->data_end + tlen;
	h.created = (uint64_t)time(NULL);
	h.pid = w->pid;
	if (EVP_Digest(tables, tlen, h.tables_sha, NULL, EVP_sha256(), NULL) !=
	    1) {
		free(tables);
		return failed(w, EIO);
	}
	rc = pwrite_all(w->fd, tables, tlen, w->data_end);
	free(tables);
	if (rc < 0)
		return failed(w, errno);
	/* The header goes last: until it is there, the file is no image. */
	if (image_fmt_put_hdr(hdr, &h) < 0)
		return failed(w, EIO);
	if (ftruncate(w->fd, (off_t)h.file_len) < 0 ||
	    pwrite_all(w->fd, hdr, sizeof(hdr), 0) < 0 || fsync(w->fd) < 0)
		return failed(w, errno);
	return 0;
}

void
image_writer_free(struct image_writer *w)
{
	if (w->ctx)
		EVP_MD_CTX_free(w->ctx);
	free(w->regions);
	free(w->runs);
	memset(w, 0, sizeof(*w));
	w->fd = -1;
}

/* A key and its place in the order given (image_ws_store()). */
struct ws_key {
	uint64_t key, at;
};

static int
cmp_ws_key(const void *a, const void *b)
{
	const struct ws_key *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->at < y->at ? -1 : x->at > y->at;
}

static int
cmp_ws_at(const void *a, const void *b)
{
	const struct ws_key *x = a, *y = b;

	return x->at < y->at ? -1 : x->at > y->at;
}

/*
 * The keys kept: data pages of im, the first time each is named, in the
 * order given. Returns how many, sorted by key in k (each with its place).
 */
static size_t
ws_keep(const struct image *im, const uint64_t *keys, size_t n,
	struct ws_key *k)
{
	size_t m = 0, out = 0;

	for (size_t i = 0; i < n; i++) {
		uint32_t ri = (uint32_t)(keys[i] >> 48);
		uint64_t page = keys[i] & ((1ull << 48) - 1);
		const struct image_region *r =
			&im->regions[ri < im->nregions ? ri : 0];

		if (ri >= im->nregions || page >= r->length / r->page_size ||
		    image_run_of(im, ri, page)->cls != IMAGE_DATA)
			continue;
		k[m].key = keys[i];
		k[m++].at = i;
	}
	qsort(k, m, sizeof(*k), cmp_ws_key);
	for (size_t i = 0; i < m; i++)
		if (i == 0 || k[i].key != k[i - 1].key)
			k[out++] = k[i];
	return out;
}

/* Copies bytes [0, len) of in to out. */
static int
copy_head(int in, int out, uint64_t len)
{
	uint8_t *buf = malloc(1u << 20);
	uint64_t at = 0;

	if (buf == NULL)
		return -1;
	while (at < len) {
		size_t n =
			len - at < (1u << 20) ? (size_t)(len - at) : 1u << 20;
		ssize_t r = pread(in, buf, n, (off_t)at);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 || pwrite_all(out, buf, (size_t)r, at) < 0) {
			if (r == 0)
				errno = ENODATA;
			free(buf);
			return -1;
		}
		at += (uint64_t)r;
	}
	free(buf);
	return 0;
}

/*
 * The working-set pages' bytes, checked with their runs, into data (in
 * the order kept), and their index entries into idx. Runs are read in
 * page order, each once.
 */
static int
ws_gather(const struct image *im, const struct ws_key *k, size_t n,
	  const uint64_t *offs, uint8_t *data, uint8_t *idx, char *err,
	  size_t errlen)
{
	const struct image_run *cur = NULL;
	uint8_t *run = malloc(IMAGE_RUN_BYTES);

	if (run == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		uint32_t ri = (uint32_t)(k[i].key >> 48);
		uint64_t page = k[i].key & ((1ull << 48) - 1);
		const struct image_run *u = image_run_of(im, ri, page);
		uint32_t ps = im->regions[ri].page_size;
		uint8_t *e = idx + k[i].at * IMAGE_WS_ENTRY_LEN;
		uint8_t *dst = data + offs[k[i].at];

		if (u != cur && image_run_read(im, u, run, err, errlen) < 0) {
			free(run);
			return -1;
		}
		cur = u;
		memcpy(dst, run + (page - u->first_page) * ps, ps);
		put32(e + IW_REGION, ri);
		put32(e + IW_RESERVED, 0);
		put64(e + IW_PAGE, page);
		if (EVP_Digest(dst, ps, e + IW_SHA, NULL, EVP_sha256(), NULL) !=
		    1) {
			free(run);
			snprintf(err, errlen, "SHA-256 failed");
			return -1;
		}
	}
	free(run);
	return 0;
}

/* The version 2 header over im's, for a working set at off. */
static int
ws_header(const struct image *im, int out, uint64_t off, uint64_t bytes,
	  uint64_t n, const uint8_t *idx)
{
	uint8_t b[IMAGE_HDR_LEN];

	if (pread(out, b, sizeof(b), 0) != (ssize_t)sizeof(b))
		return -1;
	memset(b + IH_WS_OFF, 0, IMAGE_HDR_LEN - IH_WS_OFF);
	put32(b + IH_VERSION, IMAGE_VERSION_WS);
	put64(b + IH_FILE_LEN, off + bytes + n * IMAGE_WS_ENTRY_LEN);
	if (EVP_Digest(b, IH_HDR_SHA, b + IH_HDR_SHA, NULL, EVP_sha256(),
		       NULL) != 1)
		return -1;
	put64(b + IH_WS_OFF, off);
	put64(b + IH_WS_COUNT, n);
	put64(b + IH_WS_INDEX_OFF, off + bytes);
	if (EVP_Digest(idx, n * IMAGE_WS_ENTRY_LEN, b + IH_WS_SHA, NULL,
		       EVP_sha256(), NULL) != 1 ||
	    EVP_Digest(b, IH_HDR2_SHA, b + IH_HDR2_SHA, NULL, EVP_sha256(),
		       NULL) != 1)
		return -1;
	(void)im;
	return pwrite_all(out, b, sizeof(b), 0);
}

int64_t
image_ws_store(const struct image *im, int out, const uint64_t *keys,
	       size_t nkeys, char *err, size_t errlen)
{
	struct ws_key *k = calloc(nkeys ? nkeys : 1, sizeof(*k));
	uint64_t *offs = NULL, bytes = 0;
	uint64_t off =
		(im->tables_end + IMAGE_ALIGN - 1) / IMAGE_ALIGN * IMAGE_ALIGN;
	uint8_t *data = NULL, *idx = NULL;
	size_t n;
	int64_t rc = -1;

	if (k == NULL)
		goto oom;
	if ((n = ws_keep(im, keys, nkeys, k)) == 0) {
		snprintf(err, errlen, "no data page of the image to keep");
		goto out;
	}
	/* Each page's place in the section: in the order given. */
	qsort(k, n, sizeof(*k), cmp_ws_at);
	if ((offs = calloc(n, sizeof(*offs))) == NULL)
		goto oom;
	for (size_t i = 0; i < n; i++) {
		offs[i] = bytes;
		bytes += im->regions[k[i].key >> 48].page_size;
		k[i].at = i;
	}
	qsort(k, n, sizeof(*k), cmp_ws_key);
	if ((data = malloc(bytes)) == NULL ||
	    (idx = calloc(n, IMAGE_WS_ENTRY_LEN)) == NULL)
		goto oom;
	if (ws_gather(im, k, n, offs, data, idx, err, errlen) < 0)
		goto out;
	if (copy_head(im->fd, out, im->tables_end) < 0 ||
	    ftruncate(out, (off_t)off) < 0 ||
	    pwrite_all(out, data, bytes, off) < 0 ||
	    pwrite_all(out, idx, n * IMAGE_WS_ENTRY_LEN, off + bytes) < 0 ||
	    ws_header(im, out, off, bytes, n, idx) < 0 || fsync(out) < 0) {
		snprintf(err, errlen, "writing the image: %s", strerror(errno));
		goto out;
	}
	rc = (int64_t)n;
	goto out;
oom:
	snprintf(err, errlen, "out of memory");
out:
	free(k);
	free(offs);
	free(data);
	free(idx);
	return rc;
}

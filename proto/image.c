/*
 * Reading a snapshot image (image.h, docs/image-format.md). The file is
 * untrusted: it may be cut short, corrupted on disk, or made by hand to
 * break the reader. Each value is checked before it sizes or places
 * anything, and against the file's real size, which fstat gives us.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "proto/frame.h"
#include "proto/image.h"
#include "proto/image_fmt.h"

/* Fills err; returns -1 (image_fmt.h). */
int
image_bad(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* Reads exactly len bytes at off: -1 on an error or a file cut short. */
int
image_pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;

	while (len > 0) {
		ssize_t r = pread(fd, p, len, (off_t)off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = ENODATA;
			return -1;
		}
		p += r;
		len -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

/* Whether the caller of image_open_stoppable() asked it to give up. */
static int
stopped(const atomic_int *stop)
{
	return stop != NULL && atomic_load_explicit(stop, memory_order_relaxed);
}

/*
 * SHA-256 of bytes [off, off + len) of fd into md, read IMAGE_READ_STEP
 * bytes at a time into one buffer: a length the file claims costs reads
 * and hashing, never memory. 0, or -1 with err set.
 */
static int
hash_range(int fd, uint64_t off, uint64_t len, const atomic_int *stop,
	   uint8_t md[IMAGE_SHA_LEN], char *err, size_t errlen)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	uint8_t *b = malloc(len < IMAGE_READ_STEP ? len + 1 : IMAGE_READ_STEP);
	unsigned mdlen = 0;
	int rc = -1;

	if (ctx == NULL || b == NULL ||
	    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		image_bad(err, errlen, "out of memory for a checksum");
		goto out;
	}
	while (len > 0) {
		size_t n =
			len < IMAGE_READ_STEP ? (size_t)len : IMAGE_READ_STEP;

		if (stopped(stop)) {
			image_bad(err, errlen, "stopped");
			goto out;
		}
		if (image_pread_all(fd, b, n, off) < 0) {
			image_bad(err, errlen, "reading %zu bytes at %llu: %s",
				  n, (unsigned long long)off, strerror(errno));
			goto out;
		}
		if (EVP_DigestUpdate(ctx, b, n) != 1) {
			image_bad(err, errlen, "SHA-256 failed");
			goto out;
		}
		off += n;
		len -= n;
	}
	if (EVP_DigestFinal_ex(ctx, md, &mdlen) != 1 || mdlen != IMAGE_SHA_LEN)
		image_bad(err, errlen, "SHA-256 failed");
	else
		rc = 0;
out:
	EVP_MD_CTX_free(ctx);
	free(b);
	return rc;
}

/*
 * Fixed-size records of the file (regions, runs, working-set entries),
 * read in order IMAGE_READ_STEP bytes' worth at a time: n records of len
 * bytes from off on; buf holds records [first, first + have).
 */
struct recs {
	int fd;
	uint64_t off, n;
	size_t len;
	uint64_t first, have;
	uint8_t *buf;
	const atomic_int *stop;
};

static void
recs_init(struct recs *rs, int fd, uint64_t off, uint64_t n, size_t len,
	  const atomic_int *stop)
{
	free(rs->buf);
	*rs = (struct recs){.fd = fd, .off = off, .n = n, .len = len};
	rs->stop = stop;
}

/* Record k (< n), read with those after it if need be; NULL, err set. */
static const uint8_t *
rec_at(struct recs *rs, uint64_t k, char *err, size_t errlen)
{
	uint64_t step = IMAGE_READ_STEP / rs->len;

	if (k >= rs->first && k - rs->first < rs->have)
		return rs->buf + (k - rs->first) * rs->len;
	if (step > rs->n)
		step = rs->n;
	if (rs->buf == NULL && (rs->buf = malloc(step * rs->len)) == NULL) {
		image_bad(err, errlen, "out of memory for the tables");
		return NULL;
	}
	if (stopped(rs->stop)) {
		image_bad(err, errlen, "stopped");
		return NULL;
	}
	rs->first = k;
	rs->have = rs->n - k < step ? rs->n - k : step;
	if (image_pread_all(rs->fd, rs->buf, (size_t)(rs->have * rs->len),
			    rs->off + k * rs->len) < 0) {
		rs->have = 0;
		image_bad(err, errlen, "reading tables: %s", strerror(errno));
		return NULL;
	}
	return rs->buf;
}

const char *
image_class_name(uint32_t cls)
{
	return cls == IMAGE_DATA   ? "data"
	       : cls == IMAGE_ZERO ? "zero"
	       : cls == IMAGE_HOLE ? "hole"
				   : "?";
}

/* Whether the n bytes at p are all zero. */
static int
all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

/*
 * The header: magic, version, its own checksum, then the layout: header,
 * data, region table and page index end to end, ending at the file's end.
 */
/*
 * Version 2's header fields: the working-set section after the page index
 * (at the next multiple of 4096), its page bytes then its index, ending
 * the file; and the checksum over the header's bytes before it.
 */
static int
check_hdr_ws(struct image *im, const uint8_t *b, struct image_fmt_hdr *h,
	     char *err, size_t errlen)
{
	uint8_t md[IMAGE_SHA_LEN];
	uint64_t off = get64(b + IH_WS_OFF), count = get64(b + IH_WS_COUNT);
	uint64_t idx = get64(b + IH_WS_INDEX_OFF);

	if (EVP_Digest(b, IH_HDR2_SHA, md, NULL, EVP_sha256(), NULL) != 1 ||
	    memcmp(md, b + IH_HDR2_SHA, IMAGE_SHA_LEN) != 0)
		return image_bad(err, errlen,
				 "working set: header checksum mismatch");
	/* im->tables_end <= file_len: checked by the caller. */
	if (off != (im->tables_end + IMAGE_ALIGN - 1) / IMAGE_ALIGN *
			    IMAGE_ALIGN ||
	    off > im->file_len || idx < off || idx > im->file_len ||
	    (idx - off) % IMAGE_ALIGN || count == 0 ||
	    count > (im->file_len - idx) / IMAGE_WS_ENTRY_LEN ||
	    idx + count * IMAGE_WS_ENTRY_LEN != h->file_len)
		return image_bad(err, errlen,
				 "working set: inconsistent layout");
	im->nws = count;
	im->ws_bytes = idx - off;
	return 0;
}

/*
 * The header: magic, version, its own checksum, then the layout: header,
 * data, region table and page index end to end, ending at the file's end
 * (version 2: followed by the working set, which ends it).
 */
static int
check_hdr(struct image *im, const uint8_t *b, struct image_fmt_hdr *h,
	  char *err, size_t errlen)
{
	uint8_t md[IMAGE_SHA_LEN];
	uint64_t tables;
	uint32_t end;

	if (memcmp(b + IH_MAGIC, IMAGE_MAGIC, 8) != 0)
		return image_bad(err, errlen, "not a uffdd image (bad magic)");
	if ((h->version = get32(b + IH_VERSION)) != IMAGE_VERSION &&
	    h->version != IMAGE_VERSION_WS)
		return image_bad(err, errlen,
				 "image format version %u: this uffdd reads "
				 "versions %u and %u",
				 h->version, IMAGE_VERSION, IMAGE_VERSION_WS);
	end = h->version == IMAGE_VERSION ? IH_END : IH_END2;
	if (EVP_Digest(b, IH_HDR_SHA, md, NULL, EVP_sha256(), NULL) != 1 ||
	    memcmp(md, b + IH_HDR_SHA, IMAGE_SHA_LEN) != 0)
		return image_bad(err, errlen, "header checksum mismatch");
	if (get32(b + IH_HDR_LEN) != IMAGE_HDR_LEN ||
	    get32(b + IH_ALIGN) != IMAGE_ALIGN || get32(b + IH_FLAGS) != 0 ||
	    !all_zero(b + end, IMAGE_HDR_LEN - end))
		return image_bad(
			err, errlen,
			"header: unknown header size, alignment or flags");
	h->nregions = get32(b + IH_NREGIONS);
	h->nruns = get64(b + IH_NRUNS);
	h->data_off = get64(b + IH_DATA_OFF);
	h->data_len = get64(b + IH_DATA_LEN);
	h->regions_off = get64(b + IH_REGIONS_OFF);
	h->runs_off = get64(b + IH_RUNS_OFF);
	h->file_len = get64(b + IH_FILE_LEN);
	memcpy(h->tables_sha, b + IH_TABLES_SHA, IMAGE_SHA_LEN);
	if (h->file_len != im->file_len)
		return image_bad(err, errlen,
				 "file is %llu bytes, its header says %llu: "
				 "truncated or extended",
				 (unsigned long long)im->file_len,
				 (unsigned long long)h->file_len);
	if (h->nregions == 0 || h->nregions > IMAGE_REGIONS_MAX)
		return image_bad(err, errlen, "header: %u regions (1 to %u)",
				 h->nregions, IMAGE_REGIONS_MAX);
	/* Each bound below keeps the sums after it from overflowing. */
	if (h->data_off != IMAGE_HDR_LEN || h->data_len > im->file_len ||
	    h->data_len % IMAGE_ALIGN ||
	    h->regions_off != h->data_off + h->data_len ||
	    h->nruns > im->file_len / IMAGE_RUN_LEN ||
	    h->runs_off !=
		    h->regions_off + (uint64_t)h->nregions * IMAGE_REGION_LEN)
		return image_bad(err, errlen, "header: inconsistent layout");
	tables = (uint64_t)h->nregions * IMAGE_REGION_LEN +
		 h->nruns * IMAGE_RUN_LEN;
	im->tables_end = h->runs_off + h->nruns * IMAGE_RUN_LEN;
	if (h->version == IMAGE_VERSION ? im->tables_end != h->file_len
					: im->tables_end > h->file_len)
		return image_bad(
			err, errlen,
			"header: tables of %llu bytes do not end the file",
			(unsigned long long)tables);
	im->version = h->version;
	memcpy(im->tables_sha, h->tables_sha, IMAGE_SHA_LEN);
	im->data_len = h->data_len;
	im->created = get64(b + IH_CREATED);
	im->pid = (int32_t)get32(b + IH_PID);
	if (h->version == IMAGE_VERSION_WS)
		return check_hdr_ws(im, b, h, err, errlen);
	return 0;
}

/* One region record: sizes, kind, name, its place among the others. */
static int
check_region(const struct image *im, uint32_t i, const uint8_t *b,
	     uint64_t runs_before, char *err, size_t errlen)
{
	struct image_region *r = &im->regions[i];
	const struct image_region *prev = i ? &im->regions[i - 1] : NULL;

	r->start = get64(b + IR_START);
	r->length = get64(b + IR_LENGTH);
	r->file_off = get64(b + IR_FILE_OFF);
	r->page_size = get32(b + IR_PAGE_SIZE);
	r->kind = get32(b + IR_KIND);
	r->shared = get32(b + IR_SHARED);
	r->first_run = get64(b + IR_FIRST_RUN);
	r->nruns = get64(b + IR_NRUNS);
	r->data_pages = get64(b + IR_DATA);
	r->zero_pages = get64(b + IR_ZERO);
	r->hole_pages = get64(b + IR_HOLE);
	memcpy(r->name, b + IR_NAME, IMAGE_NAME_MAX);
	if (r->name[IMAGE_NAME_MAX - 1] != '\0' || text_bad_at(r->name) >= 0)
		return image_bad(err, errlen,
				 "region %u: name not printable text", i);
	if (r->page_size < IMAGE_ALIGN || r->page_size > IMAGE_PAGE_MAX ||
	    (r->page_size & (r->page_size - 1)))
		return image_bad(err, errlen, "region %u: page size %u", i,
				 r->page_size);
	if (r->length == 0 || r->length % r->page_size ||
	    r->start % r->page_size || r->file_off % IMAGE_ALIGN ||
	    r->kind < 1 || r->kind > 6 || r->shared > 1 ||
	    get32(b + IR_RESERVED) != 0)
		return image_bad(err, errlen,
				 "region %u: bad start, length or kind", i);
	/*
	 * Its pages cost the file one record whatever their number: the
	 * address space bounds them (and every sum of them: the regions do
	 * not overlap). Written so that nothing wraps.
	 */
	if (r->start >= IMAGE_ADDR_END ||
	    r->length > IMAGE_ADDR_END - r->start ||
	    r->file_off > INT64_MAX - r->length)
		return image_bad(
			err, errlen,
			"region %u: 0x%llx, %llu bytes: not inside the user "
			"address space (below 0x%llx)",
			i, (unsigned long long)r->start,
			(unsigned long long)r->length,
			(unsigned long long)IMAGE_ADDR_END);
	if (prev != NULL && r->start < prev->start + prev->length)
		return image_bad(err, errlen,
				 "region %u overlaps or precedes region %u", i,
				 i - 1);
	/* A run holds one page at least. */
	if (r->first_run != runs_before || r->nruns == 0 ||
	    r->nruns > im->nruns - runs_before ||
	    r->nruns > r->length / r->page_size)
		return image_bad(err, errlen, "region %u: runs out of place",
				 i);
	return 0;
}

/* One run of region r, which must start at page *next. */
static int
check_run(const struct image *im, uint64_t k, const uint8_t *b, uint32_t ri,
	  uint64_t *next, uint64_t *data_at, uint64_t cnt[4], char *err,
	  size_t errlen)
{
	struct image_run *u = &im->runs[k];
	const struct image_region *r = &im->regions[ri];
	uint64_t npages = r->length / r->page_size, bytes;

	u->region = get32(b + IU_REGION);
	u->cls = get32(b + IU_CLASS);
	u->first_page = get64(b + IU_FIRST_PAGE);
	u->npages = get64(b + IU_NPAGES);
	u->data_off = get64(b + IU_DATA_OFF);
	memcpy(u->sha, b + IU_SHA, IMAGE_SHA_LEN);
	if (u->region != ri || u->cls < IMAGE_DATA || u->cls > IMAGE_HOLE)
		return image_bad(err, errlen, "run %llu: bad region or class",
				 (unsigned long long)k);
	if (u->first_page != *next || u->npages == 0 ||
	    u->npages > npages - *next)
		return image_bad(err, errlen,
				 "run %llu: pages out of place in region %u",
				 (unsigned long long)k, ri);
	*next += u->npages;
	cnt[u->cls] += u->npages;
	if (u->cls != IMAGE_DATA) {
		if (u->data_off != 0 || !all_zero(u->sha, IMAGE_SHA_LEN))
			return image_bad(err, errlen,
					 "run %llu: marker with data",
					 (unsigned long long)k);
		return 0;
	}
	bytes = u->npages * r->page_size; /* npages <= length / page_size */
	if (bytes > IMAGE_RUN_BYTES && u->npages > 1)
		return image_bad(
			err, errlen, "run %llu: %llu bytes, more than a run",
			(unsigned long long)k, (unsigned long long)bytes);
	/* Data runs lie end to end in index order: no gap, no overlap. */
	if (u->data_off != *data_at ||
	    bytes > im->data_len + IMAGE_HDR_LEN - *data_at)
		return image_bad(err, errlen, "run %llu: data out of place",
				 (unsigned long long)k);
	*data_at += bytes;
	return 0;
}

/*
 * The regions, from the region table: each checked, and their runs
 * counted against the page index's. Read a step at a time (rs).
 */
static int
check_regions(struct image *im, const struct image_fmt_hdr *h, struct recs *rs,
	      char *err, size_t errlen)
{
	uint64_t runs = 0;

	recs_init(rs, im->fd, h->regions_off, h->nregions, IMAGE_REGION_LEN,
		  rs->stop);
	for (uint32_t i = 0; i < h->nregions; i++) {
		const uint8_t *b = rec_at(rs, i, err, errlen);

		if (b == NULL || check_region(im, i, b, runs, err, errlen) < 0)
			return -1;
		runs += im->regions[i].nruns;
	}
	if (runs != h->nruns)
		return image_bad(err, errlen, "page index: runs left over");
	return 0;
}

/*
 * The region table and page index: their checksum first, read and hashed
 * a step at a time; then the regions, then the runs, read the same way.
 * What is allocated is sized by the checked counts: at most 4096 regions,
 * and no more runs than the file holds records or the regions pages.
 */
static int
check_tables(struct image *im, const struct image_fmt_hdr *h,
	     const atomic_int *stop, char *err, size_t errlen)
{
	struct recs rs = {.stop = stop};
	uint8_t md[IMAGE_SHA_LEN];
	uint64_t k = 0, data_at = IMAGE_HDR_LEN;
	int rc = -1;

	if (hash_range(im->fd, h->regions_off, im->tables_end - h->regions_off,
		       stop, md, err, errlen) < 0)
		return -1;
	if (memcmp(md, h->tables_sha, IMAGE_SHA_LEN) != 0)
		return image_bad(
			err, errlen,
			"region table or page index checksum mismatch");
	im->nregions = h->nregions;
	im->nruns = h->nruns;
	im->regions = calloc(h->nregions, sizeof(*im->regions));
	if (im->regions == NULL)
		return image_bad(err, errlen, "out of memory for the tables");
	if (check_regions(im, h, &rs, err, errlen) < 0)
		goto out;
	im->runs = calloc(h->nruns ? h->nruns : 1, sizeof(*im->runs));
	if (im->runs == NULL) {
		image_bad(err, errlen, "out of memory for %llu runs",
			  (unsigned long long)h->nruns);
		goto out;
	}
	recs_init(&rs, im->fd, h->runs_off, h->nruns, IMAGE_RUN_LEN, stop);
	for (uint32_t i = 0; i < h->nregions; i++) {
		struct image_region *r = &im->regions[i];
		uint64_t next = 0, cnt[4] = {0};

		for (; k < r->first_run + r->nruns; k++) {
			const uint8_t *b = rec_at(&rs, k, err, errlen);

			if (b == NULL || check_run(im, k, b, i, &next, &data_at,
						   cnt, err, errlen) < 0)
				goto out;
		}
		if (next != r->length / r->page_size ||
		    cnt[IMAGE_DATA] != r->data_pages ||
		    cnt[IMAGE_ZERO] != r->zero_pages ||
		    cnt[IMAGE_HOLE] != r->hole_pages) {
			image_bad(err, errlen,
				  "region %u: its runs do not cover its pages "
				  "as counted",
				  i);
			goto out;
		}
	}
	if (k != h->nruns || data_at != h->regions_off) {
		image_bad(err, errlen, "page index: runs or data left over");
		goto out;
	}
	rc = 0;
out:
	free(rs.buf);
	return rc;
}

const struct image_run *
image_run_of(const struct image *im, uint32_t ri, uint64_t page)
{
	const struct image_region *r = &im->regions[ri];
	uint64_t lo = r->first_run, hi = r->first_run + r->nruns;

	/* The runs cover the region in order, from its page 0 (checked). */
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (im->runs[mid].first_page <= page)
			lo = mid;
		else
			hi = mid;
	}
	return &im->runs[lo];
}

/* Whether page of region ri lies in a data run. */
static int
is_data_page(const struct image *im, uint32_t ri, uint64_t page)
{
	return image_run_of(im, ri, page)->cls == IMAGE_DATA;
}

static int
cmp_key(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * The working-set index (version 2), once the tables are checked: its
 * checksum, then each entry a data page of a region, none twice, their
 * bytes end to end filling the section's data exactly. Read a step at a
 * time, as the tables are.
 */
static int
check_ws(struct image *im, const uint8_t *hdr, const atomic_int *stop,
	 char *err, size_t errlen)
{
	uint64_t idx = get64(hdr + IH_WS_INDEX_OFF),
		 at = get64(hdr + IH_WS_OFF);
	struct recs rs = {0};
	uint8_t md[IMAGE_SHA_LEN];
	uint64_t *keys = NULL;
	int rc = -1;

	if (hash_range(im->fd, idx, im->nws * IMAGE_WS_ENTRY_LEN, stop, md, err,
		       errlen) < 0)
		return -1;
	if (memcmp(md, hdr + IH_WS_SHA, IMAGE_SHA_LEN) != 0)
		return image_bad(err, errlen,
				 "working set: index checksum mismatch");
	keys = calloc(im->nws, sizeof(*keys));
	im->ws = calloc(im->nws, sizeof(*im->ws));
	if (keys == NULL || im->ws == NULL) {
		image_bad(err, errlen, "out of memory for the working set");
		goto out;
	}
	recs_init(&rs, im->fd, idx, im->nws, IMAGE_WS_ENTRY_LEN, stop);
	for (uint64_t i = 0; i < im->nws; i++) {
		const uint8_t *e = rec_at(&rs, i, err, errlen);
		struct image_ws *w = &im->ws[i];
		const struct image_region *r;

		if (e == NULL)
			goto out;
		w->region = get32(e + IW_REGION);
		w->page = get64(e + IW_PAGE);
		memcpy(w->sha, e + IW_SHA, IMAGE_SHA_LEN);
		r = &im->regions[w->region < im->nregions ? w->region : 0];
		if (w->region >= im->nregions || get32(e + IW_RESERVED) != 0 ||
		    w->page >= r->length / r->page_size ||
		    w->page >= 1ull << 48 ||
		    !is_data_page(im, w->region, w->page)) {
			image_bad(err, errlen,
				  "working set: entry %llu is not a data page "
				  "of the image",
				  (unsigned long long)i);
			goto out;
		}
		if (r->page_size > idx - at) {
			image_bad(err, errlen,
				  "working set: entry %llu: data out "
				  "of place",
				  (unsigned long long)i);
			goto out;
		}
		w->off = at;
		at += r->page_size;
		keys[i] = IMAGE_WS_KEY(w->region, w->page);
	}
	if (at != idx) {
		image_bad(err, errlen, "working set: data left over");
		goto out;
	}
	qsort(keys, im->nws, sizeof(*keys), cmp_key);
	for (uint64_t i = 1; i < im->nws; i++)
		if (keys[i] == keys[i - 1]) {
			image_bad(err, errlen,
				  "working set: a page listed twice");
			goto out;
		}
	rc = 0;
out:
	free(rs.buf);
	free(keys);
	return rc;
}

int
image_open(struct image *im, int fd, char *err, size_t errlen)
{
	return image_open_stoppable(im, fd, NULL, err, errlen);
}

int
image_open_stoppable(struct image *im, int fd, const atomic_int *stop,
		     char *err, size_t errlen)
{
	uint8_t hdr[IMAGE_HDR_LEN];
	struct image_fmt_hdr h = {0};
	struct stat st;

	memset(im, 0, sizeof(*im));
	im->fd = fd;
	if (fstat(fd, &st) < 0)
		return image_bad(err, errlen, "fstat: %s", strerror(errno));
	if (!S_ISREG(st.st_mode))
		return image_bad(err, errlen, "not a regular file");
	im->file_len = (uint64_t)st.st_size;
	if (im->file_len < IMAGE_HDR_LEN ||
	    image_pread_all(fd, hdr, sizeof(hdr), 0) < 0)
		return image_bad(err, errlen,
				 "%llu bytes: shorter than an image header",
				 (unsigned long long)im->file_len);
	if (check_hdr(im, hdr, &h, err, errlen) < 0 ||
	    check_tables(im, &h, stop, err, errlen) < 0 ||
	    (im->nws && check_ws(im, hdr, stop, err, errlen) < 0)) {
		free(im->regions);
		free(im->runs);
		free(im->ws);
		im->regions = NULL;
		im->runs = NULL;
		im->ws = NULL;
		im->nregions = 0;
		im->nruns = 0;
		im->nws = 0;
		return -1;
	}
	return 0;
}

void
image_close(struct image *im)
{
	if (im->fd >= 0)
		close(im->fd);
	free(im->regions);
	free(im->runs);
	free(im->ws);
	memset(im, 0, sizeof(*im));
	im->fd = -1;
}

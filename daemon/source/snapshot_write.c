/*
 * A snapshot's pages into its image (snapshot.c says what a snapshot is):
 * read from the frozen process, holes and all-zero pages as markers, the
 * rest as data runs. It reports what failed and leaves failing the
 * snapshot (the client told, the process thawed) to snapshot.c.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/pagemap.h"
#include "daemon/procref.h"
#include "daemon/source/internal.h"
#include "daemon/source/snapshot.h"
#include "proto/frame.h"
#include "proto/image.h"

/*
 * Reads len bytes of region sr from page on into s->buf: shared hugetlb
 * from its page cache (export.c says why), the rest through the
 * /proc/PID/mem its grant opened (read_pages() in serve.c says why; a
 * page the process cannot read itself reads too: the kernel's forced
 * read). Swapped-out pages are read back in. The read counts only if
 * the process is still itself afterwards.
 */
static int
read_mem(struct snap *s, const struct src_region *sr, uint64_t page,
	 uint64_t len, uint32_t *code, char *err, size_t errlen)
{
	uint64_t addr = sr->r.start + page * sr->r.page_size;
	ssize_t got;

	if (len > IMAGE_RUN_BYTES)
		fatalx("snapshot: read of %llu bytes", (unsigned long long)len);
	if (sr->cache_fd >= 0)
		got = pread(sr->cache_fd, s->buf, len,
			    (off_t)(sr->r.file_off + page * sr->r.page_size));
	else
		got = pread(s->t.memfd, s->buf, len, (off_t)addr);
	if (got == (ssize_t)len && procref_same(&s->t))
		return 0;
	if (!procref_same(&s->t)) {
		*code = ERR_NO_PROCESS;
		snprintf(err, errlen,
			 "process %d exited, or runs another program",
			 (int)s->t.pid);
	} else {
		*code = ERR_KERNEL;
		snprintf(err, errlen, "reading %llu bytes at 0x%llx: %s",
			 (unsigned long long)len, (unsigned long long)addr,
			 got < 0 ? strerror(errno) : "short read");
	}
	return -1;
}

/* Whether a page of len bytes is all zero: it goes as a ZERO marker. */
static int
page_zero(const uint8_t *p, uint64_t len)
{
	return p[0] == 0 && memcmp(p, p + 1, len - 1) == 0;
}

/*
 * Pages [page, page + n) of region ri, all holding data, now in s->buf:
 * the all-zero ones become ZERO markers, the others data runs.
 */
static int
write_read_pages(struct snap *s, uint32_t ri, uint64_t page, uint64_t n)
{
	uint64_t ps = s->regs[ri].r.page_size;

	for (uint64_t i = 0; i < n;) {
		int zero = page_zero(s->buf + i * ps, ps);
		uint64_t k = 1;
		int rc;

		while (i + k < n &&
		       page_zero(s->buf + (i + k) * ps, ps) == zero)
			k++;
		rc = zero ? image_write_marker(&s->w, ri, page + i, k,
					       IMAGE_ZERO)
			  : image_write_data(&s->w, ri, page + i, k,
					     s->buf + i * ps);
		if (rc < 0)
			return -1;
		s->pages[zero ? IMAGE_ZERO : IMAGE_DATA] += k;
		i += k;
	}
	return 0;
}

/*
 * The next stretch of one class from the current page: holes as a
 * marker, data read and written. Returns the bytes read, or -1 with
 * *code and err set (the caller fails the snapshot).
 */
int64_t
snap_write_next(struct snap *s, uint32_t *code, char *err, size_t errlen)
{
	struct src_region *sr = &s->regs[s->cur_reg];
	uint64_t ps = sr->r.page_size, page = s->cur_page, n = 1;
	int data = bit_test(sr->data, page);
	uint64_t max = data ? IMAGE_RUN_BYTES / ps : sr->npages;

	while (n < max && page + n < sr->npages &&
	       bit_test(sr->data, page + n) == data)
		n++;
	s->cur_page += n;
	if (!data) {
		s->pages[IMAGE_HOLE] += n;
		if (image_write_marker(&s->w, s->cur_reg, page, n, IMAGE_HOLE) <
		    0)
			goto bad;
		return 0;
	}
	if (read_mem(s, sr, page, n * ps, code, err, errlen) < 0)
		return -1;
	if (write_read_pages(s, s->cur_reg, page, n) < 0)
		goto bad;
	return (int64_t)(n * ps);
bad:
	*code = ERR_INVALID;
	snprintf(err, errlen, "writing the image: %s", strerror(errno));
	return -1;
}
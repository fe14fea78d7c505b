/*
 * Reading an opened image's pages (image.h): a run's, or working-set
 * pages', each checked against the checksum image_open() read, and the
 * whole file checked that way. image.c opens and checks the tables this
 * relies on.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "proto/image.h"
#include "proto/image_fmt.h"

uint64_t
image_run_bytes(const struct image *im, const struct image_run *u)
{
	return u->npages * im->regions[u->region].page_size;
}

int
image_run_check(const struct image *im, const struct image_run *u,
		const void *buf, char *err, size_t errlen)
{
	uint8_t md[IMAGE_SHA_LEN];
	uint64_t len = image_run_bytes(im, u);

	if (EVP_Digest(buf, (size_t)len, md, NULL, EVP_sha256(), NULL) != 1 ||
	    memcmp(md, u->sha, IMAGE_SHA_LEN) != 0)
		return image_bad(
			err, errlen,
			"checksum mismatch in the data of region %u, "
			"pages %llu-%llu (file offset %llu)",
			u->region, (unsigned long long)u->first_page,
			(unsigned long long)(u->first_page + u->npages - 1),
			(unsigned long long)u->data_off);
	return 0;
}

int
image_run_read(const struct image *im, const struct image_run *u, void *buf,
	       char *err, size_t errlen)
{
	uint64_t len = image_run_bytes(im, u);

	if (u->cls != IMAGE_DATA)
		return image_bad(err, errlen, "run of %s pages has no data",
				 image_class_name(u->cls));
	if (image_pread_all(im->fd, buf, (size_t)len, u->data_off) < 0)
		return image_bad(err, errlen, "reading %llu bytes at %llu: %s",
				 (unsigned long long)len,
				 (unsigned long long)u->data_off,
				 errno == ENODATA ? "file cut short"
						  : strerror(errno));
	return image_run_check(im, u, buf, err, errlen);
}

uint64_t
image_ws_bytes(const struct image *im, uint64_t first, uint64_t n)
{
	return im->ws[first + n - 1].off - im->ws[first].off +
	       im->regions[im->ws[first + n - 1].region].page_size;
}

int
image_ws_check(const struct image *im, uint64_t first, uint64_t n,
	       const void *buf, char *err, size_t errlen)
{
	uint8_t md[IMAGE_SHA_LEN];
	const uint8_t *p = buf;

	for (uint64_t i = first; i < first + n; i++) {
		uint32_t ps = im->regions[im->ws[i].region].page_size;

		if (EVP_Digest(p, ps, md, NULL, EVP_sha256(), NULL) != 1 ||
		    memcmp(md, im->ws[i].sha, IMAGE_SHA_LEN) != 0)
			return image_bad(
				err, errlen,
				"checksum mismatch in working-set page %llu "
				"(region %u page %llu)",
				(unsigned long long)i, im->ws[i].region,
				(unsigned long long)im->ws[i].page);
		p += ps;
	}
	return 0;
}

int
image_ws_read(const struct image *im, uint64_t first, uint64_t n, void *buf,
	      char *err, size_t errlen)
{
	if (n == 0 || first >= im->nws || n > im->nws - first)
		return image_bad(err, errlen, "working set: no pages %llu+%llu",
				 (unsigned long long)first,
				 (unsigned long long)n);
	if (image_pread_all(im->fd, buf, (size_t)image_ws_bytes(im, first, n),
			    im->ws[first].off) < 0)
		return image_bad(err, errlen, "reading the working set: %s",
				 errno == ENODATA ? "file cut short"
						  : strerror(errno));
	return image_ws_check(im, first, n, buf, err, errlen);
}

int
image_verify(const struct image *im, char *err, size_t errlen)
{
	uint64_t max = 0;
	uint8_t *buf;
	int rc = 0;

	/* A buffer the size of the largest run (bounded by image_open()). */
	for (uint64_t k = 0; k < im->nruns; k++)
		if (im->runs[k].cls == IMAGE_DATA &&
		    image_run_bytes(im, &im->runs[k]) > max)
			max = image_run_bytes(im, &im->runs[k]);
	if ((buf = malloc(max ? max : 1)) == NULL)
		return image_bad(err, errlen, "out of memory");
	for (uint64_t k = 0; k < im->nruns && rc == 0; k++)
		if (im->runs[k].cls == IMAGE_DATA)
			rc = image_run_read(im, &im->runs[k], buf, err, errlen);
	/* The working set, a page at a time (bounded by the buffer). */
	for (uint64_t i = 0; i < im->nws && rc == 0; i++)
		if (im->regions[im->ws[i].region].page_size <= (max ? max : 1))
			rc = image_ws_read(im, i, 1, buf, err, errlen);
	free(buf);
	return rc;
}

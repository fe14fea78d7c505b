/*
 * libFuzzer target: the snapshot image reader (proto/image.h), which
 * takes files a user hands it. The first input byte is flags, the rest
 * the file. A checksum would stop the fuzzer at the door, so flag 1 puts
 * the right SHA-256 of the tables (from the header's regions_off to the
 * end; in a version 2 image, to the page index's end) into the header,
 * flag 4 that of a version 2 image's working-set index, and flag 2 the
 * header's own (both, in version 2) after that: what lies behind the
 * checksums is reached too. An image that opens is
 * verified and each of its data runs read, as uffd-client image does.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "proto/image.h"
#include "proto/image_fmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The checksums the flags ask for, made right in b. */
static void
fix_sums(uint8_t *b, size_t n, uint8_t flags)
{
	uint64_t off, end = n, idx;
	int v2;

	if (n < IMAGE_HDR_LEN)
		return;
	v2 = get32(b + IH_VERSION) == IMAGE_VERSION_WS;
	off = get64(b + IH_REGIONS_OFF);
	if (v2 && get64(b + IH_NRUNS) < n / IMAGE_RUN_LEN &&
	    get64(b + IH_RUNS_OFF) <= n)
		end = get64(b + IH_RUNS_OFF) +
		      get64(b + IH_NRUNS) * IMAGE_RUN_LEN;
	if ((flags & 1) && off <= end && end <= n)
		EVP_Digest(b + off, end - off, b + IH_TABLES_SHA, NULL,
			   EVP_sha256(), NULL);
	idx = get64(b + IH_WS_INDEX_OFF);
	if ((flags & 4) && v2 && idx <= n)
		EVP_Digest(b + idx, n - idx, b + IH_WS_SHA, NULL, EVP_sha256(),
			   NULL);
	if (flags & 2)
		EVP_Digest(b, IH_HDR_SHA, b + IH_HDR_SHA, NULL, EVP_sha256(),
			   NULL);
	if ((flags & 2) && v2)
		EVP_Digest(b, IH_HDR2_SHA, b + IH_HDR2_SHA, NULL, EVP_sha256(),
			   NULL);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct image im;
	char err[256];
	uint8_t *b, *buf;
	int fd;

	if (size < 1)
		return 0;
	b = malloc(size);
	memcpy(b, data + 1, size - 1);
	fix_sums(b, size - 1, data[0]);
	fd = memfd_create("fuzz_image", MFD_CLOEXEC);
	if (fd < 0 || write(fd, b, size - 1) != (ssize_t)(size - 1)) {
		free(b);
		if (fd >= 0)
			close(fd);
		return 0;
	}
	free(b);
	if (image_open(&im, fd, err, sizeof(err)) < 0) {
		close(fd);
		return 0;
	}
	(void)image_verify(&im, err, sizeof(err));
	buf = malloc(IMAGE_RUN_BYTES);
	for (uint64_t k = 0; k < im.nruns; k++)
		if (im.runs[k].cls == IMAGE_DATA &&
		    image_run_bytes(&im, &im.runs[k]) <= IMAGE_RUN_BYTES)
			(void)image_run_read(&im, &im.runs[k], buf, err,
					     sizeof(err));
		else if (im.runs[k].cls == IMAGE_DATA)
			abort(); /* the reader let a run past its bound */
	for (uint64_t i = 0; i < im.nws; i++)
		if (im.regions[im.ws[i].region].page_size <= IMAGE_RUN_BYTES)
			(void)image_ws_read(&im, i, 1, buf, err, sizeof(err));
		else
			abort(); /* a working-set page larger than a page */
	free(buf);
	image_close(&im);
	return 0;
}

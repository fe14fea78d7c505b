/*
 * libFuzzer target: the snapshot image reader (proto/image.h), which
 * takes files a user hands it. The first input byte is flags, the rest
 * the file. A checksum would stop the fuzzer at the door, so flag 1 puts
 * the right SHA-256 of the tables (from the header's regions_off to the
 * end) into the header, and flag 2 the header's own after that: what
 * lies behind the checksums is reached too. An image that opens is
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
	uint64_t off;

	if (n < IMAGE_HDR_LEN)
		return;
	off = get64(b + IH_REGIONS_OFF);
	if ((flags & 1) && off <= n)
		EVP_Digest(b + off, n - off, b + IH_TABLES_SHA, NULL,
			   EVP_sha256(), NULL);
	if (flags & 2)
		EVP_Digest(b, IH_HDR_SHA, b + IH_HDR_SHA, NULL, EVP_sha256(),
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
	free(buf);
	image_close(&im);
	return 0;
}

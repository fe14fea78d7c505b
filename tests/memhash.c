/*
 * memhash PID START END [--poke-every K]: SHA-256 of another process's memory
 * read through /proc/PID/mem, independent of uffdd. --poke-every applies the
 * workload's pre-arrival writes (word 8 of every K-th page) to the bytes
 * before hashing, to predict a destination that wrote on top of the source.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#define CHUNK (1u << 20)

int
main(int argc, char **argv)
{
	uint64_t start, end, poke = 0;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen;
	EVP_MD_CTX *ctx;
	char path[64];
	uint8_t *buf;
	int fd;

	if (argc != 4 && !(argc == 6 && strcmp(argv[4], "--poke-every") == 0)) {
		fprintf(stderr,
			"usage: memhash PID START END [--poke-every K]\n");
		return 2;
	}
	start = strtoull(argv[2], NULL, 0);
	end = strtoull(argv[3], NULL, 0);
	if (argc == 6)
		poke = strtoull(argv[5], NULL, 0);
	snprintf(path, sizeof(path), "/proc/%s/mem", argv[1]);
	if ((fd = open(path, O_RDONLY)) < 0) {
		perror(path);
		return 1;
	}
	buf = malloc(CHUNK);
	ctx = EVP_MD_CTX_new();
	EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
	for (uint64_t at = start; at < end;) {
		size_t want = end - at < CHUNK ? (size_t)(end - at) : CHUNK;
		ssize_t r = pread(fd, buf, want, (off_t)at);

		if (r <= 0) {
			fprintf(stderr,
				"memhash: read at 0x%" PRIx64 " failed\n", at);
			return 1;
		}
		for (uint64_t off = 0; poke && off < (uint64_t)r; off += 4096) {
			uint64_t page = (at + off - start) / 4096;
			uint64_t v = 0xFFFFULL << 48 | page;

			if (page % poke == 0 && off + 72 <= (uint64_t)r)
				memcpy(buf + off + 64, &v, 8);
		}
		EVP_DigestUpdate(ctx, buf, (size_t)r);
		at += (uint64_t)r;
	}
	EVP_DigestFinal_ex(ctx, md, &mdlen);
	for (unsigned i = 0; i < mdlen; i++)
		printf("%02x", md[i]);
	printf("\n");
	return 0;
}

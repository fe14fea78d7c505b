/*
 * memhash [--present MAP | --map MAP [--zero-absent]] PID START END
 *         [--poke-every K]
 * SHA-256 of another process's memory read through /proc/PID/mem,
 * independent of uffdd.
 *
 * Plain, every byte of START-END is read. A read of a page that is not
 * present faults it in: a swapped page comes back, a page never touched
 * becomes a zero page. That changes what a source daemon finds there, so
 * a source not yet migrated is hashed with
 *   --present MAP: pagemap is read first (that touches nothing) and MAP
 *     written, one byte a page: 'P' present, 'S' swapped, '-' neither;
 *     "present N swapped N none N" goes to stderr; only the present pages
 *     are read and hashed; pagemap is read again at the end, and a page
 *     that was not present and is now fails (exit 1): the hash changed
 *     nothing.
 * and the destination, once complete, with
 *   --map MAP: the pages MAP says were present, in the same order, so
 *     that the two hashes compare; --zero-absent: the pages that were
 *     neither present nor swapped must read as zeros (exit 1 if not).
 * The pages left out are still checked word by word where the workload
 * checks the destination (tests/workload.c).
 * --poke-every K applies the workload's pre-arrival writes (word 8 of
 * every K-th page) to the bytes before hashing, to predict a destination
 * that wrote on top of the source.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#define PS 4096u
#define CHUNK (1u << 20)
#define PM_PRESENT (1ULL << 63)
#define PM_SWAP (1ULL << 62)
#define PM_SWP_TYPE 0x1fULL

static void
usage(void)
{
	fprintf(stderr, "usage: memhash [--present MAP | --map MAP "
			"[--zero-absent]] PID START END [--poke-every K]\n");
	exit(2);
}

/*
 * A pagemap entry of a swapped-out page. A PTE marker (the uffd-wp marker
 * a write-protecting daemon leaves on a page never touched) is a swap
 * entry to pagemap as well, PM_SWAP with the swap type SWP_PTE_MARKER,
 * the last of the 32 (root sees the type in the low bits): a page never
 * touched, not swapped.
 */
static int
is_swapped(uint64_t e)
{
	return (e & PM_SWAP) && (e & PM_SWP_TYPE) != PM_SWP_TYPE;
}

/* The pagemap of PID over npages pages from start, one byte a page. */
static char *
page_kinds(const char *pid, uint64_t start, uint64_t npages)
{
	char path[64], *kinds = malloc(npages ? npages : 1);
	uint64_t buf[4096];
	int fd;

	snprintf(path, sizeof(path), "/proc/%s/pagemap", pid);
	if (kinds == NULL || (fd = open(path, O_RDONLY)) < 0) {
		perror(path);
		exit(1);
	}
	for (uint64_t p = 0; p < npages;) {
		uint64_t want = npages - p < 4096 ? npages - p : 4096;
		ssize_t r =
			pread(fd, buf, want * 8, (off_t)((start / PS + p) * 8));

		if (r <= 0 || r % 8) {
			fprintf(stderr, "memhash: %s: read failed\n", path);
			exit(1);
		}
		for (ssize_t i = 0; i < r / 8; i++)
			kinds[p + i] = buf[i] & PM_PRESENT  ? 'P'
				       : is_swapped(buf[i]) ? 'S'
							    : '-';
		p += (uint64_t)r / 8;
	}
	close(fd);
	return kinds;
}

int
main(int argc, char **argv)
{
	const char *pos[3], *present = NULL, *map = NULL;
	uint64_t start, end, npages, poke = 0, counts[3] = {0, 0, 0};
	unsigned char md[EVP_MAX_MD_SIZE];
	int npos = 0, zero_absent = 0, fd;
	unsigned int mdlen;
	char *kinds = NULL;
	EVP_MD_CTX *ctx;
	char path[64];
	uint8_t *buf;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--present") == 0 && i + 1 < argc)
			present = argv[++i];
		else if (strcmp(argv[i], "--map") == 0 && i + 1 < argc)
			map = argv[++i];
		else if (strcmp(argv[i], "--zero-absent") == 0)
			zero_absent = 1;
		else if (strcmp(argv[i], "--poke-every") == 0 && i + 1 < argc)
			poke = strtoull(argv[++i], NULL, 0);
		else if (argv[i][0] != '-' && npos < 3)
			pos[npos++] = argv[i];
		else
			usage();
	}
	if (npos != 3 || (present && map) || (zero_absent && !map))
		usage();
	start = strtoull(pos[1], NULL, 0);
	end = strtoull(pos[2], NULL, 0);
	if (start % PS || end % PS || end < start)
		usage();
	npages = (end - start) / PS;
	if (present) {
		FILE *f;

		kinds = page_kinds(pos[0], start, npages);
		for (uint64_t p = 0; p < npages; p++)
			counts[kinds[p] == 'P' ? 0 : kinds[p] == 'S' ? 1 : 2]++;
		if ((f = fopen(present, "w")) == NULL ||
		    fwrite(kinds, 1, npages, f) != npages || fclose(f) != 0) {
			perror(present);
			return 1;
		}
		fprintf(stderr,
			"present %" PRIu64 " swapped %" PRIu64 " none %" PRIu64
			"\n",
			counts[0], counts[1], counts[2]);
	} else if (map) {
		FILE *f = fopen(map, "r");

		kinds = malloc(npages + 1);
		if (f == NULL || kinds == NULL ||
		    fread(kinds, 1, npages + 1, f) != npages) {
			fprintf(stderr,
				"memhash: %s: not a map of %" PRIu64 " pages\n",
				map, npages);
			return 1;
		}
		fclose(f);
	}
	snprintf(path, sizeof(path), "/proc/%s/mem", pos[0]);
	if ((fd = open(path, O_RDONLY)) < 0) {
		perror(path);
		return 1;
	}
	buf = malloc(CHUNK);
	ctx = EVP_MD_CTX_new();
	EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
	for (uint64_t at = start; at < end;) {
		uint64_t p = (at - start) / PS, n = 1, len;
		int hash = kinds == NULL || kinds[p] == 'P';
		ssize_t r;

		/* A run of pages of one kind, at most a chunk. */
		while (kinds && p + n < npages && kinds[p + n] == kinds[p] &&
		       (n + 1) * PS <= CHUNK)
			n++;
		if (!kinds)
			n = (end - at < CHUNK ? end - at : CHUNK) / PS;
		len = n * PS;
		if (!hash && !(zero_absent && kinds[p] == '-')) {
			at += len;
			continue;
		}
		r = pread(fd, buf, len, (off_t)at);
		if (r != (ssize_t)len) {
			fprintf(stderr,
				"memhash: read at 0x%" PRIx64 " failed\n", at);
			return 1;
		}
		if (!hash) {
			for (uint64_t i = 0; i < len; i++)
				if (buf[i]) {
					fprintf(stderr,
						"memhash: page at 0x%" PRIx64
						" is not zero, but was never "
						"touched on the source\n",
						(at + i) & ~(uint64_t)(PS - 1));
					return 1;
				}
			at += len;
			continue;
		}
		for (uint64_t off = 0; poke && off < len; off += PS) {
			uint64_t page = (at + off - start) / PS;
			uint64_t v = 0xFFFFULL << 48 | page;

			if (page % poke == 0)
				memcpy(buf + off + 64, &v, 8);
		}
		EVP_DigestUpdate(ctx, buf, len);
		at += len;
	}
	if (present) {
		char *after = page_kinds(pos[0], start, npages);
		uint64_t changed = 0, first = 0;

		for (uint64_t p = 0; p < npages; p++)
			if (kinds[p] != 'P' && after[p] == 'P' && !changed++)
				first = start + p * PS;
		if (changed) {
			fprintf(stderr,
				"memhash: %" PRIu64 " pages not present before "
				"the hash are now, the first at 0x%" PRIx64
				": the source changed under it\n",
				changed, first);
			return 1;
		}
	}
	EVP_DigestFinal_ex(ctx, md, &mdlen);
	for (unsigned i = 0; i < mdlen; i++)
		printf("%02x", md[i]);
	printf("\n");
	return 0;
}

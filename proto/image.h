/*
 * Snapshot images (docs/image-format.md): one writer for the daemon and
 * one reader for everyone (the daemon later, uffd-client's image command,
 * the fuzz target). An image is a header, the page data, a region table
 * and a page index of runs: each run a stretch of pages of one region and
 * one class (data, zero, hole), data runs with their own SHA-256.
 *
 * The reader takes nothing from a file on trust: every count, offset and
 * length is checked against the file's real size and against the others
 * before anything is allocated or read by it, every region against the
 * user address space (image_open()).
 */
#ifndef UFFDD_IMAGE_H
#define UFFDD_IMAGE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define IMAGE_MAGIC "UFFDDIMG"
#define IMAGE_VERSION 1
/*
 * Version 2: a version 1 image followed by a working-set section, the
 * pages a restore faulted first, in order, with their own bytes and
 * checksums (docs/image-format.md). Version 1 readers refuse it by version.
 */
#define IMAGE_VERSION_WS 2
#define IMAGE_WS_ENTRY_LEN 48u
/* The header's size, and the alignment of every data run in the file. */
#define IMAGE_HDR_LEN 4096u
#define IMAGE_ALIGN 4096u
#define IMAGE_REGION_LEN 336u
#define IMAGE_RUN_LEN 64u
#define IMAGE_NAME_MAX 256u
#define IMAGE_SHA_LEN 32u
/* At most this many regions (the daemon's REGION_TABLE_MAX). */
#define IMAGE_REGIONS_MAX 4096u
/* Pages of at most this size (what one frame carries: FRAME_DATA_MAX). */
#define IMAGE_PAGE_MAX (4u << 20)
/*
 * Every region lies below this address: the x86-64 user address space
 * (4-level page tables). A region's pages cost the reader nothing in the
 * file (a hole or zero run is one record), so this is what bounds them,
 * and the bitmaps a source keeps of them (docs/image-format.md, "Limits").
 */
#define IMAGE_ADDR_END (1ull << 47)
/*
 * The reader reads and hashes the tables at most this many bytes at a
 * time, with one buffer: a file that claims long tables costs reads, not
 * memory, and image_open_stoppable() looks at its stop flag between steps.
 */
#define IMAGE_READ_STEP (1u << 20)
/* A data run holds at most this many bytes (or one page, if larger). */
#define IMAGE_RUN_BYTES (4u << 20)
/*
 * The writer makes data runs of at most this many bytes (or one page, if
 * larger). A restore reads and checks a whole run for any page of it, so
 * a demand fault into a run not read yet costs its read and SHA-256:
 * about 0.2 ms for 256 KiB against 3-5 ms for 4 MiB on the machines
 * measured (docs/image-format.md).
 */
#define IMAGE_RUN_WRITE (256u << 10)

enum image_class {
	IMAGE_DATA = 1, /* bytes in the file, with their checksum */
	IMAGE_ZERO = 2, /* populated, every byte zero */
	IMAGE_HOLE = 3, /* never populated: as the mapping gives it */
};

struct image_region {
	uint64_t start, length;
	uint64_t file_off; /* a private file mapping: start's offset in it */
	uint32_t page_size;
	uint32_t kind; /* enum region_kind: RegionKind on the wire */
	uint32_t shared;
	uint64_t first_run, nruns; /* its runs in the page index */
	uint64_t data_pages, zero_pages, hole_pages;
	char name[IMAGE_NAME_MAX];
};

struct image_run {
	uint32_t region;
	uint32_t cls; /* enum image_class */
	uint64_t first_page, npages;
	uint64_t data_off; /* IMAGE_DATA: where its bytes start in the file */
	uint8_t sha[IMAGE_SHA_LEN];
};

/*
 * One page of the working set: page of region, a data page in the runs;
 * its bytes again at off in the working-set section, with their SHA-256.
 */
struct image_ws {
	uint32_t region;
	uint64_t page;
	uint64_t off;
	uint8_t sha[IMAGE_SHA_LEN];
};

/* An image opened for reading, its tables checked (image_open()). */
struct image {
	int fd;
	uint64_t file_len, data_len;
	int32_t pid;
	uint64_t created; /* seconds since the epoch */
	uint32_t nregions;
	uint64_t nruns;
	struct image_region *regions;
	struct image_run *runs;
	uint32_t version;
	uint64_t tables_end; /* the end of the page index */
	uint8_t tables_sha[IMAGE_SHA_LEN];
	/* Version 2: the working set, in fault order, its section checked. */
	uint64_t nws;
	struct image_ws *ws;
	uint64_t ws_bytes;
};

/*
 * Reads and checks the header, the region table and the page index of
 * the image open at fd (which the image keeps; image_close() closes it).
 * Returns 0, or -1 with err saying what is wrong and where.
 */
int image_open(struct image *, int fd, char *err, size_t errlen);
/*
 * The same, on a thread that may be told to stop (the daemon's worker,
 * daemon/worker.h): gives up with err "stopped" once *stop is set, which
 * it looks at between reads of IMAGE_READ_STEP bytes.
 */
int image_open_stoppable(struct image *, int fd, const atomic_int *stop,
			 char *err, size_t errlen);
/* The run of region ri of an opened image that holds page (binary search). */
const struct image_run *image_run_of(const struct image *, uint32_t ri,
				     uint64_t page);
void image_close(struct image *);
/* A run's bytes in the file (npages * page_size of its region). */
uint64_t image_run_bytes(const struct image *, const struct image_run *);
/*
 * Reads data run r into buf (image_run_bytes() long) and checks its
 * SHA-256. 0, or -1 with err set: a short read or a wrong checksum.
 */
int image_run_read(const struct image *, const struct image_run *r, void *buf,
		   char *err, size_t errlen);
/*
 * Reads the bytes of working-set pages [first, first + n) (one read: they
 * lie end to end) into buf and checks each page's SHA-256. 0, or -1.
 */
int image_ws_read(const struct image *, uint64_t first, uint64_t n, void *buf,
		  char *err, size_t errlen);
/*
 * The checks of the two reads above alone, on bytes read some other way
 * (image_ra.h): 0, or -1 with err naming the run or page.
 */
int image_run_check(const struct image *, const struct image_run *r,
		    const void *buf, char *err, size_t errlen);
int image_ws_check(const struct image *, uint64_t first, uint64_t n,
		   const void *buf, char *err, size_t errlen);
/* The bytes of working-set pages [first, first + n) (n > 0), end to end. */
uint64_t image_ws_bytes(const struct image *, uint64_t first, uint64_t n);
/*
 * Writes to out (a new empty file) im's image with the working set keys
 * (region << 48 | page, in fault order) as its section, replacing any it
 * had: pages that are not data pages of im, and repeats, are left out;
 * every byte copied is checked first. Then fsync. The number of pages
 * kept, or -1 with err set.
 */
int64_t image_ws_store(const struct image *im, int out, const uint64_t *keys,
		       size_t nkeys, char *err, size_t errlen);
#define IMAGE_WS_KEY(region, page) ((uint64_t)(region) << 48 | (page))

/* Reads every data run and checks it. 0, or -1 at the first bad one. */
int image_verify(const struct image *, char *err, size_t errlen);
const char *image_class_name(uint32_t cls);

/*
 * Writing, to a new empty file at fd: the regions are given first, then
 * their pages in order (region by region, page by page, none left out) as
 * data or markers; adjacent pages of one class join one run.
 */
struct image_writer {
	int fd;
	int32_t pid;
	uint32_t nregions;
	struct image_region *regions;
	struct image_run *runs;
	size_t nruns, cap;
	uint64_t data_end; /* the next data run's offset */
	void *ctx;	   /* EVP_MD_CTX of the last run while it grows */
	int err;	   /* errno of the first failure: later calls fail */
};

/* 0, or -1 with errno set. Only the regions' identities are taken. */
int image_writer_begin(struct image_writer *, int fd,
		       const struct image_region *regions, uint32_t nregions,
		       int32_t pid);
/* Pages [page, page + n) of region ri, bytes at buf. 0, or -1 (errno). */
int image_write_data(struct image_writer *, uint32_t ri, uint64_t page,
		     uint64_t n, const void *buf);
int image_write_marker(struct image_writer *, uint32_t ri, uint64_t page,
		       uint64_t n, enum image_class cls);
/*
 * The tables and the header, then fsync: the file is whole on disk.
 * EINVAL when a region was not covered page for page. 0, or -1 (errno).
 */
int image_writer_end(struct image_writer *);
void image_writer_free(struct image_writer *);

#endif

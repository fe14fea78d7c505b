/*
 * The byte layout of an image's header, region records and runs
 * (docs/image-format.md), for image.c, image_data.c and image_write.c
 * only: every field little-endian at a fixed offset, whatever the host.
 */
#ifndef UFFDD_IMAGE_FMT_H
#define UFFDD_IMAGE_FMT_H

#include <stdint.h>
#include <string.h>

#include <openssl/evp.h>

#include "proto/image.h"

/* Header offsets. */
#define IH_MAGIC 0
#define IH_VERSION 8
#define IH_HDR_LEN 12
#define IH_ALIGN 16
#define IH_NREGIONS 20
#define IH_NRUNS 24
#define IH_DATA_OFF 32
#define IH_DATA_LEN 40
#define IH_REGIONS_OFF 48
#define IH_RUNS_OFF 56
#define IH_FILE_LEN 64
#define IH_CREATED 72
#define IH_PID 80
#define IH_FLAGS 84
#define IH_TABLES_SHA 88
#define IH_HDR_SHA 120
#define IH_END 152 /* version 1: the rest of the header is zero */
/* Version 2: the working-set section, and a checksum over all before. */
#define IH_WS_OFF 152
#define IH_WS_COUNT 160
#define IH_WS_INDEX_OFF 168
#define IH_WS_SHA 176
#define IH_HDR2_SHA 208
#define IH_END2 240 /* version 2: the rest of the header is zero */

struct image_fmt_hdr {
	uint32_t version, hdr_len, align, nregions, flags;
	uint64_t nruns, data_off, data_len, regions_off, runs_off, file_len;
	uint64_t created;
	int32_t pid;
	uint8_t tables_sha[IMAGE_SHA_LEN];
};

static inline void
put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void
put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t
get32(const uint8_t *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static inline uint64_t
get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Encodes a header (IMAGE_HDR_LEN bytes) with its own checksum. */
static inline int
image_fmt_put_hdr(uint8_t *b, const struct image_fmt_hdr *h)
{
	memset(b, 0, IMAGE_HDR_LEN);
	memcpy(b + IH_MAGIC, IMAGE_MAGIC, 8);
	put32(b + IH_VERSION, IMAGE_VERSION);
	put32(b + IH_HDR_LEN, IMAGE_HDR_LEN);
	put32(b + IH_ALIGN, IMAGE_ALIGN);
	put32(b + IH_NREGIONS, h->nregions);
	put64(b + IH_NRUNS, h->nruns);
	put64(b + IH_DATA_OFF, h->data_off);
	put64(b + IH_DATA_LEN, h->data_len);
	put64(b + IH_REGIONS_OFF, h->regions_off);
	put64(b + IH_RUNS_OFF, h->runs_off);
	put64(b + IH_FILE_LEN, h->file_len);
	put64(b + IH_CREATED, h->created);
	put32(b + IH_PID, (uint32_t)h->pid);
	put32(b + IH_FLAGS, 0);
	memcpy(b + IH_TABLES_SHA, h->tables_sha, IMAGE_SHA_LEN);
	return EVP_Digest(b, IH_HDR_SHA, b + IH_HDR_SHA, NULL, EVP_sha256(),
			  NULL) == 1
		       ? 0
		       : -1;
}

/* Working-set index entry offsets (IMAGE_WS_ENTRY_LEN bytes each). */
#define IW_REGION 0
#define IW_RESERVED 4
#define IW_PAGE 8
#define IW_SHA 16

/* Region record offsets. */
#define IR_START 0
#define IR_LENGTH 8
#define IR_FILE_OFF 16
#define IR_PAGE_SIZE 24
#define IR_KIND 28
#define IR_SHARED 32
#define IR_RESERVED 36
#define IR_FIRST_RUN 40
#define IR_NRUNS 48
#define IR_DATA 56
#define IR_ZERO 64
#define IR_HOLE 72
#define IR_NAME 80

static inline void
image_fmt_put_region(uint8_t *b, const struct image_region *r)
{
	put64(b + IR_START, r->start);
	put64(b + IR_LENGTH, r->length);
	put64(b + IR_FILE_OFF, r->file_off);
	put32(b + IR_PAGE_SIZE, r->page_size);
	put32(b + IR_KIND, r->kind);
	put32(b + IR_SHARED, r->shared);
	put32(b + IR_RESERVED, 0);
	put64(b + IR_FIRST_RUN, r->first_run);
	put64(b + IR_NRUNS, r->nruns);
	put64(b + IR_DATA, r->data_pages);
	put64(b + IR_ZERO, r->zero_pages);
	put64(b + IR_HOLE, r->hole_pages);
	memset(b + IR_NAME, 0, IMAGE_NAME_MAX);
	memcpy(b + IR_NAME, r->name, strnlen(r->name, IMAGE_NAME_MAX - 1));
}

/* Run record offsets. */
#define IU_REGION 0
#define IU_CLASS 4
#define IU_FIRST_PAGE 8
#define IU_NPAGES 16
#define IU_DATA_OFF 24
#define IU_SHA 32

static inline void
image_fmt_put_run(uint8_t *b, const struct image_run *r)
{
	put32(b + IU_REGION, r->region);
	put32(b + IU_CLASS, r->cls);
	put64(b + IU_FIRST_PAGE, r->first_page);
	put64(b + IU_NPAGES, r->npages);
	put64(b + IU_DATA_OFF, r->data_off);
	memcpy(b + IU_SHA, r->sha, IMAGE_SHA_LEN);
}

/* image.c, for image_data.c: fills err and returns -1. */
int image_bad(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* image.c: reads exactly len bytes at off; -1 on an error or a cut file. */
int image_pread_all(int fd, void *buf, size_t len, uint64_t off);

#endif

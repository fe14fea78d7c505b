/* Unit tests for the destination's check of a source's region table. */
#include "config.h"

#include <stdlib.h>

#include "daemon/region.h"
#include "tests/unit/unit.h"

static Uffdd__Region *
mk(uint32_t index, uint64_t start, uint64_t length, uint32_t page_size)
{
	Uffdd__Region *r = calloc(1, sizeof(*r));

	uffdd__region__init(r);
	r->index = index;
	r->start = start;
	r->length = length;
	r->page_size = page_size;
	return r;
}

static int
check(Uffdd__Region **r, size_t n)
{
	char err[256];
	int rc = region_table_check(r, n, err, sizeof(err));

	if (rc < 0)
		printf("refused: %s\n", err);
	return rc;
}

int
main(void)
{
	const uint64_t b = 0x500000000000;
	Uffdd__Region *r[3], **many;

	/* Empty and one-region tables; adjacent regions do not overlap. */
	CHECK(check(NULL, 0) == 0);
	r[0] = mk(0, b, 1 << 20, 4096);
	CHECK(check(r, 1) == 0);
	r[1] = mk(1, b + (1 << 20), 4096, 4096);
	r[2] = mk(7, b - 2 * 4096, 2 * 4096, 2 << 20);
	CHECK(check(r, 3) == 0);

	/* Overlap, in any order. */
	r[1]->start = b + (1 << 20) - 4096;
	CHECK(check(r, 3) < 0);
	r[1]->start = b + (1 << 20);
	r[2]->length = 3 * 4096;
	CHECK(check(r, 3) < 0);
	r[2]->length = 2 * 4096;

	/* A repeated index. */
	r[2]->index = 1;
	CHECK(check(r, 3) < 0);
	r[2]->index = 7;

	/* Lengths: zero, wrapping around. */
	r[0]->length = 0;
	CHECK(check(r, 3) < 0);
	r[0]->length = 1 << 20;
	r[1]->start = UINT64_MAX - 4095;
	r[1]->length = 8192;
	CHECK(check(r, 3) < 0);
	r[1]->start = b + (1 << 20);
	r[1]->length = 4096;

	/*
	 * Page sizes: powers of two from 4 KiB, and at most what one frame
	 * covers (FRAME_DATA_MAX): 1 GiB pages (default_hugepagesz=1G) would
	 * come in frames larger than the buffers and the zero source.
	 */
	r[0]->page_size = 0;
	CHECK(check(r, 3) < 0);
	r[0]->page_size = 2048;
	CHECK(check(r, 3) < 0);
	r[0]->page_size = 12288;
	CHECK(check(r, 3) < 0);
	r[0]->page_size = 2u << 30;
	CHECK(check(r, 3) < 0);
	r[0]->page_size = 1u << 30;
	CHECK(check(r, 3) < 0);
	r[0]->page_size = 2 * FRAME_DATA_MAX;
	CHECK(check(r, 3) < 0);
	r[0]->page_size = FRAME_DATA_MAX;
	CHECK(check(r, 3) == 0);
	r[0]->page_size = 4096;
	CHECK(check(r, 3) == 0);

	/* Count. */
	many = calloc(REGION_TABLE_MAX + 1, sizeof(*many));
	for (size_t i = 0; i <= REGION_TABLE_MAX; i++)
		many[i] = mk((uint32_t)i, b + i * 8192, 4096, 4096);
	CHECK(check(many, REGION_TABLE_MAX) == 0);
	CHECK(check(many, REGION_TABLE_MAX + 1) < 0);
	for (size_t i = 0; i <= REGION_TABLE_MAX; i++)
		free(many[i]);
	free(many);
	for (int i = 0; i < 3; i++)
		free(r[i]);
	return UNIT_DONE();
}

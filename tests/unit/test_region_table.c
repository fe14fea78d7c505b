/* Unit tests for the destination's check of a source's region table. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

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

/* A name in a one-region table: accepted (0) or refused (-1). */
static int
name_ok(const char *name)
{
	Uffdd__Region *r = mk(3, 0x500000000000, 4096, 4096);
	int rc;

	r->name = (char *)name;
	rc = check(&r, 1);
	free(r);
	return rc;
}

/*
 * A peer's name reaches logs, status and the state file: only printable
 * UTF-8, at most REGION_NAME_MAX - 1 bytes; what a source reads from
 * /proc/PID/maps (region_name_escape()) always passes.
 */
static void
names(void)
{
	char big[REGION_NAME_MAX + 8], out[REGION_NAME_MAX];

	CHECK(name_ok("/usr/lib/x86_64-linux-gnu/libc.so.6") == 0);
	CHECK(name_ok("/tmp/caf\xc3\xa9 (deleted)") == 0);
	CHECK(name_ok("[anon:guest ram]") == 0);
	CHECK(name_ok("x\npid=1\ntarget_fd=3") < 0);
	CHECK(name_ok("a\x1b[31m") < 0);
	CHECK(name_ok("a\x7f") < 0);
	CHECK(name_ok("a\xc2\x9b") < 0);
	CHECK(name_ok("a\xff") < 0);
	memset(big, 'a', sizeof(big));
	big[REGION_NAME_MAX - 1] = '\0';
	CHECK(name_ok(big) == 0);
	big[REGION_NAME_MAX - 1] = 'a';
	big[REGION_NAME_MAX] = '\0';
	CHECK(name_ok(big) < 0);

	/* Escaped as the kernel writes a newline; printable text stays. */
	CHECK(region_name_escape(out, "/d/x\x1b[31m\ty\xff\xc3\xa9") == 0);
	CHECK(strcmp(out, "/d/x\\033[31m\\011y\\377\xc3\xa9") == 0);
	CHECK(name_ok(out) == 0);
	CHECK(region_name_escape(out, "/d/a\\012b") == 0);
	CHECK(strcmp(out, "/d/a\\012b") == 0);
	/* Too long: cut to REGION_NAME_MAX - 1, never mid-character. */
	memset(big, 'a', sizeof(big));
	big[REGION_NAME_MAX] = '\0';
	CHECK(region_name_escape(out, big) == 1);
	CHECK(strlen(out) == REGION_NAME_MAX - 1 && name_ok(out) == 0);
	big[REGION_NAME_MAX - 1] = '\0';
	CHECK(region_name_escape(out, big) == 0 && name_ok(out) == 0);
	big[REGION_NAME_MAX - 3] = '\xe2'; /* a euro sign over the edge */
	big[REGION_NAME_MAX - 2] = '\x82';
	big[REGION_NAME_MAX - 1] = '\xac';
	big[REGION_NAME_MAX] = '\0';
	CHECK(region_name_escape(out, big) == 1);
	CHECK(strlen(out) == REGION_NAME_MAX - 1 && name_ok(out) == 0);
	CHECK(strcmp(out + REGION_NAME_MAX - 3, "??") == 0);
	big[REGION_NAME_MAX - 3] = '\n';
	CHECK(region_name_escape(out, big) == 1);
	CHECK(strlen(out) == REGION_NAME_MAX - 1 && name_ok(out) == 0);
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
	names();
	return UNIT_DONE();
}

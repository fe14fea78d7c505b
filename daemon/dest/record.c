/*
 * The record of installed pages: one bit a page of every region, set
 * once a page went into the target (UFFDIO_COPY or ZEROPAGE, or found
 * there: EEXIST), kept in ID.destination.installed in the state directory
 * and mapped shared, so that a store into it outlives a daemon killed
 * the next instant (the page cache keeps it; docs/state-files.md).
 *
 * Why: a restarted daemon (or engine) rebuilds its page map from the
 * target's pagemap, and shared memory (shmem, memfd, tmpfs, hugetlbfs)
 * can lose an installed page with no uffd event: a hole punched in its
 * file (fallocate). The page then looks never installed, and the source's
 * bytes would go where the target wants zeros. With the record, a page
 * whose bit is set counts as installed whatever the pagemap says: a fault
 * there gets a zero page, as from the daemon that installed it.
 *
 * The bit is set right after the install, never before: set before, a
 * daemon killed in between would leave a page marked that never went in,
 * and a zero page would be served where the source's bytes belong. Set
 * after, a daemon killed between the install and the store leaves a page
 * installed and unmarked: torn only if the target also punches that very
 * page before the restarted daemon reads the pagemap, a window of a few
 * instructions (documented in docs/state-files.md).
 *
 * Forked children share their root's record for shared memory (one page
 * cache, one bitmap); their private memory is theirs, and its pages leave
 * only with an event, which the state file keeps.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/migration.h"
#include "daemon/pagemap.h"
#include "daemon/state.h"
#include "daemon/statefmt.h"

#define RECORD_SUFFIX STATE_INSTALLED_SUFFIX
#define RECORD_MAGIC "uffdd-installed\n" /* 16 bytes, no NUL kept */
#define RECORD_VERSION 1

/*
 * The file: this head, a struct record_region a region (in the state
 * file's order), then each region's bits, bit_words(npages) words, in
 * the same order. Native byte order: the file never leaves its host.
 */
struct record_head {
	char magic[16];
	uint32_t version;
	uint32_t nregs;
	char id[MIG_ID_LEN];
};

struct record_region {
	uint64_t index, npages, page_size;
};

struct dest_record {
	int refs; /* the root, and each forked child that shares it */
	uint8_t *map;
	size_t len;
};

/*
 * The file's size for these regions (checked ones: a state file's, or a
 * table region_table_check() passed), or 0 past STATE_FILE_MAX.
 */
static size_t
record_size(const struct region *regs, size_t nregs)
{
	uint64_t len = sizeof(struct record_head) +
		       (uint64_t)nregs * sizeof(struct record_region);

	for (size_t k = 0; k < nregs && len <= STATE_FILE_MAX; k++)
		len += bit_words(regs[k].length / regs[k].page_size) *
		       sizeof(uint64_t);
	return len <= STATE_FILE_MAX ? (size_t)len : 0;
}

/* The regions of d as the file describes them. */
static struct region *
regions_of(const struct dest *d)
{
	struct region *r = xcalloc(d->nregs ? d->nregs : 1, sizeof(*r));

	for (size_t i = 0; i < d->nregs; i++)
		r[i] = d->regs[i].r;
	return r;
}

/* Pages that can be installed and lost again: all but private files. */
static int
tracked(const struct dst_region *dr)
{
	return dr->r.kind != REGION_FILE_PRIVATE;
}

/* Each region of the root d points at its bits, in the file's order. */
static void
point(struct dest *d)
{
	size_t at = sizeof(struct record_head) +
		    d->nregs * sizeof(struct record_region);

	for (size_t i = 0; i < d->nregs; i++) {
		struct dst_region *dr = &d->regs[i];

		dr->installed =
			tracked(dr) ? (uint64_t *)(d->ps.rec->map + at) : NULL;
		at += bit_words(dr->npages) * sizeof(uint64_t);
	}
}

int
dest_record_make(struct dest *d, char *err, size_t errlen)
{
	struct region *r = regions_of(d);
	size_t len = record_size(r, d->nregs);
	struct record_head *h;
	struct record_region *rr;
	uint8_t *map;

	free(r);
	if (len == 0) {
		snprintf(err, errlen,
			 "its record of installed pages would be larger "
			 "than %u bytes",
			 STATE_FILE_MAX);
		return -1;
	}
	map = state_map(d->m, RECORD_SUFFIX, len, 1, err, errlen);
	if (map == NULL)
		return -1;
	h = (struct record_head *)map;
	memcpy(h->magic, RECORD_MAGIC, sizeof(h->magic));
	h->version = RECORD_VERSION;
	h->nregs = (uint32_t)d->nregs;
	memcpy(h->id, d->m->id, MIG_ID_LEN);
	rr = (struct record_region *)(h + 1);
	for (size_t i = 0; i < d->nregs; i++)
		rr[i] = (struct record_region){d->regs[i].r.index,
					       d->regs[i].npages,
					       d->regs[i].r.page_size};
	d->ps.rec = xcalloc(1, sizeof(*d->ps.rec));
	d->ps.rec->refs = 1;
	d->ps.rec->map = map;
	d->ps.rec->len = len;
	point(d);
	return 0;
}

/* The head of a record mapped at restart, against the state file's. */
static int
head_check(const uint8_t *map, const char *id, const struct region *regs,
	   size_t nregs, char *err, size_t errlen)
{
	const struct record_head *h = (const struct record_head *)map;
	const struct record_region *rr = (const struct record_region *)(h + 1);

	if (memcmp(h->magic, RECORD_MAGIC, sizeof(h->magic)) != 0 ||
	    h->version != RECORD_VERSION) {
		snprintf(err, errlen,
			 "not one this uffdd writes (magic, or version %u)",
			 h->version);
		return -1;
	}
	if (memcmp(h->id, id, MIG_ID_LEN) != 0 || h->nregs != nregs) {
		snprintf(err, errlen,
			 "of another migration, or of %u regions where the "
			 "state file has %zu",
			 h->nregs, nregs);
		return -1;
	}
	for (size_t i = 0; i < nregs; i++) {
		if (rr[i].index == regs[i].index &&
		    rr[i].page_size == regs[i].page_size &&
		    rr[i].npages == regs[i].length / regs[i].page_size)
			continue;
		snprintf(err, errlen,
			 "its region %zu is %llu pages of %llu bytes (source "
			 "index %llu), not the state file's",
			 i, (unsigned long long)rr[i].npages,
			 (unsigned long long)rr[i].page_size,
			 (unsigned long long)rr[i].index);
		return -1;
	}
	return 0;
}

int
dest_record_take(struct dest *d, const struct region *regs, size_t nregs,
		 char *err, size_t errlen)
{
	size_t len = record_size(regs, nregs);
	uint8_t *map = NULL;
	char why[256];

	if (len == 0)
		snprintf(why, sizeof(why),
			 "the state file's regions make it larger than %u "
			 "bytes",
			 STATE_FILE_MAX);
	else if ((map = state_map(d->m, RECORD_SUFFIX, len, 0, why,
				  sizeof(why))) != NULL &&
		 head_check(map, d->m->id, regs, nregs, why, sizeof(why)) < 0) {
		munmap(map, len);
		map = NULL;
	}
	if (map == NULL) {
		snprintf(err, errlen, "record of installed pages: %s", why);
		return -1;
	}
	d->ps.rec = xcalloc(1, sizeof(*d->ps.rec));
	d->ps.rec->refs = 1;
	d->ps.rec->map = map;
	d->ps.rec->len = len;
	return 0;
}

void
dest_record_regions(struct dest *d)
{
	if (d->ps.rec && d->root == NULL)
		point(d);
}

void
dest_record_share(struct dest *k, struct dest *root)
{
	if (root->ps.rec == NULL)
		return;
	k->ps.rec = root->ps.rec;
	k->ps.rec->refs++;
	for (size_t i = 0; i < k->nregs && i < root->nregs; i++)
		if (region_kind_shmem(k->regs[i].r.kind))
			k->regs[i].installed = root->regs[i].installed;
}

int
dest_record_has(const struct dst_region *dr, uint64_t page)
{
	return dr->installed && bit_test(dr->installed, page);
}

void
dest_record_mark(const struct dst_region *dr, uint64_t page, uint64_t n)
{
	if (dr->installed && n)
		bit_set_range(dr->installed, page, page + n);
}

/*
 * After a restart, with the page map read from the pagemap: a page the
 * record says was installed is, whatever the pagemap says now (a hole
 * punched since: a fault there gets a zero page); a page the pagemap
 * shows is marked (installed, or written by the target itself).
 */
void
dest_record_apply(struct dst_region *dr)
{
	for (uint64_t p = 0; dr->installed && p < dr->npages; p++) {
		if (bit_test(dr->installed, p))
			pagestate_set(&dr->ps, p, PAGE_PRESENT);
		else if (pagestate_get(&dr->ps, p) == PAGE_PRESENT)
			bit_set(dr->installed, p);
	}
}

void
dest_record_drop(struct dest *d)
{
	if (d->ps.rec && --d->ps.rec->refs == 0) {
		munmap(d->ps.rec->map, d->ps.rec->len);
		free(d->ps.rec);
	}
	d->ps.rec = NULL;
	for (size_t i = 0; i < d->nregs; i++)
		d->regs[i].installed = NULL;
}

void
dest_record_remove(struct dest *d)
{
	if (d->root == NULL)
		state_map_remove(d->m, RECORD_SUFFIX);
}

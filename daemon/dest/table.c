/*
 * The source's region table, as the demand lane hands it to an attach:
 * matched to the target's maps, and the regions that fit are taken
 * (target.c), or the attach fails saying why. Below the lanes: it answers
 * them (dest_attach_regions()) and never calls into them.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/conffile.h"
#include "daemon/conn.h"
#include "daemon/control.h"
#include "daemon/dest.h"
#include "daemon/dest/internal.h"
#include "daemon/fdpass.h"
#include "daemon/log.h"
#include "daemon/migration.h"
#include "daemon/peer.h"
#include "daemon/role.h"
#include "daemon/tls.h"

/* A copy of a source region for the reply, in out. */
static Uffdd__Region *
pb_region(Uffdd__Region *out, const Uffdd__Region *in)
{
	*out = *in;
	return out;
}

/*
 * Where a source region goes in the target: the same address, or where
 * an attach --map says, by the region's address or by its name (0:
 * nowhere, with maps given and none for it).
 */
static uint64_t
target_start(const struct dest *d, const Uffdd__Region *r)
{
	if (d->req.nmaps == 0)
		return r->start;
	for (size_t i = 0; i < d->req.nmaps; i++)
		if (d->req.map_names[i][0]
			    ? strcmp(d->req.map_names[i], r->name) == 0
			    : d->req.maps[i].start == r->start)
			return d->req.maps[i].end;
	return 0;
}

/*
 * A path too long for a region's name arrives cut on either side; two
 * different files could then look the same, and the target would run on
 * the wrong file's pages. Such a mapping never matches.
 */
static int
name_cut(const Uffdd__Region *r)
{
	return strlen(r->name) >= REGION_NAME_MAX - 1;
}

/*
 * A private file mapping matches only the same file at the same offset:
 * the clean pages the destination keeps must be the ones the source has.
 * (Files are told apart by path, as /proc/PID/maps shows it.)
 */
static int
same_file(const struct vma *v, size_t nv, uint64_t at, const Uffdd__Region *r)
{
	const struct vma *e = region_vma_at(v, nv, at);

	return e && !e->name_cut && !name_cut(r) &&
	       strcmp(e->name, r->name) == 0 &&
	       e->offset + (at - e->start) == r->file_offset;
}

/*
 * A source region whose written private file pages would have nowhere to
 * go: the target would run on the file's stale bytes there. Refused before
 * anything is touched, saying what the target has at that address.
 */
static int
private_unmatched(struct dest *d, const struct vma *v, size_t nv,
		  const Uffdd__Region *r, uint64_t at)
{
	const struct vma *e = region_vma_at(v, nv, at);
	char there[REGION_NAME_MAX + 160];

	if (r->kind != UFFDD__REGION_KIND__KIND_FILE_PRIVATE ||
	    r->data_pages == 0)
		return 0;
	if (name_cut(r) || (e && e->name_cut)) {
		conn_send_error(d->demand, ERR_NO_MATCH, "attach failed");
		dest_attach_fail(
			d, ERR_NO_MATCH,
			"source region 0x%llx-0x%llx with %llu written "
			"pages maps a file privately whose path (%.48s...) "
			"is %d characters or longer on one side: a path "
			"this long cannot be matched safely",
			(unsigned long long)r->start,
			(unsigned long long)(r->start + r->length),
			(unsigned long long)r->data_pages,
			name_cut(r) ? r->name : e->name, REGION_NAME_MAX - 1);
		return 1;
	}
	if (e == NULL)
		snprintf(there, sizeof(there), "nothing mapped there");
	else
		snprintf(there, sizeof(there),
			 "0x%llx-0x%llx %s %s (%s) at offset 0x%llx",
			 (unsigned long long)e->start,
			 (unsigned long long)e->end, e->perms,
			 e->name[0] ? e->name : "[anon]",
			 region_kind_name(e->kind),
			 (unsigned long long)e->offset);
	conn_send_error(d->demand, ERR_NO_MATCH, "attach failed");
	dest_attach_fail(
		d, ERR_NO_MATCH,
		"source region 0x%llx-0x%llx, %s mapped privately at "
		"offset 0x%llx with %llu written pages, has no match in "
		"process %d (%s); map the same file privately at the same "
		"address and length",
		(unsigned long long)r->start,
		(unsigned long long)(r->start + r->length), r->name,
		(unsigned long long)r->file_offset,
		(unsigned long long)r->data_pages, (int)d->m->pid, there);
	return 1;
}

/* The source's regions sorted for the reply: matched, and not. */
struct match {
	Uffdd__AttachReply rep; /* counts them: n_matched, n_unmatched */
	Uffdd__Region *mbuf, *ubuf, **mp, **up;
};

/* Whether source region r can go to `at` in the target (its maps: v). */
static int
region_fits(const struct dest *d, const struct vma *v, size_t nv,
	    const Uffdd__Region *r, uint64_t at)
{
	uint32_t ps = (uint32_t)sysconf(_SC_PAGESIZE);
	uint64_t end = at + r->length;

	return at != 0 &&
	       (r->page_size == ps ||
		(r->kind == UFFDD__REGION_KIND__KIND_HUGETLB &&
		 r->page_size == region_huge_page_size())) &&
	       r->length > 0 && r->length % r->page_size == 0 &&
	       at % r->page_size == 0 && end > at &&
	       region_in_ranges(d->req.ranges, d->req.nranges, at, end) &&
	       region_covered(v, nv, at, end, (enum region_kind)r->kind) &&
	       (r->kind != UFFDD__REGION_KIND__KIND_FILE_PRIVATE ||
		same_file(v, nv, at, r));
}

/*
 * A source region in the ranges that does not fit is skipped, unless the
 * target's mapping there could not be told, or it holds private file pages
 * that would have nowhere to go: then the attach fails (1).
 */
static int
match_refused(struct dest *d, const struct vma *v, size_t nv,
	      const Uffdd__Region *r, uint64_t at)
{
	char err[512];

	if (!at || !region_in_ranges(d->req.ranges, d->req.nranges, at, at + 1))
		return 0;
	/* A target mapping we could not tell: refuse, not skip. */
	if (region_denied(v, nv, at, at + r->length, err, sizeof(err))) {
		conn_send_error(d->demand, ERR_PERMISSION, "attach failed");
		dest_attach_fail(d, ERR_PERMISSION, "process %d: %s",
				 (int)d->m->pid, err);
		return 1;
	}
	return private_unmatched(d, v, nv, r, at);
}

/* Source region r goes to `at` in the target: every page missing. */
static void
take_matched(struct dest *d, const struct vma *v, size_t nv,
	     const Uffdd__Region *r, uint64_t at)
{
	struct dst_region *dr = &d->regs[d->nregs++];

	dr->r.index = r->index;
	snprintf(dr->r.name, sizeof(dr->r.name), "%s", r->name);
	dr->r.start = at;
	dr->src_start = r->start;
	dr->r.length = r->length;
	dr->r.page_size = r->page_size;
	dr->r.kind = (enum region_kind)r->kind;
	dr->npages = r->length / r->page_size;
	dr->shared = region_vma_at(v, nv, at)->perms[3] == 's';
	if (pagestate_init(&dr->ps, dr->npages) < 0)
		fatal("page state of %llu pages",
		      (unsigned long long)dr->npages);
	/* Nothing written there: the file's pages are all it holds. */
	if (dr->r.kind == REGION_FILE_PRIVATE && r->data_pages == 0)
		pagestate_set_present(&dr->ps, 0, dr->npages);
	d->m->cnt.pages_total += dr->npages;
}

/*
 * Matches every region of the source's table with the target's maps: the
 * ones that fit become ours (d->regs). 0, or -1 when the attach failed.
 */
static int
match_regions(struct dest *d, const Uffdd__RegionTable *t, struct match *mt)
{
	struct vma *v;
	size_t nv;

	/* Its maps only if it is still the process the caller named. */
	if (!procref_same(&d->t)) {
		dest_attach_fail(d, ERR_NO_PROCESS,
				 "process %d: no such process (it exited, or "
				 "runs another program, since it was named)",
				 (int)d->m->pid);
		return -1;
	}
	if (region_read_maps(d->m->pid, &v, &nv) < 0) {
		dest_attach_fail(d, ERR_NO_PROCESS, "process %d: %s",
				 (int)d->m->pid, strerror(errno));
		return -1;
	}
	mt->mbuf = xcalloc(t->n_regions, sizeof(*mt->mbuf));
	mt->ubuf = xcalloc(t->n_regions, sizeof(*mt->ubuf));
	mt->mp = xcalloc(t->n_regions, sizeof(*mt->mp));
	mt->up = xcalloc(t->n_regions, sizeof(*mt->up));
	d->regs = xcalloc(t->n_regions, sizeof(*d->regs));
	for (size_t i = 0; i < t->n_regions; i++) {
		const Uffdd__Region *r = t->regions[i];
		uint64_t at = target_start(d, r);

		if (region_fits(d, v, nv, r, at)) {
			mt->mp[mt->rep.n_matched++] =
				pb_region(&mt->mbuf[i], r);
			take_matched(d, v, nv, r, at);
		} else if (match_refused(d, v, nv, r, at)) {
			free(v);
			return -1;
		} else {
			mt->up[mt->rep.n_unmatched++] =
				pb_region(&mt->ubuf[i], r);
		}
	}
	free(v);
	return 0;
}

/* No region matched: the attach fails, naming the source's first. */
static void
no_match(struct dest *d, const Uffdd__RegionTable *t)
{
	conn_send_error(d->demand, ERR_NO_MATCH, "no matching region");
	dest_attach_fail(
		d, ERR_NO_MATCH,
		"no region of process %d matches the %zu region(s) "
		"of the source (first: 0x%llx-0x%llx %s); regions "
		"match by start, length and kind (or as --map says, "
		"by address or name)",
		(int)d->m->pid, t->n_regions,
		t->n_regions ? (unsigned long long)t->regions[0]->start : 0,
		t->n_regions ? (unsigned long long)(t->regions[0]->start +
						    t->regions[0]->length)
			     : 0,
		t->n_regions ? region_kind_name(
				       (enum region_kind)t->regions[0]->kind)
			     : "");
}

/*
 * With --map, two source regions could be put in one place: the attach
 * fails (1), naming both.
 */
static int
overlap(struct dest *d)
{
	for (size_t i = 0; i < d->nregs; i++)
		for (size_t k = i + 1; k < d->nregs; k++) {
			const struct region *a = &d->regs[i].r;
			const struct region *b = &d->regs[k].r;
			uint64_t ae = a->start + a->length;
			uint64_t be = b->start + b->length;

			if (a->start >= be || b->start >= ae)
				continue;
			conn_send_error(d->demand, ERR_NO_MATCH,
					"attach failed");
			dest_attach_fail(
				d, ERR_INVALID,
				"source regions 0x%llx and 0x%llx would "
				"both go to 0x%llx-0x%llx of process %d "
				"(--map)",
				(unsigned long long)d->regs[i].src_start,
				(unsigned long long)d->regs[k].src_start,
				(unsigned long long)(a->start > b->start
							     ? a->start
							     : b->start),
				(unsigned long long)(ae < be ? ae : be),
				(int)d->m->pid);
			return 1;
		}
	return 0;
}

/*
 * The target is taken: its faults and exit are watched, the source gets
 * the regions we take, the control client its reply, and the state file
 * the uffd's place. 1: the bulk lane is to open; 0: nothing is missing.
 */
static int
attached(struct dest *d, struct match *mt)
{
	Uffdd__RegionTable acc = UFFDD__REGION_TABLE__INIT;

	/*
	 * Children it has now are not forks we follow. Marked after the
	 * registration: a child forked in between is then missed (served
	 * without its pid, as one never found), never taken for another.
	 */
	dest_claim_child(d->m->pid, d, 1);
	dest_fault_watch(d);
	dest_exit_watch(d);
	conn_set_timeout(d->demand, LANE_TIMEOUT);
	conn_read_direct(d->demand);

	acc.n_regions = mt->rep.n_matched;
	acc.regions = mt->mp;
	conn_send(d->demand, FRAME_REGIONS, &acc.base);
	migration_set_state(d->m, MIG_RUNNING);
	dest_request_private(d);
	log_info("attached to process %d for %s: %zu regions, %llu pages from "
		 "%s",
		 (int)d->m->pid, log_id(d->m->id), d->nregs,
		 (unsigned long long)d->m->cnt.pages_total, d->from);
	mt->rep.id = d->m->id;
	mt->rep.matched = mt->mp;
	mt->rep.unmatched = mt->up;
	control_reply(d->req.serial, FRAME_CTL_ATTACH_REPLY, &mt->rep.base);
	d->req.serial = 0;
	dest_persist_now(d);
	if (dest_present_total(d) == d->m->cnt.pages_total) {
		dest_maybe_complete(d); /* only unwritten private file pages */
		return 0;
	}
	return 1;
}

/*
 * The source's region table came: matched to the target, which is then
 * taken (dest_setup_target()), or the attach fails saying why. 1 when the
 * target is taken and pages are missing: the caller opens the bulk lane.
 */
int
dest_attach_regions(struct dest *d, const Uffdd__RegionTable *t)
{
	struct match mt = {.rep = UFFDD__ATTACH_REPLY__INIT};
	uint32_t code;
	char err[512];
	int bulk = 0;

	/* Untrusted input: checked before anything is sized from it. */
	if (region_table_check(t->regions, t->n_regions, err, sizeof(err)) <
	    0) {
		dest_attach_fail(d, ERR_PROTOCOL,
				 "source %s: bad region table: %s", d->from,
				 err);
		return 0;
	}
	if (match_regions(d, t, &mt) < 0)
		goto out;
	if (mt.rep.n_matched == 0) {
		no_match(d, t);
		goto out;
	}
	if (overlap(d))
		goto out;
	/*
	 * Without a state file a restart would forget the target it holds
	 * (its threads would wait for good), and without the record of
	 * installed pages it would fetch the source's bytes into holes the
	 * target punched (record.c): find out before touching it.
	 */
	if (dest_persist_first(d, err, sizeof(err)) < 0) {
		conn_send_error(d->demand, ERR_NO_MATCH, "attach failed");
		dest_attach_fail(d, ERR_INVALID,
				 "cannot save its state in %s: %s; process %d "
				 "left as it was",
				 conf.state_dir, err, (int)d->m->pid);
		goto out;
	}
	if (dest_setup_target(d, err, sizeof(err), &code) < 0) {
		conn_send_error(d->demand, ERR_NO_MATCH, "attach failed");
		dest_attach_fail(d, code, "%s", err);
		goto out;
	}
	bulk = attached(d, &mt);
out:
	free(mt.mbuf);
	free(mt.ubuf);
	free(mt.mp);
	free(mt.up);
	return bulk;
}

/*
 * A destination's state file read back (persist.c writes it): every record
 * is checked as the untrusted input it is before anything is made from it
 * (struct saved, internal.h). Reading touches nothing: restore.c decides
 * what to take up, and dest_restore_check() only validates.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/dest.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/statefmt.h"
#include "daemon/tls.h"

/* No user address reaches this, with 5-level page tables too. */
#define ADDR_END (1ULL << 57)

/* The lists a read allocated. */
void
dest_saved_free(struct saved *sv)
{
	free(sv->regs);
	free(sv->ranges);
	free(sv->moves);
	free(sv->runs);
	free(sv->kids);
}

/* An optional 0/1 record: absent is 0. */
static int
saved_flag(struct state_tbl *t, const char *key, int *v)
{
	uint64_t x = 0;

	if (state_has(t, key) && state_u64(t, key, 0, 1, &x) < 0)
		return -1;
	*v = (int)x;
	return 0;
}

/* HOST:PORT as attach took it: printable, no blanks. */
static int
printable(const char *s)
{
	for (; *s; s++)
		if (*s <= ' ' || *s > '~')
			return 0;
	return 1;
}

/* owner: UID GID PRIVILEGED CAPPRM, the attach's caller (authz.h). */
static int
saved_owner(struct state_tbl *t, struct authz_caller *c)
{
	uint64_t v[4];

	if (state_u64s(t, "owner", v, 4) < 0)
		return -1;
	if (v[0] > UINT32_MAX || v[1] > UINT32_MAX || v[2] > 1)
		return state_bad(t, "owner",
				 "owner: want UID GID PRIVILEGED CAPPRM");
	/* CAPPRM (v[3]) stays in the format, unread: a caller's capabilities
	 * never count (authz.h). */
	*c = (struct authz_caller){.uid = (uid_t)v[0],
				   .gid = (gid_t)v[1],
				   .privileged = (int)v[2]};
	return 0;
}

/* The migration's own records: whose, which process, from where. */
static int
saved_head(struct state_tbl *t, struct saved *sv)
{
	unsigned char fp[32];
	char role[16];
	uint64_t v;

	if (state_str(t, "role", role, sizeof(role)) < 0)
		return -1;
	if (strcmp(role, "destination") != 0)
		return state_bad(t, "role", "role %s: not a destination's file",
				 role);
	if (state_str(t, "id", sv->id, sizeof(sv->id)) < 0 ||
	    state_u64(t, "pid", 2, INT32_MAX, &v) < 0)
		return -1;
	sv->pid = (pid_t)v;
	if (state_u64(t, "start", 1, UINT64_MAX, &v) < 0)
		return -1;
	sv->start = v;
	if (saved_owner(t, &sv->owner) < 0 ||
	    state_str(t, "state", sv->state, sizeof(sv->state)) < 0)
		return -1;
	if (strcmp(sv->state, "connecting") && strcmp(sv->state, "running") &&
	    strcmp(sv->state, "paused") && strcmp(sv->state, "complete") &&
	    strcmp(sv->state, "failed"))
		return state_bad(t, "state", "state %s: not a destination's",
				 sv->state);
	if (state_str(t, "from", sv->from, sizeof(sv->from)) < 0)
		return -1;
	if (!sv->from[0] || !printable(sv->from))
		return state_bad(t, "from", "from: want HOST:PORT");
	sv->tfd = -1;
	if (state_has(t, "target_fd")) {
		if (state_u64(t, "target_fd", 0, INT32_MAX, &v) < 0)
			return -1;
		sv->tfd = (int)v;
	}
	if (saved_flag(t, "held", &sv->held) < 0 ||
	    saved_flag(t, "gone", &sv->gone) < 0 ||
	    saved_flag(t, "sole", &sv->sole) < 0 ||
	    saved_flag(t, "installed", &sv->installed) < 0 ||
	    saved_flag(t, "released", &sv->released) < 0)
		return -1;
	if (state_has(t, "committed") &&
	    state_u64(t, "committed", 1, UINT64_MAX, &sv->committed) < 0)
		return -1;
	if (state_has(t, "pin") &&
	    (state_str(t, "pin", sv->pin, sizeof(sv->pin)) < 0 ||
	     (tls_parse_pin(sv->pin, fp) < 0 &&
	      state_bad(t, "pin", "pin: not a SHA-256 fingerprint") < 0)))
		return -1;
	return 0;
}

/* region.I: INDEX START LENGTH PAGE_SIZE KIND SOURCE_START, and its name. */
static int
saved_region(struct state_tbl *t, size_t i, struct region *r)
{
	uint64_t ps = (uint64_t)sysconf(_SC_PAGESIZE),
		 huge = region_huge_page_size(), v[6];
	char key[STATE_KEY_MAX], nkey[STATE_KEY_MAX];

	if (state_u64s(t, state_key(key, "region", i), v, 6) < 0 ||
	    state_str(t, state_key(nkey, "region_name", i), r->name,
		      sizeof(r->name)) < 0)
		return -1;
	/* The page size first: the others are divided by it. */
	if (v[0] > UINT32_MAX || v[4] < REGION_ANON_PRIVATE ||
	    v[4] > REGION_FILE_PRIVATE ||
	    !(v[3] == ps || (v[4] == REGION_HUGETLB && huge && v[3] == huge)) ||
	    v[2] == 0 || v[2] % v[3] || v[1] % v[3] || v[5] % v[3] ||
	    v[1] >= ADDR_END || v[2] > ADDR_END - v[1] || v[5] >= ADDR_END ||
	    v[2] > ADDR_END - v[5])
		return state_bad(t, key,
				 "%s: not a region this host can have "
				 "(INDEX START LENGTH PAGE_SIZE KIND "
				 "SOURCE_START)",
				 key);
	r->index = (uint32_t)v[0];
	r->start = v[1];
	r->length = v[2];
	r->page_size = (uint32_t)v[3];
	r->kind = (enum region_kind)v[4];
	r->vma_start = v[5]; /* the source's start, for resume */
	return 0;
}

/* As attach took them: 1 to REGION_TABLE_MAX, distinct, no overlaps. */
static int
saved_regions(struct state_tbl *t, struct saved *sv)
{
	Uffdd__Region *pb, **pp;
	char err[256];
	int rc = 0;

	sv->nregs = state_count(t, "region");
	if (sv->nregs == 0 || sv->nregs > REGION_TABLE_MAX)
		return state_bad(t, NULL,
				 "%zu regions (region.0 on), want 1 to %d",
				 sv->nregs, REGION_TABLE_MAX);
	sv->regs = xcalloc(sv->nregs, sizeof(*sv->regs));
	for (size_t i = 0; i < sv->nregs; i++)
		if (saved_region(t, i, &sv->regs[i]) < 0)
			return -1;
	pb = xcalloc(sv->nregs, sizeof(*pb));
	pp = xcalloc(sv->nregs, sizeof(*pp));
	for (size_t i = 0; i < sv->nregs; i++) {
		uffdd__region__init(&pb[i]);
		pb[i].index = sv->regs[i].index;
		pb[i].start = sv->regs[i].start;
		pb[i].length = sv->regs[i].length;
		pb[i].page_size = sv->regs[i].page_size;
		pp[i] = &pb[i];
	}
	if (region_table_check(pp, sv->nregs, err, sizeof(err)) < 0)
		rc = state_bad(t, "region.0", "regions: %s", err);
	free(pb);
	free(pp);
	return rc;
}

/* Pages v[1] to v[2] (not included) of region v[0]. */
static int
saved_run(struct state_tbl *t, const char *key, const struct saved *sv,
	  const uint64_t *v)
{
	if (v[0] < sv->nregs && v[1] < v[2] &&
	    v[2] <= sv->regs[v[0]].length / sv->regs[v[0]].page_size)
		return 0;
	return state_bad(t, key, "%s: not pages of one of the regions", key);
}

/* move.I: REGION P0 P1 BASE (pages [P0, P1) now at BASE). */
static int
saved_moves(struct state_tbl *t, struct saved *sv)
{
	char key[STATE_KEY_MAX];
	uint64_t v[4], ps;

	sv->nmoves = state_count(t, "move");
	sv->moves = xcalloc(sv->nmoves + 1, sizeof(*sv->moves));
	for (size_t i = 0; i < sv->nmoves; i++) {
		if (state_u64s(t, state_key(key, "move", i), v, 4) < 0 ||
		    saved_run(t, key, sv, v) < 0)
			return -1;
		ps = sv->regs[v[0]].page_size;
		if (v[3] % ps || v[3] >= ADDR_END ||
		    v[2] - v[1] > (ADDR_END - v[3]) / ps)
			return state_bad(t, key,
					 "%s: moved to where no process maps",
					 key);
		sv->moves[i] = (struct saved_move){v[0], {v[1], v[2], v[3]}};
	}
	return 0;
}

/* Orders forked children by pid (qsort, bsearch). */
static int
by_pid(const void *a, const void *b)
{
	pid_t x = ((const struct saved_kid *)a)->pid;
	pid_t y = ((const struct saved_kid *)b)->pid;

	return (x > y) - (x < y);
}

/* child.I: PID START FD, each pid once; kept sorted by pid. */
static int
saved_kids(struct state_tbl *t, struct saved *sv)
{
	char key[STATE_KEY_MAX];
	uint64_t v[3];

	sv->nkids = state_count(t, "child");
	sv->kids = xcalloc(sv->nkids + 1, sizeof(*sv->kids));
	for (size_t i = 0; i < sv->nkids; i++) {
		if (state_u64s(t, state_key(key, "child", i), v, 3) < 0)
			return -1;
		if (v[0] < 2 || v[0] > INT32_MAX || v[0] == (uint64_t)sv->pid ||
		    v[1] == 0 || v[2] > INT32_MAX)
			return state_bad(t, key,
					 "%s: not the PID START FD of a "
					 "forked process",
					 key);
		sv->kids[i] = (struct saved_kid){(pid_t)v[0], v[1], (int)v[2]};
	}
	qsort(sv->kids, sv->nkids, sizeof(*sv->kids), by_pid);
	for (size_t i = 1; i < sv->nkids; i++)
		if (sv->kids[i].pid == sv->kids[i - 1].pid)
			return state_bad(t, "child.0", "child: pid %d twice",
					 (int)sv->kids[i].pid);
	return 0;
}

/* discarded.I: REGION P0 P1; child_discarded.I: PID REGION P0 P1. */
static int
saved_runs(struct state_tbl *t, struct saved *sv)
{
	size_t nr = state_count(t, "discarded"),
	       nk = state_count(t, "child_discarded");
	char key[STATE_KEY_MAX];
	uint64_t v[4];

	sv->runs = xcalloc(nr + nk + 1, sizeof(*sv->runs));
	for (size_t i = 0; i < nr; i++) {
		if (state_u64s(t, state_key(key, "discarded", i), v, 3) < 0 ||
		    saved_run(t, key, sv, v) < 0)
			return -1;
		sv->runs[sv->nruns++] = (struct gone){0, v[0], v[1], v[2]};
	}
	for (size_t i = 0; i < nk; i++) {
		struct saved_kid k = {.pid = 0};

		if (state_u64s(t, state_key(key, "child_discarded", i), v, 4) <
			    0 ||
		    saved_run(t, key, sv, v + 1) < 0)
			return -1;
		k.pid = v[0] <= INT32_MAX ? (pid_t)v[0] : 0;
		if (bsearch(&k, sv->kids, sv->nkids, sizeof(k), by_pid) == NULL)
			return state_bad(t, key, "%s: pid %llu is no child.N's",
					 key, (unsigned long long)v[0]);
		sv->runs[sv->nruns++] =
			(struct gone){(int)v[0], v[1], v[2], v[3]};
	}
	return 0;
}

/* Reads and checks every record of t; touches nothing. */
int
dest_saved_read(struct state_tbl *t, struct saved *sv)
{
	memset(sv, 0, sizeof(*sv));
	if (saved_head(t, sv) < 0 || saved_regions(t, sv) < 0 ||
	    state_ranges(t, "range", &sv->ranges, &sv->nranges) < 0 ||
	    saved_moves(t, sv) < 0 || saved_kids(t, sv) < 0 ||
	    saved_runs(t, sv) < 0)
		return -1;
	return state_all_read(t);
}

/* Whether a state file is one this daemon wrote (role.h, restore_check). */
int
dest_restore_check(struct state_tbl *t)
{
	struct saved sv;
	int rc = dest_saved_read(t, &sv);

	dest_saved_free(&sv);
	return rc;
}

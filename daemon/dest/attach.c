/*
 * The attach: a control client's request makes a destination, whose demand
 * lane asks the source for its region table; the table is matched to the
 * target's maps, and the regions that fit are taken (target.c). Also the
 * role's registration (role.h): its requests and restores.
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

/* Attach failed before the target was touched: answer and forget. */
void
dest_attach_fail(struct dest *d, uint32_t code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_warnx("attach %d: %s", (int)d->m->pid, msg);
	control_reply_error(d->req.serial, code, "attach: %s", msg);
	if (d->demand) {
		conn_finish(d->demand); /* what it queued still goes out */
		d->demand = NULL;
	}
	dest_persist_remove(d);
	migration_free(d->m);
}

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
 * the uffd's place; then the bulk lane opens.
 */
static void
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
		return;
	}
	if (dest_open_bulk(d) < 0)
		dest_lanes_down(d, "bulk lane unreachable");
}

/*
 * The source's region table came: matched to the target, which is then
 * taken (dest_setup_target()), or the attach fails saying why.
 */
void
dest_attach_regions(struct dest *d, const Uffdd__RegionTable *t)
{
	struct match mt = {.rep = UFFDD__ATTACH_REPLY__INIT};
	uint32_t code;
	char err[512];

	/* Untrusted input: checked before anything is sized from it. */
	if (region_table_check(t->regions, t->n_regions, err, sizeof(err)) <
	    0) {
		dest_attach_fail(d, ERR_PROTOCOL,
				 "source %s: bad region table: %s", d->from,
				 err);
		return;
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
	attached(d, &mt);
out:
	free(mt.mbuf);
	free(mt.ubuf);
	free(mt.mp);
	free(mt.up);
}

/* A --pin is a SHA-256 fingerprint that fits where we keep it. */
static int
pin_ok(const char *pin)
{
	const struct dest *d = NULL;
	unsigned char fp[32];

	return strlen(pin) < sizeof(d->pin) && tls_parse_pin(pin, fp) == 0;
}

/* A process that is a target already: -1, the client told. */
static int
target_busy(uint64_t serial, pid_t pid)
{
	if (migration_of_pid(pid, ROLE_DEST) == NULL)
		return 0;
	control_reply_error(serial, ERR_BUSY,
			    "attach: process %d is already a migration target",
			    (int)pid);
	return -1;
}

/*
 * An attach request refused before anything is made: a malformed ID or
 * pin, or a process that is a target already. 0, or -1 when answered.
 */
static int
attach_refused(uint64_t serial, const Uffdd__AttachRequest *req, pid_t pid)
{
	if (strlen(req->id) != MIG_ID_LEN ||
	    strspn(req->id, "0123456789abcdef") != MIG_ID_LEN) {
		control_reply_error(serial, ERR_UNKNOWN_ID,
				    "attach: malformed "
				    "migration ID (want the %d hex digits that "
				    "export printed)",
				    MIG_ID_LEN);
		return -1;
	}
	/* A pin replaces the name check, so it must be one, and TLS on. */
	if (req->pin[0] && !pin_ok(req->pin)) {
		control_reply_error(serial, ERR_INVALID,
				    "attach: --pin: want the 64 hex digits of "
				    "the source certificate's SHA-256 "
				    "fingerprint");
		return -1;
	}
	if (req->pin[0] && !tls_enabled()) {
		control_reply_error(serial, ERR_INVALID,
				    "attach: --pin needs TLS, and this daemon "
				    "runs plaintext (insecure)");
		return -1;
	}
	if (req->export_wait_secs > EXPORT_WAIT_MAX) {
		control_reply_error(serial, ERR_INVALID,
				    "attach: --wait-export %u: at most %d "
				    "seconds",
				    req->export_wait_secs, EXPORT_WAIT_MAX);
		return -1;
	}
	if (strcmp(req->from, PEER_LOCAL) == 0) {
		control_reply_error(serial, ERR_INVALID,
				    "attach: --from %s: want HOST:PORT",
				    req->from);
		return -1;
	}
	/* A name cut to fit could match another region than the one meant. */
	for (size_t i = 0; i < req->n_maps; i++)
		if (req->maps[i]->src_name &&
		    strlen(req->maps[i]->src_name) >= REGION_NAME_MAX) {
			control_reply_error(serial, ERR_INVALID,
					    "attach: --map: a region name is "
					    "at most %d bytes",
					    REGION_NAME_MAX - 1);
			return -1;
		}
	return target_busy(serial, pid);
}

/*
 * A destination for process t (taken over), which asks the source at from
 * for the region table of migration id.
 */
static void
attach_go(uint64_t serial, const struct authz_caller *who, struct procref *t,
	  const Uffdd__AttachRequest *req, const char *id, const char *from)
{
	struct dest *d;
	char err[256];

	d = dest_new(id, t->pid, from, req->pin);
	d->m->start = t->start;
	procref_move(&d->t, t);
	d->owner = *who;
	d->req.serial = serial;
	d->ln.export_wait = req->export_wait_secs;
	d->bh.run_hold = req->hold_bulk ? 1 : 0;
	d->m->ph.hold_bulk = d->bh.run_hold;
	migration_set_peer(d->m, from);
	if (req->record_working_set) {
		migration_ws_start(d->m, req->ws_faults, req->ws_secs);
		dest_ws_watch(d);
	}
	d->req.nranges = req->n_ranges;
	d->req.ranges = xcalloc(req->n_ranges, sizeof(*d->req.ranges));
	for (size_t i = 0; i < req->n_ranges; i++) {
		d->req.ranges[i].start = req->ranges[i]->start;
		d->req.ranges[i].end = req->ranges[i]->end;
	}
	d->req.nmaps = req->n_maps;
	d->req.maps = xcalloc(req->n_maps, sizeof(*d->req.maps));
	d->req.map_names = xcalloc(req->n_maps, sizeof(*d->req.map_names));
	for (size_t i = 0; i < req->n_maps; i++) {
		d->req.maps[i].start = req->maps[i]->src_start;
		d->req.maps[i].end = req->maps[i]->dst_start;
		snprintf(d->req.map_names[i], sizeof(d->req.map_names[i]), "%s",
			 req->maps[i]->src_name ? req->maps[i]->src_name : "");
	}
	if (posix_memalign((void **)&d->in.buf, 4096, FRAME_DATA_MAX) != 0)
		fatal("page buffer");
	if (dest_connect_demand(d, 0, err, sizeof(err)) < 0) {
		dest_attach_fail(d, ERR_UNREACHABLE, "%s", err);
		return;
	}
}

/* attach --image: waiting for the client's image file (fdpass.h). */
struct image_attach {
	uint64_t serial;
	struct authz_caller who;
	struct procref t;
	uint8_t *req; /* the request, packed: it outlives its frame */
	size_t len;
};

static void
image_attach_free(struct image_attach *a)
{
	procref_close(&a->t);
	free(a->req);
	free(a);
}

/*
 * The image is checked and served under id (or refused: NULL), and the
 * destination attaches to that as to any source, over a socket pair
 * (PEER_LOCAL). Region matching, setup, the lanes, the failure rules: all
 * the attach's own.
 */
static void
image_served(void *arg, const char *id, uint32_t code, const char *err)
{
	struct image_attach *a = arg;
	Uffdd__AttachRequest *req;

	if (id == NULL) {
		control_reply_error(a->serial, code, "attach: %s", err);
	} else if (target_busy(a->serial, a->t.pid) < 0) {
		/* Another attach took the target while the image was checked. */
		struct migration *m = migration_find(id, ROLE_SOURCE);

		if (m != NULL)
			migration_free(m);
	} else {
		req = uffdd__attach_request__unpack(NULL, a->len, a->req);
		if (req == NULL)
			fatalx("attach --image: the request copy");
		log_info("attach %d: restoring from an image as %s",
			 (int)a->t.pid, log_id(id));
		control_bind(a->serial, ROLE_SOURCE, id);
		attach_go(a->serial, &a->who, &a->t, req, id, PEER_LOCAL);
		uffdd__attach_request__free_unpacked(req, NULL);
	}
	image_attach_free(a);
}

/*
 * The image arrived: this daemon's source role checks it off the loop and
 * serves it under a new ID (role.h, serve_image), then image_served().
 */
static void
image_fd(void *arg, int fd, const char *why)
{
	struct image_attach *a = arg;
	const struct role_ops *src = role_get(ROLE_SOURCE);

	if (fd < 0) {
		control_reply_error(a->serial, ERR_INVALID, "attach: %s", why);
	} else if (target_busy(a->serial, a->t.pid) < 0) {
		close(fd);
	} else if (src == NULL || src->serve_image == NULL) {
		close(fd);
		control_reply_error(a->serial, ERR_INVALID,
				    "attach: this daemon serves no images");
	} else {
		src->serve_image(fd, &a->who, image_served, a);
		return;
	}
	image_attach_free(a);
}

/*
 * An attach request (control.c checked the caller who may act on t): a
 * destination for process t, which asks the source for its region table;
 * with --image, once the client has handed the image over.
 */
void
dest_attach(uint64_t serial, const struct authz_caller *who, struct procref *t,
	    const Uffdd__AttachRequest *req)
{
	struct image_attach *a;

	if (!req->image) {
		if (attach_refused(serial, req, t->pid) < 0)
			procref_close(t);
		else
			attach_go(serial, who, t, req, req->id, req->from);
		return;
	}
	if (req->from[0] || req->id[0] || req->pin[0]) {
		control_reply_error(serial, ERR_INVALID,
				    "attach --image takes no --from, --id or "
				    "--pin");
		procref_close(t);
		return;
	}
	if (target_busy(serial, t->pid) < 0) {
		procref_close(t);
		return;
	}
	a = xcalloc(1, sizeof(*a));
	a->serial = serial;
	a->who = *who;
	procref_move(&a->t, t);
	a->len = uffdd__attach_request__get_packed_size(req);
	a->req = xmalloc(a->len ? a->len : 1);
	uffdd__attach_request__pack(req, a->req);
	fdpass_ask(serial, image_fd, a);
}

/* The role's control request (role.h): an attach. */
static void
attach_request(uint64_t serial, const struct authz_caller *who,
	       struct procref *t, const ProtobufCMessage *req)
{
	dest_attach(serial, who, t, (const Uffdd__AttachRequest *)req);
}

/* The process an attach request names, for control.c's checks. */
static int
attach_pid(const ProtobufCMessage *req)
{
	return ((const Uffdd__AttachRequest *)req)->pid;
}

static const struct role_ops dest_ops = {
	.role = ROLE_DEST,
	.name = "destination",
	.request_type = FRAME_CTL_ATTACH,
	.verb = "attach",
	.request_pid = attach_pid,
	.request = attach_request,
	.restore = dest_restore,
	.restore_check = dest_restore_check,
};

/* At start-up: the daemon serves attaches and restores destinations. */
void
dest_register(void)
{
	role_register(&dest_ops);
	dest_runhold_register();
}

/*
 * The attach: a control client's request makes a destination, whose demand
 * lane asks the source for its region table (which table.c matches to the
 * target). Also the role's registration (role.h): its requests and
 * restores. The top of the destination: it calls down into the lanes and
 * everything below them, and nothing calls it.
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
	d->bh.complete_held = d->bh.run_hold;
	d->m->ph.hold_bulk = d->bh.run_hold;
	d->held.no_hold = req->precopy_no_hold ? 1 : 0;
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
/* What the fault reader calls up through (owner.c). */
static void
broken(struct dest *d, const char *why)
{
	dest_fail(d, "%s", why);
}

static const struct dest_owner owner = {
	.forked = dest_fork_child,
	.exited = dest_target_exited,
	.broken = broken,
};

void
dest_register(void)
{
	dest_owner_set(&owner);
	role_register(&dest_ops);
	dest_runhold_register();
}

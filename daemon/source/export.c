/*
 * An export: the process's regions in the ranges asked for, classified
 * (which pages hold data), its record in the migration table, and the
 * events it lives by; and the role's operations (role.h).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/compat.h"
#include "daemon/conffile.h"
#include "daemon/conn.h"
#include "daemon/authz.h"
#include "daemon/control.h"
#include "daemon/fdpass.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/migration.h"
#include "daemon/pagemap.h"
#include "daemon/probe.h"
#include "daemon/procref.h"
#include "daemon/region.h"
#include "daemon/role.h"
#include "daemon/source/internal.h"
#include "daemon/wplinger.h"

/*
 * The events of a live export: bulk work (serve.c), its process's exit and
 * the pings (lanes.c), the deferred state write (persist.c). The parts
 * below that make an export (make.c, defer.c, image.c) start it through
 * source_start() (owner.c).
 */
static void
start(struct source *s)
{
	source_serve_start(s);
	source_lanes_start(s);
	source_persist_start(s);
}

/*
 * export --precopy --track PID: the second process of the request, which
 * the privileged part checked and granted as the first (control.h).
 */
static int
track(struct source *s, const Uffdd__ExportRequest *req, uint32_t *code,
      char *err, size_t errlen)
{
	struct procref *tp = control_second();

	if (tp == NULL || tp->pid != req->track_pid) {
		*code = ERR_INVALID;
		snprintf(err, errlen,
			 "--track %d: the process came without its grant (a "
			 "bug in uffdd: please report it)",
			 (int)req->track_pid);
		return -1;
	}
	s->pc->track_unstopped = req->track_unstopped;
	return source_track_arm(s, tp, code, err, errlen);
}

/*
 * export --precopy: like source_create(), but the process runs on. Its
 * writes are tracked before its pages are classified, so that a page
 * written after it was looked at goes again. Takes t over.
 */
static struct source *
source_create_precopy(struct procref *t, const struct range *ranges,
		      size_t nranges, const Uffdd__ExportRequest *req,
		      const char *id, uint32_t *code, char *err, size_t errlen)
{
	struct wptrack wp = WPTRACK_NONE;
	struct region *regs = NULL;
	struct source *s = NULL;
	int n = source_build_regions(t->pid, ranges, nranges, &regs, code, err,
				     errlen);

	if (n > 0 &&
	    source_precopy_arm(t, regs, (size_t)n, &wp, code, err, errlen) == 0)
		s = source_new(t, regs, (size_t)n, ranges, nranges, id, 0, code,
			       err, errlen);
	if (s != NULL) {
		source_precopy_init(s, &wp, req);
		source_watch_files(s);
		if (req->deferred)
			source_precopy_wait_go(s);
		s->keep_source = req->keep_source;
		if (req->track_pid != 0 &&
		    track(s, req, code, err, errlen) < 0) {
			migration_free(s->m);
			s = NULL;
		}
	}
	if (s != NULL)
		start(s);
	wptrack_stop(&wp);
	free(regs);
	procref_close(t);
	return s;
}

/* export --image: waiting for the client's file (fdpass.h). */
struct image_ask {
	uint64_t serial;
	struct authz_caller who;
};

/* The image checked (off the loop: image.c) and served, or refused. */
static void
export_image_done(void *arg, struct source *s, const char *err)
{
	struct image_ask *a = arg;

	if (s == NULL) {
		control_reply_error(a->serial, ERR_INVALID, "export: %s", err);
	} else if (!control_client_here(a->serial)) {
		/* No one will ever know its ID. */
		log_info("export --image: the client went away while its "
			 "image was checked; not exported");
		migration_free(s->m);
	} else {
		Uffdd__ExportReply rep = UFFDD__EXPORT_REPLY__INIT;

		log_info("exported an image as %s: %zu regions, %llu pages "
			 "(pid %d when it was taken)",
			 log_id(s->m->id), s->nregs,
			 (unsigned long long)s->m->cnt.pages_total,
			 (int)s->img->img.pid);
		rep.id = s->m->id;
		control_reply(a->serial, FRAME_CTL_EXPORT_REPLY, &rep.base);
	}
	free(a);
}

static void
export_image_fd(void *arg, int fd, const char *why)
{
	struct image_ask *a = arg;

	if (fd < 0) {
		control_reply_error(a->serial, ERR_INVALID, "export: %s", why);
		free(a);
		return;
	}
	source_image_create(fd, 0, export_image_done, a);
}

/* attach --image: the destination's caller, waiting for the source. */
struct serve_ask {
	struct authz_caller who;
	role_image_cb done;
	void *arg;
};

static void
serve_image_done(void *arg, struct source *s, const char *err)
{
	struct serve_ask *a = arg;

	if (s == NULL) {
		a->done(a->arg, NULL, ERR_INVALID, err);
	} else {
		a->done(a->arg, s->m->id, 0, NULL);
	}
	free(a);
}

/* The role's operation for attach --image (role.h, serve_image). */
static void
serve_image(int fd, const struct authz_caller *who, role_image_cb done,
	    void *arg)
{
	struct serve_ask *a = xcalloc(1, sizeof(*a));

	a->who = *who;
	a->done = done;
	a->arg = arg;
	source_image_create(fd, 1, serve_image_done, a);
}

/*
 * An export refused after it was made: its process as it was (thawed only
 * if the export froze it: neither a pre-copy's nor a deferred one's).
 */
static void
unexport(struct source *s)
{
	if (!s->m->ph.deferred && s->pc == NULL)
		source_thaw(&s->t, s->was_stopped);
	migration_free(s->m);
}

/*
 * The control request: checks the ranges, exports, and answers with the
 * new ID only once the state file holds the export (a pre-copy's, at its
 * switchover: source_persist_now(); a deferred one's, at its go).
 */
void
source_export(uint64_t serial, const struct authz_caller *who,
	      struct procref *t, const Uffdd__ExportRequest *req)
{
	Uffdd__ExportReply rep = UFFDD__EXPORT_REPLY__INIT;
	struct range *ranges = xcalloc(req->n_ranges, sizeof(*ranges));
	char err[256], idbuf[MIG_ID_LEN + 1];
	const char *id;
	struct source *s;
	uint32_t code;

	if (source_export_check(req, ranges, idbuf, &code, err, sizeof(err)) <
		    0 ||
	    (!req->image &&
	     source_exported_already(req->pid, &code, err, sizeof(err)) < 0)) {
		control_reply_error(serial, code, "export: %s", err);
		free(ranges);
		procref_close(t);
		return;
	}
	if (req->image) {
		struct image_ask *a = xcalloc(1, sizeof(*a));

		procref_close(t);
		free(ranges);
		a->serial = serial;
		a->who = *who;
		fdpass_ask(serial, export_image_fd, a);
		return;
	}
	id = idbuf[0] ? idbuf : NULL;
	if (req->precopy) /* with --deferred too: its switch waits for go */
		s = source_create_precopy(t, ranges, req->n_ranges, req, id,
					  &code, err, sizeof(err));
	else if (req->deferred)
		s = source_create_deferred(t, ranges, req->n_ranges, id, &code,
					   err, sizeof(err));
	else
		s = source_create(t, who, ranges, req->n_ranges,
				  req->keep_source, id, &code, err,
				  sizeof(err));
	free(ranges);
	if (s == NULL) {
		control_reply_error(serial, code, "export: %s", err);
		return;
	}
	if (source_export_name_regions(s, req, err, sizeof(err)) < 0) {
		unexport(s);
		control_reply_error(serial, ERR_INVALID,
				    "export: %s; process %d left as it was",
				    err, (int)req->pid);
		return;
	}
	s->keep_source = req->keep_source;
	if (!s->pc && !s->m->ph.deferred)
		source_watch_freeze(s);
	/*
	 * Without its state file a restart would forget the export and
	 * leave the process frozen for good: refuse it instead.
	 */
	if (source_persist_now(s) < 0) {
		int e = errno;

		unexport(s);
		control_reply_error(serial, ERR_INVALID,
				    "export: cannot save its state in %s: %s; "
				    "process %d left as it was",
				    conf.state_dir, strerror(e), (int)req->pid);
		return;
	}
	log_info("exported process %d as %s: %zu regions, %llu pages%s",
		 (int)req->pid, log_id(s->m->id), s->nregs,
		 (unsigned long long)s->m->cnt.pages_total,
		 s->pc ? "; pre-copy, the process runs until the switchover"
		 : s->m->ph.deferred ? "; deferred, the process runs until go"
				     : "");
	rep.id = s->m->id;
	control_reply(serial, FRAME_CTL_EXPORT_REPLY, &rep.base);
}

/*
 * The role's memory, after teardown or at the daemon's exit (a state write
 * still pending goes first); the record stays for status.
 */
static void
free_source(struct migration *m)
{
	struct source *s = m->impl;

	if (s == NULL)
		return;
	source_persist_free(s);
	if (s->df.go_ev)
		event_free(s->df.go_ev);
	if (s->df.hold_ev)
		event_free(s->df.hold_ev);
	conn_free(s->demand);
	conn_free(s->bulk);
	if (s->bulk_ev)
		event_free(s->bulk_ev);
	if (s->exit_ev)
		event_free(s->exit_ev);
	if (s->ping_ev)
		event_free(s->ping_ev);
	if (s->cm.check_ev)
		event_free(s->cm.check_ev);
	if (s->cm.commit_ev)
		event_free(s->cm.commit_ev);
	if (s->rate_ev)
		event_free(s->rate_ev);
	/*
	 * A go still waiting: its echo came before COMPLETE on the same
	 * lane, so this is a safety net. Complete, the destination switched.
	 */
	if (m->state == MIG_COMPLETE)
		source_precopy_switched(s);
	source_precopy_go_failed(s, ERR_INVALID,
				 "the export ended before its switchover");
	source_defer_free(s); /* a prepare's stop, before the rounds' end */
	/*
	 * Complete: its processes are done with, and QEMU may be writing its
	 * device state; their trackers end out of its way (wplinger.h). Any
	 * other end leaves them as they were before the export, at once.
	 */
	if (m->state == MIG_COMPLETE) {
		wptrack_release(&s->wp, &s->t);
		if (s->pc)
			wptrack_release(&s->pc->track_wp, &s->pc->track);
	}
	source_precopy_free(s);
	wptrack_stop(&s->wp);
	procref_close(&s->t);
	free(s->ps.ranges);
	for (size_t i = 0; i < s->nregs; i++) {
		free(s->regs[i].data);
		free(s->regs[i].sent);
		if (s->regs[i].cache_fd >= 0)
			close(s->regs[i].cache_fd);
		if (s->regs[i].file_fd >= 0)
			close(s->regs[i].file_fd);
		if (s->regs[i].watched)
			close(s->regs[i].watch_fd);
	}
	free(s->regs);
	free(s->scratch);
	source_image_free(s);
	free(s);
	m->impl = NULL;
}

/* The role's entry for an export request (role.h, request). */
static void
export_request(uint64_t serial, const struct authz_caller *who,
	       struct procref *t, const ProtobufCMessage *req)
{
	source_export(serial, who, t, (const Uffdd__ExportRequest *)req);
}

/* The process an export request names, for control.c's checks. */
static int
export_pid(const ProtobufCMessage *req)
{
	return ((const Uffdd__ExportRequest *)req)->pid;
}

/* export --precopy --track PID: the process whose writes are tracked. */
static int
export_track_pid(const ProtobufCMessage *req)
{
	return ((const Uffdd__ExportRequest *)req)->track_pid;
}

/* export --image names no process: the image is what is served. */
static int
export_no_process(const ProtobufCMessage *req)
{
	return ((const Uffdd__ExportRequest *)req)->image;
}

static const struct role_ops source_ops = {
	.role = ROLE_SOURCE,
	.name = "source",
	.request_type = FRAME_CTL_EXPORT,
	.verb = "export",
	.request_pid = export_pid,
	.request_no_process = export_no_process,
	.request_second_pid = export_track_pid,
	.request = export_request,
	.restore = source_restore,
	.restore_check = source_restore_check,
	.hello = source_hello,
	.serve_image = serve_image,
};

/*
 * What the parts below call up through (owner.c): the events started
 * here, the ends in lanes.c, the one state machine of an export.
 */
static const struct source_owner owner = {
	.start = start,
	.free = free_source,
	.fail = source_lanes_fail,
	.fail_ran = source_lanes_fail_ran,
	.teardown = source_lanes_teardown,
};

/* Makes the source role known to the daemon (role.h). */
void
source_register(void)
{
	source_owner_set(&owner);
	role_register(&source_ops);
	source_snapshot_register();
	source_defer_register();
}

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
#include "daemon/wptrack.h"

static void source_free(struct migration *);

/*
 * Which pages of region sr hold data, by its kind (docs/design.md):
 * anonymous memory from pagemap, shared memory from its backing file (a
 * swapped-out shmem page looks untouched in pagemap), shared hugetlb all
 * data (struct src_region). Returns the data pages, or -1.
 */
static int64_t
classify(pid_t pid, struct src_region *sr)
{
	int64_t data;
	int fd;

	if (sr->r.kind == REGION_HUGETLB && sr->r.shared) {
		sr->cache_fd = region_open_backing(pid, sr->r.vma_start,
						   sr->r.vma_end);
		if (sr->cache_fd < 0)
			return -1;
		for (uint64_t p = 0; p < sr->npages; p++)
			bit_set(sr->data, p);
		return (int64_t)sr->npages;
	}
	if (sr->r.kind == REGION_FILE_PRIVATE)
		return pagemap_classify_cow(pid, sr->r.start, sr->npages,
					    sr->data, pagemap_method());
	if (!region_kind_shmem(sr->r.kind))
		return pagemap_classify(pid, sr->r.start, sr->npages,
					sr->r.page_size, sr->data,
					pagemap_method());
	if ((fd = region_open_backing(pid, sr->r.vma_start, sr->r.vma_end)) < 0)
		return -1;
	if (kfeat.shmem_pm_swap &&
	    sr->r.page_size == (uint64_t)sysconf(_SC_PAGESIZE))
		data = pagemap_classify_shmem(pid, sr->r.start, fd,
					      sr->r.file_off, sr->npages,
					      sr->r.page_size, sr->data);
	else
		data = pagemap_classify_file(fd, sr->r.file_off, sr->npages,
					     sr->r.page_size, sr->data);
	close(fd);
	return data;
}

/*
 * Pre-copy, once frozen: pages sent as data that hold nothing now (the
 * process dropped them: MADV_DONTNEED, a hole punched) go again, as ZERO
 * markers, or the destination would keep the bytes it had. Linux 6.18
 * reports a dropped anonymous page as written (it keeps no protection
 * marker, and a page without one counts as written); this check does not
 * depend on that, for one classification at the freeze. Returns the pages
 * marked, or -1 with errno set.
 */
int64_t
source_mark_dropped(struct source *s)
{
	int64_t n = 0;

	for (size_t i = 0; i < s->nregs && n >= 0; i++) {
		struct src_region *sr = &s->regs[i], now = *sr;

		/* Shared hugetlb counts every page as data (its page cache). */
		if (sr->cache_fd >= 0 || !sr->accepted)
			continue;
		now.data = xcalloc(bit_words(sr->npages), sizeof(uint64_t));
		if (classify(s->t.pid, &now) < 0)
			n = -1;
		for (uint64_t p = 0; n >= 0 && p < sr->npages; p++) {
			if (!bit_test(sr->data, p) || bit_test(now.data, p))
				continue;
			bit_clear(sr->data, p);
			if (bit_test(sr->sent, p)) {
				bit_clear(sr->sent, p);
				s->m->cnt.pages_present--;
				s->m->cnt.prefetched_pages--;
			}
			n++;
		}
		free(now.data);
	}
	return n;
}

/*
 * The regions of process pid in the ranges asked for, checked against what
 * a destination accepts. Returns their number (> 0), or 0 with *code and
 * err set.
 */
static int
build_regions(pid_t pid, const struct range *ranges, size_t nranges,
	      struct region **regs, uint32_t *code, char *err, size_t errlen)
{
	char why[512];
	int n = region_build(pid, ranges, nranges, regs, why, sizeof(why));

	if (n <= 0) {
		*code = n == 0		  ? ERR_NO_MATCH
			: errno == EPERM  ? ERR_PERMISSION
			: errno == EINVAL ? ERR_INVALID
					  : ERR_NO_PROCESS;
		snprintf(err, errlen, "process %d: %.200s", (int)pid,
			 n < 0 ? why
			       : "no memory uffdd migrates in the ranges "
				 "given");
		free(*regs);
		*regs = NULL;
		return 0;
	}
	/* A destination would refuse the table: say so before serving. */
	if ((unsigned)n > region_table_max) {
		*code = ERR_INVALID;
		snprintf(err, errlen,
			 "process %d has %d regions, more than max-regions "
			 "%u: narrow it with --range, or raise max-regions",
			 (int)pid, n, region_table_max);
		free(*regs);
		*regs = NULL;
		return 0;
	}
	return n;
}

/* A source's record, with no process and no regions yet. */
struct source *
source_new_bare(const char *id)
{
	struct migration *m = migration_new(ROLE_SOURCE, id);
	struct source *s = xcalloc(1, sizeof(*s));

	m->impl = s;
	m->impl_free = source_free;
	s->m = m;
	s->t = (struct procref)PROCREF_NONE;
	s->switches = -1; /* source_watch_freeze() */
	s->wp = (struct wptrack)WPTRACK_NONE;
	return s;
}

/* The export's record and its regions (internal.h). */
struct source *
source_new(struct procref *t, const struct region *regs, size_t nregs,
	   const struct range *ranges, size_t nranges, const char *id,
	   int deferred, uint32_t *code, char *err, size_t errlen)
{
	struct source *s = source_new_bare(id);
	struct migration *m = s->m;

	m->pid = t->pid;
	m->start = t->start;
	m->ph.deferred = deferred;
	procref_move(&s->t, t);
	s->ps.nranges = nranges;
	s->ps.ranges = xcalloc(nranges, sizeof(*s->ps.ranges));
	memcpy(s->ps.ranges, ranges, nranges * sizeof(*ranges));
	s->nregs = nregs;
	s->regs = xcalloc(s->nregs, sizeof(*s->regs));
	for (size_t i = 0; i < s->nregs; i++) {
		struct src_region *sr = &s->regs[i];
		int64_t data;

		sr->r = regs[i];
		sr->npages = sr->r.length / sr->r.page_size;
		sr->data = xcalloc(bit_words(sr->npages), sizeof(uint64_t));
		sr->sent = xcalloc(bit_words(sr->npages), sizeof(uint64_t));
		sr->cache_fd = -1;
		m->cnt.pages_total += sr->npages;
		/*
		 * Deferred: the process runs on until go, so what it holds
		 * is not known yet. The table says every page may hold
		 * data: a destination then takes nothing for granted (a
		 * private file mapping with no written page would be
		 * marked present there).
		 */
		if (deferred) {
			sr->r.data_pages = sr->npages;
			sr->r.zero_pages = 0;
			continue;
		}
		if ((data = classify(s->t.pid, sr)) < 0) {
			*code = ERR_KERNEL;
			snprintf(err, errlen, "classifying 0x%llx of %d: %s",
				 (unsigned long long)sr->r.start, (int)s->t.pid,
				 strerror(errno));
			procref_move(t, &s->t);
			migration_free(m);
			return NULL;
		}
		sr->r.data_pages = (uint64_t)data;
		sr->r.zero_pages = sr->npages - (uint64_t)data;
	}
	return s;
}

/*
 * The events of a live export: bulk work (serve.c), its process's exit and
 * the pings (lanes.c), the deferred state write (persist.c).
 */
void
source_start(struct source *s)
{
	source_serve_start(s);
	source_lanes_start(s);
	source_persist_start(s);
}

/*
 * Freezes process t (for the caller who; NULL on a restore), builds and
 * classifies its regions and registers the export under id (a fresh one
 * when NULL). Takes t over. Returns NULL with *code and err set; a process
 * that ran before is running again then.
 */
struct source *
source_create(struct procref *t, const struct authz_caller *who,
	      const struct range *ranges, size_t nranges, int keep,
	      const char *id, uint32_t *code, char *err, size_t errlen)
{
	struct region *regs = NULL;
	struct source *s = NULL;
	int n, was_stopped;

	/* Check before freezing: a bad request must leave the process be. */
	if (build_regions(t->pid, ranges, nranges, &regs, code, err, errlen) ==
	    0)
		goto out;
	free(regs);
	regs = NULL;
	if (source_freeze_checked(t, who, NULL, &was_stopped, code, err,
				  errlen) < 0)
		goto out;
	n = build_regions(t->pid, ranges, nranges, &regs, code, err, errlen);
	if (n > 0)
		s = source_new(t, regs, (size_t)n, ranges, nranges, id, 0, code,
			       err, errlen);
	if (s == NULL) {
		source_thaw(t, was_stopped);
		goto out;
	}
	s->was_stopped = was_stopped;
	s->keep_source = keep;
	source_start(s);
out:
	free(regs);
	procref_close(t);
	return s;
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
	int n = build_regions(t->pid, ranges, nranges, &regs, code, err,
			      errlen);

	if (n > 0 &&
	    source_precopy_arm(t, regs, (size_t)n, &wp, code, err, errlen) == 0)
		s = source_new(t, regs, (size_t)n, ranges, nranges, id, 0, code,
			       err, errlen);
	if (s != NULL) {
		source_precopy_init(s, &wp, req);
		s->keep_source = req->keep_source;
		source_start(s);
	}
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
	if (req->precopy)
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
		if (!s->m->ph.deferred)
			source_thaw(&s->t, s->was_stopped);
		migration_free(s->m);
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

		source_thaw(&s->t, s->was_stopped);
		migration_free(s->m);
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
source_free(struct migration *m)
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
	source_precopy_free(s);
	source_defer_free(s);
	wptrack_stop(&s->wp);
	procref_close(&s->t);
	free(s->ps.ranges);
	for (size_t i = 0; i < s->nregs; i++) {
		free(s->regs[i].data);
		free(s->regs[i].sent);
		if (s->regs[i].cache_fd >= 0)
			close(s->regs[i].cache_fd);
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
	.request = export_request,
	.restore = source_restore,
	.restore_check = source_restore_check,
	.hello = source_hello,
	.serve_image = serve_image,
};

/* Makes the source role known to the daemon (role.h). */
void
source_register(void)
{
	role_register(&source_ops);
	source_snapshot_register();
	source_defer_register();
}

/*
 * For a snapshot (snapshot.c): the regions an export would take, checked
 * the same way, and each region's pages classified as an export does.
 */
int
source_build_regions(pid_t pid, const struct range *ranges, size_t nranges,
		     struct region **regs, uint32_t *code, char *err,
		     size_t errlen)
{
	return build_regions(pid, ranges, nranges, regs, code, err, errlen);
}

int64_t
source_classify(pid_t pid, struct src_region *sr)
{
	return classify(pid, sr);
}

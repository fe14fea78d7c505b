/*
 * export --deferred (docs/qemu-two-hosts.md): the export exists at once,
 * with its ID and region table, and takes its destination's lanes, but
 * the process runs on: nothing is frozen, classified or served. Page
 * requests wait in a queue. GO takes the memory as it is from then on:
 * the freeze, the classification, the queued answers, the bulk stream.
 * CANCEL ends a deferred export before its go, the process untouched.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/authz.h"
#include "daemon/compat.h"
#include "daemon/conn.h"
#include "daemon/control.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/migration.h"
#include "daemon/pagemap.h"
#include "daemon/procref.h"
#include "daemon/region.h"
#include "daemon/role.h"
#include "daemon/source/internal.h"

/*
 * A deferred export of process t (taken over): its regions read now, so
 * that go need not, and nothing else done to it. NULL with *code and err.
 */
struct source *
source_create_deferred(struct procref *t, const struct range *ranges,
		       size_t nranges, const char *id, uint32_t *code,
		       char *err, size_t errlen)
{
	struct region *regs = NULL;
	struct source *s = NULL;
	int n = source_build_regions(t->pid, ranges, nranges, &regs, code, err,
				     errlen);

	if (n > 0)
		s = source_new(t, regs, (size_t)n, ranges, nranges, id, 1, code,
			       err, errlen);
	if (s != NULL)
		source_start(s);
	free(regs);
	procref_close(t);
	return s;
}

int
source_defer_request(struct source *s, const Uffdd__PageRequest *pr)
{
	struct defer_req *q;

	if (s->df.ndq >= DEFER_QUEUE_MAX) {
		log_warnx("migration %s: more than %d page requests before "
			  "go: dropping the destination's lanes",
			  log_id(s->m->id), DEFER_QUEUE_MAX);
		return -1;
	}
	if (s->df.dq == NULL)
		s->df.dq = xcalloc(DEFER_QUEUE_MAX, sizeof(*s->df.dq));
	q = &s->df.dq[s->df.ndq++];
	q->region = pr->region;
	q->page = pr->page;
	q->npages = pr->npages;
	return 0;
}

void
source_defer_lanes_down(struct source *s)
{
	s->df.ndq = 0;
}

void
source_defer_free(struct source *s)
{
	source_defer_unprepare(s); /* the daemon stops before go */
	free(s->df.dq);
	s->df.dq = NULL;
	s->df.ndq = 0;
}

/*
 * Whether the regions read at go are the ones the export's table gave the
 * destination: a mapping the process made, moved or dropped meanwhile
 * would have it install pages at the wrong place, or miss them. A shared
 * one replaced in place (another file of the same name, size and offset,
 * mapped at the same address) is another memory, told by its file.
 */
static int
same_regions(const struct source *s, const struct region *regs, size_t n)
{
	if (n != s->nregs)
		return 0;
	for (size_t i = 0; i < n; i++) {
		const struct region *a = &s->regs[i].r, *b = &regs[i];

		if (a->start != b->start || a->length != b->length ||
		    a->kind != b->kind || a->page_size != b->page_size ||
		    a->file_off != b->file_off ||
		    !region_same_file(a, b->dev, b->ino))
			return 0;
	}
	return 1;
}

/*
 * Every region's pages classified (hugetlb_only: the shared hugetlb ones
 * alone), now that the process is frozen.
 */
static int
classify_some(struct source *s, int hugetlb_only, uint32_t *code, char *err,
	      size_t errlen)
{
	for (size_t i = 0; i < s->nregs; i++) {
		struct src_region *sr = &s->regs[i];
		int64_t data;

		if (hugetlb_only &&
		    !(sr->r.kind == REGION_HUGETLB && sr->r.shared))
			continue;
		memset(sr->data, 0, bit_words(sr->npages) * sizeof(uint64_t));
		if (sr->cache_fd >= 0)
			close(sr->cache_fd);
		sr->cache_fd = -1;
		if ((data = source_classify(s->t.pid, sr)) < 0) {
			*code = ERR_KERNEL;
			snprintf(err, errlen, "classifying 0x%llx of %d: %s",
				 (unsigned long long)sr->r.start, (int)s->t.pid,
				 strerror(errno));
			return -1;
		}
		sr->r.data_pages = (uint64_t)data;
		sr->r.zero_pages = sr->npages - (uint64_t)data;
	}
	return 0;
}

/*
 * At go every page counts as data until after_go() classifies them: a
 * page asked for meanwhile is answered with its bytes, never wrongly as
 * zeros, and go leaves the classification's milliseconds out of the
 * guest's stop window. Shared hugetlb is all data anyway, and classifying
 * it opens the file its pages are read from.
 */
static int
presume_data(struct source *s, uint32_t *code, char *err, size_t errlen)
{
	for (size_t i = 0; i < s->nregs; i++) {
		struct src_region *sr = &s->regs[i];

		if (sr->r.kind == REGION_HUGETLB && sr->r.shared)
			continue;
		for (uint64_t p = 0; p < sr->npages; p++)
			bit_set(sr->data, p);
		sr->r.data_pages = sr->npages;
		sr->r.zero_pages = 0;
	}
	s->df.unclassified = 1;
	return classify_some(s, 1, code, err, errlen);
}

/*
 * Go's first half: freezes the process (checked again for the caller who)
 * and checks its maps are the ones exported; us[0] and us[1] say how long
 * each took. On failure the process runs again as it was.
 */
static int
freeze_checked(struct source *s, const struct authz_caller *who, uint64_t us[2],
	       uint32_t *code, char *err, size_t errlen)
{
	struct region *regs = NULL;
	uint64_t t0 = now_ns();
	int n, was_stopped;

	if (source_freeze_checked(&s->t, who, NULL, &was_stopped, code, err,
				  errlen) < 0)
		return -1;
	/*
	 * The count a run is found by from here (commit.c), until the
	 * watch after go takes it again: demand answers go out before.
	 */
	s->switches = source_settled_switches(s->t.pid);
	us[0] = (now_ns() - t0) / 1000;
	n = source_build_regions(s->t.pid, s->ps.ranges, s->ps.nranges, &regs,
				 code, err, errlen);
	if (n > 0 && !same_regions(s, regs, (size_t)n)) {
		*code = ERR_INVALID;
		snprintf(err, errlen,
			 "process %d mapped, moved, replaced or dropped "
			 "memory in the ranges exported since the export: "
			 "cancel it and export again",
			 (int)s->t.pid);
		n = 0;
	}
	free(regs);
	us[1] = (now_ns() - t0) / 1000 - us[0];
	if (n <= 0) {
		source_thaw(&s->t, was_stopped);
		return -1;
	}
	s->was_stopped = was_stopped;
	return 0;
}

/*
 * Go's work: the first half (freeze_checked()), unless a prepare did it,
 * when the process has been frozen since and only the caller is checked
 * again; then every page taken as data. On failure the process runs
 * again as it was, and the export is still deferred.
 */
static int
take_memory(struct source *s, const struct authz_caller *who, uint64_t us[3],
	    uint32_t *code, char *err, size_t errlen)
{
	uint64_t t0 = now_ns();

	if (s->df.prepared) {
		if (authz_may_ptrace(who, &s->t, code, err, errlen) != 0)
			return -1; /* frozen still, as the prepare left it */
		us[0] = (now_ns() - t0) / 1000;
	} else if (freeze_checked(s, who, us, code, err, errlen) < 0) {
		return -1;
	}
	t0 = now_ns();
	if (presume_data(s, code, err, errlen) < 0) {
		source_thaw(&s->t, s->was_stopped);
		s->df.prepared = 0;
		return -1;
	}
	us[2] = (now_ns() - t0) / 1000;
	return 0;
}

/* A deferred export that never went: a process its prepare froze runs. */
void
source_defer_unprepare(struct source *s)
{
	/* Before go, or before the freeze of a pre-copy that went. */
	if (!s->df.prepared || !(s->m->ph.deferred ||
				 (s->pc != NULL && s->pc->phase == PC_ROUNDS)))
		return;
	source_thaw(&s->t, s->was_stopped);
	s->df.prepared = 0;
	log_info("migration %s: ends before go; process %d, stopped by its "
		 "prepare, runs again",
		 log_id(s->m->id), (int)s->m->pid);
}

/*
 * The deferred export a GO or CANCEL names, if the caller may see it
 * (control_may_see(), as for status: an ID it may not see is unknown to
 * it). Else the caller is told why and NULL.
 */
static struct source *
named_export(uint64_t serial, const struct authz_caller *who,
	     const Uffdd__GoRequest *req, const char *verb)
{
	struct migration *m = migration_find(req->id, ROLE_SOURCE);
	struct source *s = m ? m->impl : NULL;

	if (m == NULL || !control_may_see(m)) {
		control_reply_error(serial, ERR_UNKNOWN_ID,
				    "%s: unknown migration ID %s", verb,
				    log_id(req->id));
		return NULL;
	}
	if (s != NULL && (m->ph.deferred || m->pre.wait_go))
		return s;
	if (m->ph.went)
		control_reply_error(serial, ERR_BUSY,
				    "%s: migration %s had its go already; "
				    "nothing changed",
				    verb, log_id(m->id));
	else if (m->state == MIG_COMPLETE || m->state == MIG_FAILED)
		control_reply_error(serial, ERR_INVALID,
				    "%s: migration %s is %s; nothing changed",
				    verb, log_id(m->id),
				    migration_state_name(m->state));
	else
		control_reply_error(serial, ERR_INVALID,
				    "%s: migration %s is not a deferred "
				    "export (export --deferred); nothing "
				    "changed",
				    verb, log_id(m->id));
	return NULL;
}

/* The page requests that came before go, answered now. */
static uint32_t
answer_queued(struct source *s)
{
	uint32_t n = 0;

	for (size_t i = 0; i < s->df.ndq && s->demand; i++) {
		Uffdd__PageRequest pr = UFFDD__PAGE_REQUEST__INIT;

		if (s->m->state != MIG_RUNNING)
			break;
		pr.region = s->df.dq[i].region;
		pr.page = s->df.dq[i].page;
		pr.npages = s->df.dq[i].npages;
		source_demand_request(s, &pr);
		n++;
	}
	source_defer_free(s);
	return n;
}

/*
 * After go's reply: from now a run of the process is noticed, and the
 * state file holds the export. Both come after the first answers (a
 * write-protecting tracker over every region and a synced file take
 * milliseconds, which the stop window of a guest has not to spare): the
 * process is frozen meanwhile, so nothing it holds changes. A file that
 * cannot be written fails the migration, and the process runs again.
 */
static void
after_go(evutil_socket_t fd, short what, void *arg)
{
	struct source *s = arg;
	uint64_t t0 = now_ns(), t1, t2;
	char err[256];
	uint32_t code;
	int rc, e;

	(void)fd;
	(void)what;
	/*
	 * The watch takes its count anew: a run before it is found first
	 * (after a COMMIT, one is looked at when its ACK comes).
	 */
	if (!s->m->ph.committing && source_check_or_fail(s) < 0)
		return;
	if (classify_some(s, 0, &code, err, sizeof(err)) < 0) {
		source_thaw(&s->t, s->was_stopped);
		source_fail(s, "go: %s; process %d runs again", err,
			    (int)s->m->pid);
		return;
	}
	s->df.unclassified = 0;
	t1 = now_ns();
	source_watch_freeze(s);
	t2 = now_ns();
	rc = source_persist_now(s);
	e = errno;
	log_info("migration %s: after go: classification %llu us, watching "
		 "process %d %llu us, the state file %llu us",
		 log_id(s->m->id), (unsigned long long)((t1 - t0) / 1000),
		 (int)s->m->pid, (unsigned long long)((t2 - t1) / 1000),
		 (unsigned long long)((now_ns() - t2) / 1000));
	if (rc == 0) {
		if (s->bulk)
			source_bulk_produce(s);
		return;
	}
	source_thaw(&s->t, s->was_stopped);
	source_fail(s,
		    "go: cannot save the export's state: %s; process %d runs "
		    "again",
		    strerror(e), (int)s->m->pid);
}

/*
 * What go leaves for later (after_go()) runs once nothing holds the bulk
 * stream: neither go's client (hold_bulk) nor the destination (its target
 * not running yet: lanes.c, peer_held), so that it takes no CPU from the
 * stop window; or anyway, when go's hold was at its longest. Else the
 * bulk stream starts, if nothing holds it.
 */
static void
go_rest(struct source *s, int anyway)
{
	if (s->df.go_pending &&
	    (anyway || (!s->df.bulk_held && !s->peer_held))) {
		s->df.go_pending = 0;
		event_active(s->df.go_ev, EV_TIMEOUT, 0);
	} else if (!s->df.go_pending && s->bulk) {
		source_bulk_produce(s);
	}
}

/* A hold was let go (lanes.c: the destination's BULK_GO). */
void
source_hold_changed(struct source *s)
{
	go_rest(s, 0);
}

/*
 * A bulk stream held at go (GoRequest.hold_bulk) starts: released by its
 * client, or at the latest BULK_HOLD_SECS after go, so that a client that
 * died meanwhile does not leave the pages to demand alone.
 */
#define BULK_HOLD_SECS 10

static void
release_bulk(evutil_socket_t fd, short what, void *arg)
{
	struct source *s = arg;

	(void)fd;
	if (!s->df.bulk_held)
		return;
	s->df.bulk_held = 0;
	log_info("migration %s: bulk stream released%s", log_id(s->m->id),
		 what & EV_TIMEOUT ? " (held for its longest)" : "");
	if (s->df.hold_ev)
		event_del(s->df.hold_ev);
	go_rest(s, what & EV_TIMEOUT);
}

static void
hold_bulk(struct source *s)
{
	struct timeval tv = {BULK_HOLD_SECS, 0};

	s->df.bulk_held = 1;
	s->df.hold_ev = evtimer_new(base, release_bulk, s);
	evtimer_add(s->df.hold_ev, &tv);
}

/* GO with release_bulk, on an export past its go. */
static int
release_request(uint64_t serial, const struct authz_caller *who,
		const Uffdd__GoRequest *req)
{
	struct migration *m = migration_find(req->id, ROLE_SOURCE);
	Uffdd__GoReply rep = UFFDD__GO_REPLY__INIT;

	if (!req->release_bulk)
		return 0;
	if (m == NULL || !control_may_see(m)) {
		control_reply_error(serial, ERR_UNKNOWN_ID,
				    "go: unknown migration ID %s",
				    log_id(req->id));
		return 1;
	}
	if (!m->ph.went || m->impl == NULL) {
		control_reply_error(serial, ERR_INVALID,
				    "go: migration %s has no bulk stream held "
				    "at its go; nothing changed",
				    log_id(m->id));
		return 1;
	}
	release_bulk(-1, 0, m->impl);
	rep.id = m->id;
	control_reply(serial, FRAME_CTL_GO_REPLY, &rep.base);
	return 1;
}

/*
 * Go's first half, now: the process frozen and its maps checked; of a
 * pre-copy, the process frozen and the rounds go on for what it tracks.
 */
static int
prepare_now(struct source *s, const struct authz_caller *who, uint32_t *code,
	    char *err, size_t errlen)
{
	uint64_t us[2] = {0};

	if (s->pc != NULL) {
		if (source_precopy_prepare(s, who, code, err, errlen) < 0)
			return -1;
		log_info("migration %s: prepared for go: process %d frozen; "
			 "the pre-copy rounds go on%s",
			 log_id(s->m->id), (int)s->m->pid,
			 s->pc->track.pid > 0 ? " for the process it tracks"
					      : "");
		return 0;
	}
	if (freeze_checked(s, who, us, code, err, errlen) < 0)
		return -1;
	log_info("migration %s: prepared for go: process %d frozen in %llu us, "
		 "its maps checked in %llu us",
		 log_id(s->m->id), (int)s->m->pid, (unsigned long long)us[0],
		 (unsigned long long)us[1]);
	return 0;
}

/* GO with prepare: go's first half now (take_memory()). */
static int
prepare_request(uint64_t serial, const struct authz_caller *who,
		const Uffdd__GoRequest *req)
{
	Uffdd__GoReply rep = UFFDD__GO_REPLY__INIT;
	uint64_t t0 = now_ns();
	struct source *s;
	char err[256];
	uint32_t code;

	if (!req->prepare)
		return 0;
	if ((s = named_export(serial, who, req, "prepare")) == NULL)
		return 1;
	if (!s->df.prepared) {
		if (prepare_now(s, who, &code, err, sizeof(err)) < 0) {
			control_reply_error(serial, code,
					    "prepare: %s; the export still "
					    "waits for go, its process runs",
					    err);
			return 1;
		}
		s->df.prepared = 1;
	}
	rep.work_us = (now_ns() - t0) / 1000;
	rep.id = s->m->id;
	control_reply(serial, FRAME_CTL_GO_REPLY, &rep.base);
	return 1;
}

/* GO: from now the process's memory is taken as it is. */
static void
go_request(uint64_t serial, const struct authz_caller *who, struct procref *t,
	   const ProtobufCMessage *msg)
{
	const Uffdd__GoRequest *req = (const Uffdd__GoRequest *)msg;
	Uffdd__GoReply rep = UFFDD__GO_REPLY__INIT;
	uint64_t t0 = now_ns();
	struct source *s;
	uint64_t us[3] = {0};
	char err[256];
	uint32_t code;

	if (release_request(serial, who, req) ||
	    prepare_request(serial, who, req) ||
	    (s = named_export(serial, who, req, "go")) == NULL)
		return;
	/* A pre-copy answers once switched over (precopy.c). */
	if (s->pc != NULL) {
		if (req->hold_bulk)
			control_reply_error(serial, ERR_INVALID,
					    "go: migration %s pre-copies: its "
					    "bulk stream is its rounds, not "
					    "to be held; nothing changed",
					    log_id(s->m->id));
		else if (source_precopy_go(s, serial) < 0)
			control_reply_error(serial, ERR_BUSY,
					    "go: migration %s had its go "
					    "already; nothing changed",
					    log_id(s->m->id));
		return;
	}
	if (take_memory(s, who, us, &code, err, sizeof(err)) < 0) {
		control_reply_error(serial, code,
				    "go: %s; the export still waits for go",
				    err);
		return;
	}
	s->m->ph.deferred = 0;
	s->m->ph.went = 1;
	if (req->hold_bulk)
		hold_bulk(s);
	rep.work_us = (now_ns() - t0) / 1000;
	rep.queued = answer_queued(s);
	rep.id = s->m->id;
	control_reply(serial, FRAME_CTL_GO_REPLY, &rep.base);
	log_info("migration %s: go: process %d taken in %llu us (%s %llu, "
		 "maps %llu, pages taken as data %llu); %u queued page "
		 "requests answered",
		 log_id(s->m->id), (int)s->m->pid,
		 (unsigned long long)rep.work_us,
		 s->df.prepared ? "frozen at its prepare, caller checked"
				: "freeze",
		 (unsigned long long)us[0], (unsigned long long)us[1],
		 (unsigned long long)us[2], rep.queued);
	/*
	 * The rest from the loop, after what waits at a higher priority, and
	 * after the holds (go_rest()): the destination's first faults come
	 * as its guest loads and starts, in the stop window, and must not
	 * wait behind milliseconds of classification, tracker and state
	 * file, nor share the CPUs with them.
	 */
	s->df.go_ev = event_new(base, -1, 0, after_go, s);
	event_priority_set(s->df.go_ev, PRIO_BULK);
	s->df.go_pending = 1;
	go_rest(s, 0);
}

/* CANCEL: a deferred export ends before its go, its process untouched. */
static void
cancel_request(uint64_t serial, const struct authz_caller *who,
	       struct procref *t, const ProtobufCMessage *msg)
{
	const Uffdd__GoRequest *req = (const Uffdd__GoRequest *)msg;
	Uffdd__GoReply rep = UFFDD__GO_REPLY__INIT;
	struct source *s = named_export(serial, who, req, "cancel");
	struct migration *m;

	if (s == NULL)
		return;
	m = s->m;
	/* source_fail() tells the destination, which then gives up. */
	source_fail(s, "cancelled before go");
	rep.id = m->id;
	control_reply(serial, FRAME_CTL_CANCEL_REPLY, &rep.base);
}

static const struct role_request go_ops = {
	.type = FRAME_CTL_GO,
	.verb = "go",
	.request = go_request,
};

static const struct role_request cancel_ops = {
	.type = FRAME_CTL_CANCEL,
	.verb = "cancel",
	.request = cancel_request,
};

void
source_defer_register(void)
{
	role_register_request(&go_ops);
	role_register_request(&cancel_ops);
}

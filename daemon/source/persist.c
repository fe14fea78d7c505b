/*
 * The export's state file, the one place it is written. Two writes are
 * explicit: the export's (an export that cannot be saved is refused) and
 * the restore's, both before anything else happens to the export; teardown
 * removes the file. Everything else (a destination accepted, a lane lost)
 * only marks the export dirty: one deferred event writes the file once
 * the current callback has returned, after whatever else it changed.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/compat.h"
#include "daemon/conffile.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/migration.h"
#include "daemon/proc.h"
#include "daemon/procref.h"
#include "daemon/source/internal.h"
#include "daemon/state.h"
#include "daemon/statefmt.h"
#include "proto/frame.h"

/* The source's own keys, after the common ones (state.h, state_write). */
static int
save_more(struct state_out *o, const struct migration *m)
{
	const struct source *s = m->impl;
	char key[STATE_KEY_MAX];

	state_put_u64(o, "start", s->m->start);
	state_put_u64(o, "keep_source", s->keep_source != 0);
	if (s->switches >= 0)
		state_put_u64(o, "switches", (uint64_t)s->switches);
	/* A COMMIT out, not acknowledged yet: for status after a restart. */
	if (s->m->ph.committing)
		state_put_u64(o, "commit_seq", s->cm.commit_seq);
	/* A tombstone (source_persist_tombstone()): what a resume is told. */
	if (s->m->state == MIG_FAILED) {
		state_put_u64(o, "fail_code", s->m->fail_code);
		state_put_str(o, "reason", s->m->reason);
		state_put_u64(o, "failed_at", (uint64_t)time(NULL));
	}
	for (size_t i = 0; i < s->ps.nranges; i++)
		state_put_u64s(o, state_key(key, "range", i),
			       (const uint64_t[]){s->ps.ranges[i].start,
						  s->ps.ranges[i].end},
			       2);
	/* export --range ...=NAME: a destination may map by it later. */
	for (size_t i = 0, k = 0; i < s->nregs; i++) {
		if (!s->regs[i].named)
			continue;
		state_put_u64(o, state_key(key, "name_at", k),
			      s->regs[i].r.start);
		state_put_str(o, state_key(key, "name", k++),
			      s->regs[i].r.name);
	}
	return 0;
}

/*
 * Writes the state file now, as the export is: 0, or -1 with errno set
 * (state_write() has said why). What was pending is written with it.
 */
int
source_persist_now(struct source *s)
{
	s->ps.dirty = 0;
	/*
	 * An image's source does not outlive the daemon: the file was the
	 * client's descriptor, which a restart does not have (a destination
	 * that resumes is told the ID is unknown, and fails loudly).
	 */
	if (s->img)
		return 0;
	/*
	 * Not before a pre-copy's switchover: a restart could not tell which
	 * of the destination's copies are stale, and the process runs (a
	 * daemon that dies leaves it running, its tracking gone with it).
	 */
	if (source_precopy_running(s))
		return 0;
	/*
	 * Nor before a deferred export's go: the process was never touched,
	 * and a daemon that restarts forgets the export (its destination
	 * is told the ID is unknown, and fails) and leaves it running.
	 */
	if (s->m->ph.deferred)
		return 0;
	return state_write(s->m, save_more);
}

/* The deferred write: the export as the callback that changed it left it. */
static void
save_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct source *s = arg;

	if (s->ps.dirty)
		source_persist_now(s);
}

/*
 * The deferred write's event. At PRIO_BULK, not below: the bulk stream
 * keeps its event active while it has room, and would starve a lower one.
 */
void
source_persist_start(struct source *s)
{
	s->ps.save_ev = event_new(base, -1, 0, save_cb, s);
	event_priority_set(s->ps.save_ev, PRIO_BULK);
}

/*
 * The data path changed what the file says (the state, the reconnects):
 * it is written once, later, however many changes come before.
 */
void
source_persist_dirty(struct source *s)
{
	if (s->ps.dirty)
		return;
	s->ps.dirty = 1;
	event_active(s->ps.save_ev, EV_TIMEOUT, 0);
}

/*
 * Teardown: the export has ended, and a restart must not take it up. A
 * write still pending would bring the file back: it goes first.
 */
void
source_persist_remove(struct source *s)
{
	s->ps.dirty = 0;
	if (s->ps.save_ev)
		event_del(s->ps.save_ev);
	state_remove(s->m);
}

/*
 * The process ran and no destination was told (its lanes were down): the
 * file stays, as a tombstone, so that one resuming is told why even after
 * a restart of this daemon (ERR_SOURCE_RAN: it stops its target), until
 * one has been (source_persist_told()). A restart drops one older than
 * pause-deadline: no destination resumes any more then.
 */
void
source_persist_tombstone(struct source *s)
{
	s->ps.dirty = 0;
	if (s->ps.save_ev)
		event_del(s->ps.save_ev);
	if (s->img || state_write(s->m, save_more) < 0)
		return;
	log_info("migration %s: its state file stays as a tombstone: a "
		 "destination that resumes is told that process %d ran",
		 log_id(s->m->id), (int)s->m->pid);
}

/* A destination was told of the run (ERR_SOURCE_RAN): the tombstone goes. */
void
source_persist_told(struct migration *m)
{
	state_remove(m);
}

/*
 * The role's memory goes (source_free()): at the daemon's exit a write
 * still pending is made now, so that a restart finds the export as it was.
 */
void
source_persist_free(struct source *s)
{
	if (s->ps.dirty)
		source_persist_now(s);
	if (s->ps.save_ev)
		event_free(s->ps.save_ev);
	s->ps.save_ev = NULL;
}
/* What a source's state file says (save_more()). */
struct saved {
	char id[MIG_ID_LEN + 1];
	pid_t pid;
	unsigned long long start;
	int keep, waiting, live;
	long long switches;  /* -1: none saved */
	uint64_t commit_seq; /* a COMMIT out (0: none) */
	/* A tombstone (state failed): the code, why, and when (time()). */
	uint32_t fail_code;
	char reason[512];
	uint64_t failed_at;
	struct range *ranges;
	size_t nranges;
	struct saved_name {
		uint64_t at; /* the start of the region named */
		char name[REGION_NAME_MAX];
	} * names;
	size_t nnames;
};

/* name.N and name_at.N: the names export gave, as name_regions() took them. */
static int
saved_names(struct state_tbl *t, struct saved *sv)
{
	char key[STATE_KEY_MAX], akey[STATE_KEY_MAX];

	sv->nnames = state_count(t, "name");
	sv->names = xcalloc(sv->nnames + 1, sizeof(*sv->names));
	for (size_t i = 0; i < sv->nnames; i++) {
		struct saved_name *n = &sv->names[i];

		if (state_u64(t, state_key(akey, "name_at", i), 1, UINT64_MAX,
			      &n->at) < 0 ||
		    state_str(t, state_key(key, "name", i), n->name,
			      sizeof(n->name)) < 0)
			return -1;
		if (n->name[0] == '\0' || text_bad_at(n->name) >= 0)
			return state_bad(t, key, "%s: not printable UTF-8",
					 key);
		for (size_t k = 0; k < i; k++)
			if (sv->names[k].at == n->at ||
			    strcmp(sv->names[k].name, n->name) == 0)
				return state_bad(t, key,
						 "%s: a second name for one "
						 "region, or one name twice",
						 key);
	}
	return 0;
}

/* commit_seq, and a tombstone's fail_code, reason and failed_at. */
static int
saved_commit(struct state_tbl *t, struct saved *sv)
{
	uint64_t v;

	if (state_has(t, "commit_seq") &&
	    state_u64(t, "commit_seq", 1, UINT64_MAX, &sv->commit_seq) < 0)
		return -1;
	if (!state_has(t, "fail_code"))
		return 0;
	if (state_u64(t, "fail_code", 0, ERR_SOURCE_RAN, &v) < 0 ||
	    state_str(t, "reason", sv->reason, sizeof(sv->reason)) < 0 ||
	    state_u64(t, "failed_at", 0, UINT64_MAX, &sv->failed_at) < 0)
		return -1;
	sv->fail_code = (uint32_t)v;
	text_clean(sv->reason);
	return 0;
}

/*
 * Reads and checks every record; touches nothing. sv->live: the state is
 * one an export is taken up from (else it had ended).
 */
static int
saved_read(struct state_tbl *t, struct saved *sv)
{
	char st[16];
	uint64_t v;

	memset(sv, 0, sizeof(*sv));
	sv->switches = -1;
	if (state_str(t, "role", st, sizeof(st)) < 0)
		return -1;
	if (strcmp(st, "source") != 0)
		return state_bad(t, "role", "role %s: not a source's file", st);
	if (state_str(t, "id", sv->id, sizeof(sv->id)) < 0 ||
	    state_u64(t, "pid", 2, INT32_MAX, &v) < 0)
		return -1;
	sv->pid = (pid_t)v;
	if (state_u64(t, "start", 1, UINT64_MAX, &v) < 0)
		return -1;
	sv->start = v;
	if (state_u64(t, "keep_source", 0, 1, &v) < 0)
		return -1;
	sv->keep = (int)v;
	if (state_has(t, "switches")) {
		if (state_u64(t, "switches", 0, INT64_MAX, &v) < 0)
			return -1;
		sv->switches = (long long)v;
	}
	if (state_str(t, "state", st, sizeof(st)) < 0)
		return -1;
	sv->waiting = strcmp(st, "waiting") == 0;
	sv->live = sv->waiting || strcmp(st, "running") == 0 ||
		   strcmp(st, "paused") == 0;
	if (!sv->live && strcmp(st, "complete") && strcmp(st, "failed"))
		return state_bad(t, "state", "state %s: not a source's", st);
	if (saved_commit(t, sv) < 0)
		return -1;
	if (state_ranges(t, "range", &sv->ranges, &sv->nranges) < 0 ||
	    saved_names(t, sv) < 0)
		return -1;
	return state_all_read(t);
}

/* Checks a state file without taking anything up (role.h, restore_check). */
int
source_restore_check(struct state_tbl *t)
{
	struct saved sv;
	int rc = saved_read(t, &sv);

	free(sv.ranges);
	free(sv.names);
	return rc;
}

/*
 * The pid must still name the process exported: else it exited while no
 * daemon ran, and the kernel gave its pid to another, never to be frozen.
 */
static int
same_process(const char *file, const struct saved *sv)
{
	unsigned long long now = proc_start(sv->pid);

	if (now == sv->start)
		return 1;
	if (now == 0)
		log_warnx("%s: source process %d is gone; export %s not taken "
			  "up",
			  file, (int)sv->pid, log_id(sv->id));
	else
		log_warnx("%s: pid %d now names another process (started at "
			  "tick %llu, the exported one at %llu): the exported "
			  "process is gone; export %s not taken up, process "
			  "%d not touched",
			  file, (int)sv->pid, now, sv->start, log_id(sv->id),
			  (int)sv->pid);
	return 0;
}

/*
 * It ran while no daemon watched (found running, or switched since the
 * count saved): pages already sent may have changed since, and taken up,
 * the migration would end with the old ones. The process holds the newest
 * bytes: it is left stopped, and the export fails as a run found while
 * watching does (source_fail_ran(): a destination that resumes is told,
 * and stops its target).
 */
static int
ran_meanwhile(const char *file, struct source *s, const struct saved *sv,
	      long long now)
{
	if (s->was_stopped &&
	    (sv->switches < 0 || now < 0 || now == sv->switches))
		return 0;
	log_warnx("%s: source process %d ran while no daemon watched it "
		  "(continued from elsewhere): export %s not taken up; the "
		  "process is left stopped",
		  file, (int)sv->pid, log_id(sv->id));
	source_fail_ran(s,
			"source process %d ran while no daemon watched it "
			"(continued from elsewhere)",
			(int)sv->pid);
	return 1;
}

/*
 * A tombstone (source_persist_tombstone()): the failed export is listed,
 * and answers a destination that resumes with its code, until
 * pause-deadline seconds after the failure. 0 when taken up (the file
 * stays), -1 when it is over.
 */
static int
restore_tombstone(const char *file, const struct saved *sv)
{
	struct migration *m;
	uint64_t now = (uint64_t)time(NULL);

	if (sv->fail_code != ERR_SOURCE_RAN ||
	    now > sv->failed_at + (uint64_t)conf.pause_deadline) {
		log_warnx("%s: export %s had failed (%s)", file, log_id(sv->id),
			  sv->reason);
		return -1;
	}
	m = migration_new(ROLE_SOURCE, sv->id);
	m->pid = sv->pid;
	m->start = sv->start;
	m->fail_code = sv->fail_code;
	migration_fail(m, "%s", sv->reason);
	log_info("%s: export %s kept failed for a destination that resumes",
		 file, log_id(sv->id));
	return 0;
}

/*
 * The names export gave go back on the regions they named: the process was
 * frozen meanwhile, so each still starts where it did. -1 if one does not.
 */
static int
names_back(const char *file, struct source *s, const struct saved *sv)
{
	for (size_t i = 0; i < sv->nnames; i++) {
		struct src_region *hit = NULL;

		for (size_t k = 0; k < s->nregs && hit == NULL; k++)
			if (s->regs[k].r.start == sv->names[i].at)
				hit = &s->regs[k];
		if (hit == NULL) {
			log_warnx("%s: no region of process %d starts at "
				  "0x%llx, which the export named %s: export "
				  "%s not taken up; the process is left as "
				  "it was found",
				  file, (int)sv->pid,
				  (unsigned long long)sv->names[i].at,
				  sv->names[i].name, log_id(sv->id));
			return -1;
		}
		snprintf(hit->r.name, sizeof(hit->r.name), "%s",
			 sv->names[i].name);
		hit->named = 1;
	}
	return 0;
}

/*
 * After a daemon restart: the exported process is still frozen; classify it
 * again under the same ID and wait for the destination to resume.
 */
int
source_restore(struct state_tbl *t)
{
	const char *file = state_name(t);
	struct source *s = NULL;
	struct procref p;
	struct saved sv;
	char err[256];
	uint32_t code;
	long long now;
	int rc = -1;

	if (saved_read(t, &sv) < 0)
		goto out;
	if (!sv.live && sv.fail_code) {
		rc = restore_tombstone(file, &sv);
		goto out;
	}
	if (!sv.live) {
		log_warnx("%s: export %s had ended", file, log_id(sv.id));
		goto out;
	}
	if (!same_process(file, &sv))
		goto out;
	/*
	 * Opened now, and still the process that started then: by the grant
	 * the privileged part kept (a restarted engine acts on it only so).
	 */
	if (procref_restore(&p, ROLE_SOURCE, sv.id, sv.pid, sv.start, err,
			    sizeof(err)) < 0 ||
	    p.start != sv.start) {
		if (p.pidfd >= 0)
			snprintf(err, sizeof(err),
				 "pid %d names another "
				 "process now",
				 (int)sv.pid);
		log_warnx("%s: export %s not taken up: %s", file, log_id(sv.id),
			  err);
		procref_close(&p);
		goto out;
	}
	s = source_create(&p, NULL, sv.ranges, sv.nranges, sv.keep, sv.id,
			  &code, err, sizeof(err));
	if (s == NULL) {
		log_warnx("%s: %s", file, err);
		goto out;
	}
	if (names_back(file, s, &sv) < 0) {
		source_thaw(&s->t, s->was_stopped);
		migration_free(s->m);
		goto out;
	}
	now = source_switch_count(sv.pid, NULL);
	if (ran_meanwhile(file, s, &sv, now)) {
		rc = 0; /* listed failed; its tombstone stays */
		goto out;
	}
	source_watch_freeze(s);
	if (!sv.waiting)
		migration_set_state(s->m, MIG_PAUSED);
	/* A COMMIT was out: the destination's committed resume ends it. */
	if (sv.commit_seq) {
		s->cm.commit_seq = sv.commit_seq;
		s->cm.completing = 1;
		s->m->ph.committing = 1;
	}
	log_info("restored export %s of process %d (%s)", log_id(sv.id),
		 (int)sv.pid, migration_state_name(s->m->state));
	source_persist_now(s);
	rc = 0;
out:
	free(sv.ranges);
	free(sv.names);
	return rc;
}

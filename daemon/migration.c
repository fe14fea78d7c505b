/* Migration table, IDs and status. */
#include "config.h"

#include <malloc.h>
#include <signal.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/crypto.h>

#include "daemon/compat.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/metrics.h"
#include "daemon/migration.h"
#include "daemon/probe.h"

/* Finished migrations kept for status queries. */
#define MIG_KEEP_FINISHED 64

struct migration_list migrations = TAILQ_HEAD_INITIALIZER(migrations);

/* IDs are credentials for now: 128 bits from the kernel's CSPRNG. */
static void
new_id(char out[MIG_ID_LEN + 1])
{
	uint8_t raw[MIG_ID_LEN / 2];

	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		fatal("getrandom");
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(out + 2 * i, 3, "%02x", raw[i]);
}

/*
 * A log line's journal fields (log.h) for the migration it names: the
 * role, peer and process, when one ID names one migration here (a daemon
 * that migrates to itself holds the ID in both roles: then none).
 */
static int
log_about(const char *id, struct log_about *a)
{
	const struct migration *m, *found = NULL;

	TAILQ_FOREACH (m, &migrations, link) {
		if (strcmp(m->id, id) != 0)
			continue;
		if (found)
			return -1;
		found = m;
	}
	if (found == NULL)
		return -1;
	a->role = found->role == ROLE_SOURCE ? "source" : "destination";
	a->peer = found->peer;
	a->pid = found->pid;
	return 0;
}

struct migration *
migration_new(enum mig_role role, const char *id)
{
	struct migration *m = xcalloc(1, sizeof(*m));

	log_set_about(log_about);

	if (id)
		snprintf(m->id, sizeof(m->id), "%s", id);
	else
		new_id(m->id);
	m->role = role;
	m->state = role == ROLE_SOURCE ? MIG_WAITING : MIG_CONNECTING;
	m->t.start = m->t.created = now_ns();
	TAILQ_INSERT_TAIL(&migrations, m, link);
	return m;
}

/* Compared in constant time: the ID is what a peer proves itself with. */
struct migration *
migration_find(const char *id, enum mig_role role)
{
	struct migration *m;

	if (id == NULL || strlen(id) != MIG_ID_LEN)
		return NULL;
	TAILQ_FOREACH (m, &migrations, link)
		if (m->role == role &&
		    CRYPTO_memcmp(m->id, id, MIG_ID_LEN) == 0)
			return m;
	return NULL;
}

struct migration *
migration_of_pid(pid_t pid, enum mig_role role)
{
	struct migration *m;

	TAILQ_FOREACH (m, &migrations, link)
		if (m->role == role && m->pid == pid &&
		    m->state != MIG_COMPLETE && m->state != MIG_FAILED)
			return m;
	return NULL;
}

/* What the dropped records held, by role (migration_totals()). */
static struct mig_totals retired[2];

static void
totals_add(struct mig_totals *t, const struct migration *m)
{
	t->demand_faults += m->cnt.demand_faults;
	t->demand_pages += m->cnt.demand_pages;
	t->prefetched_pages += m->cnt.prefetched_pages;
	t->zero_pages += m->cnt.zero_pages;
	t->zero_content_pages += m->cnt.zero_content_pages;
	t->discarded_pages += m->cnt.discarded_pages;
	t->hinted_pages += m->cnt.hinted_pages;
	t->bytes += m->cnt.bytes;
	t->pages_lost += m->loss.pages;
	t->reconnects += m->reconnects;
	t->blocked_ns += m->blk.ns;
	t->precopy_rounds += m->pre.rounds;
	t->precopy_bytes += m->pre.bytes;
}

void
migration_totals(enum mig_role role, struct mig_totals *t)
{
	const struct migration *m;

	*t = retired[role];
	TAILQ_FOREACH (m, &migrations, link)
		if (m->role == role)
			totals_add(t, m);
}

void
migration_free(struct migration *m)
{
	if (m->impl_free)
		m->impl_free(m);
	totals_add(&retired[m->role], m);
	TAILQ_REMOVE(&migrations, m, link);
	if (m->ws)
		free(m->ws->keys);
	free(m->ws);
	free(m);
}

void
migration_ws_start(struct migration *m, uint32_t max, uint32_t secs)
{
	m->ws = xcalloc(1, sizeof(*m->ws));
	m->ws->max = max == 0 || max > MIG_WS_MAX ? MIG_WS_MAX : max;
	/* The bulk lane waits for it: a recording always ends. */
	m->ws->secs =
		secs == 0 || secs > MIG_WS_SECS_MAX ? MIG_WS_SECS_MAX : secs;
	m->ws->t_first = now_ns();
}

int
migration_ws_closed(const struct migration *m)
{
	const struct mig_ws *w = m->ws;

	return w == NULL || w->n >= w->max || m->state == MIG_COMPLETE ||
	       m->state == MIG_FAILED ||
	       (w->secs &&
		now_ns() - w->t_first >= (uint64_t)w->secs * 1000000000ull);
}

/*
 * A page a target thread faulted on. Each is asked for once while it is
 * missing, so the list has no repeats but after a reconnect; the client
 * drops those when it stores the list (image_ws_store()).
 */
void
migration_ws_add(struct migration *m, uint32_t region, uint64_t page)
{
	struct mig_ws *w = m->ws;

	if (w == NULL || page >= 1ull << 48 || migration_ws_closed(m))
		return;
	if (w->n == w->cap) {
		w->cap = w->cap ? w->cap * 2 : 1024;
		w->keys = realloc(w->keys, w->cap * sizeof(*w->keys));
		if (w->keys == NULL)
			fatal("working set");
	}
	w->keys[w->n++] = (uint64_t)region << 48 | page;
}

static void
reap_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct migration *m = arg, *it, *next;
	size_t finished = 0;

	if (m->impl_free && m->impl)
		m->impl_free(m);
	/*
	 * A migration's socket buffers are megabytes that glibc keeps in its
	 * arenas after free; hand them back, so that a daemon that served
	 * many migrations is as small as a fresh one.
	 */
	malloc_trim(0);
	TAILQ_FOREACH (it, &migrations, link)
		if (it->state == MIG_COMPLETE || it->state == MIG_FAILED)
			finished++;
	for (it = TAILQ_FIRST(&migrations); it && finished > MIG_KEEP_FINISHED;
	     it = next) {
		next = TAILQ_NEXT(it, link);
		if ((it->state == MIG_COMPLETE || it->state == MIG_FAILED) &&
		    it != m && it->impl == NULL) {
			if (it->forget)
				it->forget(it);
			migration_free(it);
			finished--;
		}
	}
}

void
migration_release(struct migration *m)
{
	static const struct timeval now = {0, 0};

	if (event_base_once(base, -1, EV_TIMEOUT, reap_cb, m, &now) < 0)
		log_warnx("migration %s: cannot schedule release",
			  log_id(m->id));
}

void
migration_lost(struct migration *m, uint64_t start, uint64_t end,
	       uint64_t pages)
{
	m->loss.pages += pages;
	if (m->loss.n < MIG_LOST_RANGES) {
		m->loss.ranges[m->loss.n][0] = start;
		m->loss.ranges[m->loss.n][1] = end;
		m->loss.n++;
	}
}

void
migration_blocked(struct migration *m, pid_t tid, uint64_t ns)
{
	m->blk.ns += ns;
	for (size_t i = 0; i < m->blk.n; i++) {
		if (m->blk.threads[i].tid == tid) {
			m->blk.threads[i].ns += ns;
			m->blk.threads[i].faults++;
			return;
		}
	}
	/* A full table keeps the totals right and drops the names. */
	if (m->blk.n < MIG_THREADS)
		m->blk.threads[m->blk.n++] = (struct thread_block){tid, ns, 1};
}

static int
by_ns_desc(const void *a, const void *b)
{
	const Uffdd__ThreadBlock *x = *(Uffdd__ThreadBlock *const *)a;
	const Uffdd__ThreadBlock *y = *(Uffdd__ThreadBlock *const *)b;

	return x->ms < y->ms ? 1 : x->ms > y->ms ? -1 : 0;
}

size_t
migration_threads(const struct migration *m, Uffdd__ThreadBlock **out,
		  Uffdd__ThreadBlock ***ptrs)
{
	*out = xcalloc(m->blk.n, sizeof(**out));
	*ptrs = xcalloc(m->blk.n, sizeof(**ptrs));
	for (size_t i = 0; i < m->blk.n; i++) {
		uffdd__thread_block__init(&(*out)[i]);
		(*out)[i].tid = m->blk.threads[i].tid;
		(*out)[i].ms = (double)m->blk.threads[i].ns / 1e6;
		(*out)[i].faults = m->blk.threads[i].faults;
		(*ptrs)[i] = &(*out)[i];
	}
	qsort(*ptrs, m->blk.n, sizeof(**ptrs), by_ns_desc);
	return m->blk.n;
}

int
migration_signal(int pidfd, pid_t pid, int sig)
{
	if (pidfd >= 0)
		return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
	return kill(pid, sig);
}

void
migration_free_all(void)
{
	struct migration *m;

	while ((m = TAILQ_FIRST(&migrations)) != NULL)
		migration_free(m);
}

const char *
migration_state_name(enum mig_state s)
{
	static const char *names[] = {"connecting", "waiting",	"running",
				      "paused",	    "complete", "failed"};

	return names[s];
}

void
migration_set_state(struct migration *m, enum mig_state s)
{
	if (m->state == s)
		return;
	log_info("migration %s (%s): %s -> %s", log_id(m->id),
		 m->role == ROLE_SOURCE ? "source" : "destination",
		 migration_state_name(m->state), migration_state_name(s));
	/* A destination's clock starts when its target starts faulting. */
	if (s == MIG_RUNNING && m->state == MIG_CONNECTING)
		m->t.start = now_ns();
	m->state = s;
	if (s != MIG_COMPLETE && s != MIG_FAILED)
		return;
	m->t.end = now_ns();
	metrics.ended[m->role][s == MIG_FAILED]++;
	if (s == MIG_COMPLETE && m->role == ROLE_DEST)
		metrics_long(&metrics.residency, m->t.end - m->t.created);
	if (s == MIG_COMPLETE && m->role == ROLE_SOURCE && m->pre.rounds)
		metrics_long(&metrics.freeze, m->pre.downtime_ns);
}

void
migration_fail(struct migration *m, const char *fmt, ...)
{
	va_list ap;

	if (m->state == MIG_FAILED || m->state == MIG_COMPLETE)
		return;
	va_start(ap, fmt);
	vsnprintf(m->reason, sizeof(m->reason), fmt, ap);
	va_end(ap);
	/*
	 * A reason may quote a peer (its ERROR, a region name) and goes to
	 * status and the state file; a cut may also split a character.
	 */
	text_clean(m->reason);
	log_event(LOG_MSGID_MIGRATION_FAILED, NULL, "migration %s failed: %s",
		  log_id(m->id), m->reason);
	migration_set_state(m, MIG_FAILED);
}

void
migration_set_peer(struct migration *m, const char *peer)
{
	snprintf(m->peer, sizeof(m->peer), "%s", peer);
	text_clean(m->peer);
}

void
migration_status(const struct migration *m, Uffdd__MigrationStatus *s)
{
	uint64_t end = m->t.end ? m->t.end : now_ns();

	s->id = (char *)m->id;
	s->role = m->role == ROLE_SOURCE ? "source" : "destination";
	s->state = m->pre.on && m->state == MIG_RUNNING ? "precopy"
		   : m->ph.deferred && (m->state == MIG_WAITING ||
					m->state == MIG_RUNNING)
			   ? "deferred"
		   : m->ph.committing && (m->state == MIG_RUNNING ||
					  m->state == MIG_PAUSED)
			   ? "committing"
			   : (char *)migration_state_name(m->state);
	s->deferred = m->ph.deferred || (m->pre.on && m->pre.wait_go);
	s->precopy_ready = m->pre.on && m->pre.ready;
	s->attached = m->ph.attached;
	s->reason = (char *)m->reason;
	s->pid = m->pid;
	s->peer = (char *)m->peer;
	s->pages_total = m->cnt.pages_total;
	s->pages_present = m->cnt.pages_present;
	s->demand_faults = m->cnt.demand_faults;
	s->demand_pages = m->cnt.demand_pages;
	s->prefetched_pages = m->cnt.prefetched_pages;
	s->zero_pages = m->cnt.zero_pages;
	s->discarded_pages = m->cnt.discarded_pages;
	s->bytes = m->cnt.bytes;
	s->elapsed_s = (double)(end - m->t.start) / 1e9;
	s->latency_p50_us = (double)hist_quantile(&m->latency, 0.50) / 1e3;
	s->latency_p99_us = (double)hist_quantile(&m->latency, 0.99) / 1e3;
	s->pages_lost = m->loss.pages;
	s->reconnects = m->reconnects;
	s->hinted_pages = m->cnt.hinted_pages;
	s->zero_content_pages = m->cnt.zero_content_pages;
	s->blocktime_ms = (double)m->blk.ns / 1e6;
	s->precopy_rounds = m->pre.rounds;
	s->precopy_bytes = m->pre.bytes;
	s->downtime_ms = (double)m->pre.downtime_ns / 1e6;
	s->n_precopy_round_bytes = m->pre.rounds < MIG_ROUNDS_KEPT
					   ? m->pre.rounds
					   : MIG_ROUNDS_KEPT;
	s->precopy_round_bytes = (uint64_t *)m->pre.round_bytes;
	s->kernel = (char *)probe_summary();
}

void
migration_round(struct migration *m, uint64_t bytes)
{
	size_t n = m->pre.rounds;

	if (n >= MIG_ROUNDS_KEPT) {
		memmove(m->pre.round_bytes, m->pre.round_bytes + 1,
			(MIG_ROUNDS_KEPT - 1) * sizeof(m->pre.round_bytes[0]));
		n = MIG_ROUNDS_KEPT - 1;
	}
	m->pre.round_bytes[n] = bytes;
	m->pre.rounds++;
	m->pre.bytes += bytes;
}

/* The lost ranges as protobuf messages; free with free(*out). */
size_t
migration_lost_ranges(const struct migration *m, Uffdd__Range **out,
		      Uffdd__Range ***ptrs)
{
	*out = xcalloc(m->loss.n, sizeof(**out));
	*ptrs = xcalloc(m->loss.n, sizeof(**ptrs));
	for (size_t i = 0; i < m->loss.n; i++) {
		uffdd__range__init(&(*out)[i]);
		(*out)[i].start = m->loss.ranges[i][0];
		(*out)[i].end = m->loss.ranges[i][1];
		(*ptrs)[i] = &(*out)[i];
	}
	return m->loss.n;
}

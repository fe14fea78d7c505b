/* Grants: what the privileged part allowed (grant.h). */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/priv/grant.h"

static TAILQ_HEAD(, grant) grants = TAILQ_HEAD_INITIALIZER(grants);
static uint64_t next_id = 1;

struct grant *
grant_new(uint16_t frame_type, const struct authz_caller *who,
	  struct procref *t)
{
	struct grant *g = xcalloc(1, sizeof(*g));

	g->id = next_id++;
	g->uffd = -1;
	g->frame_type = frame_type;
	g->who = *who;
	procref_move(&g->t, t);
	TAILQ_INSERT_TAIL(&grants, g, link);
	return g;
}

struct grant *
grant_find(uint64_t id)
{
	struct grant *g;

	TAILQ_FOREACH (g, &grants, link)
		if (g->id == id)
			return g;
	return NULL;
}

struct grant *
grant_next(uint64_t id)
{
	struct grant *g;

	TAILQ_FOREACH (g, &grants, link)
		if (g->id > id)
			return g;
	return NULL;
}

struct grant *
grant_holding(pid_t pid, unsigned long long start)
{
	struct grant *g;

	TAILQ_FOREACH (g, &grants, link)
		if (!g->dropped && g->t.pid == pid && g->t.start == start)
			return g;
	return NULL;
}

struct grant *
grant_root(struct grant *g)
{
	struct grant *p;

	/* Bounded: a parent is always made before its children. */
	while (g->parent != 0 && (p = grant_find(g->parent)) != NULL &&
	       p->id < g->id)
		g = p;
	return g;
}

void
grant_bind(struct grant *g, uint32_t role, const char *id)
{
	for (size_t i = 0; i < g->nbinds; i++)
		if (g->binds[i].role == role && strcmp(g->binds[i].id, id) == 0)
			return;
	if (g->nbinds == GRANT_BINDS) {
		log_warnx("grant %llu: more than %d migrations bound; %s "
			  "not seen by its caller",
			  (unsigned long long)g->id, GRANT_BINDS, log_id(id));
		return;
	}
	g->binds[g->nbinds].role = role;
	snprintf(g->binds[g->nbinds].id, sizeof(g->binds[g->nbinds].id), "%s",
		 id);
	g->nbinds++;
}

/* Dropped grants kept for status, as the engine keeps finished records. */
#define GRANTS_KEPT 256

void
grant_drop(struct grant *g)
{
	struct grant *o, *oldest = NULL;
	size_t kept = 0;

	procref_close(&g->t);
	if (g->uffd >= 0)
		close(g->uffd);
	g->uffd = -1;
	g->dropped = 1;
	/*
	 * Kept even with nothing bound yet: an image checked off the loop is
	 * bound once the check is done, after its request let the grant go.
	 */
	TAILQ_FOREACH (o, &grants, link)
		if (o->dropped) {
			kept++;
			if (oldest == NULL)
				oldest = o;
		}
	if (kept > GRANTS_KEPT)
		grant_free(oldest);
}

void
grant_free(struct grant *g)
{
	TAILQ_REMOVE(&grants, g, link);
	procref_close(&g->t);
	if (g->uffd >= 0)
		close(g->uffd);
	free(g);
}

void
grant_keep_uffd(struct grant *g, int uffd)
{
	if (g->uffd >= 0)
		close(g->uffd);
	g->uffd = fcntl(uffd, F_DUPFD_CLOEXEC, 0);
}

void
grant_free_all(void)
{
	struct grant *g;

	while ((g = TAILQ_FIRST(&grants)) != NULL)
		grant_free(g);
}

struct grant *
grant_bound(uint32_t role, const char *id)
{
	struct grant *g;

	TAILQ_FOREACH (g, &grants, link) {
		if (g->dropped)
			continue;
		for (size_t i = 0; i < g->nbinds; i++)
			if (g->binds[i].role == role &&
			    strcmp(g->binds[i].id, id) == 0)
				return g;
	}
	return NULL;
}

void
grant_engine_gone(void)
{
	struct grant *g;

	TAILQ_FOREACH (g, &grants, link)
		if (!g->dropped)
			g->unclaimed = 1;
}

void
grant_drop_unclaimed(void (*dropping)(struct grant *))
{
	struct grant *g, *next;

	for (g = TAILQ_FIRST(&grants); g != NULL; g = next) {
		next = TAILQ_NEXT(g, link);
		if (g->dropped || !g->unclaimed)
			continue;
		log_info("grant %llu (process %d): not taken up by the new "
			 "engine; let go",
			 (unsigned long long)g->id, (int)g->t.pid);
		g->unclaimed = 0;
		if (dropping != NULL)
			dropping(g);
		grant_drop(g);
	}
}

/*
 * Whether who may see grant g's migrations: it made them, or it could
 * ptrace the process (still the one checked when the grant was made).
 */
static int
may_see(const struct authz_caller *who, const struct grant *g)
{
	if (g->who.uid == who->uid && g->who.gid == who->gid)
		return 1;
	return g->t.pidfd >= 0 && procref_same(&g->t) &&
	       authz_allows(who, &g->t);
}

size_t
grant_seen(const struct authz_caller *who, struct ctl_seen **out, int *all)
{
	struct grant *g;
	size_t n = 0, cap = 16;

	*all = who->privileged;
	*out = xcalloc(cap, sizeof(**out));
	TAILQ_FOREACH (g, &grants, link) {
		if (*all || !may_see(who, g))
			continue;
		for (size_t i = 0; i < g->nbinds && n < CTL_SEEN_MAX; i++) {
			if (n == cap) {
				cap *= 2;
				*out = xrealloc(*out, cap * sizeof(**out));
			}
			(*out)[n].role = g->binds[i].role;
			memcpy((*out)[n].id, g->binds[i].id,
			       sizeof((*out)[n].id));
			n++;
		}
	}
	return n;
}

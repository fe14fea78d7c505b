/*
 * Grants (docs/privsep.md): what the privileged part allowed. A control
 * request that names a process, and that its caller may make, opens one:
 * the process (a procref opened under the check), the caller as it was at
 * connect, and the migrations the engine made of it (bound by the engine
 * once it has them: the caller owns those, for status). The engine names
 * processes by grant only; a request of its that names no grant, or a
 * grant's process that is not itself any more, does nothing.
 */
#ifndef UFFDD_PRIV_GRANT_H
#define UFFDD_PRIV_GRANT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "daemon/authz.h"
#include "daemon/ctlmsg.h"
#include "daemon/migration.h"
#include "daemon/procref.h"

#define GRANT_BINDS 4

struct grant {
	TAILQ_ENTRY(grant) link;
	uint64_t id;
	uint16_t frame_type; /* the request that opened it */
	struct authz_caller who;
	struct procref t; /* PROCREF_NONE: the request named no process */
	struct ctl_bind binds[GRANT_BINDS];
	size_t nbinds;
	int dropped;	 /* the engine holds nothing of it: kept for status */
	uint64_t parent; /* a forked child's (PRIVOP_CHILD): its parent's */
	/*
	 * A duplicate of the userfaultfd its setup handed the engine (or -1):
	 * a process that holds that very file is of this migration (kin.c).
	 */
	int uffd;
	/*
	 * Its engine died: the new one takes it back (PRIVOP_CLAIM) while
	 * it restores, or it is dropped once that engine is ready.
	 */
	int unclaimed;
	/* Its record's file name (record.h), or empty: none written. */
	char record[MIG_ID_LEN + 24];
};

/* A new grant: t (may be PROCREF_NONE) is moved into it. */
struct grant *grant_new(uint16_t frame_type, const struct authz_caller *,
			struct procref *t);
struct grant *grant_find(uint64_t id);
/* The grant made after grant id (0: the first), or NULL. */
struct grant *grant_next(uint64_t id);
/* The live grant that holds the process (pid, start), or NULL. */
struct grant *grant_holding(pid_t pid, unsigned long long start);
/* The grant g descends from (PRIVOP_CHILD's parents), g itself at the top. */
struct grant *grant_root(struct grant *g);
/* The engine made migration (role, id) of grant g. */
void grant_bind(struct grant *, uint32_t role, const char *id);
void grant_free(struct grant *);
/* g keeps a duplicate of uffd, the one its process's setup made. */
void grant_keep_uffd(struct grant *g, int uffd);
/*
 * The engine holds nothing of grant g any more: its process is let go;
 * what it made stays seen by its caller, for a while (GRANTS_KEPT).
 */
void grant_drop(struct grant *);
void grant_free_all(void);
/*
 * The live grant bound to migration (role, id), or NULL: the one a new
 * engine takes back for a migration it restores.
 */
struct grant *grant_bound(uint32_t role, const char *id);
/* The engine died: every live grant waits to be claimed by the next. */
void grant_engine_gone(void);
/*
 * The new engine is ready (it restored what it could): a grant it did not
 * claim is of a migration it did not take up, and is dropped, dropping(g)
 * called first (when not NULL).
 */
void grant_drop_unclaimed(void (*dropping)(struct grant *));
/*
 * The migrations who may see: those it made, and those of processes it
 * could ptrace (authz_may_see() of old). *all is set for a caller who may
 * see every one (privileged). Returns how many, in *out (malloc'd).
 */
size_t grant_seen(const struct authz_caller *, struct ctl_seen **out, int *all);

#endif

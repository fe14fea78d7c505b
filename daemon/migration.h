/* The daemon's table of migrations, in either role, with their statistics. */
#ifndef UFFDD_MIGRATION_H
#define UFFDD_MIGRATION_H

#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

#include "daemon/stats.h"
#include "proto/frame.h"

#define MIG_ID_LEN 32 /* 128 random bits in hex */
#define MIG_LOST_RANGES 16
#define MIG_THREADS 64	   /* threads whose blocktime is kept one by one */
#define MIG_ROUNDS_KEPT 16 /* pre-copy rounds whose bytes are kept */

enum mig_role { ROLE_SOURCE, ROLE_DEST };
enum mig_state {
	MIG_CONNECTING, /* destination: talking to the source */
	MIG_WAITING,	/* source: exported, no destination yet */
	MIG_RUNNING,
	MIG_PAUSED,
	MIG_COMPLETE,
	MIG_FAILED,
};

/* What a migration moved, counted where it moves (status shows them). */
struct mig_counts {
	uint64_t pages_total;
	uint64_t pages_present; /* source: pages sent */
	uint64_t demand_faults;
	uint64_t demand_pages;
	uint64_t prefetched_pages;
	uint64_t zero_pages;
	uint64_t discarded_pages; /* destination: the target gave them back */
	uint64_t bytes;
	uint64_t hinted_pages;	     /* installed with ACCESS_LIKELY */
	uint64_t zero_content_pages; /* source: data found all zero */
};

/* When (ns, monotonic): the export or attach, and the run's ends. */
struct mig_times {
	uint64_t created, start, end;
};

/* Pages poisoned, never to arrive: how many, and the first ranges. */
struct mig_loss {
	uint64_t pages;
	uint64_t ranges[MIG_LOST_RANGES][2]; /* [start, end) */
	size_t n;
};

/* Blocktime (destination, UFFD_FEATURE_THREAD_ID): per thread. */
struct mig_block {
	uint64_t ns;
	struct thread_block {
		pid_t tid;
		uint64_t ns, faults;
	} threads[MIG_THREADS];
	size_t n;
};

/*
 * Pre-copy (export --precopy): on while its rounds run, before the
 * switchover (status shows state "precopy"); rounds done, their page
 * bytes (all, and each of the last MIG_ROUNDS_KEPT, oldest first), and
 * the freeze time.
 */
struct mig_precopy {
	int on;
	/*
	 * export --deferred --precopy: the switchover waits for GO (status:
	 * deferred until it comes); ready once the rounds converged.
	 */
	int wait_go, ready;
	uint32_t rounds;
	uint64_t bytes;
	uint64_t round_bytes[MIG_ROUNDS_KEPT];
	uint64_t downtime_ns;
};

/* Where a migration stands between its states' steps. */
struct mig_phase {
	/*
	 * export --deferred: deferred set until its go (status shows state
	 * "deferred"), went once it was given; attached: the source has its
	 * destination's two lanes and the regions it takes.
	 */
	int deferred, went, attached;
	/*
	 * Completion is a commit (docs/design.md, "Completion"): set from
	 * the destination's COMPLETE until the COMMIT is acknowledged
	 * (source), or until COMMIT came (destination); status shows state
	 * "committing" meanwhile.
	 */
	int committing;
	/* attach --hold-bulk: kept once the role's state is freed (RELEASE). */
	int hold_bulk;
};

struct migration {
	TAILQ_ENTRY(migration) link;
	char id[MIG_ID_LEN + 1];
	enum mig_role role;
	enum mig_state state;
	char reason[512];
	/*
	 * Failed: the code a peer that comes later is told (ERR_SOURCE_RAN,
	 * or 0 for ERR_SOURCE).
	 */
	uint32_t fail_code;
	pid_t pid;
	unsigned long long start; /* pid's start time: tells a reused pid */
	char peer[128];
	struct mig_counts cnt;
	struct mig_times t;
	struct hist latency; /* ns from fault read to install */
	struct mig_loss loss;
	uint32_t reconnects;
	struct mig_block blk;
	struct mig_precopy pre;
	struct mig_phase ph;
	/* attach --record-working-set: the pages faulted (migration_ws_*). */
	struct mig_ws *ws;
	void *impl; /* struct source or struct dest */
	void (*impl_free)(struct migration *);
	/*
	 * An ended record kept on disk (state_end()): what removes it when
	 * the record is dropped from the table, not when the daemon exits.
	 */
	void (*forget)(const struct migration *);
};

TAILQ_HEAD(migration_list, migration);

/*
 * A role's counts over every migration this engine held, those whose
 * records were dropped included: the daemon's counters never go back.
 */
struct mig_totals {
	uint64_t demand_faults, demand_pages, prefetched_pages, zero_pages;
	uint64_t zero_content_pages, discarded_pages, hinted_pages, bytes;
	uint64_t pages_lost, reconnects, blocked_ns, precopy_rounds;
	uint64_t precopy_bytes;
};
void migration_totals(enum mig_role, struct mig_totals *);
extern struct migration_list migrations;

/* A new migration with a fresh random ID; id may name an existing ID. */
struct migration *migration_new(enum mig_role, const char *id);
struct migration *migration_find(const char *id, enum mig_role);
/* The migration of this role that holds process pid and has not ended. */
struct migration *migration_of_pid(pid_t pid, enum mig_role);
void migration_free(struct migration *);
const char *migration_state_name(enum mig_state);
void migration_set_state(struct migration *, enum mig_state);
/*
 * attach --record-working-set: pages faulted are recorded, in order, each
 * once, until max of them or secs after the attach (0: no limit). The
 * destination holds its bulk lane meanwhile, so a time limit there is.
 */
#define MIG_WS_MAX 65536 /* what one status frame carries with room */
#define MIG_WS_SECS_MAX 3600
struct mig_ws {
	uint64_t *keys; /* region index << 48 | page index */
	size_t n, cap;
	uint32_t max, secs;
	uint64_t t_first; /* ns, the recording's start */
};
void migration_ws_start(struct migration *, uint32_t max, uint32_t secs);
void migration_ws_add(struct migration *, uint32_t region, uint64_t page);
int migration_ws_closed(const struct migration *);

/* Marks the migration failed with a reason, logged once. */
void migration_fail(struct migration *, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/*
 * Sets the peer shown in status and saved in the state file (an address,
 * or what a control client gave as --from), as printable text.
 */
void migration_set_peer(struct migration *, const char *peer);
/* Fills a status message; strings point into m. */
void migration_status(const struct migration *, Uffdd__MigrationStatus *);
void migration_free_all(void);
/*
 * Signals a migration's process through its pidfd when there is one, so
 * that a pid the kernel gave to another process meanwhile is never hit.
 * sig 0 asks whether it is alive. Returns 0 or -1 with errno set.
 */
int migration_signal(int pidfd, pid_t pid, int sig);
/* Records lost pages [start, end) for status. */
void migration_lost(struct migration *, uint64_t start, uint64_t end,
		    uint64_t pages);
/*
 * Frees the role's state (buffers, bitmaps, descriptors) once the current
 * callback has returned; the record stays for status. Finished records
 * beyond a fixed number are dropped, oldest first.
 */
void migration_release(struct migration *);
/* Adds ns of blocking on a missing page to thread tid's account. */
void migration_blocked(struct migration *, pid_t tid, uint64_t ns);
size_t migration_threads(const struct migration *, Uffdd__ThreadBlock **out,
			 Uffdd__ThreadBlock ***ptrs);
/* A pre-copy round of bytes page bytes is done (struct migration). */
void migration_round(struct migration *, uint64_t bytes);
size_t migration_lost_ranges(const struct migration *, Uffdd__Range **out,
			     Uffdd__Range ***ptrs);

#endif

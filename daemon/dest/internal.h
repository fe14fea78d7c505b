/*
 * The destination role's parts (daemon/dest/, one concern a file) and
 * what they share: the migration's state (struct dest), its regions, and
 * the calls one part makes into another. The rest of the daemon sees
 * only daemon/dest.h.
 *
 * Where to start reading (top down: a file calls only files below it,
 * tests/layers): attach.c takes a target and restore.c takes one up after
 * a restart; lanes.c talks to the source and hands its frames to
 * table.c (the region table), pagedata.c, precopy.c and commit.c;
 * target.c sets the target up by its grant (bygrant.c asks the
 * privileged part), children.c follows the processes it forks (find.c
 * finds them), feed.c feeds a frame's pages to the installer
 * (install.c); offload.c hands bulk frames to the installing thread
 * (installer.c) and takes them back; lifecycle.c makes a destination and ends it; fault.c reads
 * the target's faults and events, and reports a fork or an exit up
 * through owner.c; hold.c writes its private file pages, complete.c says
 * COMPLETE; persist.c writes the state file, saved.c reads it back,
 * record.c keeps which pages went in; regions.c says where each page of a
 * region is now.
 */
#ifndef UFFDD_DEST_INTERNAL_H
#define UFFDD_DEST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/authz.h"
#include "daemon/migration.h"
#include "daemon/pagestate.h"
#include "daemon/procref.h"
#include "daemon/region.h"
#include "daemon/uffd.h"
#include "proto/frame.h"

struct conn;
struct dest_ring;
struct event;
struct evbuffer_iovec;
struct frame_hdr;
struct migration;
struct uffd_msg;

/* Threads that may wait on a page at once, each migration. */
#define INFLIGHT_MAX 4096
/* EAGAIN retries of one install before the migration is declared broken. */
#define RETRY_MAX 10000
/*
 * A frame's installs, though: the kernel refuses them (EAGAIN) from the
 * moment a target thread starts changing its memory map (madvise, munmap,
 * mremap) until that thread is back from its event, after we read it. A
 * guest inflating its balloon does that once a page, back to back, and
 * the thread may wait for a CPU: installs spin RETRY_SPIN times, then
 * sleep RETRY_SLEEP_US between tries, and fail only after RETRY_SECS
 * without a page going in.
 */
#define RETRY_SPIN 64
#define RETRY_SLEEP_US 50
#define RETRY_SECS 10
/*
 * A lane silent this long is dead: the source pings every second, so this
 * notices a cut link (whose TCP connection may linger for minutes) quickly.
 */
#define LANE_TIMEOUT 3
/* attach --wait-export: seconds at most. */
#define EXPORT_WAIT_MAX 3600

/* Pages [p0, p1) of a region that the target moved to base (mremap). */
struct move {
	uint64_t p0, p1, base;
};

struct dst_region {
	struct region r;    /* r.index: the source's index; r.start: ours */
	uint64_t src_start; /* where the region is in the source */
	uint64_t npages;
	struct pagestate ps;
	struct move *moves; /* later entries win */
	size_t nmoves;
	int shared; /* the target maps it MAP_SHARED (hugetlb: a page cache) */
	/*
	 * record.c: its bits in the record of installed pages, or NULL (a
	 * private file's; a forked child's private memory).
	 */
	uint64_t *installed;
};

/*
 * A target thread blocked on a missing page: its wait is its blocktime;
 * the wait of the fault that sent the request is a latency sample.
 */
struct waiter {
	uint32_t reg;
	uint64_t page;
	uint64_t t0;
	pid_t tid;
	int first;
	int front; /* first, and its page at the bulk front (pace.c) */
	/* first, left to the stream (dest_stream_brings()): 1; asked late: 2 */
	int unasked;
};

/*
 * What the control client asked of an attach (attach.c), and whom to
 * answer: the ranges and the --map pairs.
 */
struct dest_request {
	uint64_t serial;
	struct range *ranges;
	size_t nranges;
	struct range *maps; /* attach --map: start = source's, end = ours */
	char (*map_names)[REGION_NAME_MAX]; /* or the source's name, if set */
	size_t nmaps;
};

/* fault.c: what the uffd says, and the threads waiting. */
struct dest_faults {
	struct event *uffd_ev;
	struct waiter *waiters;
	size_t nwaiters;
	size_t nrequests; /* waiters that sent their page's request */
	size_t nfront;	  /* of them, for a page at the bulk front */
	/*
	 * Faults answered with a zero page that the kernel refused (EAGAIN:
	 * an event was pending): the fault is read, so nothing else would
	 * wake the thread. Tried again once dest_read_faults() has read the
	 * event.
	 */
	uint64_t *zretry;
	size_t nzretry;
	/*
	 * Messages read from the uffd while an injection waited for a thread
	 * to stop (dest_drain_uffd()), handled by the next dest_read_faults().
	 */
	struct uffd_msg *backlog;
	size_t nbacklog;
	int read_err; /* a failed read of the uffd was logged */
	/* Waiters left to the stream are asked for when it fires. */
	struct event *stream_ev;
	uint64_t stream_brought; /* faults the stream settled, unasked */
	uint64_t stream_late;	 /* left to it, and asked for after all */
	uint64_t answer_ns;	 /* a request's answer time (EWMA) */
};

/*
 * commit.c: completion is a commit. complete_sent: COMPLETE went on this
 * demand lane, and the target runs waiting for COMMIT (sent again after a
 * resume); committed: COMMIT commit_seq was acted on, persisted first, and
 * the ACK's echo is awaited (the state file stays until then); released:
 * the target was let go after it. In the root, done_kids: forked children
 * that hold every page, waiting for the root's COMMIT (stopped if it
 * fails).
 */
struct dest_commit {
	int complete_sent, committed, released;
	/*
	 * The target's copy of its uffd closed LATE_CLOSE_MS after the
	 * commit (dest_close_target_later()); end_waits: the migration
	 * ended meanwhile, its memory goes once that close is done.
	 */
	struct event *late_close_ev;
	int end_waits;
	uint64_t commit_seq;
	struct dest **done_kids;
	size_t ndone_kids;
};

/* lanes.c: the lanes' reconnection, and how the bulk lane is opened. */
struct dest_lanes {
	/*
	 * Why the source refused our resume (another protocol version): the
	 * pause deadline fails with it rather than with "unreachable".
	 */
	char refused[512];
	int bulk_opened;  /* logged that we open this bulk lane's records */
	int resuming;	  /* the demand lane is in a resume handshake */
	uint64_t t_pause; /* ns: when the lanes went down */
	int backoff_ms;
	struct event *retry_ev;
	/*
	 * attach --wait-export: how long an attach waits for a source that
	 * does not know its ID yet (seconds, from the attach); 0: not at all.
	 */
	uint32_t export_wait;
	struct event *bulk_delay; /* UFFDD_BENCH_BULK_DELAY_MS */
};

/* pagedata.c: a frame's bytes, and a bulk frame installed in pieces. */
struct dest_install {
	uint8_t *buf;
	struct dest_ring *ring; /* offload.c, once a frame went there */
	uint64_t offloaded;	/* bulk frames handed to that thread */
	/*
	 * A bulk frame being installed in pieces (bulk_pieces()): its pages
	 * [pend.page + pdone, pend.page + pend.npages) are still to go in,
	 * from pbuf + pdone pages; the bulk lane hands no frame meanwhile.
	 */
	Uffdd__PageData pend;
	uint64_t pdone;
	int pending;
	uint8_t *pbuf;
	struct event *piece_ev;
	/*
	 * Past the last bulk frame taken: where the stream goes on (set
	 * with the first, when pbuf is made).
	 */
	uint32_t front_reg;
	uint64_t front_page;
	/* When the last was taken, and the mean time between two (EWMA). */
	uint64_t take_ns, gap_ns;
};

/*
 * The bulk lane held. attach --record-working-set: while the recording
 * runs the bulk lane is held (dest_bulk_hold()), so that every page the
 * target touches is a fault, recorded; ws_ev ends the hold when the
 * recording's time is up. runhold.c (AttachRequest.hold_bulk): run_hold
 * is 1 while the bulk lane is held until the target runs, 2 once
 * released; run_hold_ev releases it BULK_HOLD_SECS after the first fault
 * (or a pre-copy's switchover) if no RELEASE came. complete_held: attached
 * so, the migration does not complete (COMPLETE, and the source's checks
 * and COMMIT after it) before that either, even when every page is in,
 * as after a pre-copy: the target's start keeps the CPUs.
 */
struct dest_bulk_hold {
	struct event *ws_ev;
	/*
	 * A demand answer came since the last bulk frame was taken: the lane
	 * is not held for one request until a frame is (dest_bulk_waits()).
	 */
	int frame_owed;
	int run_hold;
	int complete_held;
	int src_holds; /* the source said FEATURE_BULK_HOLD back */
	struct event *run_hold_ev;
};

/*
 * hold.c: private file mappings cannot be registered (userfaultfd has no
 * MISSING mode for a regular file mapped privately), so nothing would stop
 * a thread from reading the file's stale page where the source had written
 * its own. Every thread stays stopped (held by the privileged part, on)
 * until each such page is written through /proc/PID/mem (memfd);
 * dest_release_held() lets them go.
 */
struct dest_held {
	int on;
	int memfd;
	/*
	 * precopy.c: the source pre-copies (its HELLO said so). The target
	 * is held as above until SWITCHOVER; until then a page sent again
	 * replaces the copy installed before (through memfd).
	 */
	int precopy;
	/*
	 * AttachRequest.precopy_no_hold: a pre-copy's target is not held,
	 * only trusted not to touch the memory until SWITCHOVER (on stands
	 * for the rounds all the same); a fault meanwhile fails it.
	 */
	int no_hold;
	/* The source waits for its SWITCHOVER echoed (its HELLO said so). */
	int ack;
};

/*
 * children.c: forked children of the target (UFFD_EVENT_FORK): each is a
 * dest of its own (its uffd, page map, move table, migration record) that
 * shares the root's lanes; the root completes when they all have.
 */
struct dest_kin {
	struct dest **kids; /* in the root */
	size_t nkids;
	struct event *find_ev; /* a child whose pid was not known yet */
	pid_t parent_pid;      /* a child's parent, to find it by */
	int find_tries;
	unsigned long long fork_ticks; /* when its fork event came */
	/*
	 * find.c, in the root: the processes no fork event may be matched
	 * with, by pid and start time (a pid is reused): children the target
	 * had when we attached or restored, and every child matched since.
	 */
	struct proc_id {
		pid_t pid;
		unsigned long long start;
	} * seen;
	size_t nseen;
};

/* persist.c, in the root: its state file. */
/* record.c: the record of installed pages. */
struct dest_record;

struct dest_persist {
	int saved; /* the state file on disk is up to date */
	/* m->pid's start time (proc.h), taken at the first save. */
	unsigned long long start;
	int dirty;		 /* changed since the file was written */
	struct event *save_ev;	 /* writes it once the callback returns */
	struct dest_record *rec; /* record.c; shared with forked children */
};

/*
 * One destination migration: the root, into the process attached to, or
 * one of the processes it forked (a child). What every part reads is
 * here; what one part keeps for itself is in that part's struct, named
 * above each (so a part's state reads as a whole, and the struct stays
 * small enough to hold in the head). The parts that make a destination
 * (attach.c, children.c, restore.c) fill them in.
 */
struct dest {
	/* lifecycle.c: the record, and whom and what it is for. */
	struct migration *m;
	char from[256];
	char pin[96]; /* attach --pin: the source certificate's SHA-256 */
	/*
	 * The target as checked (procref.h): its pidfd for signals, events
	 * and pidfd_getfd; procref_same() before each injection.
	 */
	struct procref t;
	/*
	 * Who asked for the attach: every process the migration acts on
	 * (the target after it is stopped, a forked child before it gets a
	 * copy of its uffd) must be one this caller could ptrace. In the
	 * root; a child's is unused.
	 */
	struct authz_caller owner;
	int failing; /* poisoning: faults are no longer requested */
	/*
	 * In the root: its target exited while children it forked were still
	 * migrating (root_gone()). It stays for their sake, with no process,
	 * no uffd, and every page counted as present.
	 */
	int gone;
	struct event *exit_ev;
	struct dest *root; /* set in a child (children.c) */

	struct dest_request req;

	/*
	 * The migrated regions and their pages' states: regions.c says where
	 * a page is; fault.c, install.c and hold.c change the states.
	 */
	struct dst_region *regs;
	size_t nregs;

	/* target.c: the userfaultfd, ours and the target's copy. */
	int uffd, target_fd;
	/*
	 * The daemon holds the only copy of the uffd, and the target is held
	 * so that it dies with the daemon (tracee.h): it could not have made
	 * this kind of userfaultfd itself. Its forked children likewise.
	 */
	int sole;
	int have_poison; /* UFFDIO_POISON offered on every region */
	int hints;	 /* ACCESS_LIKELY negotiated on this uffd */

	/* lanes.c: the two lanes to the source, and their reconnection. */
	struct conn *demand, *bulk;
	struct dest_lanes ln;

	struct dest_faults fr;
	struct dest_install in;
	struct dest_bulk_hold bh;
	struct dest_held held;
	struct dest_commit cm;
	struct dest_kin kin;
	struct dest_persist ps;
};

/* lifecycle.c */
/*
 * A new destination for process pid of migration id (the root's ID for
 * a child), its record listed: no process, no uffd, no regions yet.
 */
struct dest *dest_new(const char *id, pid_t pid, const char *from,
		      const char *pin);
/* The target's exit is an event, once its process is known. */
void dest_exit_watch(struct dest *);
void dest_drop_target(struct dest *, int kill);
/*
 * close_target: RELEASE_KEEP (the target keeps its copy of the uffd; one
 * with none is killed), RELEASE_CLOSE, RELEASE_CLOSE_LATER (the commit
 * of a pre-copy whose target was not held: unregistered now, its copy
 * closed later, dest_close_target_later()).
 */
enum { RELEASE_KEEP, RELEASE_CLOSE, RELEASE_CLOSE_LATER };
void dest_release_target(struct dest *, int close_target);
/*
 * The target's copy of its uffd, inert once unregistered, closed
 * LATE_CLOSE_MS from now: the injection that closes it stops every thread
 * of the target for milliseconds, which right after a pre-copy's
 * switchover would fall in a guest's stop window. dest_late_close_free():
 * at the end of the role's memory, a close still due is done.
 */
void dest_close_target_later(struct dest *);
void dest_late_close_free(struct dest *);
void dest_end(struct dest *);
void dest_fail(struct dest *, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/*
 * The pages present may be of two moments (the source ran, or never
 * vouched for them): the target is stopped, its children too, and the
 * migration fails with why.
 */
void dest_fail_stop(struct dest *, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void dest_fail_kids(struct dest *, const char *why);
void dest_target_exited(struct dest *);
/* A forked child finished or dead: off its root's list, let go. */
void dest_child_done(struct dest *k);
void dest_gone_reason(struct dest *);
/* An attach failed before its target was touched: answered, forgotten. */
void dest_attach_fail(struct dest *, uint32_t code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* complete.c */
void dest_maybe_complete(struct dest *);
void dest_kid_waits(struct dest *root, struct dest *k);
void dest_done_kids_end(struct dest *, const char *stopped_why);

/* commit.c */
const char *dest_commit(struct dest *, const Uffdd__Commit *);
void dest_committed_frame(struct dest *, const struct frame_hdr *,
			  ProtobufCMessage *);

/* table.c */
int dest_attach_regions(struct dest *, const Uffdd__RegionTable *);

/* target.c */
int dest_setup_target(struct dest *, char *err, size_t errlen, uint32_t *code);
int dest_poison_usable(void);

/*
 * bygrant.c: what the engine asks of the privileged part about a target
 * held by grant (dest_by_grant(): a root, or a forked child with a grant
 * of its own); how: enum privop_dest_how. Failures of dest_grant_end()
 * are logged when err is NULL.
 */
int dest_by_grant(const struct dest *);
/* The target makes its uffd; ours comes back (d->uffd, d->target_fd). */
int dest_grant_uffd(struct dest *, char *err, size_t errlen, uint32_t *code);
int dest_grant_discard(struct dest *, uint64_t start, uint64_t length, int shm,
		       char *err, size_t errlen);
int dest_grant_end(struct dest *, uint32_t how, char *err, size_t errlen);
void dest_grant_close(struct dest *);
/* The target's own copy of the uffd closed, by its grant (or none kept). */
void dest_close_target_fd(struct dest *);
void dest_grant_child(struct dest *k);
/*
 * A restored target's (or forked child's) uffd, its copy at target_fd
 * taken again by the privileged part for grant: the descriptor, or -1
 * with err filled.
 */
int dest_grant_retake(uint64_t grant, int target_fd, char *err, size_t errlen);

/* regions.c */
uint64_t dest_present_total(const struct dest *);
uint64_t dest_page_addr(const struct dst_region *, uint64_t page);
uint64_t dest_addr_run(const struct dst_region *, uint64_t page, uint64_t max);
struct dst_region *dest_region_by_index(struct dest *, uint32_t idx);
void dest_add_move(struct dst_region *, uint64_t p0, uint64_t p1, uint64_t at);

/*
 * owner.c: what the fault reader calls up through, installed by the
 * role's top: the target forked (its child's uffd), the target is gone.
 */
struct dest_owner {
	void (*forked)(struct dest *parent, int ufd);
	void (*exited)(struct dest *);
	/* A fault that the migration cannot serve: it fails, saying why. */
	void (*broken)(struct dest *, const char *why);
};
void dest_owner_set(const struct dest_owner *);
void dest_forked(struct dest *parent, int ufd);
void dest_exited(struct dest *);
void dest_broken(struct dest *, const char *why);

/* uffdread.c */
void dest_uffd_read_failed(struct dest *);
void dest_drain_uffd(void *dest);

/* fault.c */
void dest_fault_watch(struct dest *);
void dest_read_faults(struct dest *);
void dest_request_page(struct dest *, struct dst_region *, uint64_t page);
/* Counts the waits no install will end, and forgets them (fault.c). */
void dest_waiters_drop(struct dest *);
void dest_settle(struct dest *, uint32_t idx, uint64_t page, uint64_t n);
void dest_zero_discarded(struct dest *, struct dst_region *, uint64_t page);

/* install.c: what an install of a frame's pages came to. */
enum install_res {
	INSTALL_DONE,	/* every page the target lacked is in */
	INSTALL_EVENTS, /* an event is pending: read it, then again */
	INSTALL_GONE,	/* the target is gone */
	INSTALL_FAILED, /* refused for good: why in struct install_try */
};
/* Kept by the caller across its calls for one frame. */
struct install_try {
	int retries;	/* EAGAIN with nothing installed, in a row */
	uint64_t stuck; /* since when nothing went in */
	uint64_t at;	/* the page the next call goes on from (0: the first) */
	char why[160];	/* INSTALL_FAILED: why */
};
enum uffd_res dest_install_zero(struct dest *, const struct dst_region *,
				uint64_t addr, uint64_t len, uint64_t mode,
				uint64_t *done);
uint64_t dest_frame_pages(struct dest *, const struct evbuffer_iovec *, int nv,
			  uint64_t off, uint64_t ps, uint64_t max,
			  const uint8_t **src);
/* What a run of got pages counts for, in t's counters and the metrics. */
void dest_install_count(struct dest *t, const struct dst_region *,
			const Uffdd__PageData *, uint64_t got);
enum install_res dest_install_missing(struct dest *t, struct dest *root,
				      struct dst_region *,
				      const Uffdd__PageData *,
				      const struct evbuffer_iovec *, int nv,
				      struct install_try *);

/* feed.c: -1 when t can take no more (gone, or failed: told). */
int dest_install_pages(struct dest *t, struct dest *root, struct dst_region *,
		       const Uffdd__PageData *, const struct evbuffer_iovec *,
		       int nv);

/* pagedata.c: NULL, or why the lanes must go down. */
const char *dest_page_data(struct dest *, struct conn *,
			   const struct frame_hdr *, const Uffdd__PageData *);

/* pace.c */
void dest_bulk_hold(struct dest *);
int dest_bulk_waits(const struct dest *);
int dest_stream_brings(const struct dest *, const struct dst_region *,
		       uint64_t page);
void dest_stream_taken(struct dest *);
/* What a request's answer takes, as measured (a default before). */
uint64_t dest_answer_ns(const struct dest *);
/* avg: the exponentially weighted mean (1/8) of what it was and x. */
void dest_ewma(uint64_t *avg, uint64_t x);
int dest_at_bulk_front(const struct dest *, const struct dst_region *,
		       uint64_t page);
void dest_ws_watch(struct dest *);

/* lanes.c */
int dest_connect_demand(struct dest *, int resuming, char *err, size_t errlen);
int dest_open_bulk(struct dest *);
void dest_lanes_down(struct dest *, const char *why);
void dest_schedule_retry(struct dest *);

/* hold.c */
uint64_t dest_private_missing(const struct dest *);
void dest_request_private(struct dest *);
/* The privileged part holds it (bygrant.c). */
int dest_hold_target(struct dest *, char *err, size_t errlen);
void dest_release_held(struct dest *);
void dest_run_hold_clock(struct dest *);
void dest_run_hold_hello(struct dest *, const Uffdd__Hello *);
void dest_runhold_register(void);
int dest_write_private(struct dest *, struct dst_region *,
		       const Uffdd__PageData *, const struct evbuffer_iovec *,
		       int nv, char *err, size_t errlen);

/* precopy.c */
void dest_precopy_hello(struct dest *, const Uffdd__Hello *);
const char *dest_precopy_data(struct dest *, struct conn *,
			      const struct frame_hdr *, const Uffdd__PageData *,
			      struct dst_region *);
const char *dest_precopy_sync(struct dest *, struct conn *,
			      const Uffdd__Ping *);
const char *dest_switchover(struct dest *, struct conn *,
			    const Uffdd__Switchover *);

/* children.c */
struct dest *dest_child_new(struct dest *root, const struct dest *parent,
			    pid_t pid, int ufd);
void dest_child_start(struct dest *root, struct dest *k);
void dest_fork_child(struct dest *parent, int ufd);

/* find.c */
pid_t dest_claim_child(pid_t parent, struct dest *root, int mark);
pid_t dest_claim_orphan(struct dest *k);
void dest_child_open(struct dest *k, pid_t pid);
uint64_t dest_orphan_addr(const struct dest *k);
unsigned long long dest_boot_ticks(void);
int dest_proc_gone(pid_t pid);

/* persist.c */
void dest_persist_dirty(struct dest *);
int dest_persist_now(struct dest *);
int dest_persist_first(struct dest *, char *err, size_t errlen);
void dest_persist_remove(struct dest *);
void dest_persist_free(struct dest *);

/* record.c */
/*
 * The root's record made afresh for its regions (attach, before any page
 * goes in), or the one a restart finds checked against the state file's
 * regions and mapped (then dest_record_regions() once d's regions are
 * built). 0, or -1 with err saying why.
 */
int dest_record_make(struct dest *, char *err, size_t errlen);
int dest_record_take(struct dest *, const struct region *regs, size_t nregs,
		     char *err, size_t errlen);
void dest_record_regions(struct dest *);
/* A forked child uses its root's record for its shared memory. */
void dest_record_share(struct dest *k, struct dest *root);
/* Pages [page, page+n) of dr went in: called after the install only. */
void dest_record_mark(const struct dst_region *, uint64_t page, uint64_t n);

/* Whether the record says page of dr went in (not a guess). */
int dest_record_has(const struct dst_region *, uint64_t page);
/* A restart's page map of dr (from the pagemap) and the record, merged. */
void dest_record_apply(struct dst_region *);
/* d lets go of the record (its memory goes); the file stays. */
void dest_record_drop(struct dest *);
/* The migration ended: the root's file goes. */
void dest_record_remove(struct dest *);

/* saved.c: what a destination's state file says (persist.c writes it). */
/* A saved run of discarded pages: the root's (pid 0) or a child's. */
struct gone {
	int pid;
	size_t reg;
	uint64_t p0, p1;
};

/* A forked child as a state file names it. */
struct saved_kid {
	pid_t pid;
	unsigned long long start;
	int tfd;
};

/* Pages [mv.p0, mv.p1) of region reg moved (save_regions(), persist.c). */
struct saved_move {
	size_t reg;
	struct move mv;
};

/* What a destination's state file says (save_more(), persist.c). */
struct saved {
	char id[MIG_ID_LEN + 1], from[256], pin[96], state[16];
	pid_t pid;
	unsigned long long start;
	struct authz_caller owner;
	int tfd; /* -1: the attach had not taken the uffd yet */
	int held, gone;
	int sole;	     /* the daemon held the only uffd (tracee.h) */
	int installed;	     /* a record of installed pages goes with it */
	uint64_t committed;  /* the COMMIT acted on (0: none) */
	int released;	     /* the target let go after it */
	struct region *regs; /* vma_start: the source's start */
	size_t nregs;
	struct range *ranges;
	size_t nranges;
	struct saved_move *moves;
	size_t nmoves;
	struct gone *runs;
	size_t nruns;
	struct saved_kid *kids;
	size_t nkids;
};

struct state_tbl;
int dest_saved_read(struct state_tbl *, struct saved *);
void dest_saved_free(struct saved *);

#endif

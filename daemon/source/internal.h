/*
 * The source role's parts (daemon/source/), and what they share: the
 * export's record and the calls from one part into another. Nothing
 * outside daemon/source/ includes it; the rest of the daemon has
 * daemon/source.h.
 *
 * They call one way, down (docs/design.md, "The code's layers"): export.c
 * and lanes.c at the top, then defer.c and precopy.c, commit.c,
 * persist.c, serve.c, image.c, snapshot.c, and at the bottom make.c,
 * owner.c, freeze.c, export_check.c. A part reports up only by what it
 * returns or through a callback its owner gave it (owner.c; struct
 * precopy's sent_all).
 *
 *   export.c   the role's entry: an export request, its events started,
 *              its memory freed
 *   owner.c    the calls up, through the callbacks export.c installs
 *   make.c     an export's record and regions made, its pages classified
 *   freeze.c   the frozen process: stop it, check it, notice a run of it
 *   export_check.c  an export request checked before the process is touched
 *   serve.c    pages out: demand answers and the bulk stream
 *   lanes.c    the destination's lanes, and how a migration ends (every
 *              end: fail, teardown, complete after the COMMIT_ACK)
 *   commit.c   the freeze check on a timer, and completion as a commit:
 *              COMPLETE answered with COMMIT, COMMIT_ACK, the process
 *              killed (or kept)
 *   persist.c  the state file: written, deferred, restored from
 *   precopy.c  export --precopy: rounds while the process runs, the freeze,
 *              the switchover
 *   snapshot.c a frozen process's memory written to an image file
 *              (snapshot_write.c: its pages read and written)
 *   image.c    a snapshot image served in place of a frozen process
 *   defer.c    export --deferred: lanes taken, nothing served until go
 */
#ifndef UFFDD_SOURCE_INTERNAL_H
#define UFFDD_SOURCE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/procref.h"
#include "daemon/region.h"
#include "daemon/source.h"
#include "daemon/wptrack.h"
#include "proto/frame.h"
#include "proto/image.h"
#include "proto/image_ra.h"
#include "proto/range.h"

struct authz_caller;
struct conn;
struct event;
struct migration;
struct source;

/* An idle lane is pinged this often so the destination sees it alive. */
#define PING_SECS 1
/*
 * The freeze check (source_check()) runs this often at least, and takes
 * at most 1/CHECK_SHARE of the loop: a check that took c ms comes back
 * after CHECK_SHARE * c ms when that is longer (docs/design.md, "The
 * freeze check").
 */
#define CHECK_MS 100
#define CHECK_SHARE 20
/* s->scratch: one frame's page bytes (a demand answer, a zero-check). */
#define SCRATCH_LEN FRAME_DATA_MAX

/* export --precopy defaults (docs/design.md, "Pre-copy"). */
#define PRECOPY_MAX_ROUNDS 30
#define PRECOPY_THRESHOLD (4ull << 20)
/* Rounds without a new smallest dirty set after which the rounds stop. */
#define PRECOPY_STALL_ROUNDS 3
/*
 * export --deferred --precopy, converged: the next round after this pause
 * (precopy_go.c), so that the dirty set stays that of one pause without
 * the rounds taking a CPU while they wait for go.
 */
#define PRECOPY_PACE_MS 100
/*
 * During the rounds only the destination notices a silent link (the
 * source reads nothing it waits for): the pings the source sends going
 * unacknowledged this long close the demand lane, and pause-deadline
 * starts. Longer than the destination's own LANE_TIMEOUT, so that a cut
 * it resumes from is not cut again here.
 */
#define PRECOPY_LINK_SECS 10

/*
 * A pre-copy, until its switchover. ROUNDS: the process runs, each round
 * sends the pages written since the one before. LAST: the rounds are
 * over, one more sends what the last left written. SYNC: waiting for the
 * destination to have installed it all (ROUND_SYNC echoed). FINAL: the
 * process is frozen, the pages written since go; then SWITCHOVER, and the
 * export goes on as any other (DONE).
 */
enum pc_phase { PC_ROUNDS, PC_LAST, PC_SYNC, PC_FINAL, PC_DONE };

struct precopy {
	enum pc_phase phase;
	uint32_t max_rounds;
	uint64_t threshold;   /* a dirty set this small (bytes) is the last */
	uint64_t round_start; /* m->bytes when the round began */
	uint64_t best;	      /* the smallest dirty set so far, bytes */
	uint32_t since_best;  /* rounds since */
	uint64_t t_freeze;    /* ns, when the freeze began */
	uint64_t wall_freeze; /* the same, CLOCK_REALTIME */
	uint64_t final_pages; /* sent during the freeze */
	int sent_since;	      /* the round's marked pages were queued */
	struct event *wp_ev;  /* a sync tracker's faults (wptrack_serve()) */
	uint64_t faults_at;   /* its faults answered, at the round's start */
	long long minflt_at, majflt_at; /* the process's, the same */
	struct event *pause_ev; /* the destination's time to come back */
	int again; /* resumed after the switchover: send it again */
	/*
	 * The bulk stream (serve.c) sent every page: a round is over, or
	 * after the switchover, nothing is left. Set by precopy.c, which
	 * drives the stream, so that serve.c reports up without calling up.
	 */
	void (*sent_all)(struct source *);
	/*
	 * export --track (track.c): the other process that writes the
	 * exported memory, its tracker, and where it maps each region.
	 */
	/*
	 * export --deferred --precopy: the switch waits for GO (m->pre
	 * wait_go); went once it came, its client answered at the switch
	 * (go_serial, 0 once answered); the rounds of a converged pre-copy
	 * paced by pace_ev meanwhile.
	 */
	int went;
	uint64_t go_serial, go_at;
	struct event *pace_ev;
	struct procref track;
	int track_unstopped; /* --track-unstopped: not frozen, only read */
	struct wptrack track_wp;
	uint64_t *track_at;
	int track_was_stopped;
	long long track_switches; /* once frozen; -1: unknown */
};

struct src_region {
	struct region r;
	uint64_t npages;
	uint64_t *data; /* page holds data (else: ZERO marker) */
	uint64_t *sent;
	/*
	 * export --precopy, from the freeze: the pages the frozen round
	 * sent. A resume's HAVE cannot vouch for them (the destination may
	 * hold an older copy), so they go again.
	 */
	uint64_t *final;
	int accepted;
	int named; /* r.name given by export --range ...=NAME */
	/*
	 * Shared hugetlb: its page cache, read with pread. A page this
	 * process does not map (dropped with MADV_DONTNEED, or touched only
	 * by a process it shares the mapping with) still holds bytes there
	 * that pagemap cannot show, and hugetlbfs reports no holes; a read
	 * through the mapping would allocate a huge page for every hole.
	 * Every page counts as data and all-zero ones go as ZERO markers.
	 */
	int cache_fd;
	/*
	 * Other shared memory (memfd, tmpfs, shared anonymous; a guest's RAM
	 * files): its backing file, which the bulk lane reads instead of
	 * the process once that is frozen for good (serve.c, shared_file()):
	 * the same bytes, without pinning each page of the mapping. -1 not
	 * opened yet, -2 not to be (another kind, or the open failed).
	 */
	int file_fd;
	/*
	 * A pre-copy of shared memory: an inotify watch of its file
	 * (watched; kfeat.punch_notify), read before each search for
	 * dropped pages (source_mark_dropped()), which a quiet watch makes
	 * needless once a first search was done (primed); after the freeze
	 * a change fails the migration (source_files_changed()).
	 */
	int watch_fd, watched, primed;
};

/*
 * A source that serves an image (image.c): the image's tables, checked at
 * open, and the last data runs checked: slot 0 the bulk stream's, the
 * others demand answers', the least recently used one reused first, so
 * that threads faulting in a few places do not evict each other's run.
 */
#define IMG_SLOTS 4
struct src_image {
	struct image img;
	int local; /* attach --image's: lanes from this daemon only */
	uint8_t *buf[IMG_SLOTS];
	size_t cap[IMG_SLOTS];
	uint64_t run[IMG_SLOTS];  /* the run each buffer holds, checked */
	uint64_t used[IMG_SLOTS]; /* when it was last read (tick) */
	uint64_t tick;
	/*
	 * The working set (version 2 images): the bulk stream sends its
	 * pages first, in order, from ws_next on; pages [ws_first, ws_first
	 * + ws_n) of it are in ws_buf, read in one go and checked.
	 */
	uint64_t ws_next, ws_first, ws_n;
	uint8_t *ws_buf;
	/*
	 * Reads ahead (image_ra.h), when io_uring may be used: the bulk
	 * stream's data runs from ra_next on and the working set's batches
	 * (starting at ws_batch[b]: a fixed grid, so that the batches read
	 * ahead are the ones asked for later) go through it instead of
	 * slot 0 and ws_buf. ra_last: the run the bulk stream read last.
	 */
	struct image_ra ra;
	uint64_t ra_next, ra_last;
	uint64_t *ws_batch, nws_batch;
};

/*
 * export --deferred: page requests that come before go wait here, at most
 * DEFER_QUEUE_MAX of them. A destination's threads each wait on one fault
 * (plus its own read-ahead), so more is a destination gone wrong: its
 * lanes are dropped, and a resume asks again for what it still waits on.
 */
#define DEFER_QUEUE_MAX 4096
/*
 * Why a tracker's PAGEMAP_SCAN says EPERM (PM_SCAN_CHECK_WPASYNC): a
 * tracked range holds a mapping the tracker never registered.
 */
#define SRC_REMAPPED \
	" (memory mapped again, or replaced, in its ranges since the export)"
struct defer_req {
	uint32_t region;
	uint32_t npages;
	uint64_t page;
};

/*
 * commit.c: the freeze check's timer; reads of the process made, and made
 * before the last check that passed (a COMMIT needs them equal); the last
 * check's cost. completing: the destination's COMPLETE came, nothing more
 * is read for the bulk stream; commit_seq: the COMMIT sent (0: none yet),
 * until its ACK.
 */
struct source_commit {
	struct event *check_ev, *commit_ev;
	uint64_t reads, reads_checked;
	uint64_t check_ns, checks, check_sum_ns, check_max_ns, check_cpu_ns;
	int completing;
	uint64_t commit_seq;
};

/* defer.c: export --deferred, and the bulk stream held after its go. */
struct source_defer {
	struct event *go_ev; /* what go leaves to the loop */
	/* the bulk stream held after go, until release or hold_ev */
	int bulk_held;
	struct event *hold_ev;
	int unclassified; /* pages taken as data at go, classified after it */
	int prepared;	  /* frozen and checked ahead of go (GO's prepare) */
	int go_pending;	  /* after_go() waits for the holds */
	/* before go, s->m->deferred is set: the requests queued meanwhile */
	struct defer_req *dq;
	size_t ndq;
};

/* persist.c: the state file, and what a restart needs of the export. */
struct source_persist {
	/*
	 * The state file is behind what the export is: save_ev writes it
	 * once the current callback has returned.
	 */
	struct event *save_ev;
	int dirty;
	struct range *ranges; /* as exported, for a restart */
	size_t nranges;
};

/*
 * One export. What every part reads is here; what one part keeps for
 * itself is in that part's struct (commit, defer, persist), so that a
 * part's state reads as a whole.
 */
struct source {
	struct migration *m;
	struct src_image *img; /* serving an image, not a process */
	struct src_region *regs;
	size_t nregs;
	struct conn *demand, *bulk;
	struct event *bulk_ev, *exit_ev, *ping_ev, *rate_ev;
	struct source_commit cm;
	struct source_defer df;
	struct source_persist ps;
	/* lanes.c: the destination holds the bulk stream (FEATURE_BULK_HOLD) */
	int peer_held;
	/* lanes.c: the destination echoes SWITCHOVER (FEATURE_SWITCHOVER_ACK) */
	int peer_acks;
	/*
	 * The process, as checked (procref.h): signals go through its pidfd,
	 * demand reads through its memory file (read_demand()).
	 */
	struct procref t;
	int keep_source;
	int was_stopped;    /* before the export froze it */
	long long switches; /* source_switch_count() once frozen; -1: unknown */
	struct wptrack wp;  /* writes since the export, where tracked */
	int resume_pending; /* the demand lane is a destination's resume */
	uint64_t win_start, win_bytes; /* --bulk-rate accounting */
	uint32_t cur_reg;
	uint64_t cur_page;
	/* After a fault: where the bulk stream goes first (serve.c). */
	uint32_t hint_reg;
	uint64_t hint_page, hint_left;
	uint64_t hint_from, hint_win; /* the window the last fault opened */
	uint8_t *scratch;	      /* SCRATCH_LEN bytes */
	struct precopy *pc; /* export --precopy (precopy.c); else NULL */
};

/* freeze.c */
/*
 * -1 (code, err set) when processes outside t share its memory (CLONE_VM):
 * a freeze of t would not stop their writes. Else 0.
 */
int source_refuse_sharers(const struct procref *t, uint32_t *code, char *err,
			  size_t errlen);
int source_freeze_checked(const struct procref *t,
			  const struct authz_caller *who, struct wptrack *serve,
			  int *was_stopped, uint32_t *code, char *err,
			  size_t errlen);
void source_thaw(const struct procref *t, int was_stopped);
/* Whether every thread of pid is stopped (a prepare's stop still holds). */
int source_still_stopped(pid_t pid);
/*
 * A pre-copy's freeze: the exported process stopped, by its prepare (if
 * that stop still holds: then nothing to do) or now. 0, or -1 with err.
 */
int source_stop_prepared(struct source *s, char *err, size_t errlen);
long long source_switch_count(pid_t pid, int *running);
void source_watch_freeze(struct source *);
long long source_settled_switches(pid_t pid);
int source_ran(pid_t pid, const struct wptrack *, long long switches, char *why,
	       size_t len);
int source_continued(const struct source *, char *why, size_t len);
long long source_watch(const struct procref *t, const struct src_region *regs,
		       size_t n, struct wptrack *wp, const char *what);

/*
 * owner.c: what a part calls up with, through the callbacks of the role's
 * top (export.c), set once at registration before any export is made.
 * start: the events of a live export; free: the export's memory (its
 * record's impl_free); fail, fail_ran, teardown: the ends of a migration
 * (lanes.c), why already formatted.
 */
struct source_owner {
	void (*start)(struct source *);
	void (*free)(struct migration *);
	void (*fail)(struct source *, const char *why);
	void (*fail_ran)(struct source *, const char *why);
	void (*teardown)(struct source *);
};
void source_owner_set(const struct source_owner *);
void source_start(struct source *);
void source_free(struct migration *);
void source_fail(struct source *, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/*
 * The process ran after pages were read from it: the migration fails
 * with ERR_SOURCE_RAN, the process is left stopped (it holds the newest
 * bytes), and a destination that comes later, even after a restart of
 * this daemon, is told the same.
 */
void source_fail_ran(struct source *, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void source_teardown(struct source *);

/* make.c */
struct source *source_new_bare(const char *id);
struct source *source_create(struct procref *t, const struct authz_caller *who,
			     const struct range *ranges, size_t nranges,
			     int keep, const char *id, uint32_t *code,
			     char *err, size_t errlen);
int source_build_regions(pid_t pid, const struct range *ranges, size_t nranges,
			 struct region **regs, uint32_t *code, char *err,
			 size_t errlen);
int64_t source_classify(pid_t pid, struct src_region *sr);
/*
 * The backing file of pid's region sr, opened through its mapping, if it
 * is still the one read at the export: a process that mapped another file
 * there since (same name, size and offset) would have the daemon read, or
 * watch, memory it no longer has. -1 with errno set (ESTALE: replaced).
 */
int source_open_same(pid_t pid, const struct src_region *sr);
/* freeze: the freeze's search, else a round's (watched files only). */
int64_t source_mark_dropped(struct source *, int freeze);
/*
 * A pre-copy of shared memory: each region's file watched for holes
 * punched (make.c). source_files_changed(): 1 (why says which) when one
 * of those files changed since the freeze's search, else 0.
 */
void source_watch_files(struct source *);
int source_files_changed(struct source *, char *why, size_t len);
/*
 * The export's record and its regions (taken over: regs is not kept);
 * classified unless deferred (then every page counts as data until go).
 * Takes t over; NULL with *code and err set, t given back.
 */
struct source *source_new(struct procref *t, const struct region *regs,
			  size_t nregs, const struct range *ranges,
			  size_t nranges, const char *id, int deferred,
			  uint32_t *code, char *err, size_t errlen);

/*
 * export_check.c: 0, or -1 with err (and *code) set. id: MIG_ID_LEN + 1
 * bytes, the ID asked for (empty when none).
 */
int source_export_check(const Uffdd__ExportRequest *req, struct range *ranges,
			char *id, uint32_t *code, char *err, size_t errlen);
int source_exported_already(pid_t pid, uint32_t *code, char *err,
			    size_t errlen);
int source_export_name_regions(struct source *s,
			       const Uffdd__ExportRequest *req, char *err,
			       size_t errlen);

/* defer.c */
struct source *source_create_deferred(struct procref *t,
				      const struct range *ranges,
				      size_t nranges, const char *id,
				      uint32_t *code, char *err, size_t errlen);
/* A page request before go: 0 when queued, -1 when the queue is full. */
int source_defer_request(struct source *, const Uffdd__PageRequest *);
/* The destination's lanes went down before go: its requests go too. */
void source_defer_lanes_down(struct source *);
void source_defer_free(struct source *);
void source_defer_unprepare(struct source *);
void source_defer_register(void);
void source_hold_changed(struct source *);

/* image.c */
/*
 * The answer to source_image_create(): the new source, or NULL with err
 * saying why (the image is refused, the daemon stops).
 */
typedef void (*source_image_cb)(void *arg, struct source *s, const char *err);
/*
 * A source for the image at fd (taken over), checked and opened off the
 * loop (worker.h); local: its lanes may come from this daemon only. done
 * is called on the loop, exactly once, maybe before this returns.
 */
void source_image_create(int fd, int local, source_image_cb done, void *arg);
/*
 * Bytes of pages [page, page + len / page size) of region sr into dst,
 * every data run's checksum checked first (demand: for a demand answer,
 * else the bulk stream). 0, or -1: the migration has failed.
 */
int source_image_read(struct source *, const struct src_region *sr,
		      uint64_t page, uint8_t *dst, uint64_t len, int demand);
/*
 * The next working-set page not sent yet, in order: its region, page and
 * checked bytes. 1, 0 when the working set is all sent, or -1: the
 * migration has failed.
 */
int source_image_ws_next(struct source *, uint32_t *ri, uint64_t *page,
			 const uint8_t **bytes);
int source_image_lane_ok(const struct source *, const struct conn *);
void source_image_free(struct source *);

/* serve.c */
void source_serve_start(struct source *);
void source_demand_request(struct source *, const Uffdd__PageRequest *);
void source_bulk_lane(struct source *, struct conn *);
void source_bulk_produce(struct source *);
void source_bulk_drain_at(struct source *, int empty);

/* precopy.c */
/* Whether s pre-copies and has not switched over yet. */
static inline int
source_precopy_running(const struct source *s)
{
	return s->pc != NULL && s->pc->phase != PC_DONE;
}
/*
 * track.c: checks that process t can be pre-copied in regions [regs, regs
 * + n) and write-protects them (wp), or refuses leaving it as it was.
 */
int source_precopy_arm(const struct procref *t, const struct region *regs,
		       size_t n, struct wptrack *wp, uint32_t *code, char *err,
		       size_t errlen);
void source_precopy_init(struct source *, struct wptrack *,
			 const Uffdd__ExportRequest *);
int source_precopy_synced(struct source *, const Uffdd__Ping *);
int source_precopy_hello(struct source *, struct conn *, const Uffdd__Hello *);
void source_precopy_lost(struct source *, const char *why);
void source_precopy_resumed(struct source *);
int source_precopy_vouched(const struct source *, const struct src_region *,
			   uint64_t page);
void source_precopy_untrack(struct source *);
void source_precopy_free(struct source *);
/* Pages [start, end) of the exported process were written. */
void source_precopy_mark(void *s, uint64_t start, uint64_t end);
/* Lets the frozen process (and a tracked one) go again. */
void source_precopy_thaw(struct source *);
/* The bulk stream sweeps every region again for the pages marked. */
void source_precopy_sweep(struct source *);
/*
 * The rounds are over: the process (and a tracked one) frozen, what was
 * written since the last scan marked, then sent, then SWITCHOVER.
 */
void source_precopy_freeze(struct source *);
/*
 * precopy_go.c: export --deferred --precopy: the rounds run, the switch
 * waits for GO.
 * source_precopy_go(): GO came from control client serial, answered once
 * the destination switched over (or the migration failed: _go_failed(),
 * which also ends the wait for a go). 0, or -1 when this export does not
 * wait for a go (any more).
 */
void source_precopy_wait_go(struct source *);
int source_precopy_go(struct source *, uint64_t serial);
void source_precopy_go_failed(struct source *, uint32_t code, const char *why);
/* The destination took the SWITCHOVER (its echo): go is answered. */
void source_precopy_switched(struct source *);
/*
 * GO --prepare: the exported process stopped now (checked again for the
 * caller who), the rounds going on for the writers it tracks; 0, or -1
 * (code, err) with the process as it was.
 */
int source_precopy_prepare(struct source *s, const struct authz_caller *who,
			   uint32_t *code, char *err, size_t errlen);
/*
 * Whether to ask the destination of hello h for SWITCHOVER's echo: a
 * deferred pre-copy answers its go once the destination switched.
 */
int source_precopy_wants_ack(const struct source *, const Uffdd__Hello *h);

/*
 * track.c: export --precopy --track. source_track_match() finds where
 * process tp maps the files regions [regs, regs + n) of pid map (at[i]);
 * source_track_arm() tracks tp's writes there (tp taken over); collect
 * (mark: the pre-copy's marking, in the export's addresses), freeze, thaw
 * and free are the pre-copy's steps for it (no-ops without one). freeze.c's source_continued() looks at it too.
 */
int source_track_match(pid_t pid, pid_t tp, const struct region *regs, size_t n,
		       uint64_t *at, uint32_t *code, char *err, size_t errlen);
int source_track_arm(struct source *, struct procref *tp, uint32_t *code,
		     char *err, size_t errlen);
int64_t source_track_collect(struct source *,
			     void (*mark)(void *s, uint64_t start,
					  uint64_t end));
int source_track_freeze(struct source *, char *err, size_t errlen);
void source_track_thaw(struct source *);
void source_track_free(struct precopy *);

/*
 * bypass.c: whether a pre-copy's process (own), or a tracked one
 * (tracked), maps a part of an exported file where no tracker covers it
 * (its stores there would not be seen): 1 with why filled, 0, or -1 with
 * errno set (its maps unreadable). Read at each round's end and in the
 * freeze checks (commit.c).
 */
int source_bypass_mapped(const struct source *, int own, int tracked, char *why,
			 size_t len);

/* lanes.c; the ends are the owner's (source_fail() and the others) */
void source_lanes_start(struct source *);
void source_lanes_fail(struct source *, const char *why);
void source_lanes_fail_ran(struct source *, const char *why);
void source_lanes_teardown(struct source *);

/* commit.c */
void source_check_start(struct source *);
void source_check_report(const struct source *);
int source_check(struct source *, char *why, size_t len);
int source_check_or_fail(struct source *);
void source_complete_requested(struct source *);
int source_commit_ack(struct source *, const Uffdd__Commit *);
void source_commit_resume(struct source *, struct conn *, const Uffdd__Hello *);
void source_commit_echo(struct conn *, const struct migration *,
			const Uffdd__Hello *);

/* persist.c */
void source_persist_start(struct source *);
int source_persist_now(struct source *);
void source_persist_dirty(struct source *);
void source_persist_remove(struct source *);
void source_persist_tombstone(struct source *);
void source_persist_told(struct migration *);
void source_persist_free(struct source *);

#endif

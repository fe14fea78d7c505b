/*
 * The destination's bulk installer (installer.c: the thread and its
 * gate; offload.c: bulk frames handed to it and taken back), shared by
 * the parts that read a uffd, free a destination or look at the bulk
 * stream's front.
 */
#ifndef UFFDD_DEST_INSTALLER_H
#define UFFDD_DEST_INSTALLER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/dest/internal.h"

/*
 * A bulk frame handed to the installing thread (installer.c): planned on
 * the loop as runs of missing pages and where they go; done counts, in
 * each run, the pages the thread put in (or found in) from its start.
 */
struct inst_run {
	uint64_t page, npages, addr, done;
};
struct inst_job {
	struct dest *d;
	void (*finish)(struct inst_job *); /* on the loop, once done */
	uint32_t region;
	uint64_t page, npages, ps;
	int uffd;
	uint8_t *buf; /* FRAME_DATA_MAX bytes */
	struct inst_run *runs;
	size_t nruns;
	uint64_t epoch;	   /* dest_installer_epoch() when planned */
	atomic_int cancel; /* dest_installer_forget() */
	int stopped;	   /* the thread stopped early: the loop goes on */
	struct inst_job *next;
};
/* Frames a bulk lane may have with the thread at once, each migration. */
#define INST_RING 4
/* A frame's pages, from v, into the root d and then its children. */
typedef void (*frame_in_fn)(struct dest *d, const Uffdd__PageData *pd,
			    const struct evbuffer_iovec *v, int nv);
/* d's jobs: [head, tail) are with the thread or to be finished. */
struct dest_ring {
	struct inst_job jobs[INST_RING];
	unsigned head, tail;
	int stalled;	   /* the bulk lane waits for a free job */
	frame_in_fn go_on; /* what a frame back from the thread goes on to */
};

/*
 * installer.c: the thread that installs bulk frames. quiet() before the
 * loop reads a uffd, resume() after (changed: the page map changed);
 * queue() once ready() said there is a thread; want(): a lane waits for a
 * job, so the next one done is said at once; reap(): the jobs done
 * finished on the loop (as a frame is handed over); forget(): before d's uffd
 * closes (drop: before d goes).
 */
void dest_installer_quiet(void);
void dest_installer_resume(int changed);
uint64_t dest_installer_epoch(void);
int dest_installer_ready(void);
void dest_installer_queue(struct inst_job *);
void dest_installer_want(void);
void dest_installer_reap(void);
void dest_installer_forget(struct dest *, int drop);
void dest_installer_ring_free(struct dest *);

/*
 * offload.c: a bulk frame to the installing thread; back from it, it goes
 * on to go_on. 0 (*why set when the lanes must go down); not taken: -1,
 * there is no thread, or no fault came lately and the thread has none of
 * d's frames (the frame goes in pieces on the loop), -2, every job is
 * taken (at once on the loop).
 */
int dest_offload(struct dest *, struct conn *, const struct frame_hdr *,
		 const Uffdd__PageData *, struct dst_region *,
		 frame_in_fn go_on, const char **why);

#endif

/*
 * Bulk frames handed to the installing thread (installer.c) and taken
 * back: each is read into a job of the migration's ring, planned (the
 * runs of its pages still missing, and where they go), installed by the
 * thread below the loop's priority, then finished here on the loop: the
 * pages that went in marked, and the frame handed on (pagedata.c: the
 * rest installed as any frame is, the children fed, the migration
 * completed). The bulk lane
 * reads the next frame into the next free job meanwhile, and waits while
 * every job is taken.
 */
#include "config.h"

#include <stdlib.h>

#include <event2/buffer.h>

#include "daemon/conn.h"
#include "daemon/dest/installer.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/migration.h"

/* The runs one frame may need: one a page at most. */
#define RUNS_MAX (FRAME_DATA_MAX / 4096)

static void finish(struct inst_job *);

/* d's ring, made at its first bulk frame. */
static struct dest_ring *
ring_of(struct dest *d)
{
	struct dest_ring *r = d->in.ring;

	if (r != NULL)
		return r;
	if ((r = calloc(1, sizeof(*r))) == NULL)
		fatal("bulk ring");
	for (int i = 0; i < INST_RING; i++) {
		struct inst_job *j = &r->jobs[i];

		if (posix_memalign((void **)&j->buf, 4096, FRAME_DATA_MAX) ||
		    (j->runs = calloc(RUNS_MAX, sizeof(*j->runs))) == NULL)
			fatal("bulk ring");
		j->d = d;
		j->finish = finish;
	}
	return d->in.ring = r;
}

/* j's plan: the runs of its pages still missing, and where they go. */
static void
plan(struct dst_region *dr, struct inst_job *j)
{
	uint64_t p = j->page, end = j->page + j->npages;

	j->nruns = 0;
	while (p < end) {
		uint64_t n = pagestate_present_run(&dr->ps, p, end - p);

		if ((p += n) >= end)
			break;
		n = pagestate_missing_run(&dr->ps, p, end - p);
		n = dest_addr_run(dr, p, n);
		j->runs[j->nruns++] = (struct inst_run){
			.page = p, .npages = n, .addr = dest_page_addr(dr, p)};
		p += n;
	}
	j->epoch = dest_installer_epoch();
}

/* Threads of a target waiting for pages that keep its installs on the loop. */
#define OFFLOAD_WAITERS 2

int
dest_offload(struct dest *d, struct conn *c, const struct frame_hdr *h,
	     const Uffdd__PageData *pd, struct dst_region *dr,
	     frame_in_fn go_on, const char **why)
{
	struct dest_ring *r;
	struct inst_job *j;

	*why = NULL;
	if (d->root != NULL || d->uffd < 0 || !dest_installer_ready())
		return -1;
	/*
	 * The thread is there so that faults never wait behind bulk work.
	 * With none read for DEMAND_RECENT_NS (nor demand traffic) and no
	 * frame of d's with it, the loop installs this one itself, in
	 * pieces: no wakeup across CPUs, the frame still in this CPU's
	 * cache (a GiB of untouched memory: 0.65 against 1.05 CPU-s at the
	 * destination; docs/benchmarks.md). So does the loop while
	 * OFFLOAD_WAITERS or more of the target's threads wait for pages:
	 * the installs are then what the target waits for, not work to
	 * keep below it (8 checking threads: 3.1x their idle migration with
	 * the thread below them, 2.0x without).
	 */
	if ((d->in.ring == NULL || d->in.ring->tail == d->in.ring->head) &&
	    (!loop_faults_recent() || d->fr.nwaiters >= OFFLOAD_WAITERS))
		return -1;
	r = ring_of(d);
	r->go_on = go_on;
	if (r->tail - r->head == INST_RING)
		return -2; /* a lane made since the ring filled */
	j = &r->jobs[r->tail % INST_RING];
	if (conn_take_data(c, j->buf, h->data_len) < 0) {
		*why = "short PAGE_DATA";
		return 0;
	}
	d->m->cnt.bytes += h->data_len;
	/* Reads in small steps while faults come (as bulk_take()). */
	conn_set_io_max(c, loop_demand_recent() ? DEMAND_STEP_BYTES : 0);
	loop_bulk();
	j->region = pd->region;
	j->page = pd->page;
	j->npages = pd->npages;
	j->ps = dr->r.page_size;
	j->uffd = d->uffd;
	plan(dr, j);
	d->in.front_reg = pd->region;
	d->in.front_page = pd->page + pd->npages;
	dest_stream_taken(d);
	r->tail++;
	d->in.offloaded++;
	dest_installer_queue(j);
	/* The lane's next frame is read straight into the next free job. */
	if (r->tail - r->head < INST_RING) {
		conn_set_sink(c, FRAME_PAGE_DATA,
			      r->jobs[r->tail % INST_RING].buf, FRAME_DATA_MAX);
	} else {
		/*
		 * Held, not only stalled: a stalled lane reads on into its
		 * input, and every frame after that is copied out of it
		 * instead of read into a job (0.3-1 CPU-s a GiB more).
		 */
		r->stalled = 1;
		/* No sink: each buffer is the thread's (finish() sets one). */
		conn_set_sink(c, 0, NULL, 0);
		dest_bulk_hold(d);
		dest_installer_want();
	}
	/*
	 * What the thread did meanwhile goes on (once this frame is taken:
	 * the installs may read the uffd and write to the lanes).
	 */
	dest_installer_reap();
	return 0;
}

/*
 * The pages of j the thread put in, marked present and recorded: those
 * still missing or asked for (one the target threw away since stays so).
 */
static void
mark_installed(struct dest *d, struct dst_region *dr, const struct inst_job *j,
	       const Uffdd__PageData *pd)
{
	uint64_t got = 0;

	for (size_t i = 0; i < j->nruns; i++) {
		const struct inst_run *run = &j->runs[i];
		uint64_t p = run->page, end = run->page + run->done;

		while (p < end) {
			uint64_t n = pagestate_missing_run(&dr->ps, p, end - p);

			if (n == 0) {
				p++;
				continue;
			}
			pagestate_set_present(&dr->ps, p, n);
			dest_record_mark(dr, p, n);
			got += n;
			p += n;
		}
	}
	dest_install_count(d, dr, pd, got);
}

/*
 * The thread is done with j: what it put in is marked, what it left (it
 * stopped early) goes in here, and the frame goes on as any other. The
 * lane, if it waited for a job, reads again.
 */
static void
finish(struct inst_job *j)
{
	struct dest *d = j->d;
	struct dest_ring *r = d->in.ring;
	struct dst_region *dr = dest_region_by_index(d, j->region);
	Uffdd__PageData pd = UFFDD__PAGE_DATA__INIT;
	struct evbuffer_iovec v = {j->buf, j->npages * j->ps};

	if (j != &r->jobs[r->head % INST_RING])
		fatalx("bulk ring: frame %llu finished out of turn",
		       (unsigned long long)j->page);
	pd.region = j->region;
	pd.page = j->page;
	pd.npages = (uint32_t)j->npages;
	if (dr != NULL && d->m->state == MIG_RUNNING) {
		mark_installed(d, dr, j, &pd);
		r->go_on(d, &pd, &v, 1);
	}
	r->head++;
	if (r->stalled) {
		r->stalled = 0;
		if (d->bulk != NULL)
			conn_set_sink(d->bulk, FRAME_PAGE_DATA,
				      r->jobs[r->tail % INST_RING].buf,
				      FRAME_DATA_MAX);
		dest_bulk_hold(d);
	}
}

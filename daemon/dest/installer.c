/*
 * The bulk installer: a thread of its own that puts bulk frames' pages
 * into their targets with UFFDIO_COPY, below the event loop's priority,
 * so that a fault never waits behind bulk work on the loop
 * (docs/multilane.md, "Installs from the channels"). The loop plans each
 * frame (which runs of pages are still missing, and where they go) and
 * hands it over; the thread installs it in pieces and hands it back,
 * where the loop marks what went in and does the rest (pagedata.c).
 *
 * The one thing the thread must never do is install a page the target
 * threw away (madvise, munmap, mremap) after the loop planned the frame:
 * once the loop has read such an event the kernel lets the target zap
 * the range, and a copy after the zap would leave the source's bytes
 * where the target expects zeros. So the loop closes a gate before each
 * read of a userfaultfd and waits until no piece is being installed; a
 * piece begins only with the gate open and the plan still current (the
 * epoch the loop moves on each such event). The busy flag and the gate
 * are the two halves of Dekker's rule: each side stores its own, then
 * loads the other's, both sequentially consistent.
 *
 * It calls nothing of the destination's: a frame's end goes back to the
 * loop through the job's own callback.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/conffile.h"
#include "daemon/dest.h"
#include "daemon/dest/installer.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/uffd.h"

/*
 * The most one piece installs: a fault that comes while the thread is in
 * one waits for its end to be read (15-20 us for 64 KiB).
 */
#define PIECE_BYTES (64u << 10)

static struct {
	pthread_t thread;
	int started, failed;
	pthread_mutex_t mu;
	pthread_cond_t work_cv; /* a job queued, stop */
	pthread_cond_t gate_cv; /* the gate opened, or a job cancelled */
	pthread_cond_t idle_cv; /* a piece or a job ended */
	struct inst_job *queue, **queue_end, *done, **done_end, *cur;
	int stop;
	int wanted; /* a lane waits for a job: say each one done */
	int unsaid; /* jobs done the loop was not told of */
	int efd;
	struct event *done_ev;
	/* The loop's reads of a uffd in progress (nested: a depth). */
	int quiet_depth;
	atomic_int gate, busy;
	atomic_int at_gate; /* the thread waits for the gate to open */
	atomic_uint_fast64_t epoch;
	int nice; /* conf.installer_nice when it started */
	atomic_int nice_errno;
} in = {
	.mu = PTHREAD_MUTEX_INITIALIZER,
	.work_cv = PTHREAD_COND_INITIALIZER,
	.gate_cv = PTHREAD_COND_INITIALIZER,
	.idle_cv = PTHREAD_COND_INITIALIZER,
	.efd = -1,
};

/* The loop is about to read a uffd: no piece goes in until it is done. */
void
dest_installer_quiet(void)
{
	if (in.quiet_depth++ > 0)
		return;
	atomic_store(&in.gate, 1);
	if (!in.started || !atomic_load(&in.busy))
		return;
	pthread_mutex_lock(&in.mu);
	while (atomic_load(&in.busy))
		pthread_cond_wait(&in.idle_cv, &in.mu);
	pthread_mutex_unlock(&in.mu);
}

/*
 * The loop read what it wanted; changed: an event it read changed the
 * page map, so every frame planned before is planned again.
 */
void
dest_installer_resume(int changed)
{
	if (changed)
		atomic_fetch_add(&in.epoch, 1);
	if (--in.quiet_depth > 0)
		return;
	atomic_store(&in.gate, 0);
	/*
	 * Only a thread that waits at the gate is woken (not one idle for
	 * want of a job, at every read of a uffd). at_gate and the gate are
	 * Dekker's pair: a thread that set at_gate and then saw the gate
	 * closed is seen here, and waits under the mutex until woken.
	 */
	if (!atomic_load(&in.at_gate))
		return;
	pthread_mutex_lock(&in.mu);
	pthread_cond_broadcast(&in.gate_cv);
	pthread_mutex_unlock(&in.mu);
}

uint64_t
dest_installer_epoch(void)
{
	return atomic_load(&in.epoch);
}

/* The thread's piece is over: a loop that waits for it goes on. */
static void
piece_ends(void)
{
	atomic_store(&in.busy, 0);
	if (!atomic_load(&in.gate))
		return;
	pthread_mutex_lock(&in.mu);
	pthread_cond_broadcast(&in.idle_cv);
	pthread_mutex_unlock(&in.mu);
}

/*
 * Whether j's next piece may go in: the gate open and j's plan current.
 * While the loop reads, waits for it. 0: the loop does the rest of j.
 */
static int
piece_begins(struct inst_job *j)
{
	for (;;) {
		atomic_store(&in.busy, 1);
		if (atomic_load(&j->cancel))
			break;
		/*
		 * The gate first, then the epoch: the loop moves the epoch
		 * before it opens the gate, so a gate seen open comes with
		 * the epoch of every event read before.
		 */
		if (!atomic_load(&in.gate)) {
			if (atomic_load(&in.epoch) == j->epoch)
				return 1;
			break;
		}
		piece_ends();
		pthread_mutex_lock(&in.mu);
		atomic_store(&in.at_gate, 1);
		while (atomic_load(&in.gate) && !atomic_load(&j->cancel))
			pthread_cond_wait(&in.gate_cv, &in.mu);
		atomic_store(&in.at_gate, 0);
		pthread_mutex_unlock(&in.mu);
	}
	piece_ends();
	return 0;
}

/*
 * One run of j's plan, piece by piece: r->done counts the pages that went
 * in, or were found in (EEXIST: whoever waits on them is woken). 0, or -1
 * where the thread stops and the loop goes on (an event to read first,
 * the target gone, a mapping split: the loop's installer says which).
 */
static int
install_run(struct inst_job *j, struct inst_run *r)
{
	uint64_t ps = j->ps, max = PIECE_BYTES / ps ? PIECE_BYTES / ps : 1;

	while (r->done < r->npages) {
		uint64_t n =
			r->npages - r->done < max ? r->npages - r->done : max;
		uint64_t at = r->addr + r->done * ps, got = 0;
		const uint8_t *src =
			j->buf + (r->page - j->page + r->done) * ps;
		enum uffd_res res;

		if (!piece_begins(j))
			return -1;
		res = uffd_copy(j->uffd, at, src, n * ps, 0, &got);
		r->done += got / ps;
		if (res == UFFD_EXISTS) {
			uffd_wake(j->uffd, r->addr + r->done * ps, ps);
			r->done++;
		}
		piece_ends();
		if (res != UFFD_OK && res != UFFD_EXISTS)
			return -1;
	}
	return 0;
}

/*
 * Lowers the thread's priority, once: it never needs it back. What went
 * wrong is said by the loop (done_cb()): the log is the loop's.
 */
static void
lower_priority(void)
{
	int now;

	errno = 0;
	now = getpriority(PRIO_PROCESS, 0);
	if (now == -1 && errno != 0)
		atomic_store(&in.nice_errno, errno);
	else if (in.nice > 0 && setpriority(PRIO_PROCESS, 0, now + in.nice) < 0)
		atomic_store(&in.nice_errno, errno);
}

/*
 * Tells the loop there are jobs done (done_cb()). Only EAGAIN can fail
 * it, at a count of 2^64-2.
 */
static void
say_done(void)
{
	uint64_t one = 1;

	in.wanted = in.unsaid = 0;
	(void)!write(in.efd, &one, sizeof(one));
}

/*
 * Waits for a job, or the stop. Jobs done that the loop was not told of
 * are told once none comes for SAY_AFTER_NS: while frames stream in the
 * loop takes them as it hands the next one over (dest_installer_reap()),
 * and a wakeup across CPUs for each one cost 0.2-0.3 CPU-s a GiB.
 */
#define SAY_AFTER_NS 2000000L

static void
wait_work(void)
{
	while (!in.stop && in.queue == NULL) {
		struct timespec ts;

		if (!in.unsaid) {
			pthread_cond_wait(&in.work_cv, &in.mu);
			continue;
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += SAY_AFTER_NS;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		if (pthread_cond_timedwait(&in.work_cv, &in.mu, &ts) ==
			    ETIMEDOUT &&
		    in.unsaid && in.queue == NULL)
			say_done();
	}
}

static void *
thread_main(void *arg)
{
	(void)arg;
	lower_priority();
	pthread_mutex_lock(&in.mu);
	for (;;) {
		struct inst_job *j;

		wait_work();
		if (in.stop)
			break;
		j = in.cur = in.queue;
		if ((in.queue = j->next) == NULL)
			in.queue_end = &in.queue;
		pthread_mutex_unlock(&in.mu);
		j->stopped = 0;
		for (size_t i = 0; i < j->nruns && !j->stopped; i++)
			j->stopped = install_run(j, &j->runs[i]) < 0;
		pthread_mutex_lock(&in.mu);
		in.cur = NULL;
		j->next = NULL;
		*in.done_end = j;
		in.done_end = &j->next;
		pthread_cond_broadcast(&in.idle_cv);
		if (in.wanted)
			say_done();
		else
			in.unsaid = 1;
	}
	pthread_mutex_unlock(&in.mu);
	return NULL;
}

/* Frames the thread is done with: their ends, on the loop, in order. */
void
dest_installer_reap(void)
{
	if (!in.started)
		return;
	if ((errno = atomic_exchange(&in.nice_errno, 0)) != 0)
		log_warn("bulk installer: lowering its priority by %d "
			 "(it runs at the loop's)",
			 in.nice);
	for (;;) {
		struct inst_job *j;

		pthread_mutex_lock(&in.mu);
		if ((j = in.done) != NULL && (in.done = j->next) == NULL)
			in.done_end = &in.done;
		if (j == NULL)
			in.unsaid = 0;
		pthread_mutex_unlock(&in.mu);
		if (j == NULL)
			break;
		j->next = NULL;
		j->finish(j);
	}
}

static void
done_cb(evutil_socket_t fd, short ev, void *arg)
{
	uint64_t v;

	(void)fd, (void)ev, (void)arg;
	if (read(in.efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		log_warn("bulk installer: eventfd");
	dest_installer_reap();
}

/* The thread, made at the first frame. 0, or -1: the loop installs. */
static int
start(void)
{
	if (in.started || in.failed)
		return in.started ? 0 : -1;
	in.queue_end = &in.queue;
	in.done_end = &in.done;
	in.nice = conf.installer_nice;
	in.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (in.efd >= 0)
		in.done_ev = event_new(base, in.efd, EV_READ | EV_PERSIST,
				       done_cb, NULL);
	if (in.done_ev == NULL || event_priority_set(in.done_ev, PRIO_BULK) ||
	    event_add(in.done_ev, NULL) ||
	    pthread_create(&in.thread, NULL, thread_main, NULL) != 0) {
		log_warn("bulk installer: no thread; bulk frames go in on "
			 "the event loop");
		in.failed = 1;
		return -1;
	}
	in.started = 1;
	log_info("bulk installer: a thread %d nice levels below the event "
		 "loop",
		 in.nice);
	return 0;
}

/* Whether bulk frames go to the thread (made at the first ask). */
int
dest_installer_ready(void)
{
	return conf.installer && start() == 0;
}

/*
 * Hands job j (planned on the loop: its runs, epoch, buffer) to the
 * thread, once dest_installer_ready() said yes; j->finish(j) is called on
 * the loop once it is done with it.
 */
void
dest_installer_queue(struct inst_job *j)
{
	atomic_store(&j->cancel, 0);
	pthread_mutex_lock(&in.mu);
	j->next = NULL;
	*in.queue_end = j;
	in.queue_end = &j->next;
	pthread_cond_broadcast(&in.work_cv);
	pthread_mutex_unlock(&in.mu);
}

/*
 * A bulk lane waits for a free job: the next frame the thread is done
 * with is said at once, not when it goes idle.
 */
void
dest_installer_want(void)
{
	pthread_mutex_lock(&in.mu);
	if (in.done != NULL)
		say_done();
	else
		in.wanted = 1;
	pthread_mutex_unlock(&in.mu);
}

/* Takes every job of d off the list at *head; fixes *end. */
static void
unlink_dest(struct inst_job **head, struct inst_job ***end,
	    const struct dest *d)
{
	struct inst_job **p = head;

	while (*p != NULL) {
		if ((*p)->d == d)
			*p = (*p)->next;
		else
			p = &(*p)->next;
	}
	*end = p;
}

/*
 * d's uffd is about to close: nothing of d is installed from here on,
 * and a piece of d's in progress is waited for. Its frames are still
 * finished on the loop (what a forked child lacks goes to it from
 * there), unless drop: d is about to go, and they are forgotten.
 */
void
dest_installer_forget(struct dest *d, int drop)
{
	if (!in.started)
		return;
	pthread_mutex_lock(&in.mu);
	for (struct inst_job *j = in.queue; j != NULL; j = j->next)
		if (j->d == d)
			atomic_store(&j->cancel, 1);
	if (in.cur != NULL && in.cur->d == d) {
		atomic_store(&in.cur->cancel, 1);
		pthread_cond_broadcast(&in.gate_cv);
		while (in.cur != NULL && in.cur->d == d)
			pthread_cond_wait(&in.idle_cv, &in.mu);
	}
	if (drop) {
		unlink_dest(&in.queue, &in.queue_end, d);
		unlink_dest(&in.done, &in.done_end, d);
	}
	pthread_mutex_unlock(&in.mu);
}

/* d's ring (offload.c made it) goes, with d: its frames forgotten. */
void
dest_installer_ring_free(struct dest *d)
{
	struct dest_ring *r = d->in.ring;

	if (r == NULL)
		return;
	dest_installer_forget(d, 1);
	for (int i = 0; i < INST_RING; i++) {
		free(r->jobs[i].buf);
		free(r->jobs[i].runs);
	}
	free(r);
	d->in.ring = NULL;
}

/* At exit, every migration freed: the thread stops and is joined. */
void
dest_installer_stop(void)
{
	if (!in.started)
		return;
	pthread_mutex_lock(&in.mu);
	in.stop = 1;
	pthread_cond_broadcast(&in.work_cv);
	pthread_mutex_unlock(&in.mu);
	pthread_join(in.thread, NULL);
	event_free(in.done_ev);
	close(in.efd);
	in.started = 0;
	in.failed = 1;
}

/*
 * Jobs on threads of their own (worker.h). Each job gets a thread while it
 * runs; its thread, when run returns, writes the job's address into a
 * pipe, and an event on the loop's base reads it, joins the thread and
 * calls done. libevent is never touched from a job's thread: event_active
 * from another thread is not safe in a base made without evthread.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/resource.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/worker.h"

struct job {
	TAILQ_ENTRY(job) link;
	pthread_t thread;
	worker_run_fn run;
	worker_done_fn done;
	void *arg;
};

TAILQ_HEAD(jobs, job);
static struct jobs waiting = TAILQ_HEAD_INITIALIZER(waiting);
static struct jobs running = TAILQ_HEAD_INITIALIZER(running);
static int nrunning;
/* Jobs' ends, written by their threads, read on the loop. */
static int ends[2] = {-1, -1};
static struct event *ends_ev;
static atomic_int stopping;
static int stopped_all;

/*
 * A job must not slow the loop by taking the CPU it would run on either:
 * a hostile file's job is as long as the file. SCHED_IDLE: the least
 * weight there is, and the scheduler preempts it for any other thread
 * that wakes, at once, where a nice 19 thread may first finish its time
 * slice. On an idle CPU the job runs at full speed. Where SCHED_IDLE is
 * refused, nice 19 (Linux: a thread's nice value is its own).
 */
static void
job_background(void)
{
	struct sched_param sp = {0};

	if (sched_setscheduler(0, SCHED_IDLE, &sp) < 0)
		(void)setpriority(PRIO_PROCESS, (id_t)gettid(), 19);
}

static void *
job_main(void *arg)
{
	struct job *j = arg;

	job_background();
	j->run(j->arg, &stopping);
	/* A pointer is written whole: a pipe's writes up to PIPE_BUF are. */
	while (write(ends[1], &j, sizeof(j)) < 0 && errno == EINTR)
		;
	return NULL;
}

/*
 * Its thread, with every signal blocked: signals are the loop's (its
 * handlers, SIGCHLD for the processes it waits on), never a job's.
 */
static void
job_run(struct job *j)
{
	static char why[96];
	sigset_t all, old;
	int rc;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&j->thread, NULL, job_main, j);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		log_warnx("worker: no thread for a job: %s", strerror(rc));
		snprintf(why, sizeof(why),
			 "no thread to check it (%s); try again", strerror(rc));
		j->done(j->arg, why);
		free(j);
		return;
	}
	TAILQ_INSERT_TAIL(&running, j, link);
	nrunning++;
}

/* Jobs waiting their turn, started while there is room. */
static void
run_waiting(void)
{
	struct job *j;

	while (nrunning < WORKERS_MAX && (j = TAILQ_FIRST(&waiting)) != NULL) {
		TAILQ_REMOVE(&waiting, j, link);
		job_run(j);
	}
}

/* A running job's end: its thread joined (it is past its run), done. */
static void
job_end(struct job *j, const char *why)
{
	pthread_join(j->thread, NULL);
	TAILQ_REMOVE(&running, j, link);
	nrunning--;
	j->done(j->arg, why);
	free(j);
}

static void
ends_cb(evutil_socket_t fd, short what, void *arg)
{
	struct job *j;

	(void)what;
	(void)arg;
	while (read(fd, &j, sizeof(j)) == (ssize_t)sizeof(j))
		job_end(j, NULL);
	run_waiting();
}

/* The pipe and its event, made with the first job. */
static void
ends_open(void)
{
	if (ends_ev != NULL)
		return;
	if (pipe2(ends, O_CLOEXEC) < 0)
		fatal("worker: pipe");
	/* Read until empty on the loop; the threads' end may block. */
	if (fcntl(ends[0], F_SETFL, O_NONBLOCK) < 0)
		fatal("worker: fcntl");
	ends_ev = event_new(base, ends[0], EV_READ | EV_PERSIST, ends_cb, NULL);
	if (ends_ev == NULL)
		fatalx("event_new");
	event_priority_set(ends_ev, PRIO_CONTROL);
	event_add(ends_ev, NULL);
}

void
worker_start(worker_run_fn run, worker_done_fn done, void *arg)
{
	struct job *j;

	if (stopped_all) {
		done(arg, "the daemon stops");
		return;
	}
	ends_open();
	j = xcalloc(1, sizeof(*j));
	j->run = run;
	j->done = done;
	j->arg = arg;
	TAILQ_INSERT_TAIL(&waiting, j, link);
	run_waiting();
}

void
worker_stop_all(void)
{
	struct job *j;

	stopped_all = 1;
	atomic_store(&stopping, 1);
	while ((j = TAILQ_FIRST(&waiting)) != NULL) {
		TAILQ_REMOVE(&waiting, j, link);
		j->done(j->arg, "the daemon stops");
		free(j);
	}
	/* Ends still in the pipe are dropped with it: the list has them. */
	while ((j = TAILQ_FIRST(&running)) != NULL)
		job_end(j, "the daemon stops");
	if (ends_ev != NULL) {
		event_free(ends_ev);
		ends_ev = NULL;
		close(ends[0]);
		close(ends[1]);
		ends[0] = ends[1] = -1;
	}
}

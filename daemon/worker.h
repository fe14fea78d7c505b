/*
 * Work that would hold the event loop too long, run on a thread of its own
 * (docs/design.md, "The event loop and its priorities"): an image's tables
 * read and hashed. The daemon is otherwise one thread: a job's run touches
 * nothing but its argument, and its end is handed back to the loop, where
 * done is called as any other callback.
 */
#ifndef UFFDD_WORKER_H
#define UFFDD_WORKER_H

#include <stdatomic.h>

/* At most this many jobs run at once; the others wait their turn. */
#define WORKERS_MAX 2

/*
 * run: on the job's thread. *stop is set when the daemon exits: run
 * should return soon after it is (image_open_stoppable() does).
 */
typedef void (*worker_run_fn)(void *arg, const atomic_int *stop);
/*
 * done: on the loop, exactly once: once run has returned (why NULL), or
 * with why saying what happened instead (the daemon stops, no thread could
 * be made); run may then not have run, or have run to its end.
 */
typedef void (*worker_done_fn)(void *arg, const char *why);

/*
 * Runs a job: at once when fewer than WORKERS_MAX run, else in turn. When
 * the daemon stops already, done is called before this returns.
 */
void worker_start(worker_run_fn run, worker_done_fn done, void *arg);
/* At exit: every job told to stop, its thread joined, its done called. */
void worker_stop_all(void);

#endif

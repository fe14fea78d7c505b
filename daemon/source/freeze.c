/*
 * The frozen process: stopped before its pages are classified, checked
 * again once it can change no more, and watched from then on, so that a
 * run of it (a SIGCONT from elsewhere) is noticed.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/authz.h"
#include "daemon/compat.h"
#include "daemon/log.h"
#include "daemon/migration.h"
#include "daemon/proc.h"
#include "daemon/procfile.h"
#include "daemon/procref.h"
#include "daemon/source/internal.h"
#include "daemon/wplinger.h"

/*
 * Whether every thread of pid is in a stopped state (T or t), or dead
 * (Z, X: it runs no more, and its exit is reported on its own).
 */
static int
all_stopped(pid_t pid)
{
	char path[320], buf[512];
	struct dirent *e;
	int stopped = 1;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	if ((d = opendir(path)) == NULL)
		return -1;
	while (stopped && (e = readdir(d)) != NULL) {
		char *p;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", (int)pid,
			 e->d_name);
		if ((f = fopen(path, "re")) == NULL)
			continue;
		if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')) &&
		    p[1] == ' ' && strchr("TtZX", p[2]) == NULL)
			stopped = 0;
		fclose(f);
	}
	closedir(d);
	return stopped;
}

/*
 * How many times the threads of pid have been switched out, in all. A
 * stopped thread never is, so a count that moves after the freeze means
 * the process ran, if only for a moment: a SIGCONT and a SIGSTOP between
 * two looks at the threads' states leave nothing else behind. -1 when unknown,
 * or when a thread is dying (its exit is reported on its own). *running
 * (when not NULL) is set when a thread it read is not stopped.
 */
long long
source_switch_count(pid_t pid, int *running)
{
	char path[320], line[256];
	struct dirent *e;
	long long n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	if ((d = opendir(path)) == NULL)
		return -1;
	while (n >= 0 && (e = readdir(d)) != NULL) {
		long long v;
		char st;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/status",
			 (int)pid, e->d_name);
		if ((f = fopen(path, "re")) == NULL) {
			n = -1;
			break;
		}
		while (n >= 0 && fgets(line, sizeof(line), f) != NULL) {
			if (sscanf(line, "State: %c", &st) == 1) {
				if (strchr("ZX", st) != NULL)
					n = -1;
				else if (strchr("Tt", st) == NULL && running)
					*running = 1;
			} else if (sscanf(line, "voluntary_ctxt_switches: %lld",
					  &v) == 1 ||
				   sscanf(line,
					  "nonvoluntary_ctxt_switches: %lld",
					  &v) == 1)
				n += v;
		}
		fclose(f);
	}
	closedir(d);
	return n;
}

/*
 * Waits until every thread of pid is stopped (all_stopped()), polling:
 * short (one scheduling round), bounded to 2 s. 0, or -1 with errno set.
 * A pre-copy's sync tracker (serve) is answered meanwhile: a thread that
 * waits on a write fault in a system call stops only once it is answered.
 */
static int
wait_stopped(pid_t pid, struct wptrack *serve)
{
	struct timespec ts = {0, 200000};

	for (int i = 0; i < 10000; i++) {
		int st = all_stopped(pid);

		if (st != 0)
			return st < 0 ? -1 : 0;
		if (serve != NULL)
			wptrack_serve(serve);
		nanosleep(&ts, NULL);
	}
	errno = ETIMEDOUT;
	return -1;
}

/*
 * SIGSTOP and wait until every thread has stopped, so that no page changes
 * after it was classified. The wait is the one place the source blocks the
 * loop.
 */
static int
freeze(const struct procref *t, struct wptrack *serve)
{
	if (procref_signal(t, SIGSTOP) < 0)
		return -1;
	if (wait_stopped(t->pid, serve) == 0)
		return 0;
	if (errno == ETIMEDOUT)
		procref_signal(t, SIGCONT);
	return -1;
}

/* Lets a process we froze go again, unless it was stopped before. */
void
source_thaw(const struct procref *t, int was_stopped)
{
	if (!was_stopped)
		procref_signal(t, SIGCONT);
}

int
source_still_stopped(pid_t pid)
{
	return all_stopped(pid) == 1;
}

int
source_stop_prepared(struct source *s, char *err, size_t errlen)
{
	int prepared = s->df.prepared;
	uint32_t code;

	s->df.prepared = 0; /* the freeze's from here, thawed as its own */
	if (prepared && source_still_stopped(s->t.pid))
		return 0;
	return source_freeze_checked(&s->t, NULL, &s->wp, &s->was_stopped,
				     &code, err, errlen);
}

int
source_refuse_sharers(const struct procref *t, uint32_t *code, char *err,
		      size_t errlen)
{
	char sharers[192];

	/* Stopping it would not stop these from writing its memory. */
	if (proc_sharers(t->pid, PROC_SHARE_VM, sharers, sizeof(sharers)) <= 0)
		return 0;
	*code = ERR_INVALID;
	snprintf(err, errlen,
		 "process %d shares its memory with %.120s, which stopping "
		 "it does not stop: export refused",
		 (int)t->pid, sharers);
	return -1;
}

/*
 * Freezes t and checks again, now that it can change no more, that it is
 * the process that was checked and that the caller who (NULL: a restore)
 * may still export it: between the first check and the freeze it could
 * have run a setuid program, or exited and left its pid to another.
 */
int
source_freeze_checked(const struct procref *t, const struct authz_caller *who,
		      struct wptrack *serve, int *was_stopped, uint32_t *code,
		      char *err, size_t errlen)
{
	if (source_refuse_sharers(t, code, err, errlen) < 0)
		return -1;
	*was_stopped = all_stopped(t->pid) == 1;
	if (freeze(t, serve) < 0) {
		*code = ERR_NO_PROCESS;
		snprintf(err, errlen, "cannot stop process %d: %s", (int)t->pid,
			 strerror(errno));
		return -1;
	}
	if (who != NULL ? authz_may_ptrace(who, t, code, err, errlen) == 0
			: procref_same(t))
		return 0;
	if (who == NULL) {
		*code = ERR_NO_PROCESS;
		snprintf(err, errlen, "process %d: no longer the process named",
			 (int)t->pid);
	}
	source_thaw(t, *was_stopped);
	return -1;
}

/*
 * Whether pid is dying: gone, a zombie, or with a SIGKILL pending for its
 * thread group. A stopped process that is killed wakes, and its threads
 * switch, on their way out: that is no run, and its exit is reported on
 * its own.
 */
static int
dying(pid_t pid)
{
	char path[64], line[256];
	unsigned long long mask;
	int dead = 0;
	char st;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if ((f = fopen(path, "re")) == NULL)
		return 1;
	while (!dead && fgets(line, sizeof(line), f) != NULL) {
		if (sscanf(line, "State: %c", &st) == 1)
			dead = strchr("ZX", st) != NULL;
		else if (sscanf(line, "ShdPnd: %llx", &mask) == 1)
			dead = (mask >> (SIGKILL - 1) & 1) != 0;
	}
	fclose(f);
	return dead;
}

/* The run found by a page it wrote: 1, why naming the page. */
static int
wrote(pid_t pid, uint64_t addr, char *why, size_t len)
{
	snprintf(why, len,
		 "source process %d ran after the export (continued from "
		 "elsewhere) and wrote to its memory at 0x%llx",
		 (int)pid, (unsigned long long)addr);
	return 1;
}

/*
 * How long a process whose threads switched is watched for its death
 * before the switches count as a run: a killed one shows its SIGKILL
 * pending, or its end, within microseconds of waking.
 */
#define DYING_LOOKS 20
#define DYING_LOOK_NS 1000000

/*
 * The process must stay as it was frozen: its pages were classified then,
 * and a page it writes after it went is lost to the destination. Nothing
 * tells us of a SIGCONT from elsewhere; look (source_check(), and the
 * snapshot's writer) for a page written since the watch began
 * (wptrack.h), where the kernel can tell, and for a context switch of its
 * threads since the count switches, which a stopped thread never makes.
 * 1 and *why says which; 0 when it did not run; -1 when it is dying (it
 * did not run before its death that anything can still tell).
 */
int
source_ran(pid_t pid, const struct wptrack *wp, long long switches, char *why,
	   size_t len)
{
	struct timespec ts = {0, DYING_LOOK_NS};
	int running = 0;
	long long n;
	uint64_t addr;

	n = source_switch_count(pid, &running);
	if (wptrack_written(wp, &addr) == 1)
		return wrote(pid, addr, why, len);
	/* Gone or dying (its exit is reported on its own), or no count. */
	if (!running && (n < 0 || switches < 0 || n == switches))
		return 0;
	for (int i = 0; i < DYING_LOOKS; i++) {
		if (dying(pid))
			return -1;
		nanosleep(&ts, NULL);
	}
	/* Running, it may have written since: the page names it better. */
	if (wptrack_written(wp, &addr) == 1)
		return wrote(pid, addr, why, len);
	snprintf(why, len,
		 "source process %d was continued (SIGCONT from elsewhere) "
		 "after the export",
		 (int)pid);
	return 1;
}

/*
 * A tracked process (--track, track.c) writes the memory too: once the
 * export is frozen, a run of it (one --track stopped) or a write by it
 * (--track-unstopped) is a run of the source. Its exit is not: it writes
 * nothing more. An unstopped one runs, so its tracker is all that vouches
 * for it: a tracker that cannot tell (the process mapped its file again
 * over the tracked range, which the new mapping's writes then bypass:
 * PAGEMAP_SCAN refuses a range no longer registered) is a run too.
 */
static int
tracked_ran(const struct source *s, char *why, size_t len)
{
	const struct precopy *pc = s->pc;
	uint64_t addr;
	int w;

	if (pc == NULL || pc->track.pid <= 0 ||
	    (pc->phase != PC_FINAL && pc->phase != PC_DONE))
		return 0;
	if (!pc->track_unstopped)
		return source_ran(pc->track.pid, &pc->track_wp,
				  pc->track_switches, why, len) > 0;
	if ((w = wptrack_written(&pc->track_wp, &addr)) == 0 ||
	    (w < 0 && !procref_same(&pc->track)))
		return 0;
	if (w < 0)
		snprintf(why, len,
			 "tracked process %d changed its mapping of the "
			 "exported memory after the freeze (mapped again, "
			 "or replaced: %s): its writes there cannot be told",
			 (int)pc->track.pid, strerror(errno));
	else
		snprintf(why, len,
			 "tracked process %d wrote to the exported memory (at "
			 "0x%llx in its mapping) after the freeze",
			 (int)pc->track.pid, (unsigned long long)addr);
	return 1;
}

/* Whether the export's process ran since it was frozen (source_ran()). */
int
source_continued(const struct source *s, char *why, size_t len)
{
	int ran;

	if (s->img)
		return 0; /* no process: nothing can run */
	ran = source_ran(s->m->pid, &s->wp, s->switches, why, len);
	return ran != 0 ? ran : tracked_ran(s, why, len);
}

/*
 * The threads' context switches once they are all stopped and off the
 * CPU. A thread that an injection let go runs once more to stop again
 * (its group stop is reinstated), so wait for that too, and take the
 * count when two looks agree. -1 when unknown.
 */
long long
source_settled_switches(pid_t pid)
{
	long long n = -1, was;

	for (int i = 0; i < 50; i++) {
		if (wait_stopped(pid, NULL) < 0)
			return -1;
		proc_off_cpu(pid);
		was = n;
		n = source_switch_count(pid, NULL);
		if (n < 0 || n == was)
			break;
	}
	return n;
}

/*
 * Write-protecting puts a marker in every page table entry of the ranges,
 * populated or not: a sparse mapping of 169 GB took the daemon over 20 s
 * (found by fuzz_state). Beyond this much, runs are found by context
 * switches alone, as on a kernel without the tracker.
 */
#define WATCH_WP_MAX (32ull << 30)

/*
 * From now on any run of the frozen process t is noticed (source_ran()):
 * regions [regs, regs + n) are write-protected into wp where the kernel
 * can track writes, and the threads' context switches are counted from
 * here (returned; -1: unknown). what names the export or snapshot in the
 * logs.
 */
long long
source_watch(const struct procref *t, const struct src_region *regs, size_t n,
	     struct wptrack *wp, const char *what)
{
	struct range *rs = xcalloc(n ? n : 1, sizeof(*rs));
	uint64_t total = 0;
	char why[256];

	for (size_t i = 0; i < n; i++) {
		rs[i].start = regs[i].r.start;
		rs[i].end = regs[i].r.start + regs[i].r.length;
		total += regs[i].r.length;
	}
	if (total > WATCH_WP_MAX)
		log_info("%s: %llu GiB, more than the write tracker takes "
			 "(%llu GiB): a run of process %d is found by its "
			 "context switches",
			 what, (unsigned long long)(total >> 30),
			 WATCH_WP_MAX >> 30, (int)t->pid);
	else if (!wptrack_usable())
		log_debug("%s: this kernel cannot track writes "
			  "(UFFD_FEATURE_WP_ASYNC, PAGEMAP_SCAN): a run of "
			  "process %d is found by its context switches",
			  what, (int)t->pid);
	else if (wptrack_start_over(wp, t, rs, n, WPTRACK_ASYNC, why,
				    sizeof(why)) < 0)
		log_info("%s: writes of process %d are not tracked (%s): a "
			 "run of it is found by its context switches",
			 what, (int)t->pid, why);
	free(rs);
	return source_settled_switches(t->pid);
}

/* The export's process is watched from now on (source_watch()). */
void
source_watch_freeze(struct source *s)
{
	char what[64];

	snprintf(what, sizeof(what), "migration %s", log_id(s->m->id));
	s->switches = source_watch(&s->t, s->regs, s->nregs, &s->wp, what);
}

int
source_files_changed(struct source *s, char *why, size_t len)
{
	for (size_t i = 0; i < s->nregs; i++) {
		const struct src_region *sr = &s->regs[i];

		if (!sr->watched || !sr->primed || sr->cache_fd >= 0 ||
		    !sr->accepted || !procfile_watch_changed(sr->watch_fd))
			continue;
		snprintf(why, len,
			 "the file behind 0x%llx (%.100s) changed after the "
			 "freeze (a hole punched, or a write() to it): the "
			 "destination would hold pages of two moments",
			 (unsigned long long)sr->r.start, sr->r.name);
		return 1;
	}
	return 0;
}

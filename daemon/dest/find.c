/*
 * Which process a fork event's child is. The event names no pid: the
 * child is the earliest process its parent forked that no event has
 * claimed yet (the root's seen list keeps those that were claimed, and
 * the children the target had before), or, when the parent exited first,
 * an orphan found by what it holds (its mapping registered with a uffd).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/authz.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/migration.h"
#include "daemon/privop.h"
#include "daemon/proc.h"
#include "daemon/procfile.h"

/* Whether the process (pid, start) was claimed or known before. */
static int
seen_has(const struct dest *root, pid_t pid, unsigned long long start)
{
	for (size_t i = 0; i < root->kin.nseen; i++)
		if (root->kin.seen[i].pid == pid &&
		    root->kin.seen[i].start == start)
			return 1;
	return 0;
}

/* The process (pid, start) is claimed: no fork event may take it again. */
static void
seen_add(struct dest *root, pid_t pid, unsigned long long start)
{
	if (seen_has(root, pid, start))
		return;
	root->kin.seen = realloc(root->kin.seen, (root->kin.nseen +
						  1) * sizeof(*root->kin.seen));
	if (root->kin.seen == NULL)
		fatal("children");
	root->kin.seen[root->kin.nseen].pid = pid;
	root->kin.seen[root->kin.nseen++].start = start;
}

/*
 * The children of parent (of all its threads) not yet seen: with mark set,
 * all of them become seen; else the one forked first is returned, and
 * becomes seen. The fork event is read while the parent is still inside
 * fork(), and events come in fork order, so the first child forked that
 * no event has claimed is this event's: a child the target had before the
 * migration, or one already matched, never is.
 */
pid_t
dest_claim_child(pid_t parent, struct dest *root, int mark)
{
	char path[320], buf[4096];
	unsigned long long best_start = 0;
	pid_t best = 0;
	struct dirent *e;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)parent);
	if ((dir = opendir(path)) == NULL)
		return 0;
	while ((e = readdir(dir)) != NULL) {
		char *tok, *save;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/children",
			 (int)parent, e->d_name);
		if ((f = fopen(path, "re")) == NULL)
			continue;
		if (fgets(buf, sizeof(buf), f) == NULL)
			buf[0] = '\0';
		fclose(f);
		for (tok = strtok_r(buf, " \n", &save); tok;
		     tok = strtok_r(NULL, " \n", &save)) {
			pid_t c = (pid_t)atoi(tok);
			unsigned long long st = c > 0 ? proc_start(c) : 0;

			if (st == 0 || seen_has(root, c, st))
				continue;
			if (mark)
				seen_add(root, c, st);
			else if (best == 0 || st < best_start ||
				 (st == best_start && c < best)) {
				best = c;
				best_start = st;
			}
		}
	}
	closedir(dir);
	if (best > 0)
		seen_add(root, best, best_start);
	return best;
}

/*
 * The address a forked process's registration is looked for at: the
 * first page of the first region a fork keeps registered (a private file
 * mapping's pages all come with it), or 0: none.
 */
uint64_t
dest_orphan_addr(const struct dest *k)
{
	for (size_t i = 0; i < k->nregs; i++)
		if (k->regs[i].r.kind != REGION_FILE_PRIVATE)
			return dest_page_addr(&k->regs[i], 0);
	return 0;
}

/*
 * A child found by pid is the process claimed only if its start time says
 * so (dest_claim_child(), dest_claim_orphan() marked it seen): the pid may
 * have gone to another process since. Else k has no process to act on.
 * The privileged part opens it (procref.h): as its parent's child, or, its
 * parent gone (an orphan), by the root target's grant.
 */
void
dest_child_open(struct dest *k, pid_t pid)
{
	uint64_t parent =
		k->kin.parent_pid > 0 ? procfile_grant(k->kin.parent_pid) : 0;
	int rc = -1;

	if (pid <= 0 || k->t.pidfd >= 0)
		return;
	if (parent != 0 && !dest_proc_gone(k->kin.parent_pid))
		rc = procref_child(&k->t, parent, pid);
	/* Its parent exited meanwhile, or was never granted: an orphan. */
	if (rc < 0 && dest_proc_gone(k->kin.parent_pid))
		rc = procref_orphan(&k->t, k->root->t.grant, k->root->m->id,
				    pid, proc_start(pid), 0,
				    dest_orphan_addr(k));
	if (rc < 0)
		log_warnx("migration %s: forked process %d: %s",
			  log_id(k->root->m->id), (int)pid,
			  errno == EPERM || errno == ESRCH
				  ? "not its parent's child, or not one its "
				    "caller could ptrace"
				  : strerror(errno));
	if (rc == 0 && !seen_has(k->root, pid, k->t.start))
		procref_close(&k->t);
}

/* Clock ticks since boot, as /proc/PID/stat counts a start time. */
unsigned long long
dest_boot_ticks(void)
{
	struct timespec ts;
	long hz = sysconf(_SC_CLK_TCK);

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (unsigned long long)ts.tv_sec * (unsigned long long)hz +
	       (unsigned long long)ts.tv_nsec /
		       (1000000000ULL / (unsigned long long)hz);
}

/* A process that is gone or a zombie: its children went to another. */
int
dest_proc_gone(pid_t pid)
{
	char path[64], buf[512], *p;
	int gone = 1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((f = fopen(path, "re")) == NULL)
		return 1;
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')) && p[1])
		gone = p[2] == 'Z' || p[2] == 'X';
	fclose(f);
	return gone;
}

/*
 * The child of a parent that exited before the child was found (a daemon
 * that detaches forks and exits at once): it went to another parent, so
 * the privileged part looks for it by what it holds (procref_orphan()): a
 * process started since the fork event, of no grant yet, whose mapping of
 * the first region is registered with a userfaultfd; the earliest such.
 * Found, it is k's process (k->t) and seen.
 */
pid_t
dest_claim_orphan(struct dest *k)
{
	unsigned long long hz = (unsigned long long)sysconf(_SC_CLK_TCK),
			   since = k->kin.fork_ticks > hz
					   ? k->kin.fork_ticks - hz
					   : 0;
	uint64_t addr = dest_orphan_addr(k);
	struct procref t;

	if (addr == 0 || k->t.pidfd >= 0 ||
	    procref_orphan(&t, k->root->t.grant, k->root->m->id, 0, 0, since,
			   addr) < 0)
		return 0;
	seen_add(k->root, t.pid, t.start);
	procref_move(&k->t, &t);
	return k->t.pid;
}

/*
 * A destination target's forked processes as grants (kin.h). The engine
 * says which process it means; what it is allowed rests on what is
 * checked here: the process is the one opened (its start time), the
 * grant's caller could ptrace it (authz.h, as for the attach itself), and
 * it is the target's kin by what the kernel shows, its parent or its
 * registered mapping. So a grant never reaches a process its caller could
 * not have attached to directly.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <linux/kcmp.h>

#include "proto/frame.h"

#include "daemon/authz.h"
#include "daemon/imsg.h"
#include "daemon/privop.h"
#include "daemon/proc.h"
#include "daemon/procref.h"
#include "daemon/priv/call.h"
#include "daemon/priv/grant.h"
#include "daemon/priv/kin.h"

int
kin_answer(struct call *c, struct grant *g)
{
	static struct privop_child_reply a;

	if (!procref_same(&g->t))
		return ESRCH;
	if (!authz_allows(&g->who, &g->t))
		return EPERM;
	c->fd = dup(g->t.pidfd);
	c->fd2 = dup(g->t.memfd);
	if (c->fd < 0 || c->fd2 < 0)
		return EMFILE; /* the descriptors closed by serve_one() */
	g->unclaimed = 0;
	a = (struct privop_child_reply){.grant = g->id,
					.start = g->t.start,
					.probe = g->t.probe,
					.pid = g->t.pid};
	c->out = &a;
	c->outlen = sizeof(a);
	return 0;
}

/* k, checked, becomes a grant of c's (its child's); the answer made. */
static int
kin_grant(struct call *c, struct procref *k)
{
	struct grant *kg = grant_new(FRAME_CTL_ATTACH, &c->g->who, k);
	int err;

	kg->parent = c->g->id;
	if ((err = kin_answer(c, kg)) != 0)
		grant_free(kg);
	return err;
}

/*
 * A destination target's forked child: opened here, then checked to be
 * the grant's process's child (a pid reused before the open would be
 * another process's, and is refused) that the grant's caller could ptrace.
 */
int
kin_child(struct call *c)
{
	const struct privop_child *r = c->req;
	struct procref k;
	char err[128];

	if (c->len != sizeof(*r))
		return EBADMSG;
	if (c->g->frame_type != FRAME_CTL_ATTACH)
		return EPERM;
	if (r->pid <= 1 || r->pid == c->g->t.pid)
		return EINVAL;
	if (!procref_same(&c->g->t))
		return ESRCH;
	if (procref_open(&k, r->pid, err, sizeof(err)) < 0)
		return errno;
	if (proc_ppid(r->pid) != c->g->t.pid || !procref_same(&k) ||
	    !authz_allows(&c->g->who, &k)) {
		procref_close(&k);
		return EPERM;
	}
	return kin_grant(c, &k);
}

/*
 * Whether process pid holds a descriptor of the same file as one the
 * grants of c's migration keep (grant.h, uffd): a copy of the migration's
 * userfaultfd, which a fork copies with the descriptor table. -1: the
 * grants keep none (a record's, its target gone: nothing to compare).
 */
static int
holds_family_uffd(struct call *c, pid_t pid)
{
	int fams[16], nf = 0, yes = 0;
	char path[64], link[64];
	struct dirent *e;
	struct grant *g;
	DIR *dir;

	for (uint64_t id = c->g->id; nf < 16 && (g = grant_next(id));
	     id = g->id)
		if (g->uffd >= 0 && grant_root(g) == c->g)
			fams[nf++] = g->uffd;
	if (c->g->uffd >= 0 && nf < 16)
		fams[nf++] = c->g->uffd;
	if (nf == 0)
		return c->g->t.pidfd < 0 ? -1 : 0;
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	if ((dir = opendir(path)) == NULL)
		return 0;
	while (!yes && (e = readdir(dir)) != NULL) {
		int fd = atoi(e->d_name);
		ssize_t ll;

		if (e->d_name[0] == '.' ||
		    (ll = readlinkat(dirfd(dir), e->d_name, link,
				     sizeof(link) - 1)) < 0)
			continue;
		link[ll] = '\0';
		if (strcmp(link, "anon_inode:[userfaultfd]") != 0)
			continue;
		for (int i = 0; !yes && i < nf; i++)
			yes = syscall(SYS_kcmp, getpid(), pid, KCMP_FILE,
				      fams[i], fd) == 0;
	}
	closedir(dir);
	return yes;
}

/*
 * Whether pid (started at start) is an orphan r asks for: started late
 * enough, of no grant, registered at r->addr, holding the migration's
 * userfaultfd (where a grant keeps one to compare), its caller's to
 * ptrace. Opened first, and the same process still after the /proc reads,
 * so that what they read is its own. 1 with *k open, else 0.
 */
static int
orphan_is(struct call *c, const struct privop_orphan *r, pid_t pid,
	  unsigned long long start, struct procref *k)
{
	char err[128];

	if (pid <= 1 || start == 0 || start < r->not_before ||
	    start < c->g->t.start || grant_holding(pid, start) != NULL ||
	    procref_open(k, pid, err, sizeof(err)) < 0)
		return 0;
	if (k->start == start && proc_uffd_mapped(pid, r->addr) &&
	    holds_family_uffd(c, pid) != 0 && authz_allows(&c->g->who, k) &&
	    procref_same(k))
		return 1;
	procref_close(k);
	return 0;
}

/* The earliest orphan r asks for, opened in *k: its pid, or 0. */
static pid_t
orphan_find(struct call *c, const struct privop_orphan *r, struct procref *k)
{
	unsigned long long best_start = 0;
	pid_t best = 0;
	struct dirent *e;
	DIR *dir;

	if ((dir = opendir("/proc")) == NULL)
		return 0;
	while ((e = readdir(dir)) != NULL) {
		pid_t pid = (pid_t)atoi(e->d_name);
		unsigned long long st = pid > 1 ? proc_start(pid) : 0;
		struct procref t;

		if (st == 0 || (best && st >= best_start) ||
		    !orphan_is(c, r, pid, st, &t))
			continue;
		if (best)
			procref_close(k);
		procref_move(k, &t);
		best = pid;
		best_start = st;
	}
	closedir(dir);
	return best;
}

/*
 * A restarted engine restores a forked process the last engine had a
 * grant for (kept, unclaimed, for the next): that grant, claimed, if it
 * descends from the migration's and its caller may still ptrace it.
 */
static int
kin_reclaim(struct call *c, struct grant *kg)
{
	if (!kg->unclaimed || grant_root(kg) != c->g)
		return EPERM;
	return kin_answer(c, kg);
}

int
kin_orphan(struct call *c)
{
	const struct privop_orphan *r = c->req;
	struct procref k = PROCREF_NONE;
	struct grant *kg;

	if (c->len != sizeof(*r))
		return EBADMSG;
	/*
	 * A target gone (a restarted engine holds no grant of it): the grant
	 * kept for its migration, while the engine restores (it is dropped,
	 * unclaimed, once the engine is ready).
	 */
	if (c->g == NULL) {
		if (memchr(r->id, 0, sizeof(r->id)) == NULL)
			return EINVAL;
		if ((c->g = grant_bound(ROLE_DEST, r->id)) == NULL ||
		    c->g->dropped)
			return ESRCH;
	}
	if (c->g->frame_type != FRAME_CTL_ATTACH || c->g->parent != 0)
		return EPERM; /* by the migration's own target's grant */
	if (r->pid < 0 || (r->pid > 0 && r->start == 0))
		return EINVAL;
	if (r->pid > 0 && (kg = grant_holding(r->pid, r->start)) != NULL)
		return kin_reclaim(c, kg);
	if (r->pid > 0 ? !orphan_is(c, r, r->pid, r->start, &k)
		       : orphan_find(c, r, &k) == 0)
		return ESRCH;
	return kin_grant(c, &k);
}

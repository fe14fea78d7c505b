/*
 * The engine's privileged requests, served (serve.h). Each names a grant;
 * nothing is done for one that names none, nor on a grant's process that
 * is not the one checked any more (procref.h). The engine is not trusted:
 * every request is checked whole, and each operation against what the
 * grant allows.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "proto/frame.h"

#include "daemon/authz.h"
#include "daemon/imsg.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/migration.h"
#include "daemon/inject.h"
#include "daemon/privop.h"
#include "daemon/procfile.h"
#include "daemon/proc.h"
#include "daemon/priv/call.h"
#include "daemon/priv/dsetup.h"
#include "daemon/priv/grant.h"
#include "daemon/priv/kin.h"
#include "daemon/priv/serve.h"
#include "daemon/wptrack.h"

/*
 * A thread an injection gave up on (it did not stop in time) stays seized
 * until it stops: looked for each second while there is one.
 */
static struct event *reap_ev;

static void
reap_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct timeval tv = {1, 0};

	if (inject_reap() > 0)
		evtimer_add(reap_ev, &tv);
}

static void
serve_reap_later(void)
{
	if (reap_ev == NULL &&
	    (reap_ev = evtimer_new(base, reap_cb, NULL)) == NULL)
		fatalx("evtimer_new");
	reap_cb(-1, 0, NULL);
}

/* SIGSTOP, SIGCONT, SIGKILL of the grant's process, through its pidfd. */
static int
do_signal(struct call *c)
{
	const struct privop_signal *r = c->req;

	if (c->len != sizeof(*r))
		return EBADMSG;
	if (r->sig != SIGSTOP && r->sig != SIGCONT && r->sig != SIGKILL)
		return EPERM;
	if (c->g->t.pidfd < 0)
		return ESRCH;
	return procref_signal(&c->g->t, r->sig) == 0 ? 0 : errno;
}

/*
 * A file of the grant's process, opened here (the engine may not): its
 * path from what the request names, never a path of the engine's. The
 * process is checked before and after: a file opened across an exec
 * could be of the program the exec ran, and is not handed over.
 */
static int
do_open(struct call *c)
{
	const struct privop_open *r = c->req;
	int flags = O_RDONLY | O_CLOEXEC;
	char path[96];
	pid_t pid = c->g->t.pid;

	if (c->len != sizeof(*r))
		return EBADMSG;
	if (pid <= 0 || !procref_same(&c->g->t))
		return ESRCH;
	switch (r->file) {
	case PRIVOP_FILE_MAPS:
		snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
		break;
	case PRIVOP_FILE_PAGEMAP:
		snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)pid);
		break;
	case PRIVOP_FILE_MAP_FILE:
	case PRIVOP_FILE_MAP_WATCH:
		if (r->start >= r->end)
			return EINVAL;
		snprintf(path, sizeof(path), "/proc/%d/map_files/%llx-%llx",
			 (int)pid, (unsigned long long)r->start,
			 (unsigned long long)r->end);
		break;
	case PRIVOP_FILE_MEM_RW:
		/* Only a destination's memory is written (its pages arrive). */
		if (c->g->frame_type != FRAME_CTL_ATTACH)
			return EPERM;
		snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
		flags = O_RDWR | O_CLOEXEC;
		break;
	default:
		return EINVAL;
	}
	if ((c->fd = open(path, flags)) < 0)
		return errno;
	if (!procref_same(&c->g->t)) {
		close(c->fd);
		c->fd = -1;
		return ESRCH;
	}
	if (r->file == PRIVOP_FILE_MAP_WATCH) {
		/* The watch is handed over, not the file. */
		int w = procfile_watch(c->fd);

		close(c->fd);
		if ((c->fd = w) < 0)
			return errno;
	}
	return 0;
}

/* Who shares the grant's process's memory or files (kcmp, all of /proc). */
static int
do_sharers(struct call *c)
{
	const struct privop_sharers *r = c->req;
	static struct privop_sharers_reply a;

	if (c->len != sizeof(*r))
		return EBADMSG;
	if (r->want == 0 || (r->want & ~(PROC_SHARE_VM | PROC_SHARE_FILES)))
		return EINVAL;
	if (c->g->t.pid <= 0 || !procref_same(&c->g->t))
		return ESRCH;
	memset(&a, 0, sizeof(a));
	a.n = proc_sharers_scan(c->g->t.pid, (int)r->want, a.list,
				sizeof(a.list));
	c->out = &a;
	c->outlen = sizeof(a);
	return 0;
}

/*
 * Waits until the grant's stopped threads are off the CPU (a source's
 * context switches are counted then): reads each thread's syscall file,
 * which needs the right to ptrace it.
 */
static int
do_off_cpu(struct call *c)
{
	if (c->len != 0)
		return EBADMSG;
	if (c->g->frame_type == FRAME_CTL_ATTACH)
		return EPERM; /* a source's, or a snapshot's, process */
	if (c->g->t.pid <= 0 || !procref_same(&c->g->t))
		return ESRCH;
	proc_off_cpu_here(c->g->t.pid);
	return 0;
}

/*
 * A source's stopped process makes a userfaultfd to track its writes
 * (wptrack.h), by injection: only a source's or a snapshot's process.
 */
static int
do_wp_uffd(struct call *c)
{
	const struct privop_wp_uffd *r = c->req;
	static char why[256];
	int err;

	if (c->len != sizeof(*r) || r->sync > 1)
		return EBADMSG;
	if (c->g->frame_type != FRAME_CTL_EXPORT &&
	    c->g->frame_type != FRAME_CTL_SNAPSHOT)
		return EPERM;
	if (c->g->t.pid <= 0 || !procref_same(&c->g->t))
		return ESRCH;
	why[0] = '\0';
	errno = 0;
	if ((c->fd = wptrack_take_uffd(&c->g->t, (int)r->sync, why,
				       sizeof(why))) >= 0)
		return 0;
	err = errno ? errno : EIO;
	c->out = why;
	c->outlen = strlen(why) + 1;
	return err;
}

/*
 * A new engine takes back the grant of a migration it restores from its
 * state file (privop.h, PRIVOP_CLAIM): only a live grant of the role's
 * request, bound to that migration, whose process is still the one
 * checked, at the pid and start time the engine names, and one its caller
 * may still ptrace (it may have run a setuid program while no engine
 * watched). The engine gets the pidfd and memory file again.
 */
static int
do_claim(struct call *c)
{
	const struct privop_claim *r = c->req;
	struct grant *g;

	if (c->len != sizeof(*r) || c->h->grant != 0)
		return EBADMSG;
	if (r->role > ROLE_DEST || memchr(r->id, 0, sizeof(r->id)) == NULL ||
	    r->pid <= 1)
		return EINVAL;
	/* One kept with no process (record.h) holds none to claim. */
	if ((g = grant_bound(r->role, r->id)) == NULL || g->t.pidfd < 0)
		return ENOENT;
	if (g->frame_type !=
	    (r->role == ROLE_SOURCE ? FRAME_CTL_EXPORT : FRAME_CTL_ATTACH))
		return EPERM;
	if (g->t.pid != r->pid || g->t.start != r->start)
		return EINVAL;
	return kin_answer(c, g);
}

/* The operations, by type: each answers an errno value (0: done). */
static int (*const ops[])(struct call *) = {
	[PRIVOP_SIGNAL] = do_signal,
	[PRIVOP_OPEN] = do_open,
	[PRIVOP_SHARERS] = do_sharers,
	[PRIVOP_OFF_CPU] = do_off_cpu,
	[PRIVOP_WP_UFFD] = do_wp_uffd,
	[PRIVOP_CHILD] = kin_child,
	[PRIVOP_DEST_UFFD] = dsetup_uffd,
	[PRIVOP_DEST_DISCARD] = dsetup_discard,
	[PRIVOP_DEST_END] = dsetup_end,
	[PRIVOP_DEST_CLOSE] = dsetup_close,
	[PRIVOP_CHILD_UFFD] = dsetup_child_uffd,
	[PRIVOP_CHILD_HOLD] = dsetup_child_hold,
	[PRIVOP_CLAIM] = do_claim,
	[PRIVOP_DEST_RETAKE] = dsetup_retake,
	[PRIVOP_ORPHAN] = kin_orphan,
};

static void
serve_one(int sock, struct imsg *m)
{
	struct call c = {.m = m, .fd = -1, .fd2 = -1};
	int fds[2], nfds = 0;
	int err;

	if (m->h.type != PRIVOP_REQUEST || m->h.len < sizeof(*c.h)) {
		err = EBADMSG;
	} else {
		c.h = (const void *)m->data;
		c.req = m->data + sizeof(*c.h);
		c.len = m->h.len - sizeof(*c.h);
		if (c.h->type >= sizeof(ops) / sizeof(ops[0]) ||
		    ops[c.h->type] == NULL)
			err = EOPNOTSUPP;
		else if (c.h->type == PRIVOP_CLAIM)
			err = do_claim(&c); /* a migration's, by its ID */
		else if (c.h->type == PRIVOP_ORPHAN && c.h->grant == 0)
			err = kin_orphan(&c); /* its grant by the ID */
		else if ((c.g = grant_find(c.h->grant)) == NULL || c.g->dropped)
			err = ESRCH;
		else
			err = ops[c.h->type](&c);
	}
	/* Threads an injection gave up on, or let go while dying. */
	if (inject_reap() > 0)
		serve_reap_later();
	if (c.fd >= 0)
		fds[nfds++] = c.fd;
	if (c.fd2 >= 0)
		fds[nfds++] = c.fd2;
	imsg_send(sock, PRIVOP_REPLY, m->h.id, err, c.out, c.outlen,
		  nfds ? fds : NULL, (size_t)nfds);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
}

int
serve_requests(int sock)
{
	struct imsg m;
	int r;

	dsetup_sweep();
	for (int i = 0; i < 64; i++) {
		if ((r = imsg_recv(sock, &m)) < 0 && errno == EBADMSG) {
			log_warnx("engine: a request that does not hold "
				  "together: refused");
			continue;
		}
		if (r <= 0)
			return r == 0 ? 0 : 1;
		serve_one(sock, &m);
		imsg_clear(&m);
	}
	return 1;
}

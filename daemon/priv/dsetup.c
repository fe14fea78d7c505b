/*
 * A destination grant's setup and hold (dsetup.h), as the engine did it by
 * itself before the split (daemon/dest/target.c keeps that path for a
 * process without a grant). One setup a grant: every thread of the target
 * is seized at PRIVOP_DEST_UFFD and stays stopped until PRIVOP_DEST_END;
 * the engine asks for the discards in between and registers each region
 * itself. Only the descriptor this made is ever closed in the target.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/ptrace.h>

#include "proto/frame.h"

#include "daemon/authz.h"
#include "daemon/compat.h"
#include "daemon/imsg.h"
#include "daemon/inject.h"
#include "daemon/log.h"
#include "daemon/privop.h"
#include "daemon/priv/call.h"
#include "daemon/priv/dsetup.h"
#include "daemon/priv/grant.h"
#include "daemon/procref.h"
#include "daemon/tracee.h"
#include "daemon/uffd.h"

/*
 * What an attach negotiates (daemon/dest/target.c): missing faults of
 * shared memory and hugetlb, the target's own changes to its memory, its
 * forks, thread ids, access hints. Nothing else is asked for a target.
 */
#define DEST_FEATURES                                                  \
	(UFFD_FEATURE_MISSING_SHMEM | UFFD_FEATURE_MISSING_HUGETLBFS | \
	 UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_UNMAP |        \
	 UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_EVENT_FORK |          \
	 UFFD_FEATURE_THREAD_ID | UFFD_FEATURE_ACCESS_HINTS)

/* The smallest page: discards are of whole pages. */
#define PAGE_MIN 4096ULL

struct dsetup {
	uint64_t grant;
	pid_t pid;
	struct inject inj;
	int open;      /* inj holds every thread */
	int held;      /* PRIVOP_DEST_HOLD: until PRIVOP_DEST_GO */
	int precopy;   /* held to die with us */
	int kept;      /* a sole target's main thread kept (tracee.h) */
	int sole;      /* the target keeps no copy of its uffd */
	int target_fd; /* the target's copy, or -1 */
	struct dsetup *next;
};

static struct dsetup *setups;

/* A message for the engine with a failure: why, nul-terminated. */
static char why[512];

static struct dsetup *
find(uint64_t grant)
{
	for (struct dsetup *s = setups; s != NULL; s = s->next)
		if (s->grant == grant)
			return s;
	return NULL;
}

static int
failed(struct call *c, int err)
{
	if (why[0] != '\0') {
		c->out = why;
		c->outlen = strlen(why) + 1;
	}
	return err;
}

/* Closes the target's copy of its uffd through the injection s holds. */
static void
close_target_fd(struct dsetup *s, struct inject *inj)
{
	long rc = -EINTR;

	/*
	 * A signal that came while it was held is delivered first (EINTR):
	 * once it is, the close goes through.
	 */
	for (int i = 0; i < 3 && rc == -EINTR; i++)
		rc = inject_syscall(inj, SYS_close, (unsigned long)s->target_fd,
				    0, 0, 0, 0, 0);
	if (rc < 0)
		log_warnx("close(%d) in process %d: %s", s->target_fd,
			  (int)s->pid, strerror((int)-rc));
	s->target_fd = -1;
}

/* The injection ends: every thread let go. */
static void
let_go(struct dsetup *s)
{
	inject_end(&s->inj);
	s->open = s->held = 0;
}

/* Grant g's setup, the one it may have. */
static struct dsetup *
new_setup(const struct grant *g)
{
	struct dsetup *s = xcalloc(1, sizeof(*s));

	s->grant = g->id;
	s->pid = g->t.pid;
	s->target_fd = -1;
	s->next = setups;
	setups = s;
	return s;
}

/*
 * Every thread stopped, and the target still one the grant's caller may
 * ptrace (it may have run a setuid program since the attach came) that
 * shares its memory and files with nothing an attach cannot stop.
 */
static int
begin(struct dsetup *s, struct grant *g)
{
	uint32_t code;
	char who[192];
	int n;

	if (inject_begin(&s->inj, s->pid, 1) < 0) {
		snprintf(why, sizeof(why), "%s", s->inj.err);
		return errno == EPERM ? EPERM : ESRCH;
	}
	s->open = 1;
	if (authz_may_ptrace(&g->who, &g->t, &code, why, sizeof(why)) < 0)
		return code == ERR_NO_PROCESS ? ESRCH : EPERM;
	n = proc_sharers_scan(s->pid, PROC_SHARE_VM | PROC_SHARE_FILES, who,
			      sizeof(who));
	if (n == 0)
		return 0;
	if (n < 0)
		snprintf(why, sizeof(why),
			 "process %d: this kernel cannot tell which processes "
			 "share its memory or files (no kcmp(2))",
			 (int)s->pid);
	else
		snprintf(why, sizeof(why),
			 "process %d shares its memory or files with %s, "
			 "which an attach cannot stop: refused",
			 (int)s->pid, who);
	return EBUSY;
}

/*
 * A target that may not call userfaultfd() itself gets a full one from
 * /dev/userfaultfd, handed in for the one call (docs/design.md).
 */
static long
via_device(struct dsetup *s)
{
	int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC), tdev;
	long rc;

	if (dev < 0)
		return -EPERM;
	tdev = inject_pass_fd(&s->inj, dev);
	close(dev);
	if (tdev < 0) {
		snprintf(why, sizeof(why),
			 "/dev/userfaultfd for process %d: %s", (int)s->pid,
			 s->inj.err);
		return -EPERM;
	}
	rc = inject_syscall(&s->inj, SYS_ioctl, (unsigned long)tdev,
			    USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK, 0, 0,
			    0);
	inject_syscall(&s->inj, SYS_close, (unsigned long)tdev, 0, 0, 0, 0, 0);
	if (rc < 0)
		snprintf(why, sizeof(why),
			 "USERFAULTFD_IOC_NEW in process %d: %s", (int)s->pid,
			 strerror((int)-rc));
	else
		log_info("process %d may not call userfaultfd(); it got one "
			 "from /dev/userfaultfd",
			 (int)s->pid);
	return rc;
}

/* The target makes its uffd; our copy in *fd. An errno value. */
static int
make_uffd(struct dsetup *s, const struct grant *g, int *fd)
{
	long rc = inject_syscall(&s->inj, SYS_userfaultfd,
				 O_CLOEXEC | O_NONBLOCK, 0, 0, 0, 0, 0);

	if (rc == -EPERM) {
		rc = via_device(s);
		s->sole = rc >= 0;
		if (rc < 0 && why[0] != '\0')
			return EPERM;
	}
	if (rc == -EPERM) {
		snprintf(why, sizeof(why),
			 "userfaultfd in process %d: EPERM: set "
			 "vm.unprivileged_userfaultfd=1 or give the process "
			 "access to /dev/userfaultfd",
			 (int)s->pid);
		return EPERM;
	}
	if (rc < 0) {
		snprintf(why, sizeof(why), "userfaultfd in process %d: %s",
			 (int)s->pid, strerror((int)-rc));
		return EIO;
	}
	s->target_fd = (int)rc;
	if ((*fd = (int)syscall(SYS_pidfd_getfd, g->t.pidfd, s->target_fd, 0)) <
	    0) {
		snprintf(why, sizeof(why), "pidfd_getfd: %s", strerror(errno));
		return EIO;
	}
	if (s->sole) {
		inject_syscall(&s->inj, SYS_close, (unsigned long)s->target_fd,
			       0, 0, 0, 0, 0);
		s->target_fd = -1;
	}
	return 0;
}

int
dsetup_uffd(struct call *c)
{
	const struct privop_dest_uffd *r = c->req;
	static struct privop_dest_uffd_reply a;
	struct dsetup *s;
	int err;

	why[0] = '\0';
	if (c->len != sizeof(*r))
		return EBADMSG;
	if (c->g->frame_type != FRAME_CTL_ATTACH)
		return EPERM;
	if (r->features & ~(uint64_t)DEST_FEATURES)
		return EINVAL;
	if (find(c->g->id) != NULL)
		return EALREADY; /* set up once */
	if (c->g->t.pid <= 0 || !procref_same(&c->g->t))
		return ESRCH;
	s = new_setup(c->g);
	if ((err = begin(s, c->g)) == 0 &&
	    (err = make_uffd(s, c->g, &c->fd)) == 0 &&
	    uffd_api(c->fd, r->features, NULL) < 0) {
		snprintf(why, sizeof(why), "UFFDIO_API: %s", strerror(errno));
		err = EIO;
	}
	if (err == 0) {
		grant_keep_uffd(c->g, c->fd);
		a = (struct privop_dest_uffd_reply){.target_fd = s->target_fd,
						    .sole = (uint32_t)s->sole};
		c->out = &a;
		c->outlen = sizeof(a);
		return 0;
	}
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	if (s->open && s->target_fd >= 0)
		close_target_fd(s, &s->inj);
	if (s->open)
		let_go(s);
	return failed(c, err);
}

/* The setup of grant g, its threads stopped and not held: or NULL. */
static struct dsetup *
setting_up(const struct grant *g)
{
	struct dsetup *s = find(g->id);

	return s != NULL && s->open && !s->held ? s : NULL;
}

int
dsetup_discard(struct call *c)
{
	const struct privop_dest_discard *r = c->req;
	struct dsetup *s;
	long rc;

	why[0] = '\0';
	if (c->len != sizeof(*r))
		return EBADMSG;
	if (r->remove > 1 || r->pad != 0 || r->length == 0 ||
	    r->start % PAGE_MIN || r->length % PAGE_MIN ||
	    r->start + r->length < r->start)
		return EINVAL;
	if ((s = setting_up(c->g)) == NULL)
		return EPROTO; /* no setup under way */
	rc = inject_syscall(&s->inj, SYS_madvise, r->start, r->length,
			    r->remove ? MADV_REMOVE : MADV_DONTNEED, 0, 0, 0);
	if (rc >= 0)
		return 0;
	snprintf(why, sizeof(why), "madvise(%s) 0x%llx in process %d: %s",
		 r->remove ? "REMOVE" : "DONTNEED",
		 (unsigned long long)r->start, (int)s->pid, strerror((int)-rc));
	return failed(c, (int)-rc);
}

/*
 * Held: every thread in an event stop, registers restored, so that should
 * we die the target goes on where it was (or dies with us: a pre-copy's,
 * which must never run on pages of several moments).
 */
static int
hold(struct dsetup *s, int precopy)
{
	if (inject_restore(&s->inj) < 0) {
		snprintf(why, sizeof(why), "holding process %d: %s",
			 (int)s->pid, strerror(errno));
		return errno ? errno : EIO;
	}
	for (size_t i = 0; precopy && i < s->inj.ntids; i++)
		if (ptrace(PTRACE_SETOPTIONS, s->inj.tids[i], 0,
			   PTRACE_O_EXITKILL) < 0)
			log_warn("PTRACE_O_EXITKILL on %d",
				 (int)s->inj.tids[i]);
	s->held = 1;
	s->precopy = precopy;
	return 0;
}

/*
 * Let go; a sole target's main thread stays seized so that it dies with
 * us (tracee.h), or it is stopped: with nobody holding the only copy of
 * its uffd it would read zeros.
 */
static void
go(struct dsetup *s)
{
	if (!s->sole) {
		let_go(s);
		return;
	}
	s->open = s->held = 0;
	if (tracee_keep(&s->inj) == 0) {
		s->kept = 1;
		return;
	}
	log_warnx("process %d cannot be held (%s); it is stopped instead",
		  (int)s->pid, strerror(errno));
	kill(s->pid, SIGSTOP);
}

int
dsetup_end(struct call *c)
{
	const struct privop_dest_end *r = c->req;
	struct dsetup *s;

	why[0] = '\0';
	if (c->len != sizeof(*r))
		return EBADMSG;
	if (r->precopy > 1 || (r->precopy && r->how != PRIVOP_DEST_HOLD))
		return EINVAL;
	if ((s = find(c->g->id)) == NULL)
		return EPROTO;
	switch (r->how) {
	case PRIVOP_DEST_GO:
		if (!s->open)
			return EPROTO;
		go(s);
		return 0;
	case PRIVOP_DEST_HOLD:
		if (!s->open || s->held)
			return EPROTO;
		return failed(c, hold(s, (int)r->precopy));
	case PRIVOP_DEST_UNDO:
		if (!s->open)
			return EPROTO;
		if (s->target_fd >= 0)
			close_target_fd(s, &s->inj);
		let_go(s);
		return 0;
	case PRIVOP_DEST_RELEASE:
		if (!s->kept)
			return EPROTO;
		tracee_release(s->pid);
		s->kept = 0;
		return 0;
	default:
		return EINVAL;
	}
}

/*
 * The target's copy of its uffd closed, by injection into its main thread
 * (the engine reads the uffd meanwhile: a thread blocked until one of its
 * events is read stops only then). Never in a process that merely took
 * the pid, nor in another program the target ran since.
 */
int
dsetup_close(struct call *c)
{
	struct dsetup *s;
	struct inject inj;
	long rc;

	why[0] = '\0';
	if (c->len != 0)
		return EBADMSG;
	if ((s = find(c->g->id)) == NULL || s->target_fd < 0 ||
	    (s->open && !s->held))
		return EPROTO;
	if (!procref_same(&c->g->t)) {
		s->target_fd = -1;
		return ESRCH;
	}
	if (s->held) {
		close_target_fd(s, &s->inj);
		return 0;
	}
	if (inject_begin(&inj, s->pid, 0) < 0) {
		snprintf(why, sizeof(why), "%s", inj.err);
		return failed(c, errno ? errno : EIO);
	}
	rc = inject_syscall(&inj, SYS_close, (unsigned long)s->target_fd, 0, 0,
			    0, 0, 0);
	inject_end(&inj);
	s->target_fd = -1;
	if (rc >= 0)
		return 0;
	snprintf(why, sizeof(why), "close in process %d: %s", (int)s->pid,
		 strerror((int)-rc));
	return failed(c, (int)-rc);
}

/*
 * Whether fd is a userfaultfd: the kernel names no process of one, so a
 * child gets no other kind of descriptor of the engine's at least.
 */
static int
is_uffd(int fd)
{
	static const char want[] = "anon_inode:[userfaultfd]";
	char path[64], link[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link));
	return n == (ssize_t)strlen(want) && memcmp(link, want, (size_t)n) == 0;
}

/* A request for a forked child's grant, before it is set up: an errno. */
static int
child_check(struct call *c)
{
	if (c->len != 0)
		return EBADMSG;
	if (c->g->frame_type != FRAME_CTL_ATTACH || c->g->parent == 0)
		return EPERM; /* a forked child's grant only */
	if (find(c->g->id) != NULL)
		return EALREADY;
	if (c->g->t.pid <= 0 || !procref_same(&c->g->t))
		return ESRCH;
	return 0;
}

/*
 * A forked child gets a copy of its uffd, as every target has: stopped,
 * it can change no more, and only a process the grant's caller could
 * ptrace gets anything (one that ran a setuid program since does not).
 * inject_pass_fd() refuses one sharing its memory or files.
 */
int
dsetup_child_uffd(struct call *c)
{
	static struct privop_dest_uffd_reply a;
	struct inject inj;
	uint32_t code;
	int err, ufd, tfd = -1;

	why[0] = '\0';
	if ((err = child_check(c)) != 0)
		return err;
	if (c->m->nfd != 1)
		return EBADMSG;
	if (!is_uffd(ufd = imsg_take_fd(c->m, 0))) {
		close(ufd);
		return EBADF;
	}
	if (inject_begin(&inj, c->g->t.pid, 1) < 0) {
		err = errno == EPERM ? EPERM : ESRCH;
		snprintf(why, sizeof(why), "%s", inj.err);
	} else {
		if (authz_may_ptrace(&c->g->who, &c->g->t, &code, why,
				     sizeof(why)) < 0)
			err = code == ERR_NO_PROCESS ? ESRCH : EPERM;
		else if ((tfd = inject_pass_fd(&inj, ufd)) < 0)
			err = EIO;
		if (err == EIO)
			snprintf(why, sizeof(why), "%s", inj.err);
		inject_end(&inj);
	}
	if (err == 0)
		grant_keep_uffd(c->g, ufd);
	close(ufd);
	if (err != 0)
		return failed(c, err);
	new_setup(c->g)->target_fd = tfd;
	a = (struct privop_dest_uffd_reply){.target_fd = tfd};
	c->out = &a;
	c->outlen = sizeof(a);
	return 0;
}

/*
 * A child whose parent held no copy of its uffd holds none either: its
 * main thread is kept seized so that it dies with us (tracee.h).
 */
int
dsetup_child_hold(struct call *c)
{
	struct dsetup *s;
	int err;

	why[0] = '\0';
	if ((err = child_check(c)) != 0)
		return err;
	if (!authz_allows(&c->g->who, &c->g->t))
		return EPERM;
	if (tracee_seize(c->g->t.pid) < 0)
		return errno ? errno : ESRCH;
	if (!procref_same(&c->g->t)) {
		tracee_release(c->g->t.pid);
		return ESRCH;
	}
	s = new_setup(c->g);
	s->sole = s->kept = 1;
	return 0;
}

/*
 * A target, or a forked child, taken up by a new engine (privop.h,
 * PRIVOP_DEST_RETAKE): its copy of its uffd copied out again, once a
 * grant, and only a userfaultfd of a process still the one checked and
 * one the grant's caller may ptrace. It is then closed as a setup's.
 */
int
dsetup_retake(struct call *c)
{
	const struct privop_dest_retake *r = c->req;
	int fd;

	why[0] = '\0';
	if (c->len != sizeof(*r) || r->pad != 0)
		return EBADMSG;
	if (r->target_fd < 0)
		return EINVAL;
	if (c->g->frame_type != FRAME_CTL_ATTACH)
		return EPERM;
	if (find(c->g->id) != NULL)
		return EALREADY;
	if (c->g->t.pid <= 0 || !procref_same(&c->g->t))
		return ESRCH;
	if (!authz_allows(&c->g->who, &c->g->t))
		return EPERM;
	fd = (int)syscall(SYS_pidfd_getfd, c->g->t.pidfd, r->target_fd, 0);
	if (fd < 0)
		return errno;
	/* An exec in between closed it (O_CLOEXEC): not the same any more. */
	if (!is_uffd(fd) || !procref_same(&c->g->t)) {
		close(fd);
		snprintf(why, sizeof(why),
			 "fd %d of process %d is not its userfaultfd any more",
			 r->target_fd, (int)c->g->t.pid);
		return failed(c, EBADF);
	}
	new_setup(c->g)->target_fd = r->target_fd;
	grant_keep_uffd(c->g, fd);
	c->fd = fd;
	return 0;
}

/*
 * What s holds ends. kill: as the kernel would have killed it when the
 * tracer died (PTRACE_O_EXITKILL): a sole target, a pre-copy's.
 */
static void
end_one(struct dsetup *s, int kill_held)
{
	if (s->open && !s->held && s->target_fd >= 0)
		close_target_fd(s, &s->inj); /* a setup that never ended */
	if (kill_held && s->open && s->held && s->precopy)
		kill(s->pid, SIGKILL);
	if (s->open)
		let_go(s);
	if (s->kept) {
		if (kill_held) {
			log_warnx("process %d held no copy of its userfaultfd: "
				  "killed with the engine that served it (its "
				  "missing pages could only read as zeros)",
				  (int)s->pid);
			kill(s->pid, SIGKILL);
		}
		tracee_release(s->pid);
	}
	free(s);
}

void
dsetup_sweep(void)
{
	struct dsetup **p = &setups, *s;

	while ((s = *p) != NULL) {
		struct grant *g = grant_find(s->grant);

		if (g != NULL && !g->dropped) {
			p = &s->next;
			continue;
		}
		*p = s->next;
		end_one(s, 0);
	}
}

void
dsetup_engine_gone(void)
{
	struct dsetup *s;

	while ((s = setups) != NULL) {
		setups = s->next;
		end_one(s, 1);
	}
}

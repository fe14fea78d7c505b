/* ptrace-based system call injection (x86_64). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include "daemon/inject.h"
#include "daemon/privop.h"
#include "daemon/procref.h"
#include "daemon/region.h"

#if !defined(__x86_64__)
#error "system call injection is written for x86_64"
#endif

static int
seized(const struct inject *inj, pid_t tid)
{
	for (size_t i = 0; i < inj->ntids; i++)
		if (inj->tids[i] == tid)
			return 1;
	return 0;
}

/*
 * A thread that does not stop within this long after PTRACE_INTERRUPT is
 * busy in the kernel where no signal reaches it (vfork() waiting for its
 * child, a hung file system): the injection gives up on it rather than
 * hold up the daemon.
 */
#define STOP_WAIT_MS 10000

static uint64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * Threads given up on, still seized: each is let go once it stops
 * (inject_reap()), which it does when whatever held it lets go.
 */
static pid_t *pending;
static size_t npending;

/*
 * Waits for a state change of a seized thread. A signal handled here (a
 * timer, a reload) must not end the wait: the thread would stop later
 * with nobody to wait for it, and could not be detached.
 *
 * With a drain set, its descriptor is watched meanwhile: a thread that
 * waits in the kernel for a userfaultfd event to be read (madvise, munmap,
 * mremap, fork in registered memory) cannot stop until someone reads it.
 */
static int
wait_thread(const struct inject *inj, pid_t tid, int *st, int bounded)
{
	const struct timespec tick = {0, 100000};
	int flags = __WALL | (inj->drain || bounded ? WNOHANG : 0);
	int fd = inj->drain ? inj->drain_fd : -1;
	uint64_t deadline = now_ms() + STOP_WAIT_MS;
	pid_t r;

	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};

		r = waitpid(tid, st, flags);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -1;
		if (r == 0 && bounded && now_ms() > deadline) {
			errno = ETIMEDOUT;
			return -1;
		}
		if (r == 0 && ppoll(&p, 1, &tick, NULL) > 0) {
			if (p.revents & (POLLERR | POLLNVAL | POLLHUP))
				fd = -1; /* nothing to drain */
			else
				inj->drain(inj->drain_arg);
		}
	}
}

/*
 * PTRACE_INTERRUPT makes a seized thread report a PTRACE_EVENT_STOP; a thread
 * that had a signal pending may report that first, so wait until the event
 * stop arrives and keep the signal for later.
 */
static int
event_stop(struct inject *inj, pid_t tid)
{
	int st;

	if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) < 0)
		return -1;
	for (;;) {
		if (wait_thread(inj, tid, &st, 1) < 0) {
			if (errno == ETIMEDOUT)
				inj->stuck = tid;
			return -1;
		}
		if (!WIFSTOPPED(st)) {
			errno = ESRCH;
			return -1;
		}
		if ((st >> 16) == PTRACE_EVENT_STOP)
			return 0;
		/* A signal-delivery stop: re-inject the signal, go on waiting. */
		if (ptrace(PTRACE_CONT, tid, 0, WSTOPSIG(st)) < 0)
			return -1;
		if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) < 0)
			return -1;
	}
}

static int
seize_one(struct inject *inj, pid_t tid)
{
	if (ptrace(PTRACE_SEIZE, tid, 0, 0) < 0)
		return errno == ESRCH ? 0 : -1; /* a thread that just exited */
	inj->tids[inj->ntids++] = tid;
	return event_stop(inj, tid);
}

/* Seizes every thread, re-reading the task list until it holds still. */
static int
seize_all(struct inject *inj)
{
	char path[64];
	size_t cap = 64;
	int added;

	inj->tids = calloc(cap, sizeof(pid_t));
	if (inj->tids == NULL)
		return -1;
	if (seize_one(inj, inj->pid) < 0 || inj->ntids == 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)inj->pid);
	do {
		DIR *d = opendir(path);
		struct dirent *e;

		if (d == NULL)
			return -1;
		added = 0;
		while ((e = readdir(d)) != NULL) {
			pid_t tid = (pid_t)atoi(e->d_name);

			if (tid <= 0 || seized(inj, tid))
				continue;
			if (inj->ntids == cap) {
				pid_t *nt = realloc(inj->tids,
						    2 * cap * sizeof(pid_t));

				if (nt == NULL) {
					closedir(d);
					return -1;
				}
				inj->tids = nt;
				cap *= 2;
			}
			if (seize_one(inj, tid) < 0) {
				closedir(d);
				return -1;
			}
			added = 1;
		}
		closedir(d);
	} while (added);
	return 0;
}

/* Finds a `syscall` instruction (0f 05) in the target's vdso. */
static int
find_syscall_insn(struct inject *inj)
{
	struct vma *v;
	size_t n;
	int rc = -1;

	if (region_read_maps(inj->pid, &v, &n) < 0)
		return -1;
	for (size_t i = 0; i < n && rc < 0; i++) {
		size_t len = (size_t)(v[i].end - v[i].start);
		unsigned char *buf;

		if (strcmp(v[i].name, "[vdso]") != 0)
			continue;
		if ((buf = malloc(len)) == NULL)
			break;
		struct iovec l = {buf, len}, r = {(void *)v[i].start, len};

		if (process_vm_readv(inj->pid, &l, 1, &r, 1, 0) ==
		    (ssize_t)len) {
			for (size_t k = 0; k + 1 < len; k++) {
				if (buf[k] == 0x0f && buf[k + 1] == 0x05) {
					inj->syscall_ip = v[i].start + k;
					rc = 0;
					break;
				}
			}
		}
		free(buf);
	}
	free(v);
	if (rc < 0)
		errno = ENOEXEC;
	return rc;
}

int
inject_begin(struct inject *inj, pid_t pid, int all_threads)
{
	return inject_begin_draining(inj, pid, all_threads, -1, NULL, NULL);
}

int
inject_begin_draining(struct inject *inj, pid_t pid, int all_threads,
		      int drain_fd, void (*drain)(void *), void *drain_arg)
{
	memset(inj, 0, sizeof(*inj));
	inj->pid = pid;
	/*
	 * Only the privileged part injects: the engine acts on a process
	 * by its grant (privop.h). Refused here, what asked fails loudly,
	 * where the engine's system call filter would have killed it.
	 */
	if (privop_available()) {
		snprintf(inj->err, sizeof(inj->err),
			 "process %d: the engine injects into no process "
			 "itself",
			 (int)pid);
		errno = EPERM;
		return -1;
	}
	inj->drain_fd = drain ? drain_fd : -1;
	inj->drain = drain;
	inj->drain_arg = drain_arg;
	if (all_threads) {
		if (seize_all(inj) < 0)
			goto fail;
		inj->all_threads = 1;
	} else {
		if ((inj->tids = calloc(1, sizeof(pid_t))) == NULL ||
		    seize_one(inj, pid) < 0 || inj->ntids == 0)
			goto fail;
	}
	if (ptrace(PTRACE_GETREGS, pid, 0, &inj->saved) < 0)
		goto fail;
	inj->have_regs = 1;
	if (find_syscall_insn(inj) < 0) {
		snprintf(inj->err, sizeof(inj->err),
			 "no syscall instruction in the vdso of %d", (int)pid);
		inject_end(inj);
		return -1;
	}
	return 0;
fail:
	if (inj->stuck)
		snprintf(inj->err, sizeof(inj->err),
			 "thread %d of process %d did not stop within %d s "
			 "(it waits in the kernel where no signal reaches it: "
			 "vfork, a hung file system)",
			 (int)inj->stuck, (int)pid, STOP_WAIT_MS / 1000);
	else
		snprintf(inj->err, sizeof(inj->err), "ptrace %d: %s", (int)pid,
			 strerror(errno));
	{
		int saved = errno;

		inject_end(inj);
		errno = saved;
	}
	return -1;
}

long
inject_syscall(struct inject *inj, long nr, unsigned long a1, unsigned long a2,
	       unsigned long a3, unsigned long a4, unsigned long a5,
	       unsigned long a6)
{
	struct user_regs_struct r = inj->saved;
	int st;

	r.rip = inj->syscall_ip;
	r.rax = (unsigned long)nr;
	r.rdi = a1;
	r.rsi = a2;
	r.rdx = a3;
	r.r10 = a4;
	r.r8 = a5;
	r.r9 = a6;
	/* No restart of whatever call the thread was stopped in. */
	r.orig_rax = (unsigned long)-1;
	if (ptrace(PTRACE_SETREGS, inj->pid, 0, &r) < 0)
		return -errno;
	if (ptrace(PTRACE_SINGLESTEP, inj->pid, 0, 0) < 0)
		return -errno;
	for (;;) {
		if (wait_thread(inj, inj->pid, &st, 0) < 0)
			return -errno;
		if (!WIFSTOPPED(st))
			return -ESRCH;
		if (WSTOPSIG(st) == SIGTRAP)
			break;
		/*
		 * A signal-delivery stop came first. Stepping on without it
		 * would drop the signal: hand it back to the thread, which runs
		 * no handler before the single step ends (the step traps at
		 * the handler's first instruction at the latest, and then rip
		 * is not past our instruction: report EINTR to the caller).
		 */
		if (ptrace(PTRACE_SINGLESTEP, inj->pid, 0, WSTOPSIG(st)) < 0)
			return -errno;
	}
	if (ptrace(PTRACE_GETREGS, inj->pid, 0, &r) < 0)
		return -errno;
	if (r.rip != inj->syscall_ip + 2)
		return -EINTR;
	return (long)r.rax;
}

/*
 * After a single step the thread sits in a SIGTRAP signal-delivery stop:
 * were we to die there, the kernel would deliver that SIGTRAP and kill the
 * target. Resuming it without the signal, with an interrupt pending, moves
 * it to an event stop before it runs a single instruction.
 */
int
inject_restore(struct inject *inj)
{
	if (inj->have_regs &&
	    ptrace(PTRACE_SETREGS, inj->pid, 0, &inj->saved) < 0)
		return -1;
	if (ptrace(PTRACE_INTERRUPT, inj->pid, 0, 0) < 0 ||
	    ptrace(PTRACE_CONT, inj->pid, 0, 0) < 0)
		return -1;
	return event_stop(inj, inj->pid);
}

void
inject_end(struct inject *inj)
{
	if (inj->have_regs)
		ptrace(PTRACE_SETREGS, inj->pid, 0, &inj->saved);
	for (size_t i = 0; i < inj->ntids; i++) {
		pid_t *np;

		if (ptrace(PTRACE_DETACH, inj->tids[i], 0, 0) == 0 ||
		    errno != ESRCH)
			continue;
		/*
		 * Not stopped yet: let go of it when it is; or dying (a
		 * target killed while held): its exit is ours to collect,
		 * or its parent can never reap it (inject_reap).
		 */
		np = realloc(pending, (npending + 1) * sizeof(*pending));
		if (np != NULL) {
			pending = np;
			pending[npending++] = inj->tids[i];
		}
	}
	free(inj->tids);
	inj->tids = NULL;
	inj->ntids = 0;
}

/* Copies len bytes into the target's memory at addr. */
static int
poke_target(pid_t pid, uint64_t addr, const void *buf, size_t len)
{
	struct iovec l = {(void *)buf, len}, r = {(void *)addr, len};

	return process_vm_writev(pid, &l, 1, &r, 1, 0) == (ssize_t)len ? 0 : -1;
}

/* Room for one SCM_RIGHTS descriptor, aligned for its header. */
union fd_cmsg {
	struct cmsghdr h;
	char buf[CMSG_SPACE(sizeof(int))];
};

/*
 * Sends our descriptor fd with SCM_RIGHTS on the connected socket cs.
 * 0, or -1 with inj->err set.
 */
static int
send_fd(struct inject *inj, int cs, int fd)
{
	union fd_cmsg cm;
	struct msghdr mh = {0};
	struct iovec iov;
	char byte = 'u';

	iov.iov_base = &byte;
	iov.iov_len = 1;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	memset(&cm, 0, sizeof(cm));
	mh.msg_control = cm.buf;
	mh.msg_controllen = sizeof(cm.buf);
	CMSG_FIRSTHDR(&mh)->cmsg_level = SOL_SOCKET;
	CMSG_FIRSTHDR(&mh)->cmsg_type = SCM_RIGHTS;
	CMSG_FIRSTHDR(&mh)->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(CMSG_FIRSTHDR(&mh)), &fd, sizeof(int));
	if (sendmsg(cs, &mh, MSG_NOSIGNAL) != 1) {
		snprintf(inj->err, sizeof(inj->err), "sendmsg to %d: %s",
			 (int)inj->pid, strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * The target's recvmsg on its socket sock: msghdr, iovec and control in
 * its scratch page. The descriptor it received (its number there), or -1
 * (inj->err set when the recvmsg itself failed).
 */
static int
target_recv_fd(struct inject *inj, long sock, uint64_t scratch)
{
	uint64_t a_mh = scratch + 512, a_iov = scratch + 1024,
		 a_cm = scratch + 1536, a_byte = scratch + 2048;
	struct iovec tiov = {(void *)a_byte, 1};
	struct msghdr tmh = {0};
	union fd_cmsg cm;
	struct iovec l = {cm.buf, sizeof(cm.buf)};
	struct iovec r = {(void *)a_cm, sizeof(cm.buf)};
	struct msghdr back = {.msg_control = cm.buf,
			      .msg_controllen = sizeof(cm.buf)};
	struct cmsghdr *c;
	int out = -1;
	long rc;

	tmh.msg_iov = (struct iovec *)a_iov;
	tmh.msg_iovlen = 1;
	tmh.msg_control = (void *)a_cm;
	tmh.msg_controllen = sizeof(cm.buf);
	memset(&cm, 0, sizeof(cm));
	if (poke_target(inj->pid, a_iov, &tiov, sizeof(tiov)) < 0 ||
	    poke_target(inj->pid, a_mh, &tmh, sizeof(tmh)) < 0 ||
	    poke_target(inj->pid, a_cm, &cm, sizeof(cm)) < 0)
		return -1;
	rc = inject_syscall(inj, SYS_recvmsg, (unsigned long)sock, a_mh,
			    MSG_CMSG_CLOEXEC, 0, 0, 0);
	if (rc != 1) {
		snprintf(inj->err, sizeof(inj->err), "recvmsg in %d: %s",
			 (int)inj->pid, rc < 0 ? strerror((int)-rc) : "short");
		return -1;
	}
	if (process_vm_readv(inj->pid, &l, 1, &r, 1, 0) !=
	    (ssize_t)sizeof(cm.buf))
		return -1;
	c = CMSG_FIRSTHDR(&back);
	if (c && c->cmsg_type == SCM_RIGHTS)
		memcpy(&out, CMSG_DATA(c), sizeof(int));
	return out;
}

/* Copies len bytes out of the target's memory at addr. */
static int
peek_target(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec l = {buf, len}, r = {(void *)addr, len};

	return process_vm_readv(pid, &l, 1, &r, 1, 0) == (ssize_t)len ? 0 : -1;
}

/*
 * The one rule for every descriptor that enters a process (docs/design.md,
 * "Descriptors into a process"): while it sits in the target's file table
 * nothing but us may reach that table. Every thread of the target is
 * seized (so none of them can dup it, or clone a new sharer), no other task
 * on the host shares its file table or memory (CLONE_FILES, CLONE_VM), and
 * the target is not dumpable for the while, so that no process without
 * CAP_SYS_PTRACE can take a copy with pidfd_getfd() or open it through
 * /proc/PID/fd. *dumpable gets what to restore (-1: nothing). 0, or -1 with
 * inj->err set.
 */
static int
guard_table(struct inject *inj, long *dumpable)
{
	char who[192];
	int n;

	*dumpable = -1;
	if (!inj->all_threads) {
		snprintf(inj->err, sizeof(inj->err),
			 "process %d: a descriptor goes only to a process "
			 "whose every thread is stopped",
			 (int)inj->pid);
		return -1;
	}
	n = proc_sharers(inj->pid, PROC_SHARE_VM | PROC_SHARE_FILES, who,
			 sizeof(who));
	if (n != 0) {
		snprintf(inj->err, sizeof(inj->err),
			 n < 0 ? "process %d: this kernel cannot tell which "
				 "processes share its files (no kcmp(2))%s"
			       : "process %d shares its memory or files with "
				 "%s: no descriptor is handed to it",
			 (int)inj->pid, n < 0 ? "" : who);
		return -1;
	}
	*dumpable =
		inject_syscall(inj, SYS_prctl, PR_GET_DUMPABLE, 0, 0, 0, 0, 0);
	if (*dumpable != 1)
		return *dumpable < 0 ? -1 : 0; /* 0, 2: already shut */
	if (inject_syscall(inj, SYS_prctl, PR_SET_DUMPABLE, 0, 0, 0, 0, 0) <
	    0) {
		snprintf(inj->err, sizeof(inj->err),
			 "prctl(PR_SET_DUMPABLE) in %d failed", (int)inj->pid);
		*dumpable = -1;
		return -1;
	}
	return 0;
}

/*
 * A connected socket pair made inside the target (both ends its own);
 * the daemon takes a copy of the first end with pidfd_getfd(), which
 * needs no name in any file system. *ours our copy, tsv the target's two
 * numbers. 0, or -1 with inj->err set.
 */
static int
target_socketpair(struct inject *inj, uint64_t scratch, int *ours, int tsv[2])
{
	long rc = inject_syscall(inj, SYS_socketpair, AF_UNIX,
				 SOCK_STREAM | SOCK_CLOEXEC, 0, scratch, 0, 0);
	int pidfd;

	tsv[0] = tsv[1] = -1;
	if (rc < 0 ||
	    peek_target(inj->pid, scratch, tsv, 2 * sizeof(int)) < 0) {
		snprintf(inj->err, sizeof(inj->err), "socketpair in %d: %s",
			 (int)inj->pid, strerror(rc < 0 ? (int)-rc : EFAULT));
		tsv[0] = tsv[1] = -1;
		return -1;
	}
	/* Seized by us, the pid cannot name another process meanwhile. */
	pidfd = (int)syscall(SYS_pidfd_open, inj->pid, 0);
	*ours = pidfd < 0 ? -1
			  : (int)syscall(SYS_pidfd_getfd, pidfd, tsv[0], 0);
	if (pidfd >= 0)
		close(pidfd);
	if (*ours < 0) {
		snprintf(inj->err, sizeof(inj->err),
			 "pidfd_getfd of %d's socket: %s", (int)inj->pid,
			 strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * Hands one of our descriptors to the target without touching any file
 * system: the target makes a socket pair, we take a copy of one end and
 * send the descriptor over it with SCM_RIGHTS, and the target receives it
 * on the other. The messages live in a scratch page mapped in the target
 * for the purpose; guard_table() keeps everyone else out of its file
 * table meanwhile. Returns the descriptor's number in the target, or -1
 * with inj->err set.
 */
int
inject_pass_fd(struct inject *inj, int fd)
{
	long scratch, dumpable = -1;
	int out = -1, ours = -1, tsv[2] = {-1, -1};

	inj->err[0] = '\0';
	scratch = inject_syscall(inj, SYS_mmap, 0, 4096, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, (unsigned long)-1,
				 0);
	if (scratch < 0 && scratch > -4096) {
		snprintf(inj->err, sizeof(inj->err), "mmap in %d: %s",
			 (int)inj->pid, strerror((int)-scratch));
		return -1;
	}
	if (guard_table(inj, &dumpable) == 0 &&
	    target_socketpair(inj, (uint64_t)scratch, &ours, tsv) == 0 &&
	    send_fd(inj, ours, fd) == 0)
		out = target_recv_fd(inj, tsv[1], (uint64_t)scratch);
	if (ours >= 0)
		close(ours);
	for (int i = 0; i < 2; i++)
		if (tsv[i] >= 0)
			inject_syscall(inj, SYS_close, (unsigned long)tsv[i], 0,
				       0, 0, 0, 0);
	if (dumpable == 1)
		inject_syscall(inj, SYS_prctl, PR_SET_DUMPABLE, 1, 0, 0, 0, 0);
	inject_syscall(inj, SYS_munmap, (unsigned long)scratch, 4096, 0, 0, 0,
		       0);
	if (out < 0 && inj->err[0] == '\0')
		snprintf(inj->err, sizeof(inj->err),
			 "handing a descriptor to %d failed", (int)inj->pid);
	return out;
}

size_t
inject_reap(void)
{
	for (size_t i = 0; i < npending;) {
		int st, sig;
		pid_t r = waitpid(pending[i], &st, __WALL | WNOHANG);

		if (r == 0 || (r < 0 && errno == EINTR)) {
			i++;
			continue;
		}
		if (r > 0 && WIFSTOPPED(st)) {
			/* A signal it stopped to take goes with it. */
			sig = (st >> 16) == 0 ? WSTOPSIG(st) : 0;
			if (ptrace(PTRACE_DETACH, pending[i], 0, sig) < 0 &&
			    errno != ESRCH) {
				i++;
				continue;
			}
		}
		/* Let go, exited, or no longer ours. */
		pending[i] = pending[--npending];
	}
	return npending;
}

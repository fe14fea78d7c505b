/*
 * The target's side of an attach, by injection (inject.h) while every
 * thread of it is stopped: it makes a userfaultfd (or gets one from
 * /dev/userfaultfd) that we copy out, the matched regions are emptied and
 * registered, and it is let go (or held: tracee.h, hold.c). At the end its
 * own copy of the uffd is closed the same way. A root target held by
 * grant has all of this done by the privileged part (bygrant.c); the
 * injections here are for a process without one: an orphaned forked
 * child, or a restored one that is not the target's own (docs/privsep.md,
 * stage 3).
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
#include <sys/stat.h>

#include <event2/event.h>

#include "daemon/authz.h"
#include "daemon/compat.h"
#include "daemon/dest/internal.h"
#include "daemon/inject.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/migration.h"
#include "daemon/privop.h"
#include "daemon/probe.h"
#include "daemon/tracee.h"

/*
 * A thread an injection gave up on (it did not stop in time) stays seized
 * until it stops: looked for each second while there is one.
 */
static struct event *reap_ev;

/* Lets go the threads that stopped since; again in a second if any is left. */
static void
reap_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct timeval tv = {1, 0};

	if (inject_reap() > 0)
		evtimer_add(reap_ev, &tv);
}

/* After an injection that failed. */
void
dest_reap_later(void)
{
	if (reap_ev == NULL)
		reap_ev = evtimer_new(base, reap_cb, NULL);
	reap_cb(-1, 0, NULL);
}

/* Closes the target's own copy of the uffd, by injection. */
void
dest_close_target_fd(struct dest *d)
{
	struct inject inj;
	long rc;

	if (d->target_fd < 0)
		return;
	if (dest_by_grant(d)) {
		dest_grant_close(d);
		return;
	}
	/*
	 * Never inject into a process that merely inherited the pid, nor
	 * into another program the target ran since (its copy of the uffd
	 * closed with the exec anyway: it is O_CLOEXEC).
	 */
	if (!procref_same(&d->t)) {
		d->target_fd = -1;
		return;
	}
	if (inject_begin_draining(&inj, d->m->pid, 0, d->uffd, dest_drain_uffd,
				  d) < 0) {
		dest_reap_later();
		log_warnx("migration %s: %s (target's uffd fd %d stays open)",
			  log_id(d->m->id), inj.err, d->target_fd);
		return;
	}
	log_debug("migration %s: closing fd %d in process %d", log_id(d->m->id),
		  d->target_fd, (int)d->m->pid);
	rc = inject_syscall(&inj, SYS_close, (unsigned long)d->target_fd, 0, 0,
			    0, 0, 0);
	inject_end(&inj);
	if (rc < 0)
		log_warnx("migration %s: close(%d) in process %d: %s",
			  log_id(d->m->id), d->target_fd, (int)d->m->pid,
			  strerror((int)-rc));
	d->target_fd = -1;
}

/*
 * Test knob (tests/integration): behave as on a kernel without
 * UFFDIO_POISON (before 6.6), so that the fallback is tested on kernels
 * that have it. Never set in production.
 */
int
dest_poison_usable(void)
{
	const char *no = getenv("UFFDD_TEST_NO_POISON");

	return no == NULL || *no == '\0';
}

/*
 * A target that may not call userfaultfd() itself (not root, and
 * vm.unprivileged_userfaultfd=0; the user-mode-only kind would break the
 * target's system calls on missing pages) gets a full one from
 * /dev/userfaultfd: we open the device, hand the target a copy and have
 * it ask the device for a userfaultfd of its own (docs/design.md).
 */
static long
uffd_via_device(struct dest *d, struct inject *inj, char *err, size_t errlen)
{
	int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC), tdev;
	long rc;

	err[0] = '\0';
	if (dev < 0)
		return -EPERM;
	tdev = inject_pass_fd(inj, dev);
	close(dev);
	if (tdev < 0) {
		snprintf(err, errlen, "/dev/userfaultfd for process %d: %s",
			 (int)d->m->pid, inj->err);
		return -EPERM;
	}
	rc = inject_syscall(inj, SYS_ioctl, (unsigned long)tdev,
			    USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK, 0, 0,
			    0);
	inject_syscall(inj, SYS_close, (unsigned long)tdev, 0, 0, 0, 0, 0);
	if (rc < 0)
		snprintf(err, errlen, "USERFAULTFD_IOC_NEW in process %d: %s",
			 (int)d->m->pid, strerror((int)-rc));
	else
		log_info("process %d may not call userfaultfd(); it got one "
			 "from /dev/userfaultfd",
			 (int)d->m->pid);
	return rc;
}

/*
 * Nothing but the target's own threads may run while it is injected into:
 * another process sharing its file table could take the descriptors we
 * hand it (the /dev/userfaultfd one above all), one sharing its memory
 * could rewrite the instruction our calls go through or touch a page
 * between its discard and the registration. Refused, naming them.
 */
static int
alone(struct dest *d, char *err, size_t errlen)
{
	char who[192];
	int n = proc_sharers(d->m->pid, PROC_SHARE_VM | PROC_SHARE_FILES, who,
			     sizeof(who));

	if (n == 0)
		return 1;
	if (n < 0)
		snprintf(err, errlen,
			 "process %d: this kernel cannot tell which processes "
			 "share its memory or files (no kcmp(2))",
			 (int)d->m->pid);
	else
		snprintf(err, errlen,
			 "process %d shares its memory or files with %s, "
			 "which an attach cannot stop: refused",
			 (int)d->m->pid, who);
	return 0;
}

/*
 * Makes the target create a userfaultfd and copies it out (d->uffd, and
 * d->target_fd the target's copy). A target that may not make one itself
 * gets one from /dev/userfaultfd, and keeps no copy (d->sole, tracee.h).
 */
static int
make_uffd(struct dest *d, struct inject *inj, char *err, size_t errlen,
	  uint32_t *code)
{
	long rc = inject_syscall(inj, SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK,
				 0, 0, 0, 0, 0);

	if (rc == -EPERM && kfeat.dev_userfaultfd) {
		rc = uffd_via_device(d, inj, err, errlen);
		d->sole = rc >= 0;
	}
	*code = ERR_PERMISSION;
	if (rc < 0 && err[0])
		return -1;
	if (rc == -EPERM) {
		snprintf(err, errlen,
			 "userfaultfd in process %d: EPERM: set "
			 "vm.unprivileged_userfaultfd=1 or give the "
			 "process access to /dev/userfaultfd",
			 (int)d->m->pid);
		return -1;
	}
	*code = ERR_KERNEL;
	if (rc < 0) {
		snprintf(err, errlen, "userfaultfd in process %d: %s",
			 (int)d->m->pid, strerror((int)-rc));
		return -1;
	}
	d->target_fd = (int)rc;
	d->uffd = (int)syscall(SYS_pidfd_getfd, d->t.pidfd, d->target_fd, 0);
	if (d->uffd < 0) {
		snprintf(err, errlen, "pidfd_getfd: %s", strerror(errno));
		return -1;
	}
	if (d->sole) {
		inject_syscall(inj, SYS_close, (unsigned long)d->target_fd, 0,
			       0, 0, 0, 0);
		d->target_fd = -1;
	}
	return 0;
}

/*
 * What the migration uses on this kernel. Shared memory needs its feature
 * bit. The event features make the kernel tell us when the target itself
 * discards or moves migrating memory, so that no stale source page lands
 * there later. THREAD_ID names the faulting thread, for blocktime.
 */
uint64_t
dest_uffd_features(void)
{
	return (kfeat.uffd_features &
		(UFFD_FEATURE_MISSING_SHMEM | UFFD_FEATURE_MISSING_HUGETLBFS |
		 UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_UNMAP |
		 UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_EVENT_FORK |
		 UFFD_FEATURE_THREAD_ID)) |
	       (kfeat.access_likely ? UFFD_FEATURE_ACCESS_HINTS : 0);
}

/* UFFDIO_API with what the migration uses on this kernel. */
static int
negotiate(struct dest *d, char *err, size_t errlen)
{
	if (uffd_api(d->uffd, dest_uffd_features(), NULL) < 0) {
		snprintf(err, errlen, "UFFDIO_API: %s", strerror(errno));
		return -1;
	}
	d->have_poison = 1;
	d->hints = kfeat.access_likely;
	return 0;
}

/*
 * Discards what is resident in region reg and registers it. For shared
 * memory MADV_DONTNEED would only drop the mapping: the page cache keeps
 * the data and no MISSING fault would ever fire. Punch a hole instead;
 * shared hugetlb has a page cache too (hugetlbfs punches holes). A private
 * file mapping is only discarded (back to the file's pages); the source's
 * copies are written while the target is held (struct dest).
 */
int
dest_take_region(struct dest *d, struct inject *inj, size_t reg, char *err,
		 size_t errlen)
{
	struct region *r = &d->regs[reg].r;
	int shm = region_kind_shmem(r->kind) ||
		  (r->kind == REGION_HUGETLB && d->regs[reg].shared);
	uint64_t ioctls;
	long rc;

	if (inj == NULL) {
		if (dest_grant_discard(d, r->start, r->length, shm, err,
				       errlen) < 0)
			return -1;
		rc = 0;
	} else {
		rc = inject_syscall(inj, SYS_madvise, r->start, r->length,
				    shm ? MADV_REMOVE : MADV_DONTNEED, 0, 0, 0);
	}
	if (rc < 0) {
		snprintf(err, errlen, "madvise(%s) 0x%llx in process %d: %s",
			 shm ? "REMOVE" : "DONTNEED",
			 (unsigned long long)r->start, (int)d->m->pid,
			 strerror((int)-rc));
		return -1;
	}
	if (r->kind == REGION_FILE_PRIVATE)
		return 0;
	if (uffd_register(d->uffd, r->start, r->length,
			  UFFDIO_REGISTER_MODE_MISSING, &ioctls) < 0) {
		snprintf(err, errlen, "UFFDIO_REGISTER 0x%llx+0x%llx: %s",
			 (unsigned long long)r->start,
			 (unsigned long long)r->length, strerror(errno));
		return -1;
	}
	if (!(ioctls & (1ULL << 8)) || /* _UFFDIO_POISON, 6.6+ */
	    !dest_poison_usable())
		d->have_poison = 0;
	if (!(ioctls & (1ULL << _UFFDIO_COPY)) ||
	    (!(ioctls & (1ULL << _UFFDIO_ZEROPAGE)) &&
	     r->kind != REGION_HUGETLB)) {
		uffd_unregister(d->uffd, r->start, r->length);
		snprintf(err, errlen,
			 "region 0x%llx: kernel offers no UFFDIO_COPY/ZEROPAGE "
			 "there",
			 (unsigned long long)r->start);
		return -1;
	}
	return 0;
}

/*
 * The injection is over: the target's threads go, but for one held with
 * the only copy of its uffd (tracee.h). By grant, the privileged part
 * lets them go (inj is no injection of ours then).
 */
void
dest_let_go(struct dest *d, struct inject *inj)
{
	if (dest_by_grant(d)) {
		dest_grant_end(d, PRIVOP_DEST_GO, NULL, 0);
	} else if (!d->sole) {
		inject_end(inj);
		dest_reap_later(); /* threads that died while held */
	} else if (tracee_keep(inj) < 0) {
		/* Not held: a daemon that dies would leave it reading zeros. */
		log_warnx("migration %s: process %d cannot be held (%s); it "
			  "is stopped instead",
			  log_id(d->m->id), (int)d->m->pid, strerror(errno));
		procref_signal(&d->t, SIGSTOP);
	}
}

/*
 * Makes the target create a userfaultfd, copies it out, discards what is
 * resident in the matched regions and registers them, all while every thread
 * of the target is stopped, so no thread can touch a page in between.
 */
int
dest_setup_target(struct dest *d, char *err, size_t errlen, uint32_t *code)
{
	struct inject inj;
	size_t reg = 0;

	if (dest_by_grant(d))
		return dest_grant_setup(d, err, errlen, code);
	*code = ERR_KERNEL;
	err[0] = '\0';
	if (inject_begin(&inj, d->m->pid, 1) < 0) {
		*code = errno == EPERM ? ERR_PERMISSION : ERR_NO_PROCESS;
		snprintf(err, errlen, "%s", inj.err);
		dest_reap_later();
		return -1;
	}
	/*
	 * Every thread stopped: the target can neither exec nor exit now.
	 * It must still be the process checked when the attach came, and
	 * one its caller may act on (it may have run a setuid program
	 * since, or exited and left its pid to another).
	 */
	if (authz_may_ptrace(&d->owner, &d->t, code, err, errlen) < 0) {
		inject_end(&inj);
		return -1;
	}
	if (!alone(d, err, errlen)) {
		*code = ERR_INVALID;
		inject_end(&inj);
		return -1;
	}
	if (make_uffd(d, &inj, err, errlen, code) < 0 ||
	    negotiate(d, err, errlen) < 0)
		goto undo;
	*code = ERR_KERNEL;
	for (reg = 0; reg < d->nregs; reg++)
		if (dest_take_region(d, &inj, reg, err, errlen) < 0)
			goto undo;
	if (dest_private_missing(d) > 0 || d->held.precopy) {
		if (dest_hold_target(d, &inj, err, errlen) == 0)
			return 0;
		goto undo;
	}
	dest_let_go(d, &inj);
	return 0;
undo:
	while (reg-- > 0)
		uffd_unregister(d->uffd, d->regs[reg].r.start,
				d->regs[reg].r.length);
	if (d->target_fd >= 0)
		inject_syscall(&inj, SYS_close, (unsigned long)d->target_fd, 0,
			       0, 0, 0, 0);
	inject_end(&inj);
	d->target_fd = -1;
	d->sole = 0;
	if (d->uffd >= 0)
		close(d->uffd);
	d->uffd = -1;
	return -1;
}

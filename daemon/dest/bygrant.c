/*
 * What the engine asks of the privileged part about a target it holds by
 * grant (docs/privsep.md): stop the target, have it make its userfaultfd
 * and hand ours over, empty a region, hold it or let it go (target.c puts
 * these together); later close the target's copy and release a kept one.
 * A forked child with a grant of its own gets its copy from it too, and
 * a new engine gets a restored target's again by the grant it claimed.
 * Every process the engine acts on has a grant (an orphan, or a restored
 * forked child that is not the target's own, by PRIVOP_ORPHAN): one
 * without is not acted on at all.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "daemon/compat.h"
#include "daemon/dest/internal.h"
#include "daemon/imsg.h"
#include "daemon/log.h"
#include "daemon/migration.h"
#include "daemon/privop.h"
#include "daemon/probe.h"
#include "daemon/uffd.h"

int
dest_by_grant(const struct dest *d)
{
	return d->t.grant != 0 && privop_available();
}

/* Why a request failed: the privileged part's message, or errno's. */
static void
why(const struct imsg *rep, int e, char *err, size_t errlen, const char *what)
{
	if (rep->h.len > 0 && rep->h.len <= 512 &&
	    memchr(rep->data, '\0', rep->h.len) != NULL)
		snprintf(err, errlen, "%s", (const char *)rep->data);
	else
		snprintf(err, errlen, "%s: %s", what, strerror(e));
}

/* The attach's error code for what the privileged part answered. */
static uint32_t
code_of(int e)
{
	switch (e) {
	case EPERM:
	case EACCES:
		return ERR_PERMISSION;
	case ESRCH:
		return ERR_NO_PROCESS;
	case EBUSY:
		return ERR_INVALID; /* it shares its memory or files */
	default:
		return ERR_KERNEL;
	}
}

/*
 * One request about d's target, with no answer but whether it was done:
 * 0, or -1 with err filled (when given).
 */
static int
ask(struct dest *d, uint32_t type, const void *req, size_t len, char *err,
    size_t errlen, int drain)
{
	struct privop_drain dr = {d->uffd, dest_drain_uffd, d};
	struct imsg rep;
	int rc, e;

	rc = privop_call(type, d->t.grant, req, len, NULL, 0, &rep,
			 drain && d->uffd >= 0 ? &dr : NULL);
	e = errno;
	if (rc < 0 && err != NULL)
		why(&rep, e, err, errlen, "the privileged part");
	imsg_clear(&rep);
	errno = e;
	return rc;
}

int
dest_grant_end(struct dest *d, uint32_t how, char *err, size_t errlen)
{
	struct privop_dest_end r = {.how = how,
				    .precopy = how == PRIVOP_DEST_HOLD &&
					       d->held.precopy};
	char buf[256];

	if (ask(d, PRIVOP_DEST_END, &r, sizeof(r), err ? err : buf,
		err ? errlen : sizeof(buf), 0) == 0)
		return 0;
	/* A child that could not be held has nothing to release. */
	if (err == NULL && !(how == PRIVOP_DEST_RELEASE && errno == EPROTO))
		log_warnx("migration %s: process %d: %s", log_id(d->m->id),
			  (int)d->m->pid, buf);
	return -1;
}

/*
 * What the migration uses on this kernel. Shared memory needs its feature
 * bit. The event features make the kernel tell us when the target itself
 * discards or moves migrating memory, so that no stale source page lands
 * there later. THREAD_ID names the faulting thread, for blocktime.
 */
static uint64_t
uffd_features(void)
{
	return (kfeat.uffd_features &
		(UFFD_FEATURE_MISSING_SHMEM | UFFD_FEATURE_MISSING_HUGETLBFS |
		 UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_UNMAP |
		 UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_EVENT_FORK |
		 UFFD_FEATURE_THREAD_ID)) |
	       (kfeat.access_likely ? UFFD_FEATURE_ACCESS_HINTS : 0);
}

/*
 * The target made its uffd; ours comes back negotiated, and the answer
 * must hold together: one descriptor, a sole target with no copy of its
 * own, any other with one.
 */
int
dest_grant_uffd(struct dest *d, char *err, size_t errlen, uint32_t *code)
{
	struct privop_dest_uffd r = {.features = uffd_features()};
	const struct privop_dest_uffd_reply *a;
	struct imsg rep;
	int e;

	if (privop_call(PRIVOP_DEST_UFFD, d->t.grant, &r, sizeof(r), NULL, 0,
			&rep, NULL) < 0) {
		e = errno;
		why(&rep, e, err, errlen, "the target's userfaultfd");
		*code = code_of(e);
		imsg_clear(&rep);
		return -1;
	}
	a = imsg_payload(&rep, sizeof(*a));
	if (a == NULL || rep.nfd != 1 || a->sole > 1 ||
	    (a->sole ? a->target_fd != -1 : a->target_fd < 0)) {
		imsg_clear(&rep);
		snprintf(err, errlen,
			 "the target's userfaultfd: an answer "
			 "that does not hold together");
		*code = ERR_KERNEL;
		dest_grant_end(d, PRIVOP_DEST_UNDO, NULL, 0);
		return -1;
	}
	d->uffd = imsg_take_fd(&rep, 0);
	d->target_fd = a->target_fd;
	d->sole = (int)a->sole;
	imsg_clear(&rep);
	d->have_poison = 1;
	d->hints = kfeat.access_likely;
	return 0;
}

/* A region emptied in the stopped target (target.c). */
int
dest_grant_discard(struct dest *d, uint64_t start, uint64_t length, int shm,
		   char *err, size_t errlen)
{
	struct privop_dest_discard r = {
		.start = start, .length = length, .remove = shm != 0};

	return ask(d, PRIVOP_DEST_DISCARD, &r, sizeof(r), err, errlen, 0);
}

/*
 * Closes the target's own copy of the uffd, by its grant. One without a
 * grant has none the engine gave it.
 */
void
dest_close_target_fd(struct dest *d)
{
	if (d->target_fd < 0)
		return;
	if (dest_by_grant(d))
		dest_grant_close(d);
	d->target_fd = -1;
}

/*
 * The target's copy of its uffd closed by the privileged part; our uffd
 * is read meanwhile (a thread waiting for one of its events to be read
 * stops only then). A target that is not itself any more kept none.
 */
void
dest_grant_close(struct dest *d)
{
	char err[256];

	if (ask(d, PRIVOP_DEST_CLOSE, NULL, 0, err, sizeof(err), 1) < 0 &&
	    errno != ESRCH)
		log_warnx("migration %s: %s (target's uffd fd %d)",
			  log_id(d->m->id), err, d->target_fd);
	d->target_fd = -1;
}

/*
 * A forked child k gets a copy of its uffd from the privileged part (our
 * uffd is read meanwhile), or is held as its parent is (k->sole). Either
 * way a daemon that dies no longer leaves it reading zeros.
 */
void
dest_grant_child(struct dest *k)
{
	struct privop_drain dr = {k->uffd, dest_drain_uffd, k};
	const struct privop_dest_uffd_reply *a;
	struct imsg rep;
	char err[512] = "";

	if (k->sole) {
		if (ask(k, PRIVOP_CHILD_HOLD, NULL, 0, err, sizeof(err), 0) < 0)
			log_warnx("migration %s: forked process %d cannot be "
				  "held (%s): should the daemon die, its "
				  "missing pages would read as zeros",
				  log_id(k->root->m->id), (int)k->m->pid, err);
		return;
	}
	if (privop_call(PRIVOP_CHILD_UFFD, k->t.grant, NULL, 0, &k->uffd, 1,
			&rep, &dr) < 0)
		why(&rep, errno, err, sizeof(err), "the privileged part");
	else if ((a = imsg_payload(&rep, sizeof(*a))) != NULL && a->sole == 0 &&
		 a->target_fd >= 0)
		k->target_fd = a->target_fd;
	else
		snprintf(err, sizeof(err),
			 "an answer that does not hold "
			 "together");
	imsg_clear(&rep);
	if (k->target_fd < 0)
		log_warnx("migration %s: forked process %d holds no copy of "
			  "its uffd: %s",
			  log_id(k->root->m->id), (int)k->m->pid, err);
}

int
dest_grant_retake(uint64_t grant, int target_fd, char *err, size_t errlen)
{
	struct privop_dest_retake r = {.target_fd = target_fd};
	struct imsg rep;
	int fd = -1;

	if (privop_call(PRIVOP_DEST_RETAKE, grant, &r, sizeof(r), NULL, 0, &rep,
			NULL) < 0)
		why(&rep, errno, err, errlen, "its userfaultfd");
	else if (rep.nfd != 1)
		snprintf(err, errlen,
			 "its userfaultfd: an answer that does "
			 "not hold together");
	else
		fd = imsg_take_fd(&rep, 0);
	imsg_clear(&rep);
	return fd;
}

/*
 * Reading the target's userfaultfd at the bottom of the destination: a
 * failed read said once, and the drain that keeps the target moving while
 * the privileged part acts on it (bygrant.c), its messages kept for the
 * fault reader (fault.c). Calls nothing of the destination's.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/compat.h"
#include "daemon/dest/installer.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/migration.h"

/*
 * A failed read of the uffd other than "nothing pending" is worth a line,
 * once: a fork event needs a descriptor, and without one (EMFILE) the
 * kernel keeps it, and the forking thread, waiting.
 */
void
dest_uffd_read_failed(struct dest *d)
{
	if (errno == EAGAIN || d->fr.read_err)
		return;
	d->fr.read_err = 1;
	log_warn("migration %s: reading the userfaultfd", log_id(d->m->id));
}

/*
 * An injection into d's target waits for a thread that waits for one of
 * d's uffd events to be read: read them now, handle them once d is built
 * (dest_child_start(), find_cb(); at teardown they are dropped).
 */
void
dest_drain_uffd(void *arg)
{
	struct dest *d = arg;
	struct uffd_msg msgs[64];
	int changed = 0;
	ssize_t r;

	/*
	 * An event read here lets the target change its map before the
	 * event is handled: bulk frames planned before are planned again.
	 */
	dest_installer_quiet();
	while ((r = read(d->uffd, msgs, sizeof(msgs))) > 0 ||
	       (r < 0 && errno == EINTR)) {
		size_t n;

		if (r < 0)
			continue; /* EINTR */
		n = (size_t)r / sizeof(msgs[0]);
		d->fr.backlog =
			realloc(d->fr.backlog,
				(d->fr.nbacklog + n) * sizeof(*d->fr.backlog));
		if (d->fr.backlog == NULL)
			fatal("uffd messages");
		memcpy(d->fr.backlog + d->fr.nbacklog, msgs,
		       n * sizeof(msgs[0]));
		d->fr.nbacklog += n;
		for (size_t i = 0; i < n; i++)
			changed |= msgs[i].event != UFFD_EVENT_PAGEFAULT;
	}
	dest_installer_resume(changed);
	if (r < 0)
		dest_uffd_read_failed(d);
}

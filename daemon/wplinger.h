/*
 * A write tracker's end, kept out of a live process's way. Closing an
 * async tracker's userfaultfd unregisters its ranges: the kernel takes the
 * tracked process's mmap lock for writing and clears the write-protect
 * bit of every page under it (on a 512 MiB guest, QEMU's address space
 * locked while its 131072 entries are walked). Done at the end of a
 * migration, that lands in the one window an operator waits on: QEMU
 * writing its device state after go (docs/qemu-two-hosts.md measures the
 * downtime halved by waiting). So a tracker is released, not stopped:
 * kept open until its process has exited (its address space is gone, and
 * the close costs nothing) or WPLINGER_S seconds have passed, whichever
 * comes first. An async tracker needs nobody meanwhile: the kernel itself
 * lets a protected page's writer on.
 */
#ifndef UFFDD_WPLINGER_H
#define UFFDD_WPLINGER_H

#include "daemon/wptrack.h"

/* The longest a released async tracker stays open. */
#define WPLINGER_S 5

struct procref;

/*
 * Ends tracker w (taken over: *w becomes WPTRACK_NONE) of process t: a
 * sync tracker at once (its writers would wait on faults nobody
 * answers), an async one as above.
 */
void wptrack_release(struct wptrack *w, const struct procref *t);
/*
 * wptrack_start() (wptrack.h), once any tracker of t still lingering is
 * closed: a range registered with it could not be registered again.
 */
int wptrack_start_over(struct wptrack *, const struct procref *t,
		       const struct range *rs, size_t n, enum wptrack_mode mode,
		       char *why, size_t len);
/* At the daemon's exit: every tracker still lingering closed. */
void wptrack_release_all(void);

#endif

/*
 * Feeding a target its pages: the installer (install.c) puts them in and
 * says what stopped it; here an event it must wait for is read (fault.c)
 * and the install goes on, and a refusal ends the migration (lifecycle.c).
 * Above the installer and the fault reader, below what hands frames in
 * (pagedata.c, precopy.c).
 */
#include "config.h"

#include <event2/buffer.h>

#include "daemon/dest/internal.h"

/*
 * Installs the pages of frame pd that t lacks (see dest_install_missing()).
 * -1 when t can take no more: its target gone (dest_target_exited() ran)
 * or the migration failed.
 */
int
dest_install_pages(struct dest *t, struct dest *root, struct dst_region *dr,
		   const Uffdd__PageData *pd, const struct evbuffer_iovec *v,
		   int nv)
{
	struct install_try it = {0};
	enum install_res res;

	while ((res = dest_install_missing(t, root, dr, pd, v, nv, &it)) ==
	       INSTALL_EVENTS)
		dest_read_faults(t);
	if (res == INSTALL_GONE)
		dest_target_exited(t);
	else if (res == INSTALL_FAILED)
		dest_fail(t->root ? t->root : t, "%s", it.why);
	return res == INSTALL_DONE ? 0 : -1;
}

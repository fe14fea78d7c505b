/*
 * The bulk lane's pace: held while one thread waits for a demand answer,
 * and from the start of an attach --record-working-set until the
 * recording is over. Calls nothing of the destination's.
 */
#include "config.h"

#include <event2/event.h>

#include "daemon/conn.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/migration.h"

/*
 * While one thread waits for a demand answer, the bulk lane waits: on a
 * busy machine the daemons share CPUs, and installing bulk frames kept the
 * source from running to answer. Only for one: with several requests in
 * flight (threads faulting back to back) holding the lane starved it, and
 * every page came on demand at half the speed.
 */
void
dest_bulk_hold(struct dest *d)
{
	int rec = (d->m->ws != NULL && !migration_ws_closed(d->m)) ||
		  d->bh.run_hold == 1;

	if (d->bulk)
		conn_pause(d->bulk, d->fr.nrequests == 1 || rec);
	if (d->in.pending && d->fr.nrequests != 1)
		event_active(d->in.piece_ev, EV_TIMEOUT, 0);
}

/* The recording's end, checked every 100 ms: the bulk lane goes on. */
static void
ws_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct dest *d = arg;

	if (!migration_ws_closed(d->m))
		return;
	event_del(d->bh.ws_ev);
	dest_bulk_hold(d);
}

/*
 * attach --record-working-set: the bulk lane is held from the start until
 * the recording is over (dest_bulk_hold()); a page the bulk stream brought
 * first would be touched without a fault, and missing from the record.
 */
void
dest_ws_watch(struct dest *d)
{
	struct timeval tv = {0, 100 * 1000};

	d->bh.ws_ev = event_new(base, -1, EV_PERSIST, ws_cb, d);
	if (d->bh.ws_ev == NULL)
		fatal("working-set timer");
	event_add(d->bh.ws_ev, &tv);
}

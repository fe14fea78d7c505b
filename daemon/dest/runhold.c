/*
 * attach with hold_bulk (migrate-qemu receive): the bulk lane is not read
 * until the target runs. The destination QEMU loads its device state and
 * starts its guest in the stop window, on CPUs the bulk stream would take
 * (decrypting, installing, and the source encrypting for it). Faults are
 * answered as ever on the demand lane. The client that attached releases
 * it (RELEASE) once the guest runs; if it never does, the lane is read
 * BULK_HOLD_SECS after the target's first fault all the same, so that a
 * client that died does not leave the pages to demand alone.
 *
 * The migration's completion waits for the same word (complete.c): a
 * pre-copy has every page in at its switchover, in the stop window, and
 * its completion would run there (the source's last checks of what it
 * froze, its COMMIT, its process ended) while the destination QEMU loads
 * and starts. A pre-copy's hold counts from the switchover.
 */
#include "config.h"

#include <string.h>

#include <event2/event.h>

#include "daemon/authz.h"
#include "daemon/conn.h"
#include "daemon/control.h"
#include "daemon/dest/internal.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/migration.h"
#include "daemon/role.h"

#define BULK_HOLD_SECS 10

static void
release(struct dest *d, const char *why)
{
	Uffdd__Ping p = UFFDD__PING__INIT;

	if (d->bh.run_hold != 1)
		return;
	d->bh.run_hold = 2;
	if (d->bh.run_hold_ev)
		event_del(d->bh.run_hold_ev);
	log_info("migration %s: bulk lane read from now (%s)", log_id(d->m->id),
		 why);
	/* Lanes down: the next demand HELLO says nothing of a hold. */
	if (d->bh.src_holds && d->demand) {
		conn_send(d->demand, FRAME_BULK_GO, &p.base);
		conn_flush(d->demand);
	}
	d->bh.src_holds = 0;
	dest_bulk_hold(d);
}

/* The target runs: its bulk lane is read, its migration may complete. */
static void
target_runs(struct dest *d, const char *why)
{
	if (d->bh.complete_held && d->bh.run_hold != 1)
		log_info("migration %s: the target runs (%s): the migration "
			 "may complete",
			 log_id(d->m->id), why);
	release(d, why);
	if (!d->bh.complete_held)
		return;
	d->bh.complete_held = 0;
	if (d->bh.run_hold_ev)
		event_del(d->bh.run_hold_ev);
	dest_maybe_complete(d);
}

/* The source's demand HELLO: whether it holds the stream for us too. */
void
dest_run_hold_hello(struct dest *d, const Uffdd__Hello *h)
{
	d->bh.src_holds = 0;
	/* A pre-copy's rounds come before the target runs: no hold. */
	if (d->held.precopy) {
		release(d, "a pre-copy streams before its target runs");
		return;
	}
	for (size_t i = 0; d->bh.run_hold == 1 && i < h->n_features; i++)
		if (strcmp(h->features[i], FEATURE_BULK_HOLD) == 0)
			d->bh.src_holds = 1;
}

static void
hold_over(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	target_runs(arg, "held for its longest after the first fault or "
			 "the switchover");
}

/*
 * A fault, or a pre-copy's switchover, while held: the longest hold
 * counts from the first.
 */
void
dest_run_hold_clock(struct dest *d)
{
	struct timeval tv = {BULK_HOLD_SECS, 0};

	if ((d->bh.run_hold != 1 && !d->bh.complete_held) ||
	    d->bh.run_hold_ev != NULL)
		return;
	d->bh.run_hold_ev = evtimer_new(base, hold_over, d);
	evtimer_add(d->bh.run_hold_ev, &tv);
}

/* RELEASE: the target runs; its bulk lane is read. */
static void
release_request(uint64_t serial, const struct authz_caller *who,
		struct procref *t, const ProtobufCMessage *msg)
{
	const Uffdd__GoRequest *req = (const Uffdd__GoRequest *)msg;
	struct migration *m = migration_find(req->id, ROLE_DEST);
	Uffdd__GoReply rep = UFFDD__GO_REPLY__INIT;
	struct dest *d = m ? m->impl : NULL;

	(void)t;
	if (m == NULL || !control_may_see(m)) {
		control_reply_error(serial, ERR_UNKNOWN_ID,
				    "release: unknown migration ID %s",
				    log_id(req->id));
		return;
	}
	/*
	 * A held migration that ended (its bulk lane can stream faster than
	 * a client releases it) holds nothing any more: done already.
	 */
	if (d == NULL && m->ph.hold_bulk) {
		rep.id = m->id;
		control_reply(serial, FRAME_CTL_RELEASE_REPLY, &rep.base);
		return;
	}
	if (d == NULL || d->bh.run_hold == 0) {
		control_reply_error(serial, ERR_INVALID,
				    "release: migration %s was not attached "
				    "with its bulk lane held; nothing changed",
				    log_id(m->id));
		return;
	}
	target_runs(d, "released");
	rep.id = m->id;
	control_reply(serial, FRAME_CTL_RELEASE_REPLY, &rep.base);
}

static const struct role_request release_ops = {
	.type = FRAME_CTL_RELEASE,
	.verb = "release",
	.request = release_request,
};

void
dest_runhold_register(void)
{
	role_register_request(&release_ops);
}

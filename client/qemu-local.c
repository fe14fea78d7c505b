/*
 * migrate-qemu --precopy: a guest pre-copied between two QEMUs of one host.
 * The two-host halves (send, receive) run interleaved in this process, so
 * that one host gets exactly the flow two hosts get:
 *
 *   1. source QEMU: x-ignore-shared, events, pause-before-switchover;
 *      destination QEMU: x-ignore-shared, migrate-incoming on a port of
 *      127.0.0.1 it picks; no RAM file of one is the other's;
 *   2. the holder of the source's RAM files is exported deferred with
 *      pre-copy, QEMU's writes tracked in QEMU; the destination QEMU is
 *      attached by block name, not held during the rounds;
 *   3. once the rounds converge, QEMU's migration starts, stops the guest
 *      and pauses before the switchover; go sends what the guest wrote
 *      last and returns once the destination switched over;
 *   4. QEMU sends the device state; the destination runs (a cont given
 *      before, unless --no-resume); every page resident, the source QEMU
 *      quits.
 *
 * The halves say what they do, as on two hosts; a failure undoes both
 * (send_undo, receive_undo): until QEMU sent the device state the source
 * guest runs on.
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "client/client.h"
#include "client/qemu-halves.h"

struct local {
	struct send s;
	struct receive r;
	char to[32]; /* where the destination QEMU listens */
};

/* Neither QEMU's RAM file is the other's; the destination's port known. */
static int
local_link(struct local *l)
{
	if (ramfiles_apart(l->s.b, l->s.n, l->r.b, l->r.n) < 0)
		return -1;
	snprintf(l->to, sizeof(l->to), "127.0.0.1:%d", l->r.port);
	l->s.to = l->to;
	flow_say("pre-copy then post-copy on one host (uffdd moves the RAM "
		 "files; QEMU the device state)");
	return 0;
}

/* The destination attaches to the export just made, by its ID. */
static int
local_attach(struct local *l)
{
	l->r.id = l->s.id;
	return receive_attach(&l->r);
}

/* Each step is one half's, or the flow's own (link, attach). */
struct step {
	int (*snd)(struct send *);
	int (*rcv)(struct receive *);
	int (*both)(struct local *);
};

static const struct step local_steps[] = {
	{send_open, NULL, NULL},      {NULL, receive_open, NULL},
	{NULL, NULL, local_link},     {send_export, NULL, NULL},
	{NULL, NULL, local_attach},   {send_wait_ready, NULL, NULL},
	{send_prepare, NULL, NULL},   {NULL, receive_cont, NULL},
	{send_switch, NULL, NULL},    {send_go, NULL, NULL},
	{send_devstate, NULL, NULL},  {NULL, receive_loaded, NULL},
	{NULL, receive_finish, NULL}, {send_finish, NULL, NULL},
};

static int
local_step(struct local *l, const struct step *st)
{
	if (st->snd)
		return st->snd(&l->s);
	if (st->rcv)
		return st->rcv(&l->r);
	return st->both(l);
}

int
qemu_local(const char *src_qmp, const char *dst_qmp, const char *src_ctl,
	   const char *dst_ctl, const char *peer, int resume, double timeout)
{
	struct local l = {
		.s = {.qmp = src_qmp,
		      .ctl = src_ctl,
		      .timeout = timeout,
		      .holder = -1,
		      .precopy = 1},
		.r = {.qmp = dst_qmp,
		      .ctl = dst_ctl,
		      .from = peer,
		      .incoming = "127.0.0.1:0",
		      .timeout = timeout,
		      .resume = resume},
	};
	size_t n = sizeof(local_steps) / sizeof(local_steps[0]), done = 0;

	flow_defer_signals();
	while (done < n && !flow_stop_signal() &&
	       local_step(&l, &local_steps[done]) == 0)
		done++;
	if (done < n) {
		if (flow_stop_signal())
			fprintf(stderr, "uffd-client: %s: stopping\n",
				strsignal(flow_stop_signal()));
		send_undo(&l.s);
		receive_undo(&l.r);
	} else if (l.s.holder > 0) {
		/* The daemon kills it once the COMMIT is acknowledged. */
		holder_reap(l.s.holder, HOLDER_REAP_SECS, l.s.ctl, l.s.id);
	}
	qmp_close(l.s.q);
	qmp_close(l.r.q);
	flow_end_by_signal();
	return done == n ? 0 : 1;
}

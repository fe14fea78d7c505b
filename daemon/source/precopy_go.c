/*
 * export --deferred --precopy: the switch waits for GO (docs/design.md,
 * "A switch the operator gives"). Until it comes, converged rounds are
 * paced; GO freezes at once (or when the round under way ends), and its
 * client is answered once the destination switched over (precopy.c),
 * or with the failure that came first.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "daemon/control.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/migration.h"
#include "daemon/source/internal.h"

void
source_precopy_go_failed(struct source *s, uint32_t code, const char *why)
{
	if (s->pc == NULL)
		return;
	s->m->pre.wait_go = 0; /* a go from now is refused: it ended */
	if (s->pc->go_serial == 0)
		return;
	control_reply_error(s->pc->go_serial, code, "go: %s", why);
	s->pc->go_serial = 0;
}

/* The pause of a converged pre-copy is over (PRECOPY_PACE_MS). */
static void
pace_cb(evutil_socket_t fd, short what, void *arg)
{
	struct source *s = arg;

	(void)fd;
	(void)what;
	source_precopy_sweep(s);
}

void
source_precopy_wait_go(struct source *s)
{
	s->m->pre.wait_go = 1;
	if ((s->pc->pace_ev = evtimer_new(base, pace_cb, s)) == NULL)
		fatalx("evtimer_new");
}

int
source_precopy_go(struct source *s, uint64_t serial)
{
	struct precopy *pc = s->pc;

	if (pc == NULL || !s->m->pre.wait_go || pc->went ||
	    pc->phase != PC_ROUNDS || s->m->state == MIG_FAILED ||
	    s->m->state == MIG_COMPLETE)
		return -1;
	pc->went = 1;
	pc->go_serial = serial;
	pc->go_at = now_ns();
	s->m->pre.wait_go = 0;
	s->m->ph.went = 1;
	log_info("migration %s: go after %u pre-copy rounds%s",
		 log_id(s->m->id), s->m->pre.rounds,
		 s->m->pre.ready ? "" : " (before they converged)");
	/*
	 * Go is the switch, now: no last round while the process runs (a
	 * guest stopped already), the freeze at once between two paced
	 * rounds, else at the end of the round under way. The freeze sends
	 * what was written since the last scan, behind the rounds' pages on
	 * the same lane (the destination takes them in order).
	 */
	if (evtimer_pending(pc->pace_ev, NULL) && s->bulk != NULL &&
	    s->m->state == MIG_RUNNING) {
		evtimer_del(pc->pace_ev);
		source_precopy_freeze(s);
	}
	return 0;
}

int
source_precopy_prepare(struct source *s, const struct authz_caller *who,
		       uint32_t *code, char *err, size_t errlen)
{
	if (s->pc->went || s->pc->phase != PC_ROUNDS) {
		*code = ERR_INVALID;
		snprintf(err, errlen, "its pre-copy rounds are over");
		return -1;
	}
	return source_freeze_checked(&s->t, who, &s->wp, &s->was_stopped, code,
				     err, errlen);
}

int
source_precopy_wants_ack(const struct source *s, const Uffdd__Hello *h)
{
	if (s->pc == NULL || !(s->m->pre.wait_go || s->pc->went))
		return 0;
	for (size_t i = 0; i < h->n_features; i++)
		if (strcmp(h->features[i], FEATURE_SWITCHOVER_ACK) == 0)
			return 1;
	log_warnx("migration %s: the destination does not say when it has "
		  "switched over (an older uffdd): go will be answered when "
		  "the switchover is sent, not when it is taken",
		  log_id(s->m->id));
	return 0;
}

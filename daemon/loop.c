/* The daemon's event loop, which polls for a while after demand traffic. */
#include "config.h"

#include <sched.h>
#include <stdint.h>

#include <event2/event.h>

#include "daemon/stats.h"
#include "daemon/uffdd.h"

/*
 * Busy polling (--poll-us): after a demand request or answer the next
 * event is due in microseconds, and waking a daemon that sleeps on another
 * CPU costs far more (~65 us on these VMs). Until poll_until the loop
 * looks for events without sleeping, yielding to anything else runnable.
 * Also on one CPU: a daemon pinned there polls for a peer on another CPU
 * or host (without, each fault during bulk waited ~70 us instead of 14 in
 * the bench's two-host placement), and a peer on the same CPU gets it at
 * each yield (pinned idle faults were no slower: FINDINGS.md). Never while
 * bulk data moves: then the daemon is busy anyway, and the target's woken
 * thread needs the CPU that polling would hold.
 */
#define BULK_QUIET_NS 1000000
static uint64_t poll_until, bulk_at;

void
loop_poll(void)
{
	uint64_t now;

	if (conf.poll_us == 0)
		return;
	now = now_ns();
	if (now - bulk_at >= BULK_QUIET_NS)
		poll_until = now + (uint64_t)conf.poll_us * 1000;
}

void
loop_bulk(void)
{
	bulk_at = now_ns();
	poll_until = 0;
}

void
run_loop(void)
{
	for (;;) {
		int rc;

		if (poll_until && now_ns() < poll_until) {
			rc = event_base_loop(base, EVLOOP_NONBLOCK);
			sched_yield();
		} else {
			poll_until = 0;
			rc = event_base_loop(base, EVLOOP_ONCE);
		}
		if (rc != 0 || event_base_got_exit(base) ||
		    event_base_got_break(base))
			break;
	}
}

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
 * Only where the daemon may run on more than one CPU (on one, polling only
 * takes the CPU from the peer it waits for), and never while bulk data
 * moves: then the daemon is busy anyway, and the target's woken thread
 * needs the CPU that polling would hold.
 */
#define BULK_QUIET_NS 1000000
static uint64_t poll_until, bulk_at;
static int multi_cpu = -1;

void
loop_poll(void)
{
	uint64_t now;

	if (multi_cpu < 0) {
		cpu_set_t set;

		multi_cpu = sched_getaffinity(0, sizeof(set), &set) == 0 &&
			    CPU_COUNT(&set) > 1;
	}
	if (conf.poll_us == 0 || !multi_cpu)
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

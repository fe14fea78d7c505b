/* The daemon's event loop, which polls for a while after demand traffic. */
#include "config.h"

#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>

#include <event2/event.h>

#include "daemon/conffile.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/stats.h"

/*
 * Busy polling (--poll-us): after a demand request or answer the next
 * event is due in microseconds, and waking a daemon that sleeps on another
 * CPU costs far more (~65 us on these VMs). Until poll_until the loop
 * looks for events without sleeping, yielding to anything else runnable.
 * Also on one CPU: a daemon pinned there polls for a peer on another CPU
 * or host (without, each fault during bulk waited ~70 us instead of 14 in
 * the bench's two-host placement). Where the daemon may run on several
 * CPUs, a poll ends at the first yield that let another task run, or at
 * a preemption: the CPU is wanted, and polling on would hold two busy
 * daemons on one CPU while the target's thread waits for a wakeup on
 * another (docs/benchmarks.md, "Faults during bulk: pieces and polls").
 *
 * loop_poll() does not start while bulk data moves: the daemon is busy
 * then. loop_poll_now() does, for an answer that is due while nothing else
 * moves: the destination's one request holds its bulk lane. (The source
 * polling so after each answer gained little once loop_yield_woken() was
 * in, and kept both daemons on one vCPU unpinned: docs/benchmarks.md.)
 */
#define BULK_QUIET_NS 1000000
/* Demand traffic this recent makes bulk work go in small steps. */
#define DEMAND_RECENT_NS 5000000
#define AFFINITY_NS 100000000
/* The daemon's event base (each part makes its own in main). */
struct event_base *base;

static uint64_t poll_until, bulk_at, demand_at, fault_at;
static int poll_forced; /* by loop_poll_now(): bulk data does not end it */
static long poll_switches;

static long
switches(void)
{
	struct rusage ru;

	return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_nivcsw : -1;
}

/*
 * Whether the daemon may run on one CPU only, as of at most 100 ms ago.
 * There a yield is all polling can do for a task that shares the CPU (a
 * peer pinned there with it gets the CPU at once), so the poll goes on;
 * elsewhere it ends once the CPU is wanted.
 */
static int
one_cpu(uint64_t now)
{
	static uint64_t looked;
	static int one;

	/* Looked at again now and then: affinity can change (taskset). */
	if (looked == 0 || now - looked > AFFINITY_NS) {
		cpu_set_t cpus;

		one = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 &&
		      CPU_COUNT(&cpus) == 1;
		looked = now;
	}
	return one;
}

static void
poll_start(uint64_t now, int forced)
{
	poll_until = now + (uint64_t)conf.poll_us * 1000;
	poll_forced = forced;
	poll_switches = one_cpu(now) ? -1 : switches();
}

/*
 * A thread of the target was just woken and bulk work would go on. Where
 * the daemon runs on one CPU only, the thread may be waiting for that very
 * CPU, and the scheduler lets a running task use up its slice (up to a
 * few ms: seen at 1.2 ms with pages slow to install) before a woken one
 * preempts it: the thread gets the CPU first. Elsewhere the thread gets
 * an idle CPU of its own, and a yield would hand ours to another daemon
 * (unpinned faults during bulk were 4x slower with it).
 */
void
loop_yield_woken(void)
{
	if (one_cpu(now_ns()))
		sched_yield();
}

void
loop_poll(void)
{
	uint64_t now = now_ns();

	demand_at = now;
	if (conf.poll_us && now - bulk_at >= BULK_QUIET_NS)
		poll_start(now, 0);
}

void
loop_poll_now(void)
{
	uint64_t now = now_ns();

	demand_at = now;
	if (conf.poll_us)
		poll_start(now, 1);
}

int
loop_demand_recent(void)
{
	return demand_at && now_ns() - demand_at < DEMAND_RECENT_NS;
}

void
loop_fault_seen(void)
{
	fault_at = now_ns();
}

int
loop_faults_recent(void)
{
	uint64_t at = fault_at > demand_at ? fault_at : demand_at;

	return at && now_ns() - at < DEMAND_RECENT_NS;
}

void
loop_bulk(void)
{
	bulk_at = now_ns();
	if (!poll_forced)
		poll_until = 0;
}

/*
 * The event base of a part, with PRIO_COUNT priorities. libevent runs an
 * active queue until it is empty, callbacks activated meanwhile included:
 * a chain of bulk callbacks that each activate the next (the bulk lane's
 * frames, while the source keeps the socket full) ran as long as the
 * stream lasted without looking at a descriptor, and a fault on the
 * userfaultfd waited for the whole stream (870 ms of a guest's run in one
 * measured case). So below the fault priority callbacks run for at most
 * LOOP_BULK_US before the loop looks again; a look that finds nothing new
 * is one epoll_wait that does not block. A look after every callback
 * read each fault at once, and a busy target's threads then asked for
 * pages the bulk stream was about to bring: its migration took twice as
 * long. 1 ms let a guest's faults wait for it one after another; 250 us
 * shortened its longest stall by a third, 100 us did not (docs/design.md,
 * "The event loop and its priorities").
 */
struct event_base *
loop_base_new(void)
{
	struct event_config *cfg = event_config_new();
	struct timeval tv = {0, LOOP_BULK_US};
	struct event_base *b = NULL;

	/* The bound by a clock finer than the tick of the coarse one. */
	if (cfg != NULL &&
	    event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER) == 0 &&
	    event_config_set_max_dispatch_interval(cfg, &tv, -1,
						   PRIO_CONTROL) == 0)
		b = event_base_new_with_config(cfg);
	if (cfg != NULL)
		event_config_free(cfg);
	if (b == NULL)
		fatalx("event_base_new");
	if (event_base_priority_init(b, PRIO_COUNT) < 0)
		fatalx("event_base_priority_init");
	return b;
}

void
run_loop(void)
{
	for (;;) {
		int rc;

		if (poll_until && now_ns() < poll_until) {
			rc = event_base_loop(base, EVLOOP_NONBLOCK);
			sched_yield();
			if (poll_switches >= 0 && switches() != poll_switches)
				poll_until = 0; /* the CPU is wanted */
		} else {
			poll_until = 0;
			rc = event_base_loop(base, EVLOOP_ONCE);
		}
		if (rc != 0 || event_base_got_exit(base) ||
		    event_base_got_break(base))
			break;
	}
}

void
loop_hold_stop_signals(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigprocmask(SIG_BLOCK, &set, NULL);
}

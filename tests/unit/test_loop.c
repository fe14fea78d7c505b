/*
 * The event loop's bound (daemon/loop.c, loop_base_new()): a chain of
 * bulk callbacks, each activating the next, as the bulk lane's frames do
 * while the source keeps its socket full, must not keep the loop from
 * looking at its descriptors. Each callback here works BULK_WORK_US, as
 * a frame's install does; a fault that becomes readable during the chain
 * is served once LOOP_BULK_US of them have run. The same chain on
 * libevent's default base runs on without a look, which is why the bound
 * is set: checked too, so that this test shows what it guards.
 */
#include "config.h"

#include <unistd.h>

#include <event2/event.h>

#include "daemon/conffile.h"
#include "daemon/loop.h"
#include "daemon/stats.h"
#include "tests/unit/unit.h"

/* The daemon's settings (confrun.c there): the defaults, zero, here. */
struct uffdd_conf conf;

/* Bulk callbacks the chain may run before giving up on the fault. */
#define CHAIN_MAX 20000
/* What one bulk callback works, about a 256 KiB frame's install. */
#define BULK_WORK_US 50

struct chain {
	struct event_base *b;
	struct event *bulk, *fault;
	int pipe[2];
	long nbulk, at_fault;
};

static void
bulk_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct chain *c = arg;

	uint64_t t = now_ns();

	(void)fd;
	(void)ev;
	while (now_ns() - t < BULK_WORK_US * 1000ull)
		; /* busy, as an install is: a sleep would let others run */
	if (++c->nbulk == 1 && write(c->pipe[1], "f", 1) != 1)
		c->nbulk = CHAIN_MAX; /* nothing to wait for */
	if (c->nbulk >= CHAIN_MAX)
		event_base_loopbreak(c->b);
	else
		event_active(c->bulk, EV_TIMEOUT, 0);
}

static void
fault_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct chain *c = arg;
	char x;

	(void)ev;
	if (read(fd, &x, 1) == 1)
		c->at_fault = c->nbulk;
	event_base_loopbreak(c->b);
}

/* Bulk callbacks run from the first one to the fault's, -1 for never. */
static long
run_chain(struct event_base *b)
{
	struct chain c = {.b = b, .at_fault = -1};

	if (pipe(c.pipe) < 0)
		return -2;
	c.bulk = event_new(b, -1, 0, bulk_cb, &c);
	c.fault = event_new(b, c.pipe[0], EV_READ | EV_PERSIST, fault_cb, &c);
	event_priority_set(c.bulk, PRIO_BULK);
	event_priority_set(c.fault, PRIO_FAULT);
	event_add(c.fault, NULL);
	event_active(c.bulk, EV_TIMEOUT, 0);
	event_base_dispatch(b);
	event_free(c.bulk);
	event_free(c.fault);
	close(c.pipe[0]);
	close(c.pipe[1]);
	return c.at_fault;
}

int
main(void)
{
	struct event_base *b = loop_base_new();
	struct event_base *plain = event_base_new();
	long n;

	n = run_chain(b);
	printf("loop_base_new(): the fault served after %ld bulk callbacks "
	       "of %d us (bound %d us)\n",
	       n, BULK_WORK_US, LOOP_BULK_US);
	/* Up to the bound and one callback; twice that for a slow clock. */
	CHECK(n >= 1 && n <= 2 * (LOOP_BULK_US / BULK_WORK_US + 1));
	event_base_priority_init(plain, PRIO_COUNT);
	n = run_chain(plain);
	printf("libevent's default base: %ld (-1: not before the chain "
	       "ended, %d callbacks)\n",
	       n, CHAIN_MAX);
	CHECK(n == -1 || n > 1000);
	event_base_free(b);
	event_base_free(plain);
	return UNIT_DONE();
}

/*
 * The one event loop (loop.c) and its rules: priorities, and the busy
 * polling that follows demand traffic.
 */
#ifndef UFFDD_LOOP_H
#define UFFDD_LOOP_H

#include <event2/event.h>

/* The event base of this part of the daemon (made by its main). */
extern struct event_base *base;

/* Event priorities: faults first, bulk work last. */
enum { PRIO_FAULT = 0, PRIO_CONTROL = 1, PRIO_BULK = 2, PRIO_COUNT = 3 };
/*
 * Time in callbacks below the fault priority between two looks at
 * descriptors (loop_base_new()).
 */
#define LOOP_BULK_US 250

/* A new event base with the priorities and the bound above. */
struct event_base *loop_base_new(void);

/*
 * After demand traffic: the loop polls for --poll-us instead of sleeping
 * (uffdd.c). loop_bulk() says bulk data moved, which stops it.
 */
void loop_poll(void);
void loop_poll_now(void);
void loop_yield_woken(void);
/*
 * Demand traffic within the last 5 ms: bulk work then goes in steps of
 * DEMAND_STEP_BYTES (frames sent, installed, read and written), so that a
 * request waits for at most one of them.
 */
int loop_demand_recent(void);
/*
 * A target's fault read (loop_fault_seen()), however it is answered, or
 * demand traffic, within the last 5 ms.
 */
void loop_fault_seen(void);
int loop_faults_recent(void);
#define DEMAND_STEP_BYTES (64u << 10)
void loop_bulk(void);
/* Runs the event loop until it is told to exit. */
void run_loop(void);
/*
 * Once a part's loop has ended, SIGTERM and SIGINT are held: a second
 * stop (an impatient operator, a test's clean-up) waits for the first
 * one to finish instead of killing the part half way through it.
 */
void loop_hold_stop_signals(void);

#endif

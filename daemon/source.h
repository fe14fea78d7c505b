/*
 * The source role (daemon/source/): freeze a process, classify its pages, and
 * serve them to one destination on two lanes. The rest of the daemon
 * reaches it through its role operations (role.h).
 */
#ifndef UFFDD_SOURCE_H
#define UFFDD_SOURCE_H

#include <stdint.h>

#include "proto/frame.h"

struct authz_caller;
struct conn;
struct procref;
struct state_tbl;

/* Registers the role's operations (role.h). */
void source_register(void);
/*
 * Exports process t for the caller who (both checked by control.c); takes
 * t over, and checks the caller's right again once the process is frozen.
 */
void source_export(uint64_t serial, const struct authz_caller *who,
		   struct procref *t, const Uffdd__ExportRequest *);
/* A peer's HELLO (role.h, hello). */
int source_hello(struct conn *, const Uffdd__Hello *);
/* After a restart (role.h, restore). */
int source_restore(struct state_tbl *);
int source_restore_check(struct state_tbl *);
/*
 * Snapshots (snapshot.c): the control request is registered with the
 * role; at the daemon's exit, those under way are given up, their
 * processes thawed.
 */
void source_snapshot_register(void);
void source_snapshot_close_all(void);

#endif

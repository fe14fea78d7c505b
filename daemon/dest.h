/*
 * The destination role (daemon/dest/): take a userfaultfd inside the target
 * process and fill its memory from a source. The rest of the daemon reaches
 * it through its role operations (role.h).
 */
#ifndef UFFDD_DEST_H
#define UFFDD_DEST_H

#include <stdint.h>

#include "proto/frame.h"

struct authz_caller;
struct migration;
struct procref;
struct state_tbl;

/* Registers the role's operations (role.h). */
void dest_register(void);
/* Attaches to process t for the caller who: checked again once stopped. */
void dest_attach(uint64_t serial, const struct authz_caller *who,
		 struct procref *t, const Uffdd__AttachRequest *);
/* After a restart (role.h, restore). */
int dest_restore(struct state_tbl *);
int dest_restore_check(struct state_tbl *);
/*
 * Fails a running or paused destination now, as its pause deadline would
 * (tests/fuzz/fuzz_dest ends each input with it).
 */
void dest_cancel(struct migration *, const char *why);
/* At exit, once every migration is freed: the bulk installer stops. */
void dest_installer_stop(void);

#endif

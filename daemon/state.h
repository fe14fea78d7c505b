/* State files, one per migration under --state-dir (state.c). */
#ifndef UFFDD_STATE_H
#define UFFDD_STATE_H

#include <stddef.h>

struct migration;
struct state_out;

/*
 * Writes the common keys and calls `more` for the role's own (-1 with
 * errno set: no file written), then replaces the file. 0, or -1 with
 * errno set and a warning logged.
 */
int state_write(const struct migration *,
		int (*more)(struct state_out *, const struct migration *));
void state_remove(const struct migration *);
/*
 * The migration ended (complete or failed): its state file goes, and a
 * short record of the outcome takes its place, so that a restarted daemon
 * still lists it and a wait that rejoins is told how it ended. The record
 * goes when the table drops the migration (MIG_KEEP_FINISHED).
 */
void state_end(struct migration *);
/*
 * A file of the migration's beside its state file, ID.ROLE.SUFFIX,
 * mapped shared and writable, size bytes (at most STATE_FILE_MAX): made
 * afresh, zeros, when create (its blocks written, so that no store into
 * it can find the file system full); else the one there, checked as a
 * state file is (no link, a regular file of ours that only we may write)
 * and exactly size bytes long. Stores into it outlive the daemon's death
 * (the page cache keeps them). The mapping, or NULL with why saying what
 * failed, the file named (statemap.c). Of these files only
 * ID.destination.installed exists (daemon/dest/record.c); a restart
 * removes one whose state file is gone (but one refused).
 */
#define STATE_INSTALLED_SUFFIX ".installed"
void *state_map(const struct migration *, const char *suffix, size_t size,
		int create, char *why, size_t whylen);
/* The migration's file of that suffix goes. */
void state_map_remove(const struct migration *, const char *suffix);
/* Restores every migration found in the state directory. */
void state_restore_all(void);
/*
 * Restores one migration from the bytes of its state file, shown in
 * messages as name. *role is, on entry, the role the file is named for
 * (-1: any; another role in the file refuses it). 0 restored; -1 not
 * taken up (the role said why); -2 refused: why says FILE:LINE and what is
 * wrong, *role is the role the file names (-1 if it names none).
 */
int state_restore_buf(const char *name, const char *id, const char *buf,
		      size_t len, char *why, size_t whylen, int *role);

#endif

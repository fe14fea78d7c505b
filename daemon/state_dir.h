/*
 * What the state directory's files share (state.c, statemap.c): the
 * directory's descriptor (statedir.h), the files' names, and the checks
 * every file read from there passes. The rest of the daemon sees only
 * state.h.
 */
#ifndef UFFDD_STATE_DIR_H
#define UFFDD_STATE_DIR_H

#include <stddef.h>

#include "daemon/statedir.h" /* state_dirfd */

/*
 * A migration's file: ID.source.SUFFIX or ID.destination.SUFFIX; a role
 * of -1 gives the name daemons before roles wrote, ID.SUFFIX.
 */
void state_file_name(char *buf, size_t len, const char *id, int role,
		     const char *suffix);
/* How logs name a file: the directory, and the ID in it cut short. */
void state_shown(char *buf, size_t len, const char *file);
/* Writes all n bytes: 0, or -1 with errno set. */
int state_write_all(int fd, const char *p, size_t n);
/*
 * A new file name in the state directory, mode 0600, opened with flags
 * (O_RDWR or O_WRONLY): whatever had the name (left by a crash, or
 * planted: a link) is removed first, and the file is created, never
 * opened. Its descriptor, or -1 with errno set.
 */
int state_create(const char *name, int flags);
/*
 * A file of the directory opened with mode (O_RDONLY, O_RDWR), refused
 * unread if it is a link, not a regular file, not ours, writable by
 * others, or over STATE_FILE_MAX. The descriptor and its size in *size;
 * or -1 with why saying what (what names the file).
 */
int state_open_checked(const char *file, const char *what, int mode,
		       size_t *size, char *why, size_t whylen);

#endif

/*
 * The state directory itself (statedir.c): opened once, by root, and kept
 * open; state.c reaches every state file through the descriptor.
 */
#ifndef UFFDD_STATEDIR_H
#define UFFDD_STATEDIR_H

#include <stddef.h>
#include <sys/types.h>

/*
 * Creates the state directory (0700) if missing, or checks it: a real
 * directory (no link), of uid owner (the engine's, which may open it
 * before it drops root), that no one else may write. Kept open for every
 * later file operation. -1 with err filled.
 */
int state_dir_open(const char *dir, uid_t owner, char *err, size_t errlen);
/*
 * The same for a confined engine: dir/sub, made by root in dir (root's)
 * and handed to uid and gid (docs/privsep.md).
 */
int state_dir_open_for(const char *dir, const char *sub, uid_t uid, gid_t gid,
		       char *err, size_t errlen);
void state_dir_close(void);

/* The directory's descriptor, for state.c; -1 before it is opened. */
extern int state_dirfd;

#endif

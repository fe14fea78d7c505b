/*
 * The engine's confinement (docs/privsep.md), in one place: after
 * sandbox_enter() the process runs as an unprivileged user, holds no
 * capability and can gain none (PR_SET_NO_NEW_PRIVS), opens files only
 * below the directories it was given (Landlock, where the kernel has it),
 * and makes only the system calls an engine makes (seccomp). What it
 * holds already (descriptors) it keeps.
 */
#ifndef UFFDD_SANDBOX_H
#define UFFDD_SANDBOX_H

#include <stddef.h>
#include <sys/types.h>

/* A directory the engine may use after the sandbox, and how. */
struct sandbox_dir {
	const char *path;
	int write; /* 0: read only */
};

/*
 * Confines the calling process (single-threaded, root) as user (by name)
 * with dirs; the parent's death kills it (PR_SET_PDEATHSIG, which a change
 * of uid clears). 0, or -1 with err set: the process must then exit.
 * *landlocked says whether the file system is restricted (the kernel's
 * Landlock), for the log.
 */
int sandbox_enter(const char *user, const struct sandbox_dir *dirs,
		  size_t ndirs, int *landlocked, char *err, size_t errlen);
/* The uid and gid of user, or -1 with err set. */
int sandbox_user(const char *user, uid_t *uid, gid_t *gid, char *err,
		 size_t errlen);

#endif

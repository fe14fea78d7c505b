/*
 * Who may ask for what on the control socket: a caller may export or attach
 * only a process it could ptrace itself. Only what the kernel vouches for
 * counts: the credentials the socket recorded when the client connected,
 * capabilities only in the daemon's own user namespace, and the target named
 * by a procref opened for the check (procref.h).
 */
#ifndef UFFDD_AUTHZ_H
#define UFFDD_AUTHZ_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct procref;

/* The caller, as the kernel saw it when it connected. */
struct authz_caller {
	pid_t pid; /* for logs only: a pid is never trusted again */
	uid_t uid;
	gid_t gid;
	/*
	 * uid 0, or in the admin group (conf.admin_gid), when it connected,
	 * in the daemon's user namespace: may act on any process. Nothing
	 * read later counts (capabilities, /proc): the client may have run
	 * a setuid program since, or handed its socket on.
	 */
	int privileged;
};

/*
 * Fills in the caller of the connected unix socket fd from what the
 * kernel recorded at connect(): SO_PEERCRED and SO_PEERGROUPS. Returns -1
 * if fd has no peer.
 */
int authz_caller_from_socket(struct authz_caller *, int fd);
/*
 * 0 if the caller may operate on the process t; else -1 with a reason for
 * the caller in err and *code set to an ERR_* value. The target must still
 * be the process t was opened on (procref_same()).
 */
int authz_may_ptrace(const struct authz_caller *, const struct procref *t,
		     uint32_t *code, char *err, size_t errlen);

/* The same, silent: 1 if allowed. */
int authz_allows(const struct authz_caller *, const struct procref *t);

#endif

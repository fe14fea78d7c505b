/*
 * Who may ask for what on the control socket: a caller may export or attach
 * only a process it could ptrace itself.
 */
#ifndef UFFDD_AUTHZ_H
#define UFFDD_AUTHZ_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The caller, as SO_PEERCRED and its /proc entry saw it at connect time. */
struct authz_caller {
	pid_t pid;
	uid_t uid;
	gid_t gid;
	int cap_sys_ptrace;
};

/* Fills in cap_sys_ptrace from the caller's CapEff (0 if unreadable). */
void authz_caller_init(struct authz_caller *, pid_t, uid_t, gid_t);
/*
 * 0 if the caller may operate on process pid; else -1 with a reason for
 * the caller in err and *code set to an ERR_* value.
 */
int authz_may_ptrace(const struct authz_caller *, pid_t pid, uint32_t *code,
		     char *err, size_t errlen);

struct migration;
/* Records the caller as the owner of the migration its request made. */
void authz_set_owner(const struct authz_caller *, struct migration *);
/*
 * Whether the caller may see a migration (and its ID): it made it, or it
 * could ptrace the process. Silent: status asks this for every migration.
 */
int authz_may_see(const struct authz_caller *, const struct migration *);

#endif

/*
 * Control socket authorization (see authz.h). The daemon itself runs as
 * root with CAP_SYS_PTRACE; without this check any user who can reach the
 * socket could read or replace the memory of any process. The rule mirrors
 * the kernel's ptrace access check (PTRACE_MODE_REALCREDS): the caller's
 * uid and gid must equal the target's real, effective and saved ids, or
 * the caller must hold CAP_SYS_PTRACE.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/authz.h"
#include "daemon/log.h"
#include "daemon/migration.h"
#include "daemon/uffdd.h"

#define CAP_SYS_PTRACE_BIT 19

/*
 * Reads the "Uid:"/"Gid:" triples (real, effective, saved) and CapEff from
 * /proc/PID/status. Returns -1 with errno set if the process is gone.
 */
static int
read_status(pid_t pid, unsigned long uid[3], unsigned long gid[3],
	    uint64_t *capeff)
{
	char path[64], line[256];
	int have = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if ((f = fopen(path, "re")) == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (sscanf(line, "Uid: %lu %lu %lu", &uid[0], &uid[1],
			   &uid[2]) == 3)
			have |= 1;
		else if (sscanf(line, "Gid: %lu %lu %lu", &gid[0], &gid[1],
				&gid[2]) == 3)
			have |= 2;
		else if (sscanf(line, "CapEff: %" SCNx64, capeff) == 1)
			have |= 4;
	}
	fclose(f);
	if (have != 7) {
		errno = ESRCH;
		return -1;
	}
	return 0;
}

void
authz_caller_init(struct authz_caller *c, pid_t pid, uid_t uid, gid_t gid)
{
	unsigned long u[3], g[3];
	uint64_t capeff = 0;

	c->pid = pid;
	c->uid = uid;
	c->gid = gid;
	/*
	 * Read once, at connect time, while the caller is certainly the
	 * process SO_PEERCRED named: later its PID could be reused.
	 */
	c->cap_sys_ptrace = read_status(pid, u, g, &capeff) == 0 &&
			    (capeff & (UINT64_C(1) << CAP_SYS_PTRACE_BIT)) != 0;
}

/* 0: allowed; -1: no such process; -2: denied (*owner: its uid). */
static int
check(const struct authz_caller *c, pid_t pid, unsigned long *owner)
{
	unsigned long u[3], g[3];
	uint64_t capeff;

	if (pid <= 0 || read_status(pid, u, g, &capeff) < 0)
		return -1;
	*owner = u[0];
	if (c->cap_sys_ptrace)
		return 0;
	for (int i = 0; i < 3; i++)
		if (u[i] != c->uid || g[i] != c->gid)
			return -2;
	return 0;
}

int
authz_may_ptrace(const struct authz_caller *c, pid_t pid, uint32_t *code,
		 char *err, size_t errlen)
{
	unsigned long owner = 0;

	switch (check(c, pid, &owner)) {
	case 0:
		return 0;
	case -1:
		*code = ERR_NO_PROCESS;
		snprintf(err, errlen, "process %d: no such process", (int)pid);
		return -1;
	default:
		*code = ERR_PERMISSION;
		snprintf(err, errlen,
			 "process %d: permission denied: uid %lu may "
			 "only migrate processes it could ptrace "
			 "(same uid and gid, or CAP_SYS_PTRACE)",
			 (int)pid, (unsigned long)c->uid);
		log_warnx("control: uid %lu (pid %d) refused on "
			  "process %d of uid %lu",
			  (unsigned long)c->uid, (int)c->pid, (int)pid, owner);
		return -1;
	}
}

void
authz_set_owner(const struct authz_caller *c, struct migration *m)
{
	m->owned = 1;
	m->owner_uid = c->uid;
	m->owner_gid = c->gid;
}

int
authz_may_see(const struct authz_caller *c, const struct migration *m)
{
	unsigned long owner;

	/* The owner still sees it after completion killed the process. */
	if (c->cap_sys_ptrace ||
	    (m->owned && m->owner_uid == c->uid && m->owner_gid == c->gid))
		return 1;
	return check(c, m->pid, &owner) == 0;
}

/*
 * Control socket authorization (see authz.h). The daemon itself runs as
 * root with CAP_SYS_PTRACE; without this check any user who can reach the
 * socket could read or replace the memory of any process. The rule mirrors
 * the kernel's ptrace access check (PTRACE_MODE_REALCREDS): the caller's
 * uid and gid must equal the target's real, effective and saved ids, the
 * target may hold no capability (the caller's own are never read: see
 * authz_caller_from_socket()) and must be dumpable, or the caller must be
 * privileged: uid 0 or the admin group when it connected.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "daemon/authz.h"
#include "daemon/conffile.h"
#include "daemon/log.h"
#include "daemon/procref.h"
#include "proto/frame.h"

/* What /proc/PID/status says about a process's credentials. */
struct creds {
	unsigned long uid[3], gid[3]; /* real, effective, saved */
	uint64_t capprm;
};

/* Reads the Uid/Gid triples and capabilities; -1 if the process is gone. */
static int
read_creds(pid_t pid, struct creds *c)
{
	char path[64], line[256];
	int have = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if ((f = fopen(path, "re")) == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (sscanf(line, "Uid: %lu %lu %lu", &c->uid[0], &c->uid[1],
			   &c->uid[2]) == 3)
			have |= 1;
		else if (sscanf(line, "Gid: %lu %lu %lu", &c->gid[0],
				&c->gid[1], &c->gid[2]) == 3)
			have |= 2;
		else if (sscanf(line, "CapPrm: %" SCNx64, &c->capprm) == 1)
			have |= 4;
	}
	fclose(f);
	if (have != 7) {
		errno = ESRCH;
		return -1;
	}
	return 0;
}

/*
 * Whether the caller was in group gid when it connected: its primary
 * group, or one of the supplementary groups the kernel recorded then
 * (SO_PEERGROUPS, Linux 4.13 and later).
 */
static int
in_group(int fd, gid_t primary, gid_t gid)
{
	socklen_t len = 64 * sizeof(gid_t);
	gid_t *g = NULL;
	int in = 0;

	if (gid == (gid_t)-1)
		return 0;
	if (primary == gid)
		return 1;
	for (int tries = 0; tries < 2; tries++) {
		free(g);
		g = xcalloc(1, len);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len) == 0)
			break;
		if (errno != ERANGE)
			len = 0;
	}
	for (size_t i = 0; i < len / sizeof(gid_t); i++)
		in |= g[i] == gid;
	free(g);
	return in;
}

/*
 * Everything here was recorded by the kernel when the client called
 * connect(), and nothing is read later: a client may run a setuid program
 * after connecting (the pid SO_PEERCRED names then has that program's
 * capabilities) or hand its socket to another process. So capabilities
 * count for nothing; privileged means uid 0, or the admin group, then.
 */
int
authz_caller_from_socket(struct authz_caller *c, int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	memset(c, 0, sizeof(*c));
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -1;
	/*
	 * Mapped into our user namespace: uid 0 of a namespace the caller
	 * made is not 0 here.
	 */
	c->pid = cred.pid;
	c->uid = cred.uid;
	c->gid = cred.gid;
	c->privileged = cred.uid == 0 || in_group(fd, cred.gid, conf.admin_gid);
	return 0;
}

/*
 * Why an unprivileged caller may not act on a process with credentials cr
 * whose /proc entry belongs to owner; NULL if it may.
 */
static const char *
refusal(const struct authz_caller *c, const struct creds *cr, uid_t owner)
{
	for (int i = 0; i < 3; i++)
		if (cr->uid[i] != c->uid || cr->gid[i] != c->gid)
			return "same uid and gid, or uid 0 or the admin group";
	if (cr->capprm != 0)
		return "it holds capabilities";
	/* A process that is not dumpable has its /proc entry owned by root. */
	if (owner != c->uid)
		return "it is not dumpable (setuid, or it said so)";
	return NULL;
}

/*
 * 0: allowed; -1: the process is gone or not the one t names any more;
 * -2: denied, *why says why and *owner whose it is.
 */
static int
check(const struct authz_caller *c, const struct procref *t, const char **why,
      unsigned long *owner)
{
	struct creds cr;
	struct stat st;
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d", (int)t->pid);
	if (read_creds(t->pid, &cr) < 0 || stat(path, &st) < 0)
		return -1;
	*why = c->privileged ? NULL : refusal(c, &cr, st.st_uid);
	*owner = cr.uid[0];
	/* Read by pid: they were t's only if t is still itself now. */
	if (!procref_same(t))
		return -1;
	return *why ? -2 : 0;
}

int
authz_may_ptrace(const struct authz_caller *c, const struct procref *t,
		 uint32_t *code, char *err, size_t errlen)
{
	unsigned long owner = 0;
	const char *why = NULL;

	switch (check(c, t, &why, &owner)) {
	case 0:
		return 0;
	case -1:
		*code = ERR_NO_PROCESS;
		snprintf(err, errlen,
			 "process %d: no such process (it exited, or runs "
			 "another program, since it was named)",
			 (int)t->pid);
		return -1;
	default:
		*code = ERR_PERMISSION;
		snprintf(err, errlen,
			 "process %d: permission denied: uid %lu may only "
			 "migrate processes it could ptrace (%s)",
			 (int)t->pid, (unsigned long)c->uid, why);
		log_warnx("control: uid %lu (pid %d) refused on process %d "
			  "of uid %lu: %s",
			  (unsigned long)c->uid, (int)c->pid, (int)t->pid,
			  owner, why);
		return -1;
	}
}

int
authz_allows(const struct authz_caller *c, const struct procref *t)
{
	unsigned long owner;
	const char *why;

	return check(c, t, &why, &owner) == 0;
}

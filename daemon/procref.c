/* Process references that survive pid reuse and notice an exec (procref.h). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/compat.h"
#include "daemon/imsg.h"
#include "daemon/log.h"
#include "daemon/privop.h"
#include "daemon/procfile.h"
#include "daemon/procref.h"

#ifndef KCMP_VM
#define KCMP_VM 1
#define KCMP_FILES 2
#endif

/*
 * Fields of /proc/PID/stat by their number in proc(5) (3 and up: the ones
 * after the command name, which may hold blanks and parentheses). Returns
 * 0, or -1 when the process is gone or the line is short.
 */
static int
stat_fields(pid_t pid, const int *want, unsigned long long *out, int n)
{
	char path[64], buf[1024], *p, *save = NULL;
	int field = 3, got = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((f = fopen(path, "re")) == NULL)
		return -1;
	p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
	fclose(f);
	if (p == NULL)
		return -1;
	for (char *tok = strtok_r(p + 1, " \n", &save); tok && got < n;
	     tok = strtok_r(NULL, " \n", &save), field++)
		for (int i = 0; i < n; i++)
			if (want[i] == field) {
				out[i] = strtoull(tok, NULL, 10);
				got++;
			}
	return got == n ? 0 : -1;
}

int
procref_open(struct procref *r, pid_t pid, char *err, size_t errlen)
{
	static const int want[] = {22, 28}; /* starttime, startstack */
	unsigned long long v[2];
	char path[64];
	int e;

	*r = (struct procref)PROCREF_NONE;
	r->pid = pid;
	if (pid <= 0) {
		errno = ESRCH;
		goto fail;
	}
	if (privop_available()) {
		errno = EPERM; /* the engine: by grant only (procref.h) */
		snprintf(err, errlen,
			 "process %d: the engine opens no process itself",
			 (int)pid);
		return -1;
	}
	r->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (r->pidfd < 0)
		goto fail;
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	if ((r->memfd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		goto fail;
	if (stat_fields(pid, want, v, 2) < 0) {
		errno = ESRCH;
		goto fail;
	}
	r->start = v[0];
	r->probe = v[1];
	/*
	 * Opened in that order, the pidfd first: if the process is still the
	 * same now, the memory file and the fields read are its own.
	 */
	if (!procref_same(r)) {
		errno = ESRCH;
		goto fail;
	}
	return 0;
fail:
	e = errno;
	snprintf(err, errlen, "process %d: %s", (int)pid,
		 e == ESRCH ? "no such process" : strerror(e));
	procref_close(r);
	r->pid = pid;
	errno = e;
	return -1;
}

/*
 * A pidfd turns readable when its process exits: asking needs no right
 * over the process (a signal 0 would need the right to signal it, which
 * the engine does not have).
 */
int
procref_alive(const struct procref *r)
{
	struct pollfd p = {.fd = r->pidfd, .events = POLLIN};

	return r->pidfd >= 0 && poll(&p, 1, 0) == 0;
}

int
procref_same(const struct procref *r)
{
	unsigned char b;

	/*
	 * A read through the memory file opened at the check: 0 bytes once
	 * that address space has no users any more (exec, exit), kernel
	 * threads have none to begin with.
	 */
	return procref_alive(r) && r->memfd >= 0 && r->probe != 0 &&
	       pread(r->memfd, &b, 1, (off_t)r->probe) == 1;
}

int
procref_signal(const struct procref *r, int sig)
{
	struct privop_signal req = {.sig = sig};
	struct imsg rep;
	int rc;

	if (r->pidfd < 0) {
		errno = ESRCH;
		return -1;
	}
	/* In the engine: the privileged part signals, by the grant. */
	if (r->grant != 0 && sig != 0 && privop_available()) {
		rc = privop_call(PRIVOP_SIGNAL, r->grant, &req, sizeof(req),
				 NULL, 0, &rep, NULL);
		imsg_clear(&rep);
		return rc;
	}
	return (int)syscall(SYS_pidfd_send_signal, r->pidfd, sig, NULL, 0);
}

/*
 * Asks for a process with a grant (PRIVOP_CHILD, PRIVOP_CLAIM): the answer
 * is its grant, start and probe, its pidfd and memory file.
 */
static int
granted(struct procref *r, uint32_t type, uint64_t grant, const void *req,
	size_t len, pid_t pid)
{
	const struct privop_child_reply *a;
	struct imsg rep;
	int e;

	*r = (struct procref)PROCREF_NONE;
	if (privop_call(type, grant, req, len, NULL, 0, &rep, NULL) < 0) {
		e = errno;
		imsg_clear(&rep);
		errno = e;
		return -1;
	}
	a = (const void *)rep.data;
	if (rep.h.len != sizeof(*a) || rep.nfd != 2 || a->grant == 0 ||
	    (pid != 0 && a->pid != pid) || a->pid <= 0) {
		imsg_clear(&rep);
		errno = EPROTO;
		return -1;
	}
	r->pid = pid = a->pid;
	r->pidfd = imsg_take_fd(&rep, 0);
	r->memfd = imsg_take_fd(&rep, 1);
	r->start = a->start;
	r->probe = a->probe;
	r->grant = a->grant;
	imsg_clear(&rep);
	/* The privileged part opens the process's files for it too. */
	procfile_bind(pid, r->grant);
	return 0;
}

int
procref_child(struct procref *r, uint64_t parent, pid_t pid)
{
	struct privop_child req = {.pid = pid};

	return granted(r, PRIVOP_CHILD, parent, &req, sizeof(req), pid);
}

int
procref_orphan(struct procref *r, uint64_t root, const char *id, pid_t pid,
	       unsigned long long start, unsigned long long not_before,
	       uint64_t addr)
{
	struct privop_orphan req = {.pid = pid,
				    .start = start,
				    .not_before = not_before,
				    .addr = addr};

	if (root == 0)
		snprintf(req.id, sizeof(req.id), "%s", id);
	return granted(r, PRIVOP_ORPHAN, root, &req, sizeof(req), pid);
}

int
procref_claim(struct procref *r, int role, const char *id, pid_t pid,
	      unsigned long long start)
{
	struct privop_claim req = {
		.role = (uint32_t)role, .pid = pid, .start = start};

	snprintf(req.id, sizeof(req.id), "%s", id);
	return granted(r, PRIVOP_CLAIM, 0, &req, sizeof(req), pid);
}

int
procref_restore(struct procref *r, int role, const char *id, pid_t pid,
		unsigned long long start, char *err, size_t errlen)
{
	unsigned long long now;
	int e;

	if (procref_claim(r, role, id, pid, start) == 0)
		return 0;
	e = errno;
	if (e != ENOENT) {
		snprintf(err, errlen,
			 "process %d: the privileged part kept its grant but "
			 "refused it (%s)",
			 (int)pid,
			 e == ESRCH ? "the process is not the one checked any "
				      "more"
			 : e == EPERM ? "its caller may not ptrace it any more"
				      : strerror(e));
		r->pid = pid;
		errno = e == EPERM ? EPERM : ESRCH;
		return -1;
	}
	/*
	 * The engine acts on a process only by a grant (docs/privsep.md):
	 * none kept, for a process gone, or for one whose record was lost
	 * (or written by no daemon: one older than the records).
	 */
	if (stat_fields(pid, (const int[]){22}, &now, 1) < 0)
		snprintf(err, errlen, "process %d is gone", (int)pid);
	else if (now != start)
		snprintf(err, errlen,
			 "pid %d now names another process (started at tick "
			 "%llu, the %s at %llu): the %s exited and its pid was "
			 "reused; process %d not touched",
			 (int)pid, now,
			 role /* ROLE_DEST */ ? "target" : "exported one",
			 start, role ? "target" : "exported process", (int)pid);
	else
		snprintf(err, errlen,
			 "process %d: no grant is kept for migration %s (the "
			 "privileged part has no record of it): not taken up",
			 (int)pid, log_id(id));
	r->pid = pid;
	errno = ESRCH;
	return -1;
}

void
procref_move(struct procref *dst, struct procref *src)
{
	*dst = *src;
	src->pidfd = src->memfd = -1;
	src->grant = 0;
}

void (*procref_drop_hook)(uint64_t grant);

void
procref_close(struct procref *r)
{
	if (r->pidfd >= 0)
		close(r->pidfd);
	if (r->memfd >= 0)
		close(r->memfd);
	if (r->grant != 0 && procref_drop_hook != NULL)
		procref_drop_hook(r->grant);
	r->grant = 0;
	r->pidfd = r->memfd = -1;
}

/* 1 if a and b share resource `type` (KCMP_*), 0 if not, -1 if unknown. */
static int
shares(pid_t a, pid_t b, int type)
{
	long r = syscall(SYS_kcmp, a, b, type, 0, 0);

	return r == 0 ? 1 : r > 0 ? 0 : errno == ENOSYS ? -1 : 0;
}

/*
 * Adds task tid (of process p) to the list if it shares what want names
 * with pid: 1 if it does, 0 if not, -1 if the kernel cannot tell.
 */
static int
sharer(pid_t pid, pid_t p, pid_t tid, int want, char *list, size_t len,
       size_t *used, int n)
{
	int vm = 0, files = 0;

	if (want & PROC_SHARE_VM)
		vm = shares(pid, tid, KCMP_VM);
	if (want & PROC_SHARE_FILES)
		files = shares(pid, tid, KCMP_FILES);
	if (vm < 0 || files < 0)
		return -1;
	if (!vm && !files)
		return 0;
	if (*used < len)
		*used += (size_t)snprintf(list + *used, len - *used,
					  "%s%d (%s)", n ? ", " : "", (int)p,
					  vm && files ? "memory and files"
					  : vm	      ? "memory"
						      : "files");
	return 1;
}

/*
 * Every task is looked at, not only each process's first thread: a thread
 * of another process may share pid's file table when its own first thread
 * no longer does (it unshared, or exited).
 */
int
proc_sharers_scan(pid_t pid, int want, char *list, size_t len)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	size_t used = 0;
	int n = 0, rc = 0;

	if (d == NULL)
		return -1;
	list[0] = '\0';
	while (rc >= 0 && (e = readdir(d)) != NULL) {
		pid_t p = (pid_t)atoi(e->d_name);
		char path[64];
		DIR *td;
		struct dirent *te;

		if (p <= 0 || p == pid)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task", (int)p);
		if ((td = opendir(path)) == NULL)
			continue; /* gone meanwhile */
		rc = 0;
		while ((te = readdir(td)) != NULL) {
			pid_t tid = (pid_t)atoi(te->d_name);

			if (tid <= 0)
				continue;
			rc = sharer(pid, p, tid, want, list, len, &used, n);
			if (rc != 0)
				break; /* one line a process */
		}
		closedir(td);
		n += rc > 0;
	}
	closedir(d);
	if (rc < 0) {
		errno = ENOSYS;
		return -1;
	}
	return n;
}

int
proc_sharers(pid_t pid, int want, char *list, size_t len)
{
	struct privop_sharers req = {.want = (uint32_t)want};
	const struct privop_sharers_reply *a;
	uint64_t grant = procfile_grant(pid);
	struct imsg rep;
	int n = -1, route = privop_route(grant);

	list[0] = '\0';
	if (route <= 0)
		return route == 0 ? proc_sharers_scan(pid, want, list, len)
				  : -1;
	if (privop_call(PRIVOP_SHARERS, grant, &req, sizeof(req), NULL, 0, &rep,
			NULL) < 0)
		return -1;
	a = (const void *)rep.data;
	if (rep.h.len != sizeof(*a) || a->list[sizeof(a->list) - 1] != '\0') {
		errno = EPROTO;
	} else if ((n = a->n) < 0) {
		errno = ENOSYS;
	} else if (len > 0) {
		snprintf(list, len, "%s", a->list);
	}
	imsg_clear(&rep);
	return n;
}

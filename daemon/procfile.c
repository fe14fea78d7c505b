/*
 * Files of other processes, opened by the privileged part for a grant
 * (procfile.h). The engine keeps which grant covers which process: that
 * is its own bookkeeping, the privileged part acts on the grant's process
 * whatever pid the engine thinks it is, and checks it is still the one
 * checked before and after the open. A pid with no grant is refused in
 * the engine, never opened by path.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/inotify.h>
#include <sys/sysmacros.h>

#include "daemon/imsg.h"
#include "daemon/log.h"
#include "daemon/privop.h"
#include "daemon/procfile.h"

/*
 * Grants the engine holds: few (one per migration's process), so a small
 * array searched whole.
 */
struct bound {
	pid_t pid;
	uint64_t grant;
};

static struct bound *bounds;
static size_t nbounds, capbounds;

void
procfile_bind(pid_t pid, uint64_t grant)
{
	if (pid <= 0 || grant == 0)
		return;
	if (nbounds == capbounds) {
		size_t cap = capbounds ? capbounds * 2 : 16;
		struct bound *nb = realloc(bounds, cap * sizeof(*nb));

		if (nb == NULL) {
			/* Without it, the engine's steps on pid are refused. */
			log_warn("procfile: grant of process %d", (int)pid);
			return;
		}
		bounds = nb;
		capbounds = cap;
	}
	bounds[nbounds++] = (struct bound){.pid = pid, .grant = grant};
}

void
procfile_unbind(uint64_t grant)
{
	for (size_t i = 0; i < nbounds;)
		if (bounds[i].grant == grant)
			bounds[i] = bounds[--nbounds];
		else
			i++;
}

uint64_t
procfile_grant(pid_t pid)
{
	for (size_t i = nbounds; i-- > 0;)
		if (bounds[i].pid == pid)
			return bounds[i].grant;
	return 0;
}

/*
 * Asks the privileged part for file of pid's grant; -2: opened here (no
 * engine runs, or the file is the engine's own); -1 with errno EPERM: the
 * engine holds no grant for pid (privop_route()).
 */
static int
ask(pid_t pid, uint32_t file, uint64_t start, uint64_t end)
{
	struct privop_open req = {.file = file, .start = start, .end = end};
	uint64_t grant = procfile_grant(pid);
	struct imsg rep;
	int fd = -1, e, route;

	if (pid == getpid())
		return -2;
	if ((route = privop_route(grant)) <= 0)
		return route == 0 ? -2 : -1;
	if (privop_call(PRIVOP_OPEN, grant, &req, sizeof(req), NULL, 0, &rep,
			NULL) == 0) {
		fd = rep.nfd > 0 ? imsg_take_fd(&rep, 0) : -1;
		if (fd < 0)
			errno = EPROTO;
	}
	e = errno;
	imsg_clear(&rep);
	errno = e;
	return fd;
}

/* Opens /proc/PID/<name> here: no grant covers pid. */
static int
open_here(pid_t pid, const char *name, int flags)
{
	char path[96];

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
	return open(path, flags | O_CLOEXEC);
}

int
procfile_maps(pid_t pid)
{
	int fd = ask(pid, PRIVOP_FILE_MAPS, 0, 0);

	return fd != -2 ? fd : open_here(pid, "maps", O_RDONLY);
}

int
procfile_pagemap(pid_t pid)
{
	int fd = ask(pid, PRIVOP_FILE_PAGEMAP, 0, 0);

	return fd != -2 ? fd : open_here(pid, "pagemap", O_RDONLY);
}

int
procfile_map_file(pid_t pid, uint64_t start, uint64_t end)
{
	char name[64];
	int fd = ask(pid, PRIVOP_FILE_MAP_FILE, start, end);

	if (fd != -2)
		return fd;
	snprintf(name, sizeof(name), "map_files/%llx-%llx",
		 (unsigned long long)start, (unsigned long long)end);
	return open_here(pid, name, O_RDONLY);
}

int
procfile_mem_rw(pid_t pid)
{
	int fd = ask(pid, PRIVOP_FILE_MEM_RW, 0, 0);

	return fd != -2 ? fd : open_here(pid, "mem", O_RDWR);
}

int
procfile_watch(int fd)
{
	char path[64];
	int w = inotify_init1(IN_NONBLOCK | IN_CLOEXEC), e;

	if (w < 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if (inotify_add_watch(w, path, IN_MODIFY) < 0) {
		e = errno;
		close(w);
		errno = e;
		return -1;
	}
	return w;
}

int
procfile_map_watch(pid_t pid, uint64_t start, uint64_t end)
{
	int fd = ask(pid, PRIVOP_FILE_MAP_WATCH, start, end), w, e;

	if (fd != -2)
		return fd;
	if ((fd = procfile_map_file(pid, start, end)) < 0)
		return -1;
	w = procfile_watch(fd);
	e = errno;
	close(fd);
	errno = e;
	return w;
}

int
procfile_watch_changed(int w)
{
	/* Events are 16 bytes and a name (none for a watched file). */
	char buf[4096] __attribute__((aligned(__alignof__(uint64_t))));
	int changed = 0;

	for (;;) {
		ssize_t n = read(w, buf, sizeof(buf));

		if (n > 0) {
			changed = 1;
			continue;
		}
		return n < 0 && errno == EAGAIN ? changed : 1;
	}
}

int
procfile_watch_file(int w, dev_t *dev, ino_t *ino)
{
	char path[64], line[256];
	unsigned long long i;
	unsigned int sdev;
	int found = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", w);
	if ((f = fopen(path, "re")) == NULL)
		return -1;
	while (!found && fgets(line, sizeof(line), f) != NULL)
		found = sscanf(line, "inotify wd:%*x ino:%llx sdev:%x", &i,
			       &sdev) == 2;
	fclose(f);
	if (!found) {
		errno = ENOENT; /* no watch on w */
		return -1;
	}
	/* The kernel's own encoding: 12 bits of major above 20 of minor. */
	*dev = makedev(sdev >> 20, sdev & 0xfffffu);
	*ino = (ino_t)i;
	return 0;
}

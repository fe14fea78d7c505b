/*
 * Files handed over the control socket: the byte that carries one, and
 * the wait for it (fdpass.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "daemon/control.h"
#include "daemon/fdpass.h"
#include "daemon/log.h"

/* What statfs() says of a FUSE file system (no uapi header has it). */
#define FUSE_SUPER_MAGIC 0x65735546

/* How long a client has to hand its file over. */
#define FDPASS_WAIT_SECS 10

struct ask {
	fdpass_cb cb;
	void *arg;
};

static void
ask_done(void *arg, int fd, uint8_t byte, int status, const char *why)
{
	struct ask *a = arg;
	fdpass_cb cb = a->cb;
	void *cb_arg = a->arg;

	free(a);
	if (status == CONTROL_ASK_TIMEOUT)
		why = "the client did not hand its file over in time";
	cb(cb_arg, status == 0 ? fd : -1, why);
}

void
fdpass_ask(uint64_t serial, fdpass_cb cb, void *arg)
{
	Uffdd__FileReady rep = UFFDD__FILE_READY__INIT;
	struct ask *a = xcalloc(1, sizeof(*a));

	a->cb = cb;
	a->arg = arg;
	control_ask(serial, FRAME_CTL_FILE_READY, &rep.base, 1,
		    FDPASS_WAIT_SECS, ask_done, a);
}

int
fdpass_file(int fd, const char *what, struct stat *st, int *fl, char *err,
	    size_t errlen)
{
	struct statfs sf;

	if (fstat(fd, st) < 0 || (*fl = fcntl(fd, F_GETFL)) < 0 ||
	    fstatfs(fd, &sf) < 0) {
		snprintf(err, errlen, "the %s handed over: %s", what,
			 strerror(errno));
		return -1;
	}
	if (sf.f_type == FUSE_SUPER_MAGIC) {
		snprintf(err, errlen,
			 "the %s handed over is on a FUSE file system, which "
			 "the daemon does not use",
			 what);
		return -1;
	}
	return 0;
}

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
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/conn.h"
#include "daemon/control.h"
#include "daemon/fdpass.h"
#include "daemon/log.h"
#include "daemon/loop.h"

/* What statfs() says of a FUSE file system (no uapi header has it). */
#define FUSE_SUPER_MAGIC 0x65735546

/* How long a client has to hand its file over. */
#define FDPASS_WAIT_SECS 10

struct ask {
	TAILQ_ENTRY(ask) link;
	uint64_t serial;
	int sock; /* a copy of the client's socket, read while it is paused */
	struct event *ev;
	fdpass_cb cb;
	void *arg;
};

static TAILQ_HEAD(, ask) asks = TAILQ_HEAD_INITIALIZER(asks);

ssize_t
fdpass_recv_byte(int sock, char *b, int *fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = {b, 1};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	struct cmsghdr *c;
	ssize_t r;

	if (fd != NULL) {
		*fd = -1;
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
	}
	while ((r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT)) < 0 &&
	       errno == EINTR)
		;
	/* Whatever came, no descriptor stays open by mistake. */
	for (c = mh.msg_controllen ? CMSG_FIRSTHDR(&mh) : NULL; c != NULL;
	     c = CMSG_NXTHDR(&mh, c)) {
		int *fds = (int *)CMSG_DATA(c);
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < n; i++) {
			if (fd != NULL && *fd < 0 && n == 1)
				*fd = fds[i];
			else
				close(fds[i]);
		}
	}
	return r;
}

/* Ends an ask: the client's frames flow again, then the answer. */
static void
ask_end(struct ask *a, int fd, const char *why)
{
	struct conn *c = control_conn(a->serial);

	TAILQ_REMOVE(&asks, a, link);
	if (c != NULL)
		conn_pause(c, 0);
	event_free(a->ev);
	close(a->sock);
	a->cb(a->arg, fd, why);
	free(a);
}

static void
ask_cb(evutil_socket_t sock, short what, void *arg)
{
	struct ask *a = arg;
	struct timeval tv = {FDPASS_WAIT_SECS, 0};
	ssize_t r;
	int fd;
	char b;

	if (what & EV_TIMEOUT) {
		ask_end(a, -1, "the client did not hand its file over in time");
		return;
	}
	r = fdpass_recv_byte(sock, &b, &fd);
	if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		event_add(a->ev, &tv);
		return;
	}
	if (r <= 0)
		ask_end(a, -1, "the client went away");
	else if (fd < 0)
		ask_end(a, -1, "no file descriptor from the client");
	else
		ask_end(a, fd, NULL);
}

void
fdpass_ask(uint64_t serial, fdpass_cb cb, void *arg)
{
	Uffdd__FileReady rep = UFFDD__FILE_READY__INIT;
	struct conn *c = control_conn(serial);
	struct timeval tv = {FDPASS_WAIT_SECS, 0};
	struct ask *a;
	int sock;

	if (c == NULL || (sock = dup(conn_fd(c))) < 0) {
		cb(arg, -1,
		   c == NULL ? "the client went away" : strerror(errno));
		return;
	}
	a = xcalloc(1, sizeof(*a));
	a->serial = serial;
	a->sock = sock;
	a->cb = cb;
	a->arg = arg;
	if ((a->ev = event_new(base, sock, EV_READ, ask_cb, a)) == NULL)
		fatalx("event_new");
	event_priority_set(a->ev, PRIO_CONTROL);
	TAILQ_INSERT_TAIL(&asks, a, link);
	/* From here the socket is read here: the connection's frames wait. */
	conn_pause(c, 1);
	control_reply(serial, FRAME_CTL_FILE_READY, &rep.base);
	event_add(a->ev, &tv);
}

void
fdpass_close_all(void)
{
	struct ask *a;

	while ((a = TAILQ_FIRST(&asks)) != NULL)
		ask_end(a, -1, "the daemon stops");
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

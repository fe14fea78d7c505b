/*
 * The control socket, in the privileged part (control.h): uffd-client's
 * requests, framed like the peer lanes, checked and forwarded to the
 * engine; its replies are routed back by client serial number, so a client
 * that went away is simply not answered.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/bufferevent.h>
#include <event2/listener.h>

#include "daemon/authz.h"
#include "daemon/ctlmsg.h"
#include "daemon/imsg.h"
#include "daemon/priv/ctlsock.h"
#include "daemon/priv/grant.h"
#include "daemon/priv/record.h"
#include "daemon/conffile.h"
#include "daemon/conn.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/procref.h"
#include "daemon/role.h"

struct client {
	TAILQ_ENTRY(client) link;
	uint64_t serial;
	struct conn *conn;
	struct authz_caller who;
	/* A request forwarded to the engine and not answered yet. */
	int pending;
	/* CTL_ASK: the socket read for one byte (and descriptor), paused. */
	int ask_sock;
	struct event *ask_ev;
	int ask_fd;
};

static TAILQ_HEAD(, client) clients = TAILQ_HEAD_INITIALIZER(clients);
static struct evconnlistener *listener;
static char *sock_path;
static uint64_t next_serial = 1;
static int engine = -1; /* the ctl socket pair's end to the engine */
static pid_t engine_pid = -1;

static void ask_end(struct client *, int status, uint8_t byte, int fd,
		    const char *why);

static void
client_free(struct client *cl)
{
	if (cl->ask_ev != NULL)
		ask_end(cl, CONTROL_ASK_GONE, 0, -1, "the client went away");
	if (engine >= 0)
		imsg_send(engine, CTL_CLIENT_GONE, cl->serial, 0, NULL, 0, NULL,
			  0);
	TAILQ_REMOVE(&clients, cl, link);
	if (cl->conn != NULL)
		conn_free(cl->conn);
	free(cl);
}

static struct client *
client_find(uint64_t serial)
{
	struct client *cl;

	TAILQ_FOREACH (cl, &clients, link)
		if (cl->serial == serial)
			return cl;
	return NULL;
}

/*
 * Sends the request to the engine: the caller, the grant (its process's
 * pidfd and memory as descriptors), the migrations the caller may see
 * and the message as the client sent it.
 */
static void
forward(struct client *cl, uint16_t type, const ProtobufCMessage *msg,
	struct grant *g, struct grant *g2)
{
	struct ctl_request rq = {.frame_type = type};
	size_t mlen = protobuf_c_message_get_packed_size(msg), nseen, off;
	struct ctl_seen *seen;
	int all, fds[4], nfds;
	uint8_t *buf;

	nseen = grant_seen(&cl->who, &seen, &all);
	rq.who = (struct ctl_caller){cl->who.uid, cl->who.gid, cl->who.pid,
				     cl->who.privileged};
	rq.seen_all = (uint32_t)all;
	rq.nseen = (uint32_t)nseen;
	rq.msg_len = (uint32_t)mlen;
	if (g != NULL) {
		rq.grant = g->id;
		rq.pid = g->t.pid;
		rq.start = g->t.start;
		rq.probe = g->t.probe;
	}
	if (g2 != NULL) {
		rq.grant2 = g2->id;
		rq.pid2 = g2->t.pid;
		rq.start2 = g2->t.start;
		rq.probe2 = g2->t.probe;
	}
	off = sizeof(rq) + nseen * sizeof(*seen);
	buf = xmalloc(off + mlen + 1);
	memcpy(buf, &rq, sizeof(rq));
	memcpy(buf + sizeof(rq), seen, nseen * sizeof(*seen));
	protobuf_c_message_pack(msg, buf + off);
	fds[0] = g != NULL ? g->t.pidfd : -1;
	fds[1] = g != NULL ? g->t.memfd : -1;
	fds[2] = g2 != NULL ? g2->t.pidfd : -1;
	fds[3] = g2 != NULL ? g2->t.memfd : -1;
	nfds = fds[0] >= 0 && fds[1] >= 0 ? 2 : 0;
	if (nfds == 2 && fds[2] >= 0 && fds[3] >= 0)
		nfds = 4;
	if (engine < 0 || imsg_send(engine, CTL_REQUEST, cl->serial, 0, buf,
				    off + mlen, fds, nfds) < 0) {
		conn_send_error(cl->conn, ERR_BUSY,
				"the daemon's engine is not running (it is "
				"being restarted): try again");
		/* No engine holds them: nothing of either grant is kept. */
		if (g != NULL)
			grant_drop(g);
		if (g2 != NULL)
			grant_drop(g2);
	} else {
		cl->pending = 1;
	}
	free(buf);
	free(seen);
}

/*
 * A request that names a process, for a caller that could ptrace it:
 * the grant it opens holds the process as checked (procref.h), and every
 * later step of the engine on it goes through that grant. NULL when
 * refused (the caller is told).
 */
static struct grant *
allowed(struct client *cl, uint16_t type, const char *what, pid_t pid)
{
	uint32_t code = ERR_INVALID;
	struct procref t;
	char err[256];

	t = (struct procref)PROCREF_NONE;
	if (pid <= 1 || pid == getpid() || pid == engine_pid)
		snprintf(err, sizeof(err),
			 "%d is not a process uffdd can migrate", (int)pid);
	else if (procref_open(&t, pid, err, sizeof(err)) < 0)
		code = errno == ESRCH ? ERR_NO_PROCESS : ERR_PERMISSION;
	else if (authz_may_ptrace(&cl->who, &t, &code, err, sizeof(err)) == 0)
		return grant_new(type, &cl->who, &t);
	procref_close(&t);
	conn_send_error(cl->conn, code, "%s: %s", what, err);
	/* The engine's metrics count the refusals made here too. */
	if (engine >= 0)
		imsg_send(engine, CTL_REFUSED, 0, (int32_t)code, NULL, 0, NULL,
			  0);
	return NULL;
}

static void
client_frame(struct conn *c, const struct frame_hdr *h, ProtobufCMessage *msg,
	     void *arg)
{
	struct client *cl = arg;
	struct procref none = PROCREF_NONE;
	const struct role_request *q;
	const struct role_ops *r;
	struct grant *g = NULL, *g2 = NULL;

	switch (h->type) {
	case FRAME_CTL_EXPORT:
	case FRAME_CTL_ATTACH:
		/* The role that serves it, with the process checked. */
		if ((r = role_by_request(h->type)) == NULL)
			fatalx("no role serves %s", frame_type_name(h->type));
		if (r->request_no_process && r->request_no_process(msg))
			g = grant_new(h->type, &cl->who, &none);
		else if ((g = allowed(cl, h->type, r->verb,
				      r->request_pid(msg))) == NULL)
			return;
		/*
		 * A second process it names: the same check, its own grant
		 * (none for a request that names no process).
		 */
		if (g->t.pid > 0 && r->request_second_pid &&
		    r->request_second_pid(msg) != 0 &&
		    (g2 = allowed(cl, h->type, "--track",
				  r->request_second_pid(msg))) == NULL) {
			grant_drop(g);
			return;
		}
		forward(cl, h->type, msg, g, g2);
		break;
	case FRAME_CTL_STATUS:
	case FRAME_CTL_METRICS: /* counts, no migration's own */
		forward(cl, h->type, msg, NULL, NULL);
		break;
	case FRAME_CTL_GO:
	case FRAME_CTL_CANCEL:
	case FRAME_CTL_RELEASE:
	case FRAME_CTL_SNAPSHOT:
		/* Served by a role besides its own request (role.h). */
		q = role_request_by_type(h->type);
		if (q == NULL) {
			conn_send_error(c, ERR_INVALID,
					"%s is not served by this daemon",
					frame_type_name(h->type));
			break;
		}
		if (q->request_pid != NULL &&
		    (g = allowed(cl, h->type, q->verb, q->request_pid(msg))) ==
			    NULL)
			return;
		forward(cl, h->type, msg, g, NULL);
		break;
	default:
		conn_send_error(c, ERR_PROTOCOL,
				"unexpected %s on the control "
				"socket",
				frame_type_name(h->type));
		conn_finish(c);
		cl->conn = NULL;
		client_free(cl);
		break;
	}
}

/*
 * One byte from a client socket, with the descriptor it carries (fd NULL:
 * none is taken). Descriptors that come otherwise (several, or when none
 * is wanted) are closed. As recvmsg(), non-blocking.
 */
static ssize_t
recv_byte(int sock, char *b, int *fd)
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

/* Tells the engine what became of its CTL_ASK; the client reads on. */
static void
ask_end(struct client *cl, int status, uint8_t byte, int fd, const char *why)
{
	struct ctl_byte b = {.status = status, .byte = byte};

	snprintf(b.why, sizeof(b.why), "%s", why ? why : "");
	event_free(cl->ask_ev);
	cl->ask_ev = NULL;
	close(cl->ask_sock);
	cl->ask_sock = -1;
	if (cl->conn != NULL)
		conn_pause(cl->conn, 0);
	if (engine >= 0)
		imsg_send(engine, CTL_BYTE, cl->serial, 0, &b, sizeof(b), &fd,
			  fd >= 0);
	if (fd >= 0)
		close(fd);
}

static void
ask_cb(evutil_socket_t sock, short what, void *arg)
{
	struct client *cl = arg;
	ssize_t r;
	int fd = -1;
	char b;

	if (what & EV_TIMEOUT) {
		ask_end(cl, CONTROL_ASK_TIMEOUT, 0, -1,
			"did not answer in time");
		return;
	}
	r = recv_byte(sock, &b, cl->ask_fd ? &fd : NULL);
	if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		event_add(cl->ask_ev, NULL);
		return;
	}
	if (r <= 0)
		ask_end(cl, CONTROL_ASK_GONE, 0, -1, "the client went away");
	else if (cl->ask_fd && fd < 0)
		ask_end(cl, CONTROL_ASK_NOFD, 0, -1,
			"no file descriptor from the client");
	else
		ask_end(cl, 0, (uint8_t)b, fd, NULL);
}

/*
 * CTL_ASK: the engine waits for one byte of the client (with a file
 * descriptor, for a file it hands over): the client's frames wait while
 * its socket is read here (fdpass.h).
 */
static void
ask(struct client *cl, const struct imsg *m)
{
	const struct ctl_ask *a = (const void *)m->data;
	const struct ctl_reply *r = (const void *)(m->data + sizeof(*a));
	struct timeval tv = {a->secs ? a->secs : 1, 0};

	if (cl->ask_ev != NULL || cl->conn == NULL ||
	    (cl->ask_sock = dup(conn_fd(cl->conn))) < 0) {
		struct ctl_byte b = {.status = CONTROL_ASK_GONE};

		snprintf(b.why, sizeof(b.why), "the client went away");
		imsg_send(engine, CTL_BYTE, cl->serial, 0, &b, sizeof(b), NULL,
			  0);
		return;
	}
	cl->ask_fd = a->want_fd != 0;
	cl->ask_ev = event_new(base, cl->ask_sock, EV_READ, ask_cb, cl);
	if (cl->ask_ev == NULL)
		fatalx("event_new");
	event_priority_set(cl->ask_ev, PRIO_CONTROL);
	conn_pause(cl->conn, 1);
	event_add(cl->ask_ev, &tv);
	if (m->h.len > sizeof(*a) && frame_descriptor(r->frame_type) != NULL &&
	    r->msg_len == m->h.len - sizeof(*a) - sizeof(*r))
		conn_send_packed(cl->conn, r->frame_type,
				 m->data + sizeof(*a) + sizeof(*r), r->msg_len);
}

/* A reply of the engine's, written to its client as it is. */
static void
reply(struct client *cl, const struct imsg *m)
{
	const struct ctl_reply *r = (const void *)m->data;

	if (m->h.len < sizeof(*r) || r->msg_len != m->h.len - sizeof(*r) ||
	    frame_descriptor(r->frame_type) == NULL) {
		log_warnx("engine: a reply that does not hold together: "
			  "dropped");
		return;
	}
	if (cl->conn != NULL)
		conn_send_packed(cl->conn, r->frame_type, m->data + sizeof(*r),
				 r->msg_len);
}

void
ctlsock_engine_msg(struct imsg *m)
{
	struct client *cl = client_find(m->h.id);
	const struct ctl_bind *b;
	struct grant *g;

	switch (m->h.type) {
	case CTL_REPLY:
		if (cl != NULL) {
			cl->pending = 0;
			reply(cl, m);
		}
		break;
	case CTL_ASK:
		if (cl != NULL &&
		    (m->h.len == sizeof(struct ctl_ask) ||
		     m->h.len >=
			     sizeof(struct ctl_ask) + sizeof(struct ctl_reply)))
			ask(cl, m);
		break;
	case CTL_BIND:
		b = imsg_payload(m, sizeof(*b));
		if (b != NULL && (g = grant_find(m->h.id)) != NULL &&
		    b->role <= ROLE_DEST && memchr(b->id, 0, sizeof(b->id))) {
			grant_bind(g, b->role, b->id);
			/* Bound: it survives a restart of the daemon. */
			record_write(g);
		}
		break;
	case CTL_DROP:
		if ((g = grant_find(m->h.id)) != NULL) {
			record_remove(g);
			grant_drop(g);
		}
		break;
	default:
		log_warnx("engine: unexpected control message %u",
			  (unsigned)m->h.type);
	}
}

/*
 * The engine to forward to, or none (sock -1) while one is restarted. A
 * request the engine that ended took will never be answered: its client's
 * connection is closed, so that it asks again (uffd-client wait rejoins)
 * rather than wait for ever.
 */
void
ctlsock_engine(int sock, pid_t pid)
{
	struct client *cl, *next;

	engine = sock;
	engine_pid = pid;
	if (sock >= 0)
		return;
	for (cl = TAILQ_FIRST(&clients); cl != NULL; cl = next) {
		next = TAILQ_NEXT(cl, link);
		if (cl->pending) {
			log_info("control: a request in flight when the "
				 "engine ended: its client is disconnected");
			client_free(cl);
		}
	}
}

static void
client_close(struct conn *c, const char *why, void *arg)
{
	client_free(arg);
}

static void
accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
	  int sl, void *arg)
{
	struct authz_caller who;
	struct bufferevent *bev;
	struct client *cl;
	char name[64];

	/* Who connected, as the kernel recorded it then (authz.h). */
	if (authz_caller_from_socket(&who, fd) < 0) {
		log_warn("control: SO_PEERCRED");
		evutil_closesocket(fd);
		return;
	}
	bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (bev == NULL) {
		evutil_closesocket(fd);
		return;
	}
	cl = xcalloc(1, sizeof(*cl));
	cl->serial = next_serial++;
	cl->who = who;
	snprintf(name, sizeof(name), "control client pid %d", (int)who.pid);
	cl->conn = conn_new(base, bev, name, client_frame, client_close, cl);
	conn_set_priority(cl->conn, PRIO_CONTROL);
	TAILQ_INSERT_TAIL(&clients, cl, link);
}

int
ctlsock_listen(const char *path)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	mode_t old;

	if (strlen(path) >= sizeof(sun.sun_path)) {
		log_warnx("control socket path too long: %s", path);
		return -1;
	}
	strcpy(sun.sun_path, path);
	/* A stale socket from a dead daemon is replaced, a live one is not. */
	if (access(path, F_OK) == 0) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd >= 0 &&
		    connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0) {
			close(fd);
			log_warnx("control socket %s: another uffdd is running "
				  "there",
				  path);
			return -1;
		}
		if (fd >= 0)
			close(fd);
		unlink(path);
	}
	/*
	 * Root only by default: the socket is created 0600, then opened to
	 * --control-mode and --control-group. Whoever gets in is still held
	 * to the ptrace rule on every request (authz.c).
	 */
	old = umask(0177);
	listener = evconnlistener_new_bind(
		base, accept_cb, NULL,
		LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 16,
		(struct sockaddr *)&sun, sizeof(sun));
	umask(old);
	if (listener == NULL) {
		log_warn("control socket %s", path);
		return -1;
	}
	sock_path = xstrdup(path);
	if (ctlsock_apply_mode() < 0) {
		ctlsock_close();
		return -1;
	}
	return 0;
}

int
ctlsock_apply_mode(void)
{
	if (sock_path == NULL)
		return 0;
	/* No control-group: our own group, also after a reload removed it. */
	gid_t gid =
		conf.control_gid != (gid_t)-1 ? conf.control_gid : getegid();

	if (chown(sock_path, (uid_t)-1, gid) < 0 ||
	    chmod(sock_path, conf.control_mode) < 0) {
		log_warn("control socket %s: mode %04o group %ld", sock_path,
			 (unsigned)conf.control_mode, (long)gid);
		return -1;
	}
	return 0;
}

void
ctlsock_close(void)
{
	struct client *cl;

	while ((cl = TAILQ_FIRST(&clients)) != NULL)
		client_free(cl);
	if (listener) {
		evconnlistener_free(listener);
		listener = NULL;
	}
	if (sock_path) {
		unlink(sock_path);
		free(sock_path);
		sock_path = NULL;
	}
}

/*
 * The control socket: uffd-client's requests, framed like the peer lanes.
 * Replies to slow requests (attach) are routed by client serial number, so a
 * client that went away is simply not answered.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/bufferevent.h>
#include <event2/listener.h>

#include "daemon/authz.h"
#include "daemon/conffile.h"
#include "daemon/conn.h"
#include "daemon/control.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/procref.h"
#include "daemon/role.h"

struct client {
	TAILQ_ENTRY(client) link;
	uint64_t serial;
	struct conn *conn;
	struct authz_caller who;
};

static TAILQ_HEAD(, client) clients = TAILQ_HEAD_INITIALIZER(clients);
static struct evconnlistener *listener;
static char *sock_path;
static uint64_t next_serial = 1;

static void
client_free(struct client *cl)
{
	TAILQ_REMOVE(&clients, cl, link);
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

void
control_reply(uint64_t serial, uint16_t type, const ProtobufCMessage *msg)
{
	struct client *cl = client_find(serial);
	const char *id = NULL;
	struct migration *m;

	if (cl == NULL)
		return;
	/* The caller whose request made a migration may follow it. */
	if (type == FRAME_CTL_EXPORT_REPLY)
		id = ((const Uffdd__ExportReply *)msg)->id;
	else if (type == FRAME_CTL_ATTACH_REPLY)
		id = ((const Uffdd__AttachReply *)msg)->id;
	if (id != NULL && (m = migration_find(id, type == FRAME_CTL_EXPORT_REPLY
							  ? ROLE_SOURCE
							  : ROLE_DEST)) != NULL)
		authz_set_owner(&cl->who, m);
	conn_send(cl->conn, type, msg);
}

struct conn *
control_conn(uint64_t serial)
{
	struct client *cl = client_find(serial);

	return cl ? cl->conn : NULL;
}

void
control_reply_error(uint64_t serial, uint32_t code, const char *fmt, ...)
{
	struct client *cl = client_find(serial);
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (cl != NULL)
		conn_send_error(cl->conn, code, "%s", msg);
}

static void
do_status(struct client *cl, const Uffdd__StatusRequest *req)
{
	Uffdd__StatusReply rep = UFFDD__STATUS_REPLY__INIT;
	Uffdd__MigrationStatus *st, **ptrs;
	Uffdd__Range **lbufs, ***lptrs;
	Uffdd__ThreadBlock **tbufs, ***tptrs;
	struct migration *m;
	size_t n = 0, i = 0;

	TAILQ_FOREACH (m, &migrations, link)
		n++;
	st = xcalloc(n, sizeof(*st));
	ptrs = xcalloc(n, sizeof(*ptrs));
	lbufs = xcalloc(n, sizeof(*lbufs));
	lptrs = xcalloc(n, sizeof(*lptrs));
	tbufs = xcalloc(n, sizeof(*tbufs));
	tptrs = xcalloc(n, sizeof(*tptrs));
	TAILQ_FOREACH (m, &migrations, link) {
		if (req->id[0] && strcmp(req->id, m->id) != 0)
			continue;
		/* IDs are credentials: only for who may touch the process. */
		if (!authz_may_see(&cl->who, m))
			continue;
		uffdd__migration_status__init(&st[i]);
		migration_status(m, &st[i]);
		st[i].n_lost = migration_lost_ranges(m, &lbufs[i], &lptrs[i]);
		st[i].lost = lptrs[i];
		st[i].n_threads = migration_threads(m, &tbufs[i], &tptrs[i]);
		st[i].threads = tptrs[i];
		/* The working set goes to who asks for this one migration. */
		if (req->id[0] && m->ws) {
			st[i].n_working_set = m->ws->n;
			st[i].working_set = m->ws->keys;
		}
		/* None recorded (or lost in a restart): nothing to wait for. */
		st[i].working_set_closed = migration_ws_closed(m);
		ptrs[i] = &st[i];
		i++;
	}
	if (req->id[0] && i == 0) {
		conn_send_error(cl->conn, ERR_UNKNOWN_ID,
				"unknown migration ID %s", log_id(req->id));
	} else {
		rep.n_migrations = i;
		rep.migrations = ptrs;
		static char *feat[] = {FEATURE_PRECOPY, FEATURE_DEFERRED};

		rep.n_features = 2;
		rep.features = feat;
		conn_send(cl->conn, FRAME_CTL_STATUS_REPLY, &rep.base);
	}
	for (size_t k = 0; k < i; k++) {
		free(lbufs[k]);
		free(lptrs[k]);
		free(tbufs[k]);
		free(tptrs[k]);
	}
	free(lbufs);
	free(lptrs);
	free(tbufs);
	free(tptrs);
	free(ptrs);
	free(st);
}

/*
 * Export and attach only for a caller that could ptrace the process: t is
 * opened for the check and handed to the role, which does every later step
 * through it (procref.h). 0 when allowed; else the caller is told.
 */
static int
allowed(struct client *cl, const char *what, pid_t pid, struct procref *t)
{
	uint32_t code = ERR_INVALID;
	char err[256];

	*t = (struct procref)PROCREF_NONE;
	if (pid <= 1 || pid == getpid())
		snprintf(err, sizeof(err),
			 "%d is not a process uffdd can migrate", (int)pid);
	else if (procref_open(t, pid, err, sizeof(err)) < 0)
		code = errno == ESRCH ? ERR_NO_PROCESS : ERR_PERMISSION;
	else if (authz_may_ptrace(&cl->who, t, &code, err, sizeof(err)) == 0)
		return 1;
	procref_close(t);
	conn_send_error(cl->conn, code, "%s: %s", what, err);
	return 0;
}

static void
client_frame(struct conn *c, const struct frame_hdr *h, ProtobufCMessage *msg,
	     void *arg)
{
	struct client *cl = arg;
	struct procref t;

	switch (h->type) {
	case FRAME_CTL_EXPORT:
	case FRAME_CTL_ATTACH: {
		/* The role that serves it, with the process checked. */
		const struct role_ops *r = role_by_request(h->type);

		if (r != NULL && r->request_no_process &&
		    r->request_no_process(msg)) {
			t = (struct procref)PROCREF_NONE;
			r->request(cl->serial, &cl->who, &t, msg);
		} else if (r != NULL &&
			   allowed(cl, r->verb, r->request_pid(msg), &t)) {
			r->request(cl->serial, &cl->who, &t, msg);
		}
		break;
	}
	case FRAME_CTL_STATUS:
		do_status(cl, (const Uffdd__StatusRequest *)msg);
		break;
	case FRAME_CTL_GO:
	case FRAME_CTL_CANCEL:
	case FRAME_CTL_RELEASE:
	case FRAME_CTL_SNAPSHOT: {
		/* Served by a role besides its own request (role.h). */
		const struct role_request *q = role_request_by_type(h->type);

		if (q == NULL)
			conn_send_error(c, ERR_INVALID,
					"%s is not served by this daemon",
					frame_type_name(h->type));
		else if (q->request_pid == NULL)
			q->request(cl->serial, &cl->who, NULL, msg);
		else if (allowed(cl, q->verb, q->request_pid(msg), &t))
			q->request(cl->serial, &cl->who, &t, msg);
		break;
	}
	default:
		conn_send_error(c, ERR_PROTOCOL,
				"unexpected %s on the control "
				"socket",
				frame_type_name(h->type));
		conn_finish(c);
		TAILQ_REMOVE(&clients, cl, link);
		free(cl);
		break;
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
control_listen(const char *path)
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
	if (control_apply_mode() < 0) {
		control_close();
		return -1;
	}
	return 0;
}

int
control_apply_mode(void)
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
control_close(void)
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

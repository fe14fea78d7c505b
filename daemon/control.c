/*
 * Control requests in the engine (control.h): they come from the
 * privileged part, which read them from uffd-client, checked the caller
 * and opened a grant for the process they name (docs/privsep.md); the
 * roles serve them, and their replies go back the same way.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/authz.h"
#include "daemon/control.h"
#include "daemon/ctlmsg.h"
#include "daemon/imsg.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/loop.h"
#include "daemon/procfile.h"
#include "daemon/procref.h"
#include "daemon/role.h"

/* A client with a request in the engine: its serial and grant. */
struct client {
	TAILQ_ENTRY(client) link;
	uint64_t serial;
	uint64_t grant;
	control_byte_cb ask_cb; /* a CTL_ASK waits */
	void *ask_arg;
};

static TAILQ_HEAD(, client) clients = TAILQ_HEAD_INITIALIZER(clients);
static int sock = -1;
static struct event *ev;
static void (*on_stop)(void);
static void (*on_reload)(int fds[RELOAD_FILES]);
/* While a request is dispatched: the migrations its caller may see. */
static const struct ctl_seen *seen;
static size_t nseen;
static int seen_all;
/* The second process of the request being served (control.h). */
static struct procref second = PROCREF_NONE;

static struct client *
client_find(uint64_t serial)
{
	struct client *cl;

	TAILQ_FOREACH (cl, &clients, link)
		if (cl->serial == serial)
			return cl;
	return NULL;
}

static struct client *
client_get(uint64_t serial)
{
	struct client *cl = client_find(serial);

	if (cl == NULL) {
		cl = xcalloc(1, sizeof(*cl));
		cl->serial = serial;
		TAILQ_INSERT_TAIL(&clients, cl, link);
	}
	return cl;
}

/* The client went away: an ask it left is answered. */
static void
client_gone(uint64_t serial)
{
	struct client *cl = client_find(serial);
	control_byte_cb cb;

	if (cl == NULL)
		return;
	TAILQ_REMOVE(&clients, cl, link);
	if ((cb = cl->ask_cb) != NULL)
		cb(cl->ask_arg, -1, 0, CONTROL_ASK_GONE,
		   "the client went away");
	free(cl);
}

/* Tells the privileged part that the engine holds nothing of a grant. */
static void
drop_grant(uint64_t grant)
{
	procfile_unbind(grant);
	if (sock >= 0 && grant != 0)
		imsg_send(sock, CTL_DROP, grant, 0, NULL, 0, NULL, 0);
}

void
control_bind(uint64_t serial, enum mig_role role, const char *id)
{
	struct client *cl = client_find(serial);
	struct ctl_bind b = {.role = role};

	if (cl == NULL || cl->grant == 0 || sock < 0)
		return;
	snprintf(b.id, sizeof(b.id), "%s", id);
	imsg_send(sock, CTL_BIND, cl->grant, 0, &b, sizeof(b), NULL, 0);
}

/* Sends an already packed message of type to the client. */
static void
send_packed(uint64_t serial, uint16_t type, const uint8_t *msg, size_t len)
{
	struct ctl_reply r = {.frame_type = type, .msg_len = (uint32_t)len};
	uint8_t *buf = xmalloc(sizeof(r) + len + 1);

	memcpy(buf, &r, sizeof(r));
	memcpy(buf + sizeof(r), msg, len);
	if (sock >= 0 && imsg_send(sock, CTL_REPLY, serial, 0, buf,
				   sizeof(r) + len, NULL, 0) < 0)
		log_warn("control reply to client %llu",
			 (unsigned long long)serial);
	free(buf);
}

void
control_reply(uint64_t serial, uint16_t type, const ProtobufCMessage *msg)
{
	size_t len = protobuf_c_message_get_packed_size(msg);
	uint8_t *buf = xmalloc(len + 1);

	protobuf_c_message_pack(msg, buf);
	/* The caller whose request made a migration may follow it. */
	if (type == FRAME_CTL_EXPORT_REPLY)
		control_bind(serial, ROLE_SOURCE,
			     ((const Uffdd__ExportReply *)msg)->id);
	else if (type == FRAME_CTL_ATTACH_REPLY)
		control_bind(serial, ROLE_DEST,
			     ((const Uffdd__AttachReply *)msg)->id);
	send_packed(serial, type, buf, len);
	free(buf);
}

/* A refused request in the metrics, by its error code's kind. */
static void
count_refusal(uint32_t code)
{
	enum metrics_refusal r = METRICS_REFUSED_OTHER;

	if (code == ERR_PERMISSION)
		r = METRICS_REFUSED_PERMISSION;
	else if (code == ERR_INVALID || code == ERR_PROTOCOL ||
		 code == ERR_UNKNOWN_ID)
		r = METRICS_REFUSED_INVALID;
	metrics.refused[r]++;
}

void
control_reply_error(uint64_t serial, uint32_t code, const char *fmt, ...)
{
	Uffdd__Error e = UFFDD__ERROR__INIT;
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	e.code = code;
	e.message = msg;
	count_refusal(code);
	control_reply(serial, FRAME_ERROR, &e.base);
}

void
control_ask(uint64_t serial, uint16_t type, const ProtobufCMessage *msg,
	    int want_fd, unsigned secs, control_byte_cb cb, void *arg)
{
	struct client *cl = client_find(serial);
	struct ctl_ask a = {.want_fd = (uint32_t)want_fd, .secs = secs};
	size_t len = msg ? protobuf_c_message_get_packed_size(msg) : 0;
	struct ctl_reply r = {.frame_type = type, .msg_len = (uint32_t)len};
	size_t total = sizeof(a) + (msg ? sizeof(r) + len : 0);
	uint8_t *buf = xmalloc(total + 1);
	int rc;

	memcpy(buf, &a, sizeof(a));
	if (msg != NULL) {
		memcpy(buf + sizeof(a), &r, sizeof(r));
		protobuf_c_message_pack(msg, buf + sizeof(a) + sizeof(r));
	}
	rc = cl == NULL || cl->ask_cb != NULL || sock < 0
		     ? -1
		     : imsg_send(sock, CTL_ASK, serial, 0, buf, total, NULL, 0);
	free(buf);
	if (rc < 0) {
		cb(arg, -1, 0, CONTROL_ASK_GONE, "the client went away");
		return;
	}
	cl->ask_cb = cb;
	cl->ask_arg = arg;
}

int
control_client_here(uint64_t serial)
{
	return client_find(serial) != NULL;
}

void
control_ask_cancel(uint64_t serial)
{
	struct client *cl = client_find(serial);

	if (cl != NULL)
		cl->ask_cb = NULL;
}

/* CTL_BYTE: the answer to an ask. */
static void
got_byte(struct imsg *m)
{
	struct client *cl = client_find(m->h.id);
	const struct ctl_byte *b = imsg_payload(m, sizeof(*b));
	control_byte_cb cb;
	char why[sizeof(b->why) + 1];

	if (cl == NULL || (cb = cl->ask_cb) == NULL || b == NULL)
		return;
	cl->ask_cb = NULL;
	snprintf(why, sizeof(why), "%.*s", (int)sizeof(b->why), b->why);
	if (b->status != 0)
		cb(cl->ask_arg, -1, 0, b->status, why);
	else
		cb(cl->ask_arg, imsg_take_fd(m, 0), b->byte, 0, NULL);
}

struct procref *
control_second(void)
{
	return second.pid > 0 ? &second : NULL;
}

int
control_may_see(const struct migration *m)
{
	if (seen_all)
		return 1;
	for (size_t i = 0; i < nseen; i++)
		if (seen[i].role == (uint32_t)m->role &&
		    strcmp(seen[i].id, m->id) == 0)
			return 1;
	return 0;
}

/* Hands a request to the role that serves it (the caller was checked). */
static void
dispatch(uint64_t serial, uint16_t type, const struct authz_caller *who,
	 struct procref *t, ProtobufCMessage *msg)
{
	const struct role_request *q;
	const struct role_ops *r;

	switch (type) {
	case FRAME_CTL_EXPORT:
	case FRAME_CTL_ATTACH:
		if ((r = role_by_request(type)) != NULL)
			r->request(serial, who, t, msg);
		break;
	default:
		if ((q = role_request_by_type(type)) != NULL)
			q->request(serial, who, q->request_pid ? t : NULL, msg);
		else
			control_reply_error(serial, ERR_INVALID,
					    "%s is not served here",
					    frame_type_name(type));
	}
}

/*
 * A process of the request, under its grant (t->grant): its pidfd and
 * memory file are descriptors at and at + 1 of m.
 */
static void
take_process(struct procref *t, struct imsg *m, int at, pid_t pid,
	     uint64_t start, uint64_t probe)
{
	t->pid = pid;
	t->pidfd = imsg_take_fd(m, at);
	t->memfd = imsg_take_fd(m, at + 1);
	t->start = start;
	t->probe = probe;
	/* The privileged part opens the process's files for it. */
	procfile_bind(t->pid, t->grant);
}

/* CTL_REQUEST: checked whole before anything of it is used. */
static void
request(struct imsg *m)
{
	const struct ctl_request *rq = (const void *)m->data;
	struct procref t = PROCREF_NONE;
	const ProtobufCMessageDescriptor *d;
	struct authz_caller who;
	ProtobufCMessage *msg;
	size_t off;

	if (m->h.len < sizeof(*rq) || rq->nseen > CTL_SEEN_MAX ||
	    (off = sizeof(*rq) + rq->nseen * sizeof(struct ctl_seen)) +
			    rq->msg_len !=
		    m->h.len ||
	    (d = frame_descriptor(rq->frame_type)) == NULL ||
	    (msg = protobuf_c_message_unpack(d, NULL, rq->msg_len,
					     m->data + off)) == NULL) {
		log_warnx("control: a request that does not hold together: "
			  "dropped");
		return;
	}
	who = (struct authz_caller){.pid = rq->who.pid,
				    .uid = rq->who.uid,
				    .gid = rq->who.gid,
				    .privileged = rq->who.privileged};
	/*
	 * The grant of the last request that named one: a STATUS on the same
	 * connection meanwhile must not take a later reply's owner away.
	 */
	if (rq->grant != 0)
		client_get(m->h.id)->grant = rq->grant;
	else
		client_get(m->h.id);
	t.grant = rq->grant;
	if (rq->pid > 0 && m->nfd == (rq->pid2 > 0 ? 4 : 2))
		take_process(&t, m, 0, rq->pid, rq->start, rq->probe);
	/* Its grant is the engine's to let go, taken or not (as t's). */
	second.grant = rq->grant2;
	if (t.pid > 0 && rq->pid2 > 0 && rq->grant2 != 0)
		take_process(&second, m, 2, rq->pid2, rq->start2, rq->probe2);
	seen = (const void *)(m->data + sizeof(*rq));
	nseen = rq->nseen;
	seen_all = rq->seen_all != 0;
	dispatch(m->h.id, rq->frame_type, &who, &t, msg);
	seen = NULL;
	nseen = 0;
	seen_all = 0;
	/* Not taken by the role: nothing of the grant is kept. */
	procref_close(&t);
	procref_close(&second);
	second = (struct procref)PROCREF_NONE;
	protobuf_c_message_free_unpacked(msg, NULL);
}

/* CTL_RELOAD: its descriptors, each to its file (ctlmsg.h), to reload. */
static void
reload_files(struct imsg *m)
{
	const struct ctl_reload *r = imsg_payload(m, sizeof(*r));
	int fds[RELOAD_FILES];

	for (int i = 0; i < RELOAD_FILES; i++)
		fds[i] = r != NULL && r->at[i] >= 0 && r->at[i] < m->nfd
				 ? imsg_take_fd(m, r->at[i])
				 : -1;
	on_reload(fds);
}

static void
ctl_cb(evutil_socket_t fd, short what, void *arg)
{
	struct imsg m;
	int r;

	for (int i = 0; i < 64; i++) {
		if ((r = imsg_recv(fd, &m)) < 0 && errno == EBADMSG)
			continue;
		if (r == 0) {
			/* The privileged part is gone: so are we. */
			log_warnx("control: the privileged part is gone; "
				  "stopping");
			on_stop();
			return;
		}
		if (r < 0)
			return;
		switch (m.h.type) {
		case CTL_REQUEST:
			request(&m);
			break;
		case CTL_CLIENT_GONE:
			client_gone(m.h.id);
			break;
		case CTL_BYTE:
			got_byte(&m);
			break;
		case CTL_STOP:
			on_stop();
			break;
		case CTL_RELOAD:
			reload_files(&m);
			break;
		case CTL_REFUSED:
			count_refusal((uint32_t)m.h.err);
			break;
		default:
			log_warnx("control: unexpected message %u",
				  (unsigned)m.h.type);
		}
		imsg_clear(&m);
	}
}

void
control_init(int fd, void (*stop)(void), void (*reload)(int *))
{
	sock = fd;
	on_stop = stop;
	on_reload = reload;
	procref_drop_hook = drop_grant;
	evutil_make_socket_nonblocking(sock);
	if ((ev = event_new(base, sock, EV_READ | EV_PERSIST, ctl_cb, NULL)) ==
	    NULL)
		fatalx("event_new");
	event_priority_set(ev, PRIO_CONTROL);
	event_add(ev, NULL);
}

void
control_say(int type, const char *line)
{
	struct ctl_status st;

	memset(&st, 0, sizeof(st));
	snprintf(st.line, sizeof(st.line), "%s", line);
	if (sock >= 0)
		imsg_send(sock, type, 0, 0, &st, sizeof(st), NULL, 0);
}

void
control_close(void)
{
	struct client *cl;

	while ((cl = TAILQ_FIRST(&clients)) != NULL)
		client_gone(cl->serial);
	if (ev != NULL)
		event_free(ev);
	ev = NULL;
	procref_drop_hook = NULL;
	if (sock >= 0)
		close(sock);
	sock = -1;
}

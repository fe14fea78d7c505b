/*
 * Peer connections between daemons: listening, connecting, address policy.
 * TLS 1.3 (tls.c) unless --insecure, and plaintext only on loopback.
 */
#include "config.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/bufferevent.h>
#include <event2/listener.h>

#include "daemon/conffile.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/metrics.h"
#include "daemon/peer.h"
#include "daemon/role.h"
#include "daemon/tls.h"

/* One listener per address in --listen (a comma-separated list). */
#define PEER_LISTEN_MAX 8
static struct evconnlistener *listeners[PEER_LISTEN_MAX];
static int nlisteners;

/*
 * Limits on connections that have not yet said which migration they are for
 * (TLS handshake, then HELLO): per peer address and in all, and a deadline
 * (max-pending-per-address, max-pending, hello-timeout in the configuration).
 * Past HELLO the source role allows one demand and one bulk lane per
 * migration. Without these, anyone who can reach the port could hold file
 * descriptors and handshakes open at no cost.
 *
 * The deadline runs from accept and traffic never moves it: a peer that
 * trickles a byte at a time would keep a read timeout from ever firing.
 * A connection counts until its socket is closed, also one refused after
 * its HELLO (unknown ID, version, busy lane) while its ERROR goes out;
 * such a one has what is left of its deadline for that, at most
 * PEER_REFUSED_SECS.
 */
#define PEER_REFUSED_SECS 2

struct pending {
	TAILQ_ENTRY(pending) link;
	struct conn *conn;
	struct event *deadline;
	uint64_t due_ns; /* now_ns() when the deadline fires */
	int secs;	 /* hello-timeout when it was accepted */
	int refused;	 /* answered with an ERROR, finishing */
	struct sockaddr_storage addr;
};
static TAILQ_HEAD(, pending) pendings = TAILQ_HEAD_INITIALIZER(pendings);
static int npending;

static int
same_host(const struct sockaddr_storage *a, const struct sockaddr *b)
{
	if (a->ss_family != b->sa_family)
		return 0;
	if (b->sa_family == AF_INET)
		return ((const struct sockaddr_in *)(const void *)a)
			       ->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)(const void *)b)
			       ->sin_addr.s_addr;
	if (b->sa_family == AF_INET6)
		return memcmp(&((const struct sockaddr_in6 *)(const void *)a)
				       ->sin6_addr,
			      &((const struct sockaddr_in6 *)(const void *)b)
				       ->sin6_addr,
			      sizeof(struct in6_addr)) == 0;
	return 0;
}

/* The connection became a lane or its socket closed: it no longer counts. */
static void
pending_done(struct pending *p)
{
	TAILQ_REMOVE(&pendings, p, link);
	npending--;
	event_free(p->deadline);
	free(p);
}

/* conn_on_closed(): however the connection ended. */
static void
pending_closed(void *arg)
{
	pending_done(arg);
}

/* Closes the connection now and stops counting it. */
static void
pending_close(struct pending *p)
{
	conn_on_closed(p->conn, NULL, NULL);
	conn_free(p->conn);
	pending_done(p);
}

static void
pending_deadline(evutil_socket_t fd, short ev, void *arg)
{
	struct pending *p = arg;

	if (p->refused)
		log_debug("%s: closed; it was refused and had %d s at most "
			  "to take its ERROR",
			  conn_name(p->conn), PEER_REFUSED_SECS);
	else
		log_event(LOG_MSGID_PEER_REFUSED, conn_name(p->conn),
			  "peer %s refused: no HELLO within %d s of "
			  "connecting, TLS handshake included (hello-timeout)",
			  conn_name(p->conn), p->secs);
	if (!p->refused)
		metrics.tls_failures[METRICS_TLS_TIMEOUT] +=
			(uint64_t)conn_tls_pending(p->conn);
	pending_close(p);
}

/*
 * Refused after its first frame, the connection is finishing (its ERROR
 * goes out, conn_finish()): it keeps counting until it closes, and closes
 * at its deadline or PEER_REFUSED_SECS from now, whichever comes first.
 */
static void
pending_refused(struct pending *p)
{
	uint64_t now = now_ns(), left;
	struct timeval tv;

	p->refused = 1;
	left = p->due_ns > now ? p->due_ns - now : 0;
	if (left > (uint64_t)PEER_REFUSED_SECS * 1000000000u)
		left = (uint64_t)PEER_REFUSED_SECS * 1000000000u;
	tv.tv_sec = (time_t)(left / 1000000000u);
	tv.tv_usec = (suseconds_t)(left % 1000000000u / 1000);
	evtimer_add(p->deadline, &tv);
}

/* Plaintext is allowed only where nobody else can listen in: loopback. */
static int
is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)sa;

		return (ntohl(s->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)sa;

		return IN6_IS_ADDR_LOOPBACK(&s->sin6_addr);
	}
	return 0;
}

/*
 * Splits HOST:PORT ([v6]:PORT too) and resolves it to one address; host
 * receives HOST, the name the peer's certificate must carry.
 */
static int
resolve(const char *hostport, struct sockaddr_storage *ss, socklen_t *sl,
	char host[256], char *err, size_t errlen)
{
	const char *port, *colon = strrchr(hostport, ':');
	struct addrinfo hints = {0}, *res;
	size_t hl;
	int rc;

	if (colon == NULL || colon[1] == '\0') {
		snprintf(err, errlen, "%s: expected HOST:PORT", hostport);
		return -1;
	}
	port = colon + 1;
	hl = (size_t)(colon - hostport);
	if (hl > 1 && hostport[0] == '[' && hostport[hl - 1] == ']') {
		hostport++;
		hl -= 2;
	}
	if (hl == 0) {
		snprintf(err, errlen, "%s: expected HOST:PORT", hostport);
		return -1;
	}
	if (hl >= 256) {
		snprintf(err, errlen, "%s: host name too long", hostport);
		return -1;
	}
	memcpy(host, hostport, hl);
	host[hl] = '\0';
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	if ((rc = getaddrinfo(host, port, &hints, &res)) != 0) {
		snprintf(err, errlen, "%s: %s", hostport, gai_strerror(rc));
		return -1;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*sl = res->ai_addrlen;
	freeaddrinfo(res);
	if (!tls_enabled() && !is_loopback((struct sockaddr *)ss)) {
		snprintf(err, errlen,
			 "%s: plaintext peer connections are refused on a "
			 "non-loopback address (--insecure is for loopback "
			 "only: give the daemon --ca, --cert and --key)",
			 hostport);
		return -1;
	}
	return 0;
}

void
peer_set_nodelay(struct conn *c)
{
	int one = 1;

	setsockopt(conn_fd(c), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	conn_set_direct(c);
}

void
peer_set_user_timeout(struct conn *c, unsigned secs)
{
	unsigned ms = secs * 1000;

	setsockopt(conn_fd(c), IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
}

/* The first frame on an accepted connection says which role it is for. */
static void
accepted_frame(struct conn *c, const struct frame_hdr *h, ProtobufCMessage *msg,
	       void *arg)
{
	struct pending *p = arg;
	const struct role_ops *r;

	if (h->type != FRAME_HELLO) {
		log_event(LOG_MSGID_PEER_REFUSED, conn_name(c),
			  "peer %s refused: %s before HELLO", conn_name(c),
			  frame_type_name(h->type));
		conn_send_error(c, ERR_PROTOCOL, "expected HELLO");
		conn_finish(c);
		pending_refused(p);
		return;
	}
	r = role_get(ROLE_SOURCE);
	if (r == NULL || r->hello == NULL ||
	    r->hello(c, (const Uffdd__Hello *)msg) < 0) {
		pending_refused(p);
		return;
	}
	/* A lane now: its migration limits it, and the role its silence. */
	conn_on_closed(c, NULL, NULL);
	pending_done(p);
}

/*
 * Before HELLO nobody owns the connection: TLS refusals end up here (its
 * conn_on_closed() callback stops counting it).
 */
static void
accepted_close(struct conn *c, const char *why, void *arg)
{
	log_event(LOG_MSGID_PEER_REFUSED, conn_name(c), "peer %s refused: %s",
		  conn_name(c), why);
	conn_free(c);
}

static void accepted(evutil_socket_t fd, const char *name,
		     const struct sockaddr *sa, int sl, int tls);

static void
accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
	  int sl, void *arg)
{
	char host[INET6_ADDRSTRLEN + 8] = "?", name[96];
	struct pending *p;
	int port = 0, same = 0;

	if (sa->sa_family == AF_INET) {
		inet_ntop(AF_INET, &((struct sockaddr_in *)sa)->sin_addr, host,
			  sizeof(host));
		port = ntohs(((struct sockaddr_in *)sa)->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)sa)->sin6_addr,
			  host, sizeof(host));
		port = ntohs(((struct sockaddr_in6 *)sa)->sin6_port);
	}
	if (!tls_enabled() && !is_loopback(sa)) {
		log_event(LOG_MSGID_PEER_REFUSED, host,
			  "peer %s refused: plaintext only on loopback", host);
		evutil_closesocket(fd);
		return;
	}
	TAILQ_FOREACH (p, &pendings, link)
		same += same_host(&p->addr, sa);
	if (same >= conf.lim.max_pending_per_addr ||
	    npending >= conf.lim.max_pending) {
		log_event(LOG_MSGID_PEER_REFUSED, host,
			  "peer %s refused: %d connections from it and %d in "
			  "all are pending, before HELLO or closing after a "
			  "refusal (max-pending-per-address %d, max-pending "
			  "%d)",
			  host, same, npending, conf.lim.max_pending_per_addr,
			  conf.lim.max_pending);
		evutil_closesocket(fd);
		return;
	}
	snprintf(name, sizeof(name), "%s%s%s:%d",
		 sa->sa_family == AF_INET6 ? "[" : "", host,
		 sa->sa_family == AF_INET6 ? "]" : "", port);
	accepted(fd, name, sa, sl, tls_enabled());
}

/*
 * A peer connection, until its HELLO: under the deadline, and counted
 * (sa: its address, as accepted).
 */
static void
accepted(evutil_socket_t fd, const char *name, const struct sockaddr *sa,
	 int sl, int tls)
{
	struct timeval tv = {0, 0};
	struct bufferevent *bev;
	struct pending *p;

	if (tls)
		bev = tls_accept(base, fd);
	else
		bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (bev == NULL) {
		evutil_closesocket(fd);
		return;
	}
	p = xcalloc(1, sizeof(*p));
	memcpy(&p->addr, sa,
	       (size_t)sl < sizeof(p->addr) ? (size_t)sl : sizeof(p->addr));
	p->conn = conn_new(base, bev, name, accepted_frame, accepted_close, p);
	conn_set_priority(p->conn, PRIO_CONTROL);
	conn_on_closed(p->conn, pending_closed, p);
	p->deadline = evtimer_new(base, pending_deadline, p);
	if (p->deadline == NULL)
		fatalx("evtimer_new");
	event_priority_set(p->deadline, PRIO_CONTROL);
	p->secs = conf.lim.hello_timeout;
	p->due_ns = now_ns() + (uint64_t)p->secs * 1000000000u;
	tv.tv_sec = p->secs;
	evtimer_add(p->deadline, &tv);
	TAILQ_INSERT_TAIL(&pendings, p, link);
	npending++;
}

/* Listens on one HOST:PORT. */
static int
listen_one(const char *hostport)
{
	struct evconnlistener *l;
	struct sockaddr_storage ss;
	socklen_t sl;
	char err[256], host[256];

	if (nlisteners == PEER_LISTEN_MAX) {
		log_warnx("--listen: at most %d addresses", PEER_LISTEN_MAX);
		return -1;
	}
	if (resolve(hostport, &ss, &sl, host, err, sizeof(err)) < 0) {
		log_warnx("--listen %s", err);
		return -1;
	}
	l = evconnlistener_new_bind(base, accept_cb, NULL,
				    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
					    LEV_OPT_CLOSE_ON_EXEC,
				    64, (struct sockaddr *)&ss, (int)sl);
	if (l == NULL) {
		log_warn("listen on %s", hostport);
		return -1;
	}
	listeners[nlisteners++] = l;
	log_info("listening for peers on %s (%s)", hostport,
		 tls_enabled() ? "TLS 1.3, mutual authentication"
			       : "plaintext, loopback only");
	return 0;
}

int
peer_listen(const char *list)
{
	char *copy = xstrdup(list), *save = NULL, *hp;
	int rc = 0;

	for (hp = strtok_r(copy, ",", &save); hp != NULL && rc == 0;
	     hp = strtok_r(NULL, ",", &save))
		rc = listen_one(hp);
	free(copy);
	if (rc < 0)
		peer_close_listeners();
	return rc;
}

void
peer_close_listeners(void)
{
	struct pending *p;

	while ((p = TAILQ_FIRST(&pendings)) != NULL)
		pending_close(p);
	while (nlisteners > 0)
		evconnlistener_free(listeners[--nlisteners]);
}

/*
 * A connection to this daemon's own source role (PEER_LOCAL): a socket
 * pair, whose other end is accepted as a peer's would be. No TLS: the
 * bytes never leave the daemon.
 */
static struct conn *
connect_local(const char *name, conn_frame_cb fcb, conn_close_cb ccb, void *arg,
	      char *err, size_t errlen)
{
	struct sockaddr_storage ss = {.ss_family = AF_UNIX};
	struct bufferevent *bev;
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
		       sv) < 0) {
		snprintf(err, errlen, "socketpair: %s", strerror(errno));
		return NULL;
	}
	if ((bev = bufferevent_socket_new(base, sv[0],
					  BEV_OPT_CLOSE_ON_FREE)) == NULL) {
		snprintf(err, errlen, "bufferevent: %s", strerror(errno));
		close(sv[0]);
		close(sv[1]);
		return NULL;
	}
	accepted(sv[1], "this daemon (image)", (struct sockaddr *)&ss,
		 (int)sizeof(sa_family_t), 0);
	return conn_new(base, bev, name, fcb, ccb, arg);
}

struct conn *
peer_connect(const char *hostport, const char *pin, const char *name,
	     conn_frame_cb fcb, conn_close_cb ccb, void *arg, char *err,
	     size_t errlen)
{
	struct sockaddr_storage ss;
	struct bufferevent *bev;
	char host[256];
	struct conn *c;
	socklen_t sl;

	if (strcmp(hostport, PEER_LOCAL) == 0)
		return connect_local(name, fcb, ccb, arg, err, errlen);
	if (resolve(hostport, &ss, &sl, host, err, errlen) < 0)
		return NULL;
	if (tls_enabled()) {
		if ((bev = tls_connect(base, host, pin, err, errlen)) == NULL)
			return NULL;
	} else if ((bev = bufferevent_socket_new(
			    base, -1, BEV_OPT_CLOSE_ON_FREE)) == NULL) {
		snprintf(err, errlen, "bufferevent: %s", strerror(errno));
		return NULL;
	}
	c = conn_new(base, bev, name, fcb, ccb, arg);
	if (bufferevent_socket_connect(bev, (struct sockaddr *)&ss, (int)sl) <
	    0) {
		snprintf(err, errlen, "source %s unreachable: %s", hostport,
			 strerror(errno));
		conn_free(c);
		return NULL;
	}
	return c;
}

/* Framed bufferevent connections (see conn.h). */
#include "config.h"

#include <stdarg.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "daemon/conn.h"
#include "daemon/log.h"
#include "daemon/tls.h"

/*
 * Reading stops at this much unprocessed input, so a fast sender cannot grow
 * our memory; it must exceed the largest frame.
 */
#define CONN_READ_HIGH (FRAME_HDR_LEN + FRAME_MSG_MAX + FRAME_DATA_MAX + 4096)
/*
 * A peer that sends requests but does not read the answers would grow our
 * output without bound: past this much unsent output no further frame is
 * handled until it is all sent. This bounds the requests in flight on every
 * connection (and, with CONN_READ_HIGH, what a peer can make us buffer).
 */
#define CONN_OUT_MAX (32u << 20)
/* How long a finished connection waits for the peer to close its side. */
#define CONN_LINGER_SECS 10

struct conn {
	struct bufferevent *bev;
	struct event *resume;
	conn_frame_cb on_frame;
	conn_close_cb on_close;
	conn_drain_cb on_drain;
	void *arg;
	char name[96];
	int budget;
	int in_cb;
	int dead;
	int finishing;
	int lingering;
	int prio;
	int blocked; /* handling paused until the output drains */
	/* The bufferevent broke: why, reported after the input is handled. */
	int failing;
	char fail_why[128];
	size_t data_left;
};

static void conn_read_cb(struct bufferevent *, void *);

/*
 * Everything queued is out: say so (TLS close_notify, TCP FIN) but go on
 * reading, and discarding, until the peer closes too. Closing with unread
 * input would send a reset, and a peer that meets the reset before it reads
 * our last frames loses them: the source lost the destination's COMPLETE
 * that way when its own late writes failed first.
 */
static void
conn_linger(struct conn *c)
{
	struct timeval tv = {CONN_LINGER_SECS, 0};
	struct evbuffer *in = bufferevent_get_input(c->bev);

	c->lingering = 1;
	tls_shutdown(c->bev);
	shutdown(conn_fd(c), SHUT_WR);
	evbuffer_drain(in, evbuffer_get_length(in));
	bufferevent_set_timeouts(c->bev, &tv, NULL);
	bufferevent_enable(c->bev, EV_READ);
}

static void
conn_destroy(struct conn *c)
{
	if (c->resume)
		event_free(c->resume);
	bufferevent_free(c->bev);
	free(c);
}

static void
conn_fail(struct conn *c, const char *why)
{
	conn_close_cb cb = c->on_close;

	if (c->dead)
		return;
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	if (c->finishing || cb == NULL) {
		conn_free(c);
		return;
	}
	cb(c, why, c->arg);
}

static void
conn_process(struct conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	int n = 0;

	int more = 0;

	if (c->finishing) {
		evbuffer_drain(in, evbuffer_get_length(in));
		if (c->failing)
			conn_free(c);
		return;
	}
	c->in_cb++;
	while (!c->dead && !c->finishing) {
		uint8_t raw[FRAME_HDR_LEN];
		struct frame_hdr h;
		ProtobufCMessage *msg;
		const char *why;
		size_t len = evbuffer_get_length(in);

		if (c->budget && n >= c->budget) {
			event_active(c->resume, EV_TIMEOUT, 0);
			more = 1;
			break;
		}
		if (evbuffer_get_length(bufferevent_get_output(c->bev)) >
		    CONN_OUT_MAX) {
			/* conn_write_cb resumes once all of it is sent. */
			c->blocked = 1;
			more = 1;
			break;
		}
		if (len < FRAME_HDR_LEN)
			break;
		evbuffer_copyout(in, raw, FRAME_HDR_LEN);
		if (frame_hdr_decode(raw, &h, &why) < 0) {
			log_warnx("%s: bad frame: %s", c->name, why);
			conn_fail(c, why);
			break;
		}
		if (len < FRAME_HDR_LEN + (size_t)h.msg_len + h.data_len)
			break;
		evbuffer_drain(in, FRAME_HDR_LEN);
		msg = frame_unpack(h.type, evbuffer_pullup(in, h.msg_len),
				   h.msg_len);
		evbuffer_drain(in, h.msg_len);
		if (msg == NULL) {
			log_warnx("%s: malformed %s message", c->name,
				  frame_type_name(h.type));
			conn_fail(c, "malformed message");
			break;
		}
		c->data_left = h.data_len;
		if (c->on_frame)
			c->on_frame(c, &h, msg, c->arg);
		frame_free(msg);
		if (!c->dead && c->data_left) {
			evbuffer_drain(in, c->data_left);
			c->data_left = 0;
		}
		n++;
	}
	/* Every whole frame that came before the break is handled: now say. */
	if (c->failing && !more && !c->dead)
		conn_fail(c, c->fail_why);
	c->in_cb--;
	if (c->dead && c->in_cb == 0)
		conn_destroy(c);
}

static void
conn_read_cb(struct bufferevent *bev, void *arg)
{
	conn_process(arg);
}

static void
conn_resume_cb(evutil_socket_t fd, short ev, void *arg)
{
	conn_process(arg);
}

static void
conn_write_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	if (c->finishing) {
		if (!c->lingering &&
		    evbuffer_get_length(bufferevent_get_output(bev)) == 0)
			conn_linger(c);
		return;
	}
	if (c->blocked &&
	    evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
		c->blocked = 0;
		event_active(c->resume, EV_TIMEOUT, 0);
	}
	if (c->on_drain) {
		c->in_cb++;
		c->on_drain(c, c->arg);
		c->in_cb--;
		if (c->dead && c->in_cb == 0)
			conn_destroy(c);
	}
}

static void
conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	char why[128];

	/*
	 * A TLS bufferevent replaces its events when the handshake is done,
	 * and with them their priorities.
	 */
	if (what & BEV_EVENT_CONNECTED) {
		tls_set_priority(bev, c->prio);
		return;
	}
	/* A refused certificate says so, not just "connection reset". */
	if (tls_error(bev, why, sizeof(why)) < 0) {
		if (what & BEV_EVENT_EOF)
			snprintf(why, sizeof(why), "connection closed by peer");
		else if (what & BEV_EVENT_TIMEOUT)
			snprintf(why, sizeof(why), "connection timed out");
		else
			snprintf(why, sizeof(why), "%s",
				 evutil_socket_error_to_string(
					 EVUTIL_SOCKET_ERROR()));
	}
	/*
	 * libevent's OpenSSL bufferevent reports a close or an error before it
	 * hands over the bytes it read in the same pass, so the peer's last
	 * frames (COMPLETE before it closes) would be lost. Handle the input
	 * first, at this connection's priority, then report.
	 */
	if (c->failing || c->dead)
		return;
	c->failing = 1;
	snprintf(c->fail_why, sizeof(c->fail_why), "%s", why);
	event_active(c->resume, EV_TIMEOUT, 0);
}

struct conn *
conn_new(struct event_base *base, struct bufferevent *bev, const char *name,
	 conn_frame_cb fcb, conn_close_cb ccb, void *arg)
{
	struct conn *c = xcalloc(1, sizeof(*c));

	c->bev = bev;
	c->on_frame = fcb;
	c->on_close = ccb;
	c->arg = arg;
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->prio = event_base_get_npriorities(base) / 2; /* libevent's default */
	c->resume = event_new(base, -1, 0, conn_resume_cb, c);
	if (c->resume == NULL)
		fatalx("event_new");
	bufferevent_setcb(bev, conn_read_cb, conn_write_cb, conn_event_cb, c);
	bufferevent_setwatermark(bev, EV_READ, 0, CONN_READ_HIGH);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
	return c;
}

void
conn_free(struct conn *c)
{
	if (c == NULL || c->dead)
		return;
	c->dead = 1;
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	event_del(c->resume);
	if (c->in_cb == 0)
		conn_destroy(c);
}

void
conn_finish(struct conn *c)
{
	/* A broken connection sends nothing more: nothing to wait for. */
	if (c->failing) {
		conn_free(c);
		return;
	}
	c->finishing = 1;
	c->on_frame = NULL;
	c->on_close = NULL;
	c->on_drain = NULL;
	bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
		conn_linger(c);
}

void
conn_set_owner(struct conn *c, conn_frame_cb fcb, conn_close_cb ccb, void *arg)
{
	c->on_frame = fcb;
	c->on_close = ccb;
	c->arg = arg;
}

void
conn_set_priority(struct conn *c, int prio)
{
	c->prio = prio;
	/* libevent 2.1 sets priorities on socket bufferevents only. */
	if (bufferevent_priority_set(c->bev, prio) < 0)
		tls_set_priority(c->bev, prio);
	event_priority_set(c->resume, prio);
}

void
conn_set_budget(struct conn *c, int n)
{
	c->budget = n;
}

void
conn_set_drain(struct conn *c, conn_drain_cb cb, size_t lowmark)
{
	c->on_drain = cb;
	bufferevent_setwatermark(c->bev, EV_WRITE, lowmark, 0);
}

void
conn_set_timeout(struct conn *c, int secs)
{
	struct timeval tv = {secs, 0};

	bufferevent_set_timeouts(c->bev, secs ? &tv : NULL, NULL);
}

const char *
conn_name(const struct conn *c)
{
	return c->name;
}

int
conn_fd(const struct conn *c)
{
	return (int)bufferevent_getfd(c->bev);
}

int
conn_send(struct conn *c, uint16_t type, const ProtobufCMessage *msg)
{
	size_t len;
	uint8_t *buf = frame_pack(type, msg, 0, &len);
	int rc;

	if (buf == NULL)
		return -1;
	rc = bufferevent_write(c->bev, buf, len);
	free(buf);
	return rc;
}

int
conn_send_data_hdr(struct conn *c, const ProtobufCMessage *msg,
		   uint32_t data_len)
{
	size_t len;
	uint8_t *buf = frame_pack(FRAME_PAGE_DATA, msg, data_len, &len);
	int rc;

	if (buf == NULL)
		return -1;
	rc = bufferevent_write(c->bev, buf, len);
	free(buf);
	return rc;
}

int
conn_send_error(struct conn *c, uint32_t code, const char *fmt, ...)
{
	Uffdd__Error e = UFFDD__ERROR__INIT;
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	e.code = code;
	e.message = msg;
	return conn_send(c, FRAME_ERROR, &e.base);
}

struct evbuffer *
conn_output(struct conn *c)
{
	return bufferevent_get_output(c->bev);
}

size_t
conn_output_len(struct conn *c)
{
	return evbuffer_get_length(bufferevent_get_output(c->bev));
}

int
conn_take_data(struct conn *c, void *dst, size_t n)
{
	if (n > c->data_left)
		return -1;
	if (evbuffer_remove(bufferevent_get_input(c->bev), dst, n) != (int)n)
		return -1;
	c->data_left -= n;
	return 0;
}

/* Framed bufferevent connections (see conn.h). */
#include "config.h"

#include <errno.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/uio.h>

#include <event2/bufferevent_ssl.h>

#include "daemon/conn.h"
#include "daemon/conn_internal.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/tls.h"

size_t conn_out_max = CONN_OUT_MAX;

static void conn_read_cb(struct bufferevent *, void *);

/* Connections conn_finish() took from their owners: nobody else has them. */
static TAILQ_HEAD(, conn) orphans = TAILQ_HEAD_INITIALIZER(orphans);

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
	conn_set_sink(c, 0, NULL, 0);
	tls_shutdown(c->bev);
	shutdown(conn_fd(c), SHUT_WR);
	evbuffer_drain(in, evbuffer_get_length(in));
	/*
	 * A direct reader goes on reading (whose records the daemon opens,
	 * OpenSSL could not read on: it would fail at the next record).
	 */
	if (c->rx.rd != NULL) {
		c->rx.idle = tv;
		event_add(c->rx.rd, &c->rx.idle);
		return;
	}
	bufferevent_set_timeouts(c->bev, &tv, NULL);
	bufferevent_enable(c->bev, EV_READ);
}

/*
 * A TLS lane read directly, with read-ahead (conn_read_direct()): OpenSSL
 * may hold whole records the socket will never announce again. Unless the
 * last read drained it, the reader comes back by itself, while there is
 * room in the input and reading is on. Each round either takes bytes or
 * drains OpenSSL, so this never spins.
 */
static void
conn_tls_kick(struct conn *c)
{
	if (c->rx.rd == NULL || !c->tls || c->rx.tls_drained || c->dead ||
	    c->paused || c->rx.full || c->finishing ||
	    evbuffer_get_length(bufferevent_get_input(c->bev)) >=
		    CONN_READ_HIGH ||
	    !tls_has_pending(c->bev))
		return;
	event_active(c->rx.rd, EV_READ, 0);
}

/* Turns reading on or off, through whichever path the conn reads. */
static void
conn_reading(struct conn *c, int on)
{
	if (on && c->rx.full)
		return; /* conn_bound() turns it on again */
	/*
	 * EOF or an error read already, reported once the input is handled
	 * (conn_process()): a socket at EOF stays readable, and a direct
	 * reader would wake for it in a loop while the owner is blocked.
	 */
	if (on && c->failing)
		return;
	if (c->rx.rd == NULL) {
		if (on)
			bufferevent_enable(c->bev, EV_READ);
		else
			bufferevent_disable(c->bev, EV_READ);
	} else if (on) {
		event_add(c->rx.rd, c->rx.idle.tv_sec ? &c->rx.idle : NULL);
		conn_tls_kick(c);
	} else {
		event_del(c->rx.rd);
	}
}

static void
conn_destroy(struct conn *c)
{
	conn_closed_cb cb = c->own.on_closed;
	void *arg = c->own.closed_arg;

	if (c->finishing)
		TAILQ_REMOVE(&orphans, c, orphan);
	if (c->rx.rd)
		event_free(c->rx.rd);
	if (c->tw.flush)
		event_free(c->tw.flush);
	if (c->deadline)
		event_free(c->deadline);
	if (c->resume)
		event_free(c->resume);
	if (c->sk.held)
		evbuffer_free(c->sk.held);
	bufferevent_free(c->bev);
	free(c);
	if (cb)
		cb(arg);
}

/*
 * A read timeout means the peer said nothing for that long, unless this
 * daemon did not run meanwhile (stopped, or starved of CPU on a loaded
 * host): then the peer's bytes wait in the socket, or inside OpenSSL,
 * and the timer ran out all the same. A lane is lost only when it is
 * silent for real.
 */
static int
conn_frame_waiting(struct conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	size_t len = evbuffer_get_length(in);
	uint8_t raw[FRAME_HDR_LEN];
	struct frame_hdr h;
	const char *why;

	if (c->sk.len)
		return c->sk.got == c->sk.len;
	return len >= FRAME_HDR_LEN &&
	       evbuffer_copyout(in, raw, FRAME_HDR_LEN) == FRAME_HDR_LEN &&
	       frame_hdr_decode(raw, &h, &why) == 0 &&
	       len >= FRAME_HDR_LEN + (size_t)h.msg_len + h.data_len;
}

static int
conn_input_waiting(struct conn *c)
{
	int n = 0;

	/*
	 * Also a whole frame read but not handled yet: on waking, the read
	 * of the same loop pass may have taken the bytes out of the socket
	 * and OpenSSL before the timer's turn came. A partial frame does not
	 * count: a peer that stops in the middle of one is silent.
	 */
	if (conn_frame_waiting(c))
		return 1;
	if (c->tls && tls_pending(c->bev) > 0)
		return 1;
	return ioctl(conn_fd(c), FIONREAD, &n) == 0 && n > 0;
}

static void
conn_fail(struct conn *c, const char *why)
{
	conn_close_cb cb = c->own.on_close;

	if (c->dead)
		return;
	conn_reading(c, 0);
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	if (c->finishing || cb == NULL) {
		conn_free(c);
		return;
	}
	cb(c, why, c->own.arg);
}

/*
 * A TLS bulk lane whose frames were handled two a round held up to 850 MB
 * of input (docs/busy-destination.md): conn_fill() then filled all the
 * space libevent reserved, more than it asked for, and the bufferevent's
 * own reads add a record each whatever conn_fill() holds back. conn_fill()
 * now reads no more than it asks; this holds a TLS connection's reading
 * at CONN_READ_HIGH whoever reads, and reads again below half of it (a
 * plaintext direct reader's too: it spun while its frames were held).
 */
static void
conn_bound(struct conn *c)
{
	size_t len;

	if ((!c->tls && !c->rx.rd) || c->dead || c->finishing || c->lingering)
		return;
	len = evbuffer_get_length(bufferevent_get_input(c->bev));
	if (!c->rx.full && len >= CONN_READ_HIGH) {
		conn_reading(c, 0);
		c->rx.full = 1;
	} else if (c->rx.full && len < CONN_READ_HIGH / 2) {
		c->rx.full = 0;
		if (!c->paused)
			conn_reading(c, 1);
	}
}

static void
conn_process(struct conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	int n = 0, more = 0;

	if (c->finishing) {
		evbuffer_drain(in, evbuffer_get_length(in));
		if (c->failing)
			conn_free(c);
		return;
	}
	c->in_cb++;
	while (!c->dead && !c->finishing && !c->paused && !c->stalled) {
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
		/* What our TLS BIO holds counts: it is not yet sent. */
		if (conn_output_len(c) > conn_out_max) {
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
		/* Its data is read into the sink, or follows in the input. */
		if (c->sk.len ? c->sk.got < c->sk.len
			      : len < FRAME_HDR_LEN + (size_t)h.msg_len +
						h.data_len)
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
		/* A peer's words reach logs, status and the client's terminal. */
		if (h.type == FRAME_ERROR)
			text_clean(((Uffdd__Error *)msg)->message);
		c->sk.data_left = h.data_len;
		c->sk.data_sunk = c->sk.len != 0;
		if (c->own.on_frame)
			c->own.on_frame(c, &h, msg, c->own.arg);
		frame_free(msg);
		if (!c->dead && c->sk.data_left && !c->sk.data_sunk)
			evbuffer_drain(in, c->sk.data_left);
		c->sk.data_left = 0;
		c->sk.data_sunk = 0;
		c->sk.len = c->sk.got = 0;
		n++;
	}
	/* Every whole frame that came before the break is handled: now say. */
	if (c->stalled)
		more = 1;
	if (c->failing && !more && !c->dead)
		conn_fail(c, c->fail_why);
	conn_bound(c);
	c->in_cb--;
	if (c->dead && c->in_cb == 0)
		conn_destroy(c);
}

/*
 * EOF and errors on a plaintext socket: the bufferevent sees them; a TLS
 * one's conn_fill() records them.
 */
static void
conn_read_cb(struct bufferevent *bev, void *arg)
{
	conn_fill(arg);
	conn_bound(arg);
	conn_process(arg);
}

/* Reading without the bufferevent (conn_read_direct()). */
static void
conn_rd_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct conn *c = arg;
	char why[128];

	if ((ev & EV_TIMEOUT) && !conn_input_waiting(c)) {
		c->in_cb++;
		conn_fail(c, "connection timed out");
		c->in_cb--;
		if (c->dead && c->in_cb == 0)
			conn_destroy(c);
		return;
	}
	c->in_cb++;
	for (int i = 0; i < CONN_SINK_ROUNDS && !c->dead; i++) {
		if (conn_fill(c) < 0) {
			snprintf(why, sizeof(why), "%s",
				 errno ? strerror(errno)
				       : "connection closed by peer");
			/*
			 * As for the bufferevent (conn_event_cb): the frames
			 * read before the close are handled first, then the
			 * owner hears.
			 */
			conn_set_failing(c, why);
		}
		conn_process(c);
		/* A sunk frame handled: the next, unless faults come (io_max) */
		if (c->failing || !c->sk.done || c->sk.len || c->rx.fill_max)
			break;
	}
	if (c->failing && !c->dead)
		conn_reading(c, 0);
	conn_tls_kick(c);
	if (!c->dead)
		conn_tls_rekeys(c);
	c->in_cb--;
	if (c->dead && c->in_cb == 0)
		conn_destroy(c);
}

static void
conn_resume_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct conn *c = arg;

	c->in_cb++;
	conn_process(c);
	conn_tls_kick(c);
	c->in_cb--;
	if (c->dead && c->in_cb == 0)
		conn_destroy(c);
}

static void
conn_write_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	conn_tls_rekeys(c);
	if (c->tw.bio &&
	    evbuffer_get_length(bufferevent_get_output(bev)) == 0 &&
	    conn_push(c) != 1)
		return;
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
	if (c->own.on_drain) {
		c->in_cb++;
		c->own.on_drain(c, c->own.arg);
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
		if (c->tls && !c->tls_up) {
			c->tls_up = 1;
			metrics.tls_handshakes++;
		}
		tls_set_priority(bev, c->prio);
		return;
	}
	/*
	 * A timeout with input waiting: read on (a socket bufferevent stops
	 * reading on a timeout, an OpenSSL one does not).
	 */
	if (what == (BEV_EVENT_TIMEOUT | BEV_EVENT_READING) && !c->dead &&
	    conn_input_waiting(c)) {
		bufferevent_enable(bev, EV_READ);
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
	if (c->tls && !c->tls_up) {
		int cert = strncmp(why, "TLS: peer certificate", 21) == 0;

		metrics.tls_failures[cert ? METRICS_TLS_PEER_CERT
					  : METRICS_TLS_PROTOCOL]++;
	}
	conn_set_failing(c, why);
	event_active(c->resume, EV_TIMEOUT, 0);
}

/*
 * The socket takes more: write out what the BIO holds. Once a full BIO
 * (conn_wbio_full()) is empty, the bufferevent writes again, and it tells
 * the owner when the output drains.
 */
static void
conn_wflush_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct conn *c = arg;

	if (c->tw.full) {
		if (conn_push(c) != 1)
			return;
		c->tw.full = 0;
		if (!c->dead)
			bufferevent_enable(c->bev, EV_WRITE);
		if (evbuffer_get_length(bufferevent_get_output(c->bev)) > 0)
			return;
	}
	conn_write_cb(c->bev, c);
}

/*
 * A TLS connection writing through our BIO (tls_batch_attach()): what the
 * socket does not take stays in the BIO, and tw.flush writes it out when the
 * socket takes more.
 */
static void
conn_wbio_init(struct conn *c)
{
	evutil_socket_t fd = bufferevent_getfd(c->bev);

	if (!c->tls || fd < 0 || !tls_batch_has(c->bev))
		return;
	c->tw.flush = event_new(bufferevent_get_base(c->bev), fd, EV_WRITE,
				conn_wflush_cb, c);
	if (c->tw.flush == NULL)
		fatalx("event_new");
	event_priority_set(c->tw.flush, c->prio);
	tls_batch_on_full(c->bev, conn_wbio_full, c);
	c->tw.bio = 1;
}

struct conn *
conn_new(struct event_base *base, struct bufferevent *bev, const char *name,
	 conn_frame_cb fcb, conn_close_cb ccb, void *arg)
{
	struct conn *c = xcalloc(1, sizeof(*c));

	c->bev = bev;
	c->own.on_frame = fcb;
	c->own.on_close = ccb;
	c->own.arg = arg;
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->prio = event_base_get_npriorities(base) / 2; /* libevent's default */
	c->resume = event_new(base, -1, 0, conn_resume_cb, c);
	if (c->resume == NULL)
		fatalx("event_new");
	bufferevent_setcb(bev, conn_read_cb, conn_write_cb, conn_event_cb, c);
	bufferevent_setwatermark(bev, EV_READ, 0, CONN_READ_HIGH);
	bufferevent_set_max_single_write(bev, CONN_WRITE_MAX);
	c->tls = bufferevent_openssl_get_ssl(bev) != NULL;
	conn_wbio_init(c);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
	return c;
}

void
conn_free(struct conn *c)
{
	if (c == NULL || c->dead)
		return;
	c->dead = 1;
	conn_set_sink(c, 0, NULL, 0);
	conn_reading(c, 0);
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	event_del(c->resume);
	if (c->tw.flush)
		event_del(c->tw.flush);
	if (c->in_cb == 0)
		conn_destroy(c);
}

static void
conn_deadline_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct conn *c = arg;

	log_debug("%s: closed %d s after it finished", c->name,
		  CONN_FINISH_SECS);
	conn_free(c);
}

void
conn_finish(struct conn *c)
{
	struct timeval tv = {CONN_FINISH_SECS, 0};

	/* A broken connection sends nothing more: nothing to wait for. */
	if (c->failing) {
		conn_free(c);
		return;
	}
	if (c->finishing)
		return;
	c->finishing = 1;
	TAILQ_INSERT_TAIL(&orphans, c, orphan);
	c->deadline =
		evtimer_new(bufferevent_get_base(c->bev), conn_deadline_cb, c);
	if (c->deadline == NULL)
		fatalx("evtimer_new");
	evtimer_add(c->deadline, &tv);
	c->own.on_frame = NULL;
	c->own.on_close = NULL;
	c->own.on_drain = NULL;
	conn_set_sink(c, 0, NULL, 0);
	conn_reading(c, 0);
	bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0 &&
	    conn_push(c) == 1)
		conn_linger(c);
}

void
conn_free_finishing(void)
{
	struct conn *c, *next;

	for (c = TAILQ_FIRST(&orphans); c != NULL; c = next) {
		next = TAILQ_NEXT(c, orphan);
		conn_free(c);
	}
}

void
conn_set_owner(struct conn *c, conn_frame_cb fcb, conn_close_cb ccb, void *arg)
{
	c->own.on_frame = fcb;
	c->own.on_close = ccb;
	c->own.arg = arg;
}

void
conn_on_closed(struct conn *c, conn_closed_cb cb, void *arg)
{
	c->own.on_closed = cb;
	c->own.closed_arg = arg;
}

void
conn_set_priority(struct conn *c, int prio)
{
	c->prio = prio;
	/* libevent 2.1 sets priorities on socket bufferevents only. */
	if (bufferevent_priority_set(c->bev, prio) < 0)
		tls_set_priority(c->bev, prio);
	event_priority_set(c->resume, prio);
	if (c->rx.rd)
		event_priority_set(c->rx.rd, prio);
	if (c->tw.flush)
		event_priority_set(c->tw.flush, prio);
}

void
conn_set_budget(struct conn *c, int n)
{
	c->budget = n;
}

void
conn_pause(struct conn *c, int on)
{
	if (c->dead || c->paused == on)
		return;
	c->paused = on;
	if (on) {
		conn_reading(c, 0);
		event_del(c->resume);
	} else {
		conn_reading(c, 1);
		event_active(c->resume, EV_TIMEOUT, 0); /* frames already in */
	}
}

void
conn_stall(struct conn *c, int on)
{
	if (c->dead || c->stalled == on)
		return;
	c->stalled = on;
	if (!on && !c->paused)
		event_active(c->resume, EV_TIMEOUT, 0); /* frames already in */
}

void
conn_set_timeout(struct conn *c, int secs)
{
	struct timeval tv = {secs, 0};

	bufferevent_set_timeouts(c->bev, secs ? &tv : NULL, NULL);
	/* The direct reader keeps the same watch on a silent peer. */
	c->rx.idle = tv;
	if (c->rx.rd && !c->paused && !c->finishing && !c->dead)
		event_add(c->rx.rd, secs ? &c->rx.idle : NULL);
}

int
conn_tls_pending(const struct conn *c)
{
	return c->tls && !c->tls_up;
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

/*
 * A bufferevent reads a frame in two system calls at least (FIONREAD,
 * then a read of at most 4 KiB) and a 4 KiB page in three. Reading the
 * socket ourselves, one readv takes what it holds. For an established
 * connection without a read timeout (the timeouts are the bufferevent's).
 */
void
conn_read_direct(struct conn *c)
{
	evutil_socket_t fd = bufferevent_getfd(c->bev);

	if (c->rx.rd || c->dead || fd < 0)
		return;
	c->rx.rd = event_new(bufferevent_get_base(c->bev), fd,
			     EV_READ | EV_PERSIST, conn_rd_cb, c);
	if (c->rx.rd == NULL)
		fatalx("event_new");
	event_priority_set(c->rx.rd, c->prio);
	bufferevent_disable(c->bev, EV_READ);
	if (!c->paused && !c->finishing)
		conn_reading(c, 1);
	/* What the bufferevent already read waits in the input buffer. */
	if (evbuffer_get_length(bufferevent_get_input(c->bev)))
		event_active(c->resume, EV_TIMEOUT, 0);
	if (c->tls) {
		tls_read_ahead(c->bev);
		conn_tls_kick(c);
	}
}

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
size_t conn_out_max = CONN_OUT_MAX;
/* How long a finished connection waits for the peer to close its side. */
#define CONN_LINGER_SECS 10
/*
 * How long a finished connection may take to send what it has queued and
 * see the peer close: past that it is closed anyway (a peer that stopped
 * reading, or a TLS handshake that never finished, would keep it forever).
 */
#define CONN_FINISH_SECS (3 * CONN_LINGER_SECS)
/* One read beyond the bufferevent's own (see conn_fill()). */
#define CONN_FILL_MAX (256u << 10)
/*
 * A read into the sink takes at most this much of what follows (the next
 * frame's header and message): the rest waits in the socket for the sink.
 */
#define CONN_SINK_TAIL 4096
/* Frames read into the sink and handled in one read event, at most. */
#define CONN_SINK_ROUNDS 2
/*
 * One write a loop round: libevent's default, 16 KiB, costs the bulk lane
 * an epoll round per 16 KiB; much more keeps the loop (and a demand
 * request) waiting while loopback TCP delivers it inside the write.
 */
#define CONN_WRITE_MAX (256u << 10)

struct conn {
	TAILQ_ENTRY(conn) orphan; /* in orphans while finishing */
	struct bufferevent *bev;
	struct event *resume;
	struct event *rd; /* own read event (conn_read_direct()), or NULL */
	struct event *deadline; /* closes a finishing conn (conn_finish()) */
	conn_frame_cb on_frame;
	conn_close_cb on_close;
	conn_drain_cb on_drain;
	void *arg;
	conn_closed_cb on_closed; /* conn_on_closed() */
	void *closed_arg;
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
	int direct;
	int paused;
	int stalled; /* the owner is not done with the last frame (conn_stall) */
	int full; /* TLS input at CONN_READ_HIGH: reading held (conn_bound) */
	/*
	 * The last TLS read stopped at OpenSSL's "want more" (or an error),
	 * not at the space it had: whatever OpenSSL still holds is at most a
	 * record's beginning, which the socket's next bytes announce.
	 */
	int tls_drained;
	size_t fill_max; /* conn_set_io_max(): bytes a read round takes */
	/*
	 * The socket carries TLS records: nothing may write it but the
	 * bufferevent, and it is read through OpenSSL only (by the
	 * bufferevent, or the direct reader), so the plaintext shortcuts
	 * below stay off.
	 */
	int tls;
	struct timeval rd_timeout; /* for the direct reader (0: none) */
	size_t data_left;
	/*
	 * conn_set_sink(). The input's first frame has sink_len bytes of data
	 * (0: none), sink_got of them in the sink; data_sunk: the frame handed
	 * to the owner has its data there.
	 */
	uint8_t *sink;
	size_t sink_cap, sink_len, sink_got;
	uint16_t sink_type;
	int data_sunk, sink_done; /* sink_done: conn_fill() sank a frame */
	struct evbuffer *held;	  /* a header and message moving aside */
};

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
	if (c->rd == NULL || !c->tls || c->tls_drained || c->dead ||
	    c->paused || c->full || c->finishing ||
	    evbuffer_get_length(bufferevent_get_input(c->bev)) >=
		    CONN_READ_HIGH ||
	    !tls_has_pending(c->bev))
		return;
	event_active(c->rd, EV_READ, 0);
}

/* Turns reading on or off, through whichever path the conn reads. */
static void
conn_reading(struct conn *c, int on)
{
	if (on && c->full)
		return; /* conn_bound() turns it on again */
	/*
	 * EOF or an error read already, reported once the input is handled
	 * (conn_process()): a socket at EOF stays readable, and a direct
	 * reader would wake for it in a loop while the owner is blocked.
	 */
	if (on && c->failing)
		return;
	if (c->rd == NULL) {
		if (on)
			bufferevent_enable(c->bev, EV_READ);
		else
			bufferevent_disable(c->bev, EV_READ);
	} else if (on) {
		event_add(c->rd, c->rd_timeout.tv_sec ? &c->rd_timeout : NULL);
		conn_tls_kick(c);
	} else {
		event_del(c->rd);
	}
}

static void
conn_destroy(struct conn *c)
{
	conn_closed_cb cb = c->on_closed;
	void *arg = c->closed_arg;

	if (c->finishing)
		TAILQ_REMOVE(&orphans, c, orphan);
	if (c->rd)
		event_free(c->rd);
	if (c->deadline)
		event_free(c->deadline);
	if (c->resume)
		event_free(c->resume);
	if (c->held)
		evbuffer_free(c->held);
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

	if (c->sink_len)
		return c->sink_got == c->sink_len;
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
	conn_close_cb cb = c->on_close;

	if (c->dead)
		return;
	conn_reading(c, 0);
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	if (c->finishing || cb == NULL) {
		conn_free(c);
		return;
	}
	cb(c, why, c->arg);
}

/*
 * A TLS bulk lane whose frames were handled two a round held up to 850 MB
 * of input (docs/busy-destination.md): conn_fill() then filled all the
 * space libevent reserved, more than it asked for, and the bufferevent's
 * own reads add a record each whatever conn_fill() holds back. conn_fill()
 * now reads no more than it asks; this holds a TLS connection's reading
 * at CONN_READ_HIGH whoever reads, and reads again below half of it.
 */
static void
conn_bound(struct conn *c)
{
	size_t len;

	if (!c->tls || c->dead || c->finishing || c->lingering)
		return;
	len = evbuffer_get_length(bufferevent_get_input(c->bev));
	if (!c->full && len >= CONN_READ_HIGH) {
		conn_reading(c, 0);
		c->full = 1;
	} else if (c->full && len < CONN_READ_HIGH / 2) {
		c->full = 0;
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
		if (evbuffer_get_length(bufferevent_get_output(c->bev)) >
		    conn_out_max) {
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
		if (c->sink_len ? c->sink_got < c->sink_len
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
		c->data_left = h.data_len;
		c->data_sunk = c->sink_len != 0;
		if (c->on_frame)
			c->on_frame(c, &h, msg, c->arg);
		frame_free(msg);
		if (!c->dead && c->data_left && !c->data_sunk)
			evbuffer_drain(in, c->data_left);
		c->data_left = 0;
		c->data_sunk = 0;
		c->sink_len = c->sink_got = 0;
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
 * Records that the connection broke (the owner hears once the frames read
 * before are handled).
 */
static void
conn_set_failing(struct conn *c, const char *why)
{
	if (c->failing || c->dead)
		return;
	c->failing = 1;
	snprintf(c->fail_why, sizeof(c->fail_why), "%s", why);
}

/*
 * One read into iov for conn_read_tls(), as readv() answers: it
 * decrypts what OpenSSL holds and what the socket brings, one record (at
 * most 16 KiB) a call, until the space is full or the socket is empty; a
 * TLS failure is recorded for conn_process() to report.
 */
static ssize_t
conn_read_iov(struct conn *c, int fd, const struct iovec *iov, int n)
{
	char why[128];
	ssize_t total = 0;

	c->tls_drained = 0;
	for (int i = 0; i < n; i++) {
		size_t off = 0;
		long r = 1;

		while (off < iov[i].iov_len &&
		       (r = tls_read(c->bev, (char *)iov[i].iov_base + off,
				     iov[i].iov_len - off, why, sizeof(why))) >
			       0)
			off += (size_t)r;
		total += (ssize_t)off;
		if (r < 0)
			conn_set_failing(c, why);
		if (r <= 0) {
			c->tls_drained = 1;
			break;
		}
	}
	if (total == 0)
		errno = EAGAIN;
	return total ? total : -1;
}

/*
 * A socket bufferevent keeps the end of its input frozen outside its own
 * reads, so conn_fill() thaws it likewise; an OpenSSL one never freezes it,
 * and a frozen end would make its reads fail.
 */
static void
conn_input_frozen(struct conn *c, int frozen)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);

	if (c->tls)
		return;
	if (frozen)
		evbuffer_freeze(in, 0);
	else
		evbuffer_unfreeze(in, 0);
}

/*
 * The frame at the head of the input goes to the sink if it may: of the
 * sink's type, its message in and its data not all, the sink not held by
 * the owner (stalled). Its header and message stay in the input, what came
 * of its data moves to the sink, and the rest is read there. A bad header
 * stays for conn_process() to refuse.
 */
static void
conn_sink_start(struct conn *c, struct evbuffer *in)
{
	size_t len = evbuffer_get_length(in), head;
	uint8_t raw[FRAME_HDR_LEN];
	struct frame_hdr h;
	const char *why;

	/* Only a direct reader: the bufferevent's reads go to the input. */
	if (c->sink == NULL || c->rd == NULL || c->sink_len || c->stalled ||
	    len < FRAME_HDR_LEN)
		return;
	evbuffer_copyout(in, raw, FRAME_HDR_LEN);
	if (frame_hdr_decode(raw, &h, &why) < 0 || h.type != c->sink_type ||
	    h.data_len == 0 || h.data_len > c->sink_cap)
		return;
	head = FRAME_HDR_LEN + (size_t)h.msg_len;
	if (len < head || len - head >= h.data_len)
		return; /* the message first; a whole frame stays as it is */
	if (c->held == NULL && (c->held = evbuffer_new()) == NULL)
		return;
	/* The input holds nothing past this frame's data: take its tail. */
	if (evbuffer_remove_buffer(in, c->held, head) != (int)head ||
	    evbuffer_remove(in, c->sink, len - head) != (int)(len - head) ||
	    evbuffer_add_buffer(in, c->held) < 0) {
		conn_set_failing(c, "out of memory");
		return;
	}
	c->sink_len = h.data_len;
	c->sink_got = len - head;
}

/*
 * With a sink and no frame's data going there yet, a read takes no more
 * than CONN_SINK_TAIL: enough for the next header and message, after which
 * conn_sink_start() sends the data to the sink. A full read would bring
 * the whole frame through the input and copy it out again, and once a
 * reader is behind, every frame after it too (the destination's CPU for
 * 1 GiB went from 0.3 to 1.1-2.1 s in such runs).
 */
static size_t
conn_sink_want(const struct conn *c, size_t want)
{
	if (c->sink != NULL && c->rd != NULL && c->sink_len == 0 &&
	    !c->stalled && want > CONN_SINK_TAIL)
		return CONN_SINK_TAIL;
	return want;
}

/*
 * A TLS connection decrypts into one buffer that stays and appends what
 * came to the input: reading into space reserved in the input
 * (evbuffer_reserve_space(), as for plaintext) grew the heap of a
 * destination by about what its bulk lane carried (900 MB for 1 GiB,
 * freed only with the lane), every page of it faulted in fresh, most of
 * the daemon's CPU (docs/busy-destination.md). The copy
 * costs far less. A frame's data for the sink (a direct reader's) is
 * decrypted straight into it, as conn_read_plain() reads it there. At
 * most want bytes; as conn_read_iov() returns.
 */
static ssize_t
conn_read_tls(struct conn *c, struct evbuffer *in, size_t want)
{
	static uint8_t buf[CONN_FILL_MAX];
	struct iovec iov[2];
	size_t s = 0;
	ssize_t r;
	int k = 0;

	conn_sink_start(c, in);
	want = conn_sink_want(c, want);
	if (c->sink_len > c->sink_got) {
		s = c->sink_len - c->sink_got < want ? c->sink_len - c->sink_got
						     : want;
		iov[k].iov_base = c->sink + c->sink_got;
		iov[k++].iov_len = s;
		want = want - s < CONN_SINK_TAIL ? want - s : CONN_SINK_TAIL;
	}
	if (want) {
		iov[k].iov_base = buf;
		iov[k++].iov_len = want < sizeof(buf) ? want : sizeof(buf);
	}
	r = conn_read_iov(c, bufferevent_getfd(c->bev), iov, k);
	if (r > 0) {
		size_t sunk = (size_t)r < s ? (size_t)r : s;

		c->sink_got += sunk;
		c->sink_done = s && c->sink_got == c->sink_len;
		if ((size_t)r > sunk &&
		    evbuffer_add(in, buf, (size_t)r - sunk) < 0) {
			conn_set_failing(c, "out of memory");
			return -1;
		}
	}
	return r;
}

/*
 * One readv for conn_fill(), of at most want bytes: first into the sink
 * while a frame's data goes there, and then no more than CONN_SINK_TAIL
 * into the input; else into the input. As readv() returns.
 */
static ssize_t
conn_read_plain(struct conn *c, struct evbuffer *in, int fd, size_t want)
{
	struct evbuffer_iovec v[2];
	struct iovec iov[3];
	size_t s = 0;
	ssize_t r, left;
	int n = 0, k = 0, used;

	conn_input_frozen(c, 0);
	conn_sink_start(c, in);
	want = conn_sink_want(c, want);
	if (c->sink_len > c->sink_got) {
		s = c->sink_len - c->sink_got < want ? c->sink_len - c->sink_got
						     : want;
		iov[k].iov_base = c->sink + c->sink_got;
		iov[k++].iov_len = s;
		want = want - s < CONN_SINK_TAIL ? want - s : CONN_SINK_TAIL;
	}
	if (want)
		n = evbuffer_reserve_space(in, (ev_ssize_t)want, v, 2);
	for (int i = 0; i < n; i++) {
		iov[k].iov_base = v[i].iov_base;
		iov[k++].iov_len = v[i].iov_len;
	}
	errno = EAGAIN;
	r = k ? readv(fd, iov, k) : -1;
	if (r > 0) {
		left = r - (ssize_t)((size_t)r < s ? (size_t)r : s);
		c->sink_got += (size_t)r - (size_t)left;
		for (used = 0; used < n && left > 0; used++) {
			if (v[used].iov_len > (size_t)left)
				v[used].iov_len = (size_t)left;
			left -= (ssize_t)v[used].iov_len;
		}
		evbuffer_commit_space(in, v, used);
		c->sink_done = s && c->sink_got == c->sink_len;
	}
	conn_input_frozen(c, 1);
	return r;
}

/*
 * libevent 2.1 reads at most 4 KiB per read event (EVBUFFER_MAX_READ), so a
 * 4 KiB page with its header takes two loop rounds and the bulk lane one
 * round per 4 KiB; its OpenSSL bufferevent decrypts one 16 KiB record per
 * read event. After the bufferevent's read, take what else the socket
 * holds, up to CONN_FILL_MAX a round: more would delay the fault events
 * behind one lane's reading. A TLS connection also takes what is left of a
 * record it began to decrypt, past those limits if need be: no read event
 * would announce input waiting inside OpenSSL. Only conn_read_cb() calls
 * this for TLS, just after the bufferevent's read, which restarts the
 * lane's read timeout (reads of our own elsewhere would leave it running).
 */
static ssize_t
conn_fill(struct conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	evutil_socket_t fd = bufferevent_getfd(c->bev);
	size_t have = evbuffer_get_length(in), taken = 0;

	c->sink_done = 0;
	while (fd >= 0) {
		size_t want = 0, held = c->tls ? tls_pending(c->bev) : 0;
		size_t fill = c->fill_max ? c->fill_max : CONN_FILL_MAX;
		ssize_t r;

		if (have < CONN_READ_HIGH && taken < fill) {
			want = CONN_READ_HIGH - have;
			if (want > fill - taken)
				want = fill - taken;
		}
		if (want < held)
			want = held;
		if (want == 0)
			break;
		r = c->tls ? conn_read_tls(c, in, want)
			   : conn_read_plain(c, in, fd, want);
		if (r > 0) {
			/* Bytes in the sink are not the input's. */
			have = evbuffer_get_length(in);
			taken += (size_t)r;
			/* Less: the socket is empty; a sunk frame goes first. */
			if ((size_t)r == want && !c->sink_done)
				continue;
			break;
		}
		if (r == 0)
			errno = 0;
		/* EOF or error once what came before is handled. */
		if (taken == 0 &&
		    (r == 0 || (errno != EAGAIN && errno != EINTR)))
			return -1;
		break;
	}
	return (ssize_t)taken;
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
		if (c->failing || !c->sink_done || c->sink_len || c->fill_max)
			break;
	}
	if (c->failing && !c->dead)
		conn_reading(c, 0);
	conn_tls_kick(c);
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
	conn_set_failing(c, why);
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
	bufferevent_set_max_single_write(bev, CONN_WRITE_MAX);
	c->tls = bufferevent_openssl_get_ssl(bev) != NULL;
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
	c->on_frame = NULL;
	c->on_close = NULL;
	c->on_drain = NULL;
	conn_set_sink(c, 0, NULL, 0);
	conn_reading(c, 0);
	bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
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
	c->on_frame = fcb;
	c->on_close = ccb;
	c->arg = arg;
}

void
conn_on_closed(struct conn *c, conn_closed_cb cb, void *arg)
{
	c->on_closed = cb;
	c->closed_arg = arg;
}

void
conn_set_priority(struct conn *c, int prio)
{
	c->prio = prio;
	/* libevent 2.1 sets priorities on socket bufferevents only. */
	if (bufferevent_priority_set(c->bev, prio) < 0)
		tls_set_priority(c->bev, prio);
	event_priority_set(c->resume, prio);
	if (c->rd)
		event_priority_set(c->rd, prio);
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
conn_set_io_max(struct conn *c, size_t n)
{
	if (c->fill_max == n)
		return;
	c->fill_max = n;
	bufferevent_set_max_single_write(c->bev, n ? n : CONN_WRITE_MAX);
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
	/* The direct reader keeps the same watch on a silent peer. */
	c->rd_timeout = tv;
	if (c->rd && !c->paused && !c->finishing && !c->dead)
		event_add(c->rd, secs ? &c->rd_timeout : NULL);
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

void
conn_set_direct(struct conn *c)
{
	c->direct = 1;
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

	if (c->rd || c->dead || fd < 0)
		return;
	c->rd = event_new(bufferevent_get_base(c->bev), fd,
			  EV_READ | EV_PERSIST, conn_rd_cb, c);
	if (c->rd == NULL)
		fatalx("event_new");
	event_priority_set(c->rd, c->prio);
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

/*
 * Queuing in the bufferevent costs a demand frame three system calls and a
 * loop round (arm EPOLLOUT, wait for it, disarm) before the write itself.
 * With nothing queued ahead, order allows writing at once; what the socket
 * does not take (or any error: the bufferevent will meet it too) is queued.
 */
int
conn_writev(struct conn *c, const struct iovec *iov, int n)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);
	evutil_socket_t fd = bufferevent_getfd(c->bev);
	size_t done = 0;

	if (c->direct && !c->tls && !c->dead && fd >= 0 &&
	    evbuffer_get_length(out) == 0) {
		ssize_t r = writev(fd, iov, n);

		done = r > 0 ? (size_t)r : 0;
	}
	for (int i = 0; i < n; i++) {
		if (done >= iov[i].iov_len) {
			done -= iov[i].iov_len;
			continue;
		}
		if (bufferevent_write(c->bev,
				      (const uint8_t *)iov[i].iov_base + done,
				      iov[i].iov_len - done) < 0)
			return -1;
		done = 0;
	}
	return 0;
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

/*
 * A bufferevent writes only when the loop next reports the socket writable,
 * one epoll round after the data was queued. The demand lane cannot afford
 * that round on every fault: write now, and leave whatever the socket does
 * not take to the write event as usual.
 */
void
conn_flush(struct conn *c)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);
	evutil_socket_t fd = bufferevent_getfd(c->bev);

	if (c->tls || c->dead || fd < 0 || evbuffer_get_length(out) == 0)
		return;
	/* The bufferevent freezes the buffer's start; it thaws it likewise. */
	evbuffer_unfreeze(out, 1);
	evbuffer_write(out, fd);
	evbuffer_freeze(out, 1);
}

int
conn_take_data(struct conn *c, void *dst, size_t n)
{
	if (n > c->data_left)
		return -1;
	if (c->data_sunk && c->sink == NULL)
		return -1; /* conn_finish() dropped it */
	else if (c->data_sunk) {
		const uint8_t *from = c->sink + (c->sink_len - c->data_left);

		if (dst != from) /* into the sink itself: nothing to copy */
			memcpy(dst, from, n);
	} else if (evbuffer_remove(bufferevent_get_input(c->bev), dst, n) !=
		   (int)n) {
		return -1;
	}
	c->data_left -= n;
	return 0;
}

void
conn_set_sink(struct conn *c, uint16_t type, uint8_t *buf, size_t cap)
{
	c->sink = buf;
	c->sink_type = type;
	c->sink_cap = buf ? cap : 0;
	if (buf == NULL)
		c->sink_len = c->sink_got = 0; /* the input goes too */
}

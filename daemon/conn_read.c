/*
 * Reading a conn's socket beyond the bufferevent's own reads (see conn.c):
 * into the input, or a frame's data straight into the owner's sink (which
 * the owner sets and takes a frame's data from); for TLS through OpenSSL.
 */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include <event2/buffer.h>

#include "daemon/conn.h"
#include "daemon/conn_internal.h"
#include "daemon/tls.h"

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

	c->rx.tls_drained = 0;
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
			c->rx.tls_drained = 1;
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
	if (c->sk.buf == NULL || c->rx.rd == NULL || c->sk.len || c->stalled ||
	    len < FRAME_HDR_LEN)
		return;
	evbuffer_copyout(in, raw, FRAME_HDR_LEN);
	if (frame_hdr_decode(raw, &h, &why) < 0 || h.type != c->sk.type ||
	    h.data_len == 0 || h.data_len > c->sk.cap)
		return;
	head = FRAME_HDR_LEN + (size_t)h.msg_len;
	if (len < head || len - head >= h.data_len)
		return; /* the message first; a whole frame stays as it is */
	if (c->sk.held == NULL && (c->sk.held = evbuffer_new()) == NULL)
		return;
	/* The input holds nothing past this frame's data: take its tail. */
	if (evbuffer_remove_buffer(in, c->sk.held, head) != (int)head ||
	    evbuffer_remove(in, c->sk.buf, len - head) != (int)(len - head) ||
	    evbuffer_add_buffer(in, c->sk.held) < 0) {
		conn_set_failing(c, "out of memory");
		return;
	}
	c->sk.data = c->sk.buf;
	c->sk.len = h.data_len;
	c->sk.got = len - head;
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
	if (c->sk.buf != NULL && c->rx.rd != NULL && c->sk.len == 0 &&
	    !c->stalled && want > CONN_SINK_TAIL)
		return CONN_SINK_TAIL;
	return want;
}

/*
 * The sink's part of a read, after conn_sink_start(): iov[*k] takes what
 * is left of the frame's data going there, at most want (*s: its length).
 * Returns what the input may take after it.
 */
static size_t
conn_sink_iov(struct conn *c, struct evbuffer *in, size_t want,
	      struct iovec *iov, int *k, size_t *s)
{
	conn_sink_start(c, in);
	want = conn_sink_want(c, want);
	*s = 0;
	if (c->sk.len <= c->sk.got)
		return want;
	*s = c->sk.len - c->sk.got < want ? c->sk.len - c->sk.got : want;
	iov[*k].iov_base = c->sk.data + c->sk.got;
	iov[(*k)++].iov_len = *s;
	return want - *s < CONN_SINK_TAIL ? want - *s : CONN_SINK_TAIL;
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

	want = conn_sink_iov(c, in, want, iov, &k, &s);
	if (want) {
		iov[k].iov_base = buf;
		iov[k++].iov_len = want < sizeof(buf) ? want : sizeof(buf);
	}
	r = conn_read_iov(c, bufferevent_getfd(c->bev), iov, k);
	if (r > 0) {
		size_t sunk = (size_t)r < s ? (size_t)r : s;

		c->sk.got += sunk;
		c->sk.done = s && c->sk.got == c->sk.len;
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
	want = conn_sink_iov(c, in, want, iov, &k, &s);
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
		c->sk.got += (size_t)r - (size_t)left;
		for (used = 0; used < n && left > 0; used++) {
			if (v[used].iov_len > (size_t)left)
				v[used].iov_len = (size_t)left;
			left -= (ssize_t)v[used].iov_len;
		}
		evbuffer_commit_space(in, v, used);
		c->sk.done = s && c->sk.got == c->sk.len;
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
ssize_t
conn_fill(struct conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	evutil_socket_t fd = bufferevent_getfd(c->bev);
	size_t have = evbuffer_get_length(in), taken = 0;

	c->sk.done = 0;
	while (fd >= 0) {
		size_t want = 0, held = c->tls ? tls_pending(c->bev) : 0;
		size_t fill = c->rx.fill_max ? c->rx.fill_max : CONN_FILL_MAX;
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
			if ((size_t)r == want && !c->sk.done)
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
 * Records that the connection broke, for conn.c, here where reading
 * finds it most often (the owner hears once the frames read
 * before are handled).
 */
void
conn_set_failing(struct conn *c, const char *why)
{
	if (c->failing || c->dead)
		return;
	c->failing = 1;
	snprintf(c->fail_why, sizeof(c->fail_why), "%s", why);
}

int
conn_take_data(struct conn *c, void *dst, size_t n)
{
	if (n > c->sk.data_left)
		return -1;
	if (c->sk.data_sunk && c->sk.data == NULL)
		return -1; /* conn_finish() dropped it */
	else if (c->sk.data_sunk) {
		const uint8_t *from =
			c->sk.data + (c->sk.len - c->sk.data_left);

		if (dst != from) /* into the sink itself: nothing to copy */
			memcpy(dst, from, n);
	} else if (evbuffer_remove(bufferevent_get_input(c->bev), dst, n) !=
		   (int)n) {
		return -1;
	}
	c->sk.data_left -= n;
	return 0;
}

void
conn_set_sink(struct conn *c, uint16_t type, uint8_t *buf, size_t cap)
{
	c->sk.buf = buf;
	c->sk.type = type;
	c->sk.cap = buf ? cap : 0;
	if (buf == NULL) {
		c->sk.data = NULL; /* the frame in hand goes too */
		c->sk.len = c->sk.got = 0;
	}
}

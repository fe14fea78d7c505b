/*
 * The write side of a conn (see conn.h): writes past the bufferevent when
 * nothing is queued, what is still to go out, and a TLS lane's batched
 * records (our BIO) with their key updates. Below conn.c, which drives
 * them from its callbacks: nothing here calls back into it.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/uio.h>

#include "daemon/conn.h"
#include "daemon/conn_internal.h"
#include "daemon/log.h"
#include "daemon/tls.h"

/*
 * A batched TLS sender (conn_batch_writes()): once the output is empty,
 * the records still in the batch go out before anyone is told that all
 * is sent. 1 when nothing is held; otherwise the socket's next writable
 * moment comes back to conn_write_cb().
 */
int
conn_push(struct conn *c)
{
	int r;

	if (!c->tw.bio || c->dead)
		return 1;
	if ((r = tls_batch_flush(c->bev)) == 0) {
		event_add(c->tw.flush, NULL);
	} else if (r < 0 && !c->failing) {
		conn_set_failing(c, strerror(errno));
		event_active(c->resume, EV_TIMEOUT, 0);
	}
	return r;
}

/*
 * TLS key updates: a sealer asks for its own between writes, once due
 * (tls_batch_rekey()); the daemon's opener takes the peer's. Both are
 * rare (one a TLS_REKEY_RECORDS records) and logged.
 */
void
conn_tls_rekeys(struct conn *c)
{
	uint64_t n;

	if (c->tw.bio && tls_batch_rekey(c->bev))
		log_info("%s: TLS: new sending key asked for, after %" PRIu64
			 " records under the last one (key update %" PRIu64 ")",
			 c->name, tls_batch_records(c->bev),
			 tls_batch_updates(c->bev) + 1);
	if (c->rx.rd != NULL && c->tls &&
	    (n = tls_open_updates_of(c->bev)) != c->tw.peer_rekeys) {
		c->tw.peer_rekeys = n;
		log_info(
			"%s: TLS: the peer's new key taken (key update %" PRIu64
			")",
			c->name, n);
	}
}

/*
 * Our BIO takes every write and holds what the socket does not (it must
 * not ask OpenSSL to retry): past its limit, the bufferevent stops
 * writing into it, and the output waits in the bufferevent, where
 * conn_out_max and the owners' limits count it.
 */
void
conn_wbio_full(void *arg)
{
	struct conn *c = arg;

	c->tw.full = 1;
	bufferevent_disable(c->bev, EV_WRITE);
	event_add(c->tw.flush, NULL);
}

void
conn_set_io_max(struct conn *c, size_t n)
{
	if (c->rx.fill_max == n)
		return;
	c->rx.fill_max = n;
	bufferevent_set_max_single_write(c->bev, n ? n : CONN_WRITE_MAX);
	if (c->tw.batch)
		tls_batch_push_at(c->bev, n);
}

void
conn_set_drain(struct conn *c, conn_drain_cb cb, size_t lowmark)
{
	c->own.on_drain = cb;
	bufferevent_setwatermark(c->bev, EV_WRITE, lowmark, 0);
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
	return evbuffer_get_length(bufferevent_get_output(c->bev)) +
	       (c->tw.bio ? tls_batch_held(c->bev) : 0);
}

int
conn_tls_opened(struct conn *c)
{
	return c->tls && c->rx.rd != NULL && tls_opens(c->bev);
}

int
conn_tls_sealed(struct conn *c)
{
	return c->tw.bio && tls_batch_sealed(c->bev);
}

void
conn_batch_writes(struct conn *c)
{
	if (c->tw.batch || !c->tw.bio || c->dead ||
	    tls_batch(c->bev, CONN_WRITE_MAX) < 0)
		return;
	c->tw.batch = 1;
	tls_batch_push_at(c->bev, c->rx.fill_max);
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

void
conn_set_direct(struct conn *c)
{
	c->direct = 1;
}

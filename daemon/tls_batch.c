/*
 * Batched TLS writes for a bulk lane (see tls.h, tls_batch()).
 *
 * OpenSSL writes each record, at most 16 KiB, to its BIO as it seals it:
 * one write() a record. Over loopback here a sender writing 16 KiB at a
 * time costs 0.34-0.44 CPU-s/GiB against 0.28-0.34 writing 256 KiB at a
 * time (docs/benchmarks.md, "Batched TLS records"): each write pushes its
 * own segments through the stack. This BIO sits between OpenSSL and the
 * socket's BIO and gathers sealed records until a threshold, then writes
 * them in one call. The copy it adds runs over bytes still in cache from
 * the sealing.
 *
 * Nothing may stay in it unsaid: whoever stops writing flushes
 * (tls_batch_flush()), and OpenSSL flushes its own handshake flights and
 * alerts through BIO_flush().
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <event2/bufferevent_ssl.h>

#include "daemon/log.h"
#include "daemon/tls.h"

struct batch {
	uint8_t *buf;
	size_t cap;	/* bytes buf holds */
	size_t off;	/* the first byte not yet written out */
	size_t len;	/* bytes held, from off */
	size_t push_at; /* held bytes that make a write() */
};

static BIO_METHOD *batch_method;
static int batch_type;

/*
 * Writes out what is held, down to nothing or until the socket takes no
 * more: 1 when empty, 0 when bytes wait (retry flags set on b), -1 on an
 * error of the socket's BIO.
 */
static int
batch_push(BIO *b)
{
	struct batch *q = BIO_get_data(b);
	BIO *next = BIO_next(b);

	BIO_clear_retry_flags(b);
	while (q->len > 0) {
		int n = q->len > INT32_MAX ? INT32_MAX : (int)q->len;
		int w = BIO_write(next, q->buf + q->off, n);

		if (w <= 0) {
			if (BIO_should_retry(next)) {
				BIO_copy_next_retry(b);
				return 0;
			}
			return -1;
		}
		q->off += (size_t)w;
		q->len -= (size_t)w;
	}
	q->off = 0;
	return 1;
}

/*
 * Takes as much of data as there is room for, making room by writing out
 * first when needed; writes out once push_at bytes are held. Short counts
 * and retries follow the socket BIO's rules, which OpenSSL's record layer
 * knows how to resume.
 */
static int
batch_write(BIO *b, const char *data, int dlen)
{
	struct batch *q = BIO_get_data(b);
	size_t want = dlen > 0 ? (size_t)dlen : 0, room;

	if (want == 0)
		return 0;
	if (q->off + q->len + want > q->cap && q->len > 0 && batch_push(b) < 0)
		return -1;
	if (q->len == 0)
		q->off = 0;
	room = q->cap - q->off - q->len;
	if (room == 0) {
		BIO_set_retry_write(b);
		return -1;
	}
	if (want > room)
		want = room;
	memcpy(q->buf + q->off + q->len, data, want);
	q->len += want;
	/* Taken: a socket that is full now is met again at the next write. */
	if (q->len >= q->push_at && batch_push(b) < 0)
		return -1;
	BIO_clear_retry_flags(b);
	return (int)want;
}

static long
batch_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	struct batch *q = BIO_get_data(b);
	BIO *next = BIO_next(b);

	switch (cmd) {
	case BIO_CTRL_FLUSH:
		if (batch_push(b) <= 0)
			return 0;
		return next != NULL ? BIO_ctrl(next, cmd, num, ptr) : 1;
	case BIO_CTRL_WPENDING:
		return (long)q->len +
		       (next != NULL ? BIO_ctrl(next, cmd, num, ptr) : 0);
	case BIO_CTRL_DUP:
		return 0; /* never duplicated: one connection's writer */
	default:
		return next != NULL ? BIO_ctrl(next, cmd, num, ptr) : 0;
	}
}

/* Reads never come this way (it is the write BIO), but pass them on. */
static int
batch_read(BIO *b, char *out, int len)
{
	int r;

	if (BIO_next(b) == NULL)
		return 0;
	r = BIO_read(BIO_next(b), out, len);
	BIO_clear_retry_flags(b);
	BIO_copy_next_retry(b);
	return r;
}

static int
batch_create(BIO *b)
{
	BIO_set_init(b, 1);
	return 1;
}

static int
batch_destroy(BIO *b)
{
	struct batch *q = BIO_get_data(b);

	if (q != NULL) {
		free(q->buf);
		free(q);
	}
	BIO_set_data(b, NULL);
	return 1;
}

static BIO_METHOD *
batch_meth(void)
{
	if (batch_method != NULL)
		return batch_method;
	batch_type = BIO_get_new_index() | BIO_TYPE_FILTER;
	batch_method = BIO_meth_new(batch_type, "uffdd batched writes");
	if (batch_method == NULL ||
	    !BIO_meth_set_write(batch_method, batch_write) ||
	    !BIO_meth_set_read(batch_method, batch_read) ||
	    !BIO_meth_set_ctrl(batch_method, batch_ctrl) ||
	    !BIO_meth_set_create(batch_method, batch_create) ||
	    !BIO_meth_set_destroy(batch_method, batch_destroy))
		fatalx("BIO_meth_new");
	return batch_method;
}

/* The batch BIO of a TLS bufferevent, or NULL. */
static BIO *
batch_of(struct bufferevent *bev)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	BIO *b = ssl != NULL ? SSL_get_wbio(ssl) : NULL;

	/* OpenSSL puts its own buffer on top during a handshake. */
	for (; b != NULL; b = BIO_next(b))
		if (batch_method != NULL && BIO_method_type(b) == batch_type)
			return b;
	return NULL;
}

int
tls_batch(struct bufferevent *bev, size_t cap)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	BIO *sock, *b;
	struct batch *q;

	if (ssl == NULL || !SSL_is_init_finished(ssl))
		return -1;
	if (batch_of(bev) != NULL)
		return 0;
	sock = SSL_get_wbio(ssl);
	if (sock == NULL || (b = BIO_new(batch_meth())) == NULL)
		return -1;
	q = calloc(1, sizeof(*q));
	if (q == NULL || (q->buf = malloc(cap)) == NULL) {
		free(q);
		BIO_free(b);
		return -1;
	}
	q->cap = q->push_at = cap;
	BIO_set_data(b, q);
	/*
	 * The socket BIO is both the read and the write BIO, one reference
	 * each. The chain keeps the write BIO's, which SSL_set0_wbio() would
	 * otherwise drop.
	 */
	if (!BIO_up_ref(sock)) {
		BIO_free(b);
		return -1;
	}
	BIO_push(b, sock);
	SSL_set0_wbio(ssl, b);
	return 0;
}

void
tls_batch_push_at(struct bufferevent *bev, size_t n)
{
	BIO *b = batch_of(bev);
	struct batch *q = b != NULL ? BIO_get_data(b) : NULL;

	if (q != NULL)
		q->push_at = n == 0 || n > q->cap ? q->cap : n;
}

int
tls_batch_flush(struct bufferevent *bev)
{
	BIO *b = batch_of(bev);

	if (b == NULL)
		return 1;
	return batch_push(b);
}

size_t
tls_batch_held(struct bufferevent *bev)
{
	BIO *b = batch_of(bev);
	struct batch *q = b != NULL ? BIO_get_data(b) : NULL;

	return q != NULL ? q->len : 0;
}

void
tls_batch_free(void)
{
	BIO_meth_free(batch_method);
	batch_method = NULL;
}

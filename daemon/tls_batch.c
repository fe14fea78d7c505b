/*
 * The write BIO of an accepted TLS connection (see tls.h, tls_batch()):
 * it seals records with the keys OpenSSL hands it, and on a bulk lane
 * gathers them.
 *
 * Sealing. OpenSSL offers the sending keys to a write BIO that says it
 * can do kTLS; this one says so and makes the records itself
 * (tls_seal.c). OpenSSL then passes the plaintext straight from the
 * caller's buffer (the bufferevent's output), where it would otherwise
 * copy it into a record buffer of its own and encrypt it there; with the
 * batch below that was two copies on top of the cipher's pass, now none.
 * Until the handshake has set the keys, and for suites it cannot seal,
 * the BIO passes OpenSSL's records on as they are.
 *
 * Batching. OpenSSL writes each record, at most 16 KiB, as it is made:
 * one write() a record. Over loopback here a sender writing 16 KiB at a
 * time costs 0.34-0.44 CPU-s/GiB against 0.28-0.34 writing 256 KiB at a
 * time (docs/benchmarks.md, "Batched TLS records"). A bulk lane's BIO
 * gathers records until a threshold, then writes them in one call; every
 * other connection's writes each record at once, as OpenSSL would.
 *
 * Nothing may stay in it unsaid: a write the socket does not take stays
 * held, and the conn writes it out when the socket is writable
 * (tls_batch_flush()); OpenSSL flushes its own handshake flights and
 * alerts through BIO_flush().
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <event2/bufferevent_ssl.h>

#include "daemon/log.h"
#include "daemon/tls.h"

/*
 * OpenSSL 3.0's kTLS controls for a write BIO. Its public header lists them
 * as reserved; the values are fixed for the 3.0 series, and a library that
 * never sends them leaves sealing to OpenSSL, as before.
 */
#define CTRL_SET_KTLS 72	  /* num: sending; ptr: the keys */
#define CTRL_SET_KTLS_CTRL_MSG 74 /* num: the next write's content type */
#define CTRL_CLEAR_KTLS_CTRL_MSG 75
/*
 * The buffer a connection's BIO starts with: the handshake's flights, or a
 * few records while its socket is full (it grows beyond, batch_seal()).
 */
#define BATCH_MIN_CAP (64u << 10)

/*
 * Held bytes past which the BIO tells its conn to stop writing into it
 * (tls_batch_on_full()) until it is empty: it takes every sealed write,
 * so a peer that does not read would otherwise grow it without bound.
 */
#define BATCH_FULL (1u << 20)

struct batch {
	void (*full_cb)(void *); /* tls_batch_on_full() */
	void *full_arg;
	int full;	       /* full_cb told, not yet empty again */
	int broken;	       /* a key update left no key: writes fail */
	int rekeying;	       /* asked OpenSSL for a key update */
	uint64_t updates;      /* key updates made */
	struct tls_seal *seal; /* the sending keys, once OpenSSL gave them */
	int ctrl_type;	       /* the next write is a record of this type */
	uint8_t *buf;
	size_t cap;	/* bytes buf holds */
	size_t off;	/* the first byte not yet written out */
	size_t len;	/* bytes held, from off */
	size_t push_at; /* held bytes that make a write() */
};

static BIO_METHOD *batch_method;
static int batch_type;
static uint64_t rekey_records; /* TLS_REKEY_RECORDS, or the tests' count */

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
	q->full = 0;
	return 1;
}

/*
 * Room for need more bytes: writes out first if they would not fit, and
 * moves what the socket left to the front. -1 on a socket error.
 */
static ssize_t
batch_room(BIO *b, struct batch *q, size_t need)
{
	if (q->off + q->len + need > q->cap && q->len > 0 && batch_push(b) < 0)
		return -1;
	if (q->off > 0 && q->off + q->len + need > q->cap) {
		memmove(q->buf, q->buf + q->off, q->len);
		q->off = 0;
	}
	return (ssize_t)(q->cap - q->off - q->len);
}

/*
 * Seals data into one record in the buffer, and always takes all of it
 * (up to a record). A retry would be wrong here: OpenSSL resumes a write
 * with kTLS from the caller's buffer as it was at the first try, and
 * libevent may move that memory in between (it sets
 * SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER). So the buffer grows instead, and
 * the conn holds its writer back while anything is held (conn_push()):
 * at most what the writer queued, which it would otherwise hold itself.
 */
static int
batch_seal(BIO *b, struct batch *q, const char *data, size_t n)
{
	uint8_t type = q->ctrl_type ? (uint8_t)q->ctrl_type : 23;
	ssize_t room;
	size_t len, need;

	if (n > TLS_SEAL_PLAIN_MAX)
		n = TLS_SEAL_PLAIN_MAX;
	need = n + TLS_SEAL_OVERHEAD;
	if ((room = batch_room(b, q, need)) < 0)
		return -1;
	if ((size_t)room < need) {
		q->cap = q->off + q->len + need > 2 * q->cap
				 ? q->off + q->len + need
				 : 2 * q->cap;
		q->buf = xrealloc(q->buf, q->cap);
	}
	len = tls_seal_record(q->seal, type, data, n, q->buf + q->off + q->len);
	if (len == 0) {
		BIO_clear_retry_flags(b);
		return -1; /* the connection fails: no record goes unsealed */
	}
	q->len += len;
	q->ctrl_type = 0;
	if (q->len >= q->push_at && batch_push(b) < 0)
		return -1;
	if (q->len > BATCH_FULL && !q->full && q->full_cb != NULL) {
		q->full = 1;
		q->full_cb(q->full_arg);
	}
	BIO_clear_retry_flags(b);
	return (int)n;
}

/*
 * Takes as much of data as there is room for, sealed if OpenSSL gave us
 * the keys, making room by writing out first when needed; writes out once
 * push_at bytes are held. Short counts and retries follow the socket
 * BIO's rules, which OpenSSL's record layer knows how to resume.
 */
static int
batch_write(BIO *b, const char *data, int dlen)
{
	struct batch *q = BIO_get_data(b);
	size_t want = dlen > 0 ? (size_t)dlen : 0;
	ssize_t room;

	if (want == 0)
		return 0;
	if (q->broken) {
		BIO_clear_retry_flags(b);
		return -1;
	}
	if (q->seal != NULL)
		return batch_seal(b, q, data, want);
	if ((room = batch_room(b, q, want)) < 0)
		return -1;
	if (room == 0) {
		BIO_set_retry_write(b);
		return -1;
	}
	if (want > (size_t)room)
		want = (size_t)room;
	memcpy(q->buf + q->off + q->len, data, want);
	q->len += want;
	/* Taken: a socket that is full now is met again at the next write. */
	if (q->len >= q->push_at && batch_push(b) < 0)
		return -1;
	BIO_clear_retry_flags(b);
	return (int)want;
}

/* OpenSSL hands over the sending keys (kTLS): 1 if we seal from now. */
static long
batch_set_keys(struct batch *q, long sending, void *info)
{
	struct tls_seal *s;

	if (!sending || (s = tls_seal_new(info)) == NULL)
		return 0;
	tls_seal_free(q->seal);
	q->seal = s;
	return 1;
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
	case CTRL_SET_KTLS:
		return batch_set_keys(q, num, ptr);
	case BIO_CTRL_GET_KTLS_SEND:
		return q->seal != NULL;
	case BIO_CTRL_GET_KTLS_RECV:
		return 0;
	case CTRL_SET_KTLS_CTRL_MSG:
		q->ctrl_type = (int)num;
		return 0;
	case CTRL_CLEAR_KTLS_CTRL_MSG:
		q->ctrl_type = 0;
		return 0;
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
		tls_seal_free(q->seal);
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

/* The batch BIO of a connection, or NULL. */
static BIO *
batch_of_ssl(const SSL *ssl)
{
	BIO *b = ssl != NULL ? SSL_get_wbio(ssl) : NULL;

	/* OpenSSL puts its own buffer on top during a handshake. */
	for (; b != NULL; b = BIO_next(b))
		if (batch_method != NULL && BIO_method_type(b) == batch_type)
			return b;
	return NULL;
}

static BIO *
batch_of(struct bufferevent *bev)
{
	return batch_of_ssl(bufferevent_openssl_get_ssl(bev));
}

int
tls_batch_attach(struct bufferevent *bev)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	BIO *sock, *b;
	struct batch *q;

	if (ssl == NULL || (sock = SSL_get_wbio(ssl)) == NULL)
		return -1;
	if (batch_of(bev) != NULL)
		return 0;
	if ((b = BIO_new(batch_meth())) == NULL)
		return -1;
	q = xcalloc(1, sizeof(*q));
	q->buf = xmalloc(BATCH_MIN_CAP);
	q->cap = BATCH_MIN_CAP;
	q->push_at = 1;
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
	/* Offer the kTLS interface, through which OpenSSL hands the keys. */
	SSL_set_options(ssl, SSL_OP_ENABLE_KTLS);
	return 0;
}

/*
 * OpenSSL 3.0 hands a kTLS BIO the keys of the handshake only: after a key
 * update (asked by the peer; ours never ask) it goes on giving plaintext,
 * which the old key would seal and the peer could not open. Its key log
 * reports the new traffic secret once the KeyUpdate message is sealed,
 * and the sealer takes the new key from it here. A sealer that cannot be
 * made fails every later write: nothing goes out under the wrong key.
 */
void
tls_batch_update_keys(const SSL *ssl, const uint8_t *secret, size_t slen)
{
	BIO *b = batch_of_ssl(ssl);
	struct batch *q = b != NULL ? BIO_get_data(b) : NULL;

	if (q == NULL || q->seal == NULL)
		return;
	tls_seal_free(q->seal);
	q->seal = tls_seal_next(SSL_get_current_cipher(ssl), secret, slen);
	q->broken = q->seal == NULL;
	q->rekeying = 0;
	q->updates++;
}

/* TLS_REKEY_RECORDS, or UFFDD_TEST_REKEY_RECORDS when set (at least 2). */
static uint64_t
rekey_after(void)
{
	const char *env;
	char *end;
	unsigned long long n;

	if (rekey_records != 0)
		return rekey_records;
	rekey_records = TLS_REKEY_RECORDS;
	if ((env = getenv("UFFDD_TEST_REKEY_RECORDS")) != NULL) {
		errno = 0;
		n = strtoull(env, &end, 10);
		if (errno == 0 && *end == '\0' && n >= 2 &&
		    n < TLS_REKEY_RECORDS)
			rekey_records = n;
	}
	return rekey_records;
}

int
tls_batch_rekey(struct bufferevent *bev)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	BIO *b = batch_of_ssl(ssl);
	struct batch *q = b != NULL ? BIO_get_data(b) : NULL;

	if (q == NULL || q->seal == NULL || q->rekeying ||
	    tls_seal_records(q->seal) < rekey_after())
		return 0;
	if (!SSL_key_update(ssl, SSL_KEY_UPDATE_NOT_REQUESTED)) {
		ERR_clear_error(); /* a write pending: asked again next time */
		return 0;
	}
	q->rekeying = 1;
	return 1;
}

uint64_t
tls_batch_records(struct bufferevent *bev)
{
	BIO *b = batch_of(bev);
	struct batch *q = b != NULL ? BIO_get_data(b) : NULL;

	return q != NULL && q->seal != NULL ? tls_seal_records(q->seal) : 0;
}

uint64_t
tls_batch_updates(struct bufferevent *bev)
{
	BIO *b = batch_of(bev);
	struct batch *q = b != NULL ? BIO_get_data(b) : NULL;

	return q != NULL ? q->updates : 0;
}

void
tls_batch_on_full(struct bufferevent *bev, void (*cb)(void *), void *arg)
{
	BIO *b = batch_of(bev);
	struct batch *q = b != NULL ? BIO_get_data(b) : NULL;

	if (q != NULL)
		q->full_cb = cb, q->full_arg = arg;
}

int
tls_batch_has(struct bufferevent *bev)
{
	return batch_of(bev) != NULL;
}

int
tls_batch_sealed(struct bufferevent *bev)
{
	BIO *b = batch_of(bev);
	struct batch *q = b != NULL ? BIO_get_data(b) : NULL;

	return q != NULL && q->seal != NULL;
}

int
tls_batch(struct bufferevent *bev, size_t cap)
{
	BIO *b = batch_of(bev);
	struct batch *q = b != NULL ? BIO_get_data(b) : NULL;

	if (q == NULL)
		return -1;
	if (cap > q->cap) {
		q->buf = xrealloc(q->buf, cap);
		q->cap = cap;
	}
	q->push_at = q->cap;
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

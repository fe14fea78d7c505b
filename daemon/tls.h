/*
 * TLS 1.3 between daemons: one context, mutual certificate authentication
 * against the configured CA, bufferevent_openssl for both ends.
 */
#ifndef UFFDD_TLS_H
#define UFFDD_TLS_H

#include <stddef.h>

#include <event2/bufferevent.h>
#include <event2/event.h>

/*
 * Loads the CA, our certificate and key. pin, if not NULL, is the SHA-256
 * fingerprint (hex, colons allowed) a source's certificate must have, in
 * place of the name check. Returns -1 with the reason logged, and then
 * keeps what was loaded before (a reload that fails changes nothing).
 */
int tls_init(const char *ca, const char *cert, const char *key,
	     const char *pin);
int tls_enabled(void);
void tls_free(void);
/* A bufferevent for an accepted socket: we are the server. */
struct bufferevent *tls_accept(struct event_base *, evutil_socket_t fd);
/*
 * A bufferevent that will connect to a source whose certificate must name
 * host (DNS name or IP address), or, given pin (hex SHA-256, NULL or "":
 * none), must have that fingerprint, whatever the daemon's own pin says.
 * NULL with err filled on failure.
 */
struct bufferevent *tls_connect(struct event_base *, const char *host,
				const char *pin, char *err, size_t errlen);
/* Parses a SHA-256 fingerprint: 64 hex digits, colons allowed. 0 or -1. */
int tls_parse_pin(const char *s, unsigned char out[32]);
/*
 * Sets the priority of a TLS bufferevent's events; again after the
 * handshake, which replaces them. -1 if bev is not TLS.
 */
int tls_set_priority(struct bufferevent *, int prio);
/* Sends close_notify if bev is a TLS bufferevent; the caller goes on reading. */
void tls_shutdown(struct bufferevent *);
/*
 * Why a TLS bufferevent failed, for logs and replies: the certificate check
 * or the OpenSSL error. Returns 0 if it wrote a reason, -1 if bev is not a
 * TLS bufferevent or holds no TLS error.
 */
int tls_error(struct bufferevent *, char *buf, size_t len);
/*
 * Decrypts into buf what has arrived for a TLS bufferevent, beside its own
 * reads: the bytes taken, 0 when the socket must bring more first, -1 with
 * why filled when the peer closed or broke the connection.
 */
long tls_read(struct bufferevent *, void *buf, size_t len, char *why,
	      size_t whylen);
/*
 * Decrypted bytes of a record not yet read out of OpenSSL: no read event
 * announces them.
 */
size_t tls_pending(struct bufferevent *);
/*
 * Whether OpenSSL holds bytes of the socket's, decrypted or not: with
 * read-ahead, records no read event announces.
 */
int tls_has_pending(struct bufferevent *);
/*
 * The connection is read by the daemon alone from now (conn_read_direct()):
 * OpenSSL may read ahead of the record it decrypts, up to TLS_READ_BUF
 * bytes a read, which the bufferevent's own reader cannot live with.
 */
void tls_read_ahead(struct bufferevent *);
/*
 * tls_batch.c. Gathers the sealed records of an established connection
 * and writes them cap bytes at a time, where OpenSSL writes each 16 KiB
 * record by itself: a bulk lane's sender. 0, or -1 if bev is not TLS or
 * not past its handshake.
 */
int tls_batch(struct bufferevent *, size_t cap);
/* Write out once n bytes are held (0: cap), for small steps. */
void tls_batch_push_at(struct bufferevent *, size_t n);
/*
 * Writes out what is held: 1 when nothing is left, 0 when the socket took
 * what it could (wait until it is writable), -1 on an error (errno).
 * 1 for a connection without a batch.
 */
int tls_batch_flush(struct bufferevent *);
/* Bytes held, not yet written to the socket. */
size_t tls_batch_held(struct bufferevent *);
/* At exit, once every connection is freed. */
void tls_batch_free(void);

#endif

/*
 * TLS 1.3 between daemons: one context, mutual certificate authentication
 * against the configured CA, bufferevent_openssl for both ends.
 */
#ifndef UFFDD_TLS_H
#define UFFDD_TLS_H

#include <stddef.h>
#include <stdint.h>

#include <event2/bufferevent.h>
#include <event2/event.h>

#include "daemon/tls_files.h"

/*
 * Loads the CA, our certificate and key. pin, if not NULL, is the SHA-256
 * fingerprint (hex, colons allowed) a source's certificate must have, in
 * place of the name check. Returns -1 with the reason logged, and then
 * keeps what was loaded before (a reload that fails changes nothing).
 */
int tls_init(const char *ca, const char *cert, const char *key,
	     const char *pin);
/*
 * The same from descriptors of the three files (named for the log), as
 * the privileged part hands them to a confined engine at a reload: the
 * engine may not open a key only root may read.
 */
int tls_init_fds(const struct tls_files *f, const char *pin);
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
 * Decrypted bytes not yet read out (of OpenSSL, or whole records the
 * daemon's own reader holds, tls_read_ahead()): no read event announces
 * them.
 */
size_t tls_pending(struct bufferevent *);
/*
 * Whether OpenSSL, or the daemon's own reader, holds bytes of the
 * socket's, decrypted or not: records no read event announces.
 */
int tls_has_pending(struct bufferevent *);
/*
 * The connection is read by the daemon alone from now (conn_read_direct()).
 * A client connection with an AES-GCM suite has its records opened by the
 * daemon (tls_open.c), straight into the reader's buffer; any other lets
 * OpenSSL read ahead of the record it decrypts, up to TLS_READ_BUF bytes a
 * read, which the bufferevent's own reader cannot live with.
 */
void tls_read_ahead(struct bufferevent *);
/* Whether the daemon opens bev's records (tls_read_ahead()). */
int tls_opens(struct bufferevent *);
/*
 * tls_batch.c. Every connection a daemon accepts writes through a BIO of
 * ours under OpenSSL, which takes the sending keys from OpenSSL once the
 * handshake sets them and seals the records itself (tls_seal.c): no copy
 * into OpenSSL's record buffer. Done from tls_accept(); a write that the
 * socket does not take at once stays in the BIO (tls_batch_flush()).
 */
int tls_batch_attach(struct bufferevent *);
/*
 * cb(arg) is called when the BIO holds more than it should (1 MiB): its
 * owner stops writing into bev until tls_batch_flush() empties it.
 */
void tls_batch_on_full(struct bufferevent *, void (*cb)(void *), void *arg);
/* The sending keys after a key update (tls.c's key log callback). */
struct ssl_st;
void tls_batch_update_keys(const struct ssl_st *, const uint8_t *secret,
			   size_t slen);
/*
 * A sender moves to a new key (KeyUpdate, RFC 8446 4.6.3) once it has
 * sealed this many records under one: 128 GiB of full records, a quarter
 * of what AES-GCM may safely seal under one key (2^24.5 records, RFC 8446
 * 5.5), which OpenSSL 3.0 does not enforce. UFFDD_TEST_REKEY_RECORDS in
 * the environment sets a smaller count for the tests.
 */
#define TLS_REKEY_RECORDS (1ull << 23)
/*
 * Asks OpenSSL for that key update when bev's sealer is due one; it goes
 * out before the next record. Called between writes (conn_write_cb()),
 * never from inside OpenSSL. 1 if it asked.
 */
int tls_batch_rekey(struct bufferevent *);
/*
 * Records bev's sealer sealed under its key, the key updates it made, and
 * the key updates of the peer's that the daemon's opener took.
 */
uint64_t tls_batch_records(struct bufferevent *);
uint64_t tls_batch_updates(struct bufferevent *);
uint64_t tls_open_updates_of(struct bufferevent *);
/* Whether bev writes through that BIO. */
int tls_batch_has(struct bufferevent *);
/* Whether the BIO seals bev's records (OpenSSL gave it the keys). */
int tls_batch_sealed(struct bufferevent *);
/*
 * Gathers the records of a bulk lane's sender and writes them cap bytes
 * at a time, where OpenSSL writes each 16 KiB record by itself. 0, or -1
 * if bev has no batch BIO.
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

/*
 * tls_seal.c: TLS 1.3 records made with keys OpenSSL handed over, in the
 * kernel's struct for them (linux/tls.h): AES-128-GCM or AES-256-GCM, or
 * NULL.
 */
#define TLS_SEAL_HDR 5
#define TLS_SEAL_TAG 16
#define TLS_SEAL_PLAIN_MAX 16384
/* A record's bytes beyond its plaintext. */
#define TLS_SEAL_OVERHEAD (TLS_SEAL_HDR + 1 + TLS_SEAL_TAG)
struct tls_seal;
struct ssl_cipher_st;
struct evp_md_st;
struct tls_seal *tls_seal_new(const void *crypto_info);
/*
 * A sealer for a sending traffic secret that a key update made (slen
 * bytes, the suite's hash size), from record 0; NULL for a suite it does
 * not seal.
 */
struct tls_seal *tls_seal_next(const struct ssl_cipher_st *suite,
			       const uint8_t *secret, size_t slen);
/*
 * The key and IV of a TLS 1.3 traffic secret (slen bytes, the suite's
 * hash size) and their cipher; NULL for a suite other than AES-GCM.
 */
struct evp_cipher_st;
const struct evp_cipher_st *tls_traffic_keys(const struct ssl_cipher_st *suite,
					     const uint8_t *secret, size_t slen,
					     uint8_t key[32], uint8_t iv[12]);
/*
 * A record's nonce (RFC 8446 5.3): the IV with the sequence number XORed
 * into its last 8 bytes, so no two records under one key share one.
 */
void tls_nonce(const uint8_t iv[12], uint64_t seq, uint8_t nonce[12]);
/* HKDF-Expand-Label(secret, label, "", len) of RFC 8446 7.1: 0 or -1. */
int tls_expand_label(const struct evp_md_st *md, const uint8_t *secret,
		     size_t slen, const char *label, uint8_t *out, size_t len);
void tls_seal_free(struct tls_seal *);
/* Records sealed under its key so far (the next sequence number). */
uint64_t tls_seal_records(const struct tls_seal *);
/*
 * Seals n bytes (at most TLS_SEAL_PLAIN_MAX) of content type type into
 * out, which has room for n + TLS_SEAL_OVERHEAD: the record's length, or
 * 0 on failure (the sequence number would wrap, or OpenSSL failed).
 */
size_t tls_seal_record(struct tls_seal *, uint8_t type, const void *in,
		       size_t n, uint8_t *out);

/*
 * tls_open.c: the peer's TLS 1.3 records opened by the daemon, with the
 * key of its traffic secret (slen bytes, the suite's hash size), the next
 * record being number seq. NULL for a suite it does not open (left to
 * OpenSSL).
 */
struct tls_open;
struct tls_open *tls_open_new(const struct ssl_cipher_st *suite,
			      const uint8_t *secret, size_t slen, uint64_t seq);
void tls_open_free(struct tls_open *);
/*
 * Opens records from fd into buf, as tls_read() answers: the bytes of
 * application data placed, 0 when the socket must bring more, -1 with why
 * filled at the peer's close_notify or EOF ("connection closed by peer")
 * or on any record that fails its checks, after which every read fails.
 * Records are decrypted in buf itself: the bytes past those returned are
 * scratch, and hold nothing of a record that did not authenticate.
 */
long tls_open_read(struct tls_open *, int fd, void *buf, size_t len, char *why,
		   size_t whylen);
/* Plaintext held or read already: at most this much, no read event. */
size_t tls_open_pending(const struct tls_open *);
int tls_open_has_pending(const struct tls_open *);
/* KeyUpdates of the peer's it took. */
uint64_t tls_open_updates(const struct tls_open *);

#endif

/*
 * TLS between daemons (see tls.h). One SSL_CTX serves both ends: a daemon is
 * the server for the migrations it exports and the client for the ones it
 * attaches, with the same certificate, so every certificate must allow both
 * serverAuth and clientAuth when it lists extended key usages.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <event2/bufferevent_ssl.h>
#include <event2/bufferevent_struct.h>

#include "daemon/log.h"
#include "daemon/tls.h"
#include "daemon/tls_files.h"

/*
 * Not BEV_OPT_DEFER_CALLBACKS: deferred callbacks would all run at one
 * priority, and fault answers must come before bulk pages. conn.c copes
 * with errors reported before the data read with them.
 */
#define BEV_OPTS BEV_OPT_CLOSE_ON_FREE
/* OpenSSL's read buffer for a lane read ahead (tls_read_ahead()). */
#define TLS_READ_BUF (256u << 10)

static SSL_CTX *ctx;
static unsigned char pin[32];
static int have_pin;
/* SSL ex_data slot: a connection's own pin (attach --pin), 32 bytes. */
static int pin_idx = -1;
/* SSL ex_data slot: a client connection's struct rx. */
static int rx_idx = -1;

/*
 * What a client connection keeps so that the daemon can open the peer's
 * records itself once it reads the connection alone (tls_read_ahead()):
 * the peer's application traffic secret, as OpenSSL's key log reports it,
 * and how many records OpenSSL opened under it, which is the next
 * record's sequence number.
 */
struct rx {
	uint8_t secret[EVP_MAX_MD_SIZE];
	size_t slen;
	uint64_t count;
	int have;
	int armed;	       /* to take over at the next record's start */
	struct tls_open *open; /* from then on */
};

/* Logs the OpenSSL error queue under what; returns -1 for the caller. */
static int
ssl_fail(const char *what)
{
	unsigned long e = ERR_get_error();
	char buf[256] = "unknown error";

	if (e)
		ERR_error_string_n(e, buf, sizeof(buf));
	ERR_clear_error();
	log_warnx("TLS: %s: %s", what, buf);
	return -1;
}

/* Accepts "ab12..." and "AB:12:...", 32 bytes, nothing else. */
int
tls_parse_pin(const char *s, unsigned char out[32])
{
	size_t n = 0;

	while (*s && n < 64) {
		int v;

		if (*s == ':') {
			s++;
			continue;
		}
		if (!isxdigit((unsigned char)*s))
			return -1;
		v = isdigit((unsigned char)*s)
			    ? *s - '0'
			    : tolower((unsigned char)*s) - 'a' + 10;
		out[n / 2] = (unsigned char)(n % 2 ? out[n / 2] | v : v << 4);
		n++;
		s++;
	}
	return n == 64 && *s == '\0' ? 0 : -1;
}

/*
 * The chain check against the CA stays on in every case; a pin only replaces
 * the name check, for sources known by fingerprint rather than by name.
 */
static int
verify_cb(int ok, X509_STORE_CTX *xs)
{
	SSL *ssl = X509_STORE_CTX_get_ex_data(
		xs, SSL_get_ex_data_X509_STORE_CTX_idx());
	unsigned char md[EVP_MAX_MD_SIZE];
	const unsigned char *want = have_pin ? pin : NULL;
	unsigned int mdlen = 0;
	X509 *x;

	/* An attach's own pin wins over the daemon's. */
	if (ssl != NULL && pin_idx >= 0 && SSL_get_ex_data(ssl, pin_idx))
		want = SSL_get_ex_data(ssl, pin_idx);
	if (!ok || want == NULL || ssl == NULL || SSL_is_server(ssl) ||
	    X509_STORE_CTX_get_error_depth(xs) != 0)
		return ok;
	x = X509_STORE_CTX_get_current_cert(xs);
	if (x == NULL || !X509_digest(x, EVP_sha256(), md, &mdlen) ||
	    mdlen != sizeof(pin) || CRYPTO_memcmp(md, want, sizeof(pin)) != 0) {
		X509_STORE_CTX_set_error(xs, X509_V_ERR_CERT_REJECTED);
		return 0;
	}
	return 1;
}

/* Frees a connection's own pin with its SSL. */
static void
pin_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
	 void *argp)
{
	(void)parent, (void)ad, (void)idx, (void)argl, (void)argp;
	free(ptr);
}

static void
rx_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
	void *argp)
{
	struct rx *rx = ptr;

	(void)parent, (void)ad, (void)idx, (void)argl, (void)argp;
	if (rx == NULL)
		return;
	tls_open_free(rx->open);
	OPENSSL_cleanse(rx, sizeof(*rx));
	free(rx);
}

static struct rx *
rx_of(const SSL *ssl)
{
	return ssl != NULL && rx_idx >= 0 ? SSL_get_ex_data(ssl, rx_idx) : NULL;
}

/*
 * The daemon opens the records from here on, if OpenSSL holds no part of
 * one it has not opened: without read-ahead it reads a record's header
 * and then its body, so it holds none once a record is whole (its
 * plaintext may still wait, SSL_pending(), and is read out first). A
 * record OpenSSL began stays its own; the next read finishes it, and then
 * the daemon takes over (tls_read()).
 */
static void
rx_take(SSL *ssl, struct rx *rx)
{
	if (!rx->armed || (SSL_has_pending(ssl) && SSL_pending(ssl) == 0))
		return;
	rx->armed = 0;
	rx->open = tls_open_new(SSL_get_current_cipher(ssl), rx->secret,
				rx->slen, rx->count);
	OPENSSL_cleanse(rx->secret, sizeof(rx->secret));
	rx->have = 0;
	SSL_set_msg_callback(ssl, NULL);
	if (rx->open == NULL)
		SSL_set_read_ahead(ssl, 1);
}

/*
 * The secret of a key log line that starts with label (with its space),
 * into out: its length, or 0 for another line or a malformed one.
 */
static size_t
keylog_secret(const char *line, const char *label, uint8_t *out, size_t cap)
{
	size_t n = 0, ll = strlen(label);
	const char *p;

	if (strncmp(line, label, ll) != 0 ||
	    (p = strchr(line + ll, ' ')) == NULL)
		return 0;
	for (p++; isxdigit((unsigned char)p[0]) &&
		  isxdigit((unsigned char)p[1]) && n < cap;
	     p += 2) {
		char hex[3] = {p[0], p[1], 0};

		out[n++] = (uint8_t)strtoul(hex, NULL, 16);
	}
	return *p == '\0' ? n : 0;
}

/*
 * OpenSSL's key log. A client keeps the server's first application
 * traffic secret: OpenSSL reports it while it handles the server's
 * Finished, after opening the record that carried it, so every record it
 * opens from now on is under that secret, counted by rx_msg_cb(). A key
 * update OpenSSL opens before the daemon takes over is reported likewise,
 * after the record that carried it was counted, and starts the count
 * again. A server's sealer takes its next secret after a key update
 * (tls_batch_update_keys()).
 */
static void
keylog_cb(const SSL *ssl, const char *line)
{
	uint8_t secret[EVP_MAX_MD_SIZE];
	struct rx *rx = rx_of(ssl);
	size_t n;

	if (SSL_is_server(ssl)) {
		n = keylog_secret(line, "SERVER_TRAFFIC_SECRET_N ", secret,
				  sizeof(secret));
		if (n > 0)
			tls_batch_update_keys(ssl, secret, n);
		OPENSSL_cleanse(secret, sizeof(secret));
		return;
	}
	if (rx == NULL)
		return;
	/* The first, or the next after a key update OpenSSL opened. */
	n = keylog_secret(line, "SERVER_TRAFFIC_SECRET_0 ", secret,
			  sizeof(secret));
	if (n == 0 && rx->have)
		n = keylog_secret(line, "SERVER_TRAFFIC_SECRET_N ", secret,
				  sizeof(secret));
	if (n > 0) {
		memcpy(rx->secret, secret, n);
		rx->slen = n;
		rx->have = 1;
		rx->count = 0;
	}
	OPENSSL_cleanse(secret, sizeof(secret));
}

/* Counts the records OpenSSL opens (TLS 1.3 reports each one's type). */
static void
rx_msg_cb(int write_p, int version, int type, const void *buf, size_t len,
	  SSL *ssl, void *arg)
{
	struct rx *rx;

	(void)version, (void)buf, (void)len, (void)arg;
	if (write_p || type != SSL3_RT_INNER_CONTENT_TYPE)
		return;
	if ((rx = rx_of(ssl)) != NULL && rx->have)
		rx->count++;
}

/* Logs why c could not be built, frees it; -1 for the caller. */
static int
ctx_fail(SSL_CTX *c, const char *what)
{
	ssl_fail(what);
	SSL_CTX_free(c);
	return -1;
}

int
tls_init(const char *ca, const char *cert, const char *key, const char *p)
{
	struct tls_files f;
	int rc;

	if (tls_files_open(&f, ca, cert, key) < 0)
		return -1;
	rc = tls_init_fds(&f, p);
	tls_files_close(&f);
	return rc;
}

int
tls_init_fds(const struct tls_files *f, const char *p)
{
	unsigned char newpin[32];
	SSL_CTX *c;

	if (p != NULL && tls_parse_pin(p, newpin) < 0) {
		log_warnx("--pin %s: want the 64 hex digits of a SHA-256 "
			  "fingerprint",
			  p);
		return -1;
	}
	if (pin_idx < 0 &&
	    (pin_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, pin_free)) < 0)
		return ssl_fail("SSL_get_ex_new_index");
	if (rx_idx < 0 &&
	    (rx_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, rx_free)) < 0)
		return ssl_fail("SSL_get_ex_new_index");
	if ((c = SSL_CTX_new(TLS_method())) == NULL)
		return ssl_fail("SSL_CTX_new");
	/* Nothing older than TLS 1.3: no downgrade, no legacy ciphers. */
	if (!SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION))
		return ctx_fail(c, "TLS 1.3 minimum");
	if (tls_files_load(c, f) < 0) {
		SSL_CTX_free(c);
		return -1;
	}
	if (!SSL_CTX_check_private_key(c))
		return ctx_fail(c, "key does not match certificate");
	/*
	 * Bulk pages cost a record's encryption and decryption per 16 KiB:
	 * prefer AES-128-GCM (AES-NI: about 15% cheaper than the default
	 * AES-256-GCM here), still accepting the other TLS 1.3 suites.
	 */
	if (!SSL_CTX_set_ciphersuites(c, "TLS_AES_128_GCM_SHA256:"
					 "TLS_AES_256_GCM_SHA384:"
					 "TLS_CHACHA20_POLY1305_SHA256"))
		return ctx_fail(c, "TLS 1.3 cipher suites");
	/* Both ends must show a certificate from our CA. */
	SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
			   verify_cb);
	/*
	 * No resumption: every connection proves its certificate again, so a
	 * revoked or replaced certificate takes effect at once.
	 */
	SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
	/*
	 * The read buffer, for read-ahead once the daemon reads a lane itself
	 * (tls_read_ahead()): 256 KiB a read instead of a record's header and
	 * body in two, about 4x fewer read calls on a bulk lane.
	 */
	SSL_CTX_set_default_read_buffer_len(c, TLS_READ_BUF);
	SSL_CTX_set_num_tickets(c, 0);
	SSL_CTX_set_options(c, SSL_OP_NO_TICKET);
	SSL_CTX_set_keylog_callback(c, keylog_cb);
	/*
	 * Only now replace what runs (a reload keeps the old context on any
	 * error); connections keep a reference to the context they began on.
	 */
	SSL_CTX_free(ctx);
	ctx = c;
	have_pin = p != NULL;
	if (have_pin)
		memcpy(pin, newpin, sizeof(pin));
	return 0;
}

int
tls_enabled(void)
{
	return ctx != NULL;
}

void
tls_free(void)
{
	SSL_CTX_free(ctx);
	ctx = NULL;
	tls_batch_free();
}

struct bufferevent *
tls_accept(struct event_base *b, evutil_socket_t fd)
{
	struct bufferevent *bev;
	SSL *ssl;

	if ((ssl = SSL_new(ctx)) == NULL) {
		ssl_fail("SSL_new");
		return NULL;
	}
	bev = bufferevent_openssl_socket_new(
		b, fd, ssl, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
	if (bev == NULL) {
		SSL_free(ssl);
		return NULL;
	}
	/*
	 * Before the handshake: OpenSSL hands the sending keys to the write
	 * BIO as it sets them. A failure leaves OpenSSL sealing, as before.
	 */
	if (tls_batch_attach(bev) < 0)
		ssl_fail("write BIO");
	return bev;
}

struct bufferevent *
tls_connect(struct event_base *b, const char *host, const char *own_pin,
	    char *err, size_t errlen)
{
	unsigned char addr[sizeof(struct in6_addr)], *pp = NULL;
	struct bufferevent *bev;
	int is_ip;
	SSL *ssl;

	if (own_pin != NULL && *own_pin != '\0') {
		pp = xmalloc(sizeof(pin));
		if (tls_parse_pin(own_pin, pp) < 0) {
			snprintf(err, errlen,
				 "pin %.80s: want the 64 hex digits of a "
				 "SHA-256 fingerprint",
				 own_pin);
			free(pp);
			return NULL;
		}
	}
	if ((ssl = SSL_new(ctx)) == NULL) {
		snprintf(err, errlen, "TLS: SSL_new failed");
		free(pp);
		return NULL;
	}
	if (pp != NULL && !SSL_set_ex_data(ssl, pin_idx, pp)) {
		snprintf(err, errlen, "TLS: SSL_set_ex_data failed");
		free(pp);
		SSL_free(ssl);
		return NULL;
	}
	is_ip = inet_pton(AF_INET, host, addr) == 1 ||
		inet_pton(AF_INET6, host, addr) == 1;
	/*
	 * The source's certificate must name the host or address we were
	 * given in --from, unless a pinned fingerprint identifies it (the
	 * attach's own pin, or the daemon's).
	 */
	if (!have_pin && pp == NULL) {
		X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);

		if ((is_ip && !X509_VERIFY_PARAM_set1_ip_asc(vp, host)) ||
		    (!is_ip && !SSL_set1_host(ssl, host))) {
			snprintf(err, errlen, "TLS: cannot check the name %s",
				 host);
			SSL_free(ssl);
			return NULL;
		}
	}
	if (!is_ip)
		SSL_set_tlsext_host_name(ssl, host);
	if (!SSL_set_ex_data(ssl, rx_idx, xcalloc(1, sizeof(struct rx)))) {
		snprintf(err, errlen, "TLS: SSL_set_ex_data failed");
		SSL_free(ssl);
		return NULL;
	}
	SSL_set_msg_callback(ssl, rx_msg_cb);
	bev = bufferevent_openssl_socket_new(
		b, -1, ssl, BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
	if (bev == NULL) {
		snprintf(err, errlen, "TLS: bufferevent_openssl_socket_new");
		SSL_free(ssl);
		return NULL;
	}
	return bev;
}

int
tls_set_priority(struct bufferevent *bev, int prio)
{
	/*
	 * bufferevent_priority_set() refuses OpenSSL bufferevents in libevent
	 * 2.1, but they read and write through the same two events as socket
	 * ones; set those directly (bufferevent_struct.h is public API).
	 */
	if (bufferevent_openssl_get_ssl(bev) == NULL ||
	    event_get_base(&bev->ev_read) == NULL)
		return -1;
	if (event_priority_set(&bev->ev_read, prio) < 0 ||
	    event_priority_set(&bev->ev_write, prio) < 0)
		return -1;
	return 0;
}

void
tls_shutdown(struct bufferevent *bev)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);

	/* A key update of ours still waiting goes first (tls_read()). */
	if (ssl != NULL && !SSL_is_init_finished(ssl) &&
	    SSL_get_key_update_type(ssl) != SSL_KEY_UPDATE_NONE)
		SSL_do_handshake(ssl);
	/* Fails harmlessly mid-handshake or on a full socket buffer. */
	if (ssl != NULL && SSL_is_init_finished(ssl))
		SSL_shutdown(ssl);
	/* A batch would hold the close_notify (OpenSSL does not flush it). */
	tls_batch_flush(bev);
	ERR_clear_error();
}

int
tls_error(struct bufferevent *bev, char *buf, size_t len)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	unsigned long e, first = 0;
	long vr;

	if (ssl == NULL)
		return -1;
	/*
	 * libevent queues SSL_get_error() codes (SSL_ERROR_SYSCALL: a socket
	 * error, which the caller reports from errno) among OpenSSL's own
	 * error codes; only the latter carry a library and a reason.
	 */
	while ((e = bufferevent_get_openssl_error(bev)) != 0)
		if (first == 0 && ERR_GET_LIB(e) != 0 &&
		    ERR_reason_error_string(e) != NULL)
			first = e;
	vr = SSL_get_verify_result(ssl);
	if (vr != X509_V_OK) {
		snprintf(buf, len, "TLS: peer certificate refused: %s",
			 X509_verify_cert_error_string(vr));
		return 0;
	}
	if (first == 0)
		return -1;
	snprintf(buf, len, "TLS: %s", ERR_reason_error_string(first));
	return 0;
}

long
tls_read(struct bufferevent *bev, void *buf, size_t len, char *why,
	 size_t whylen)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	struct rx *rx;
	unsigned long e;
	int r, err;

	/*
	 * Not before the handshake. A key update of ours waiting to go out
	 * (tls_batch_rekey()) puts OpenSSL "in init" again: its next read or
	 * write sends it, and this read must be that one, or a reader that
	 * the socket keeps waking would never get past it.
	 */
	if (ssl == NULL ||
	    (!SSL_is_init_finished(ssl) &&
	     SSL_get_key_update_type(ssl) == SSL_KEY_UPDATE_NONE))
		return 0;
	if ((rx = rx_of(ssl)) != NULL && rx->open != NULL) {
		/* What OpenSSL opened before comes first; it reads no more. */
		if ((r = SSL_pending(ssl)) <= 0)
			return tls_open_read(rx->open, bufferevent_getfd(bev),
					     buf, len, why, whylen);
		if (len > (size_t)r)
			len = (size_t)r;
	}
	if (len > INT_MAX)
		len = INT_MAX;
	if ((r = SSL_read(ssl, buf, (int)len)) > 0) {
		if (rx != NULL && rx->armed)
			rx_take(ssl, rx);
		return r;
	}
	err = SSL_get_error(ssl, r);
	/*
	 * WANT_WRITE (a record that needs an answer on a full socket) is
	 * left to the bufferevent's own read, which knows how to wait.
	 */
	if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
		ERR_clear_error();
		return 0;
	}
	e = ERR_peek_error();
	if (err == SSL_ERROR_ZERO_RETURN)
		snprintf(why, whylen, "connection closed by peer");
	else if (e != 0 && ERR_reason_error_string(e) != NULL)
		snprintf(why, whylen, "TLS: %s", ERR_reason_error_string(e));
	else if (err == SSL_ERROR_SYSCALL && errno != 0)
		snprintf(why, whylen, "%s", strerror(errno));
	else
		snprintf(why, whylen, "connection closed by peer");
	ERR_clear_error();
	return -1;
}

int
tls_has_pending(struct bufferevent *bev)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	struct rx *rx = rx_of(ssl);

	if (ssl == NULL)
		return 0;
	if (rx != NULL && rx->open != NULL)
		return SSL_pending(ssl) > 0 || tls_open_has_pending(rx->open);
	return SSL_has_pending(ssl);
}

/*
 * A client connection with its peer's traffic secret: the daemon opens
 * its records (rx_take()), with AES-GCM. Any other: OpenSSL reads ahead.
 */
void
tls_read_ahead(struct bufferevent *bev)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	struct rx *rx = rx_of(ssl);
	int nid;

	if (ssl == NULL || (rx != NULL && (rx->armed || rx->open != NULL)))
		return;
	nid = SSL_is_init_finished(ssl)
		      ? SSL_CIPHER_get_cipher_nid(SSL_get_current_cipher(ssl))
		      : NID_undef;
	if (rx != NULL && rx->have &&
	    (nid == NID_aes_128_gcm || nid == NID_aes_256_gcm)) {
		rx->armed = 1;
		rx_take(ssl, rx);
		return;
	}
	if (rx != NULL) {
		OPENSSL_cleanse(rx->secret, sizeof(rx->secret));
		rx->have = 0;
		SSL_set_msg_callback(ssl, NULL);
	}
	SSL_set_read_ahead(ssl, 1);
}

uint64_t
tls_open_updates_of(struct bufferevent *bev)
{
	struct rx *rx = rx_of(bufferevent_openssl_get_ssl(bev));

	return rx != NULL && rx->open != NULL ? tls_open_updates(rx->open) : 0;
}

int
tls_opens(struct bufferevent *bev)
{
	struct rx *rx = rx_of(bufferevent_openssl_get_ssl(bev));

	return rx != NULL && rx->open != NULL;
}

size_t
tls_pending(struct bufferevent *bev)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	struct rx *rx = rx_of(ssl);
	int n = ssl != NULL ? SSL_pending(ssl) : 0;
	size_t held = n > 0 ? (size_t)n : 0;

	if (rx != NULL && rx->open != NULL)
		held += tls_open_pending(rx->open);
	return held;
}

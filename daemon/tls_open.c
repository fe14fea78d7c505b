/*
 * TLS 1.3 records opened by the daemon, on a connection it reads itself
 * (see tls.h, tls_read_ahead()).
 *
 * OpenSSL decrypts a record in place in its read buffer and then copies
 * the plaintext out to the caller: on a destination's bulk lane that copy
 * cost 0.11-0.14 CPU-s/GiB (docs/benchmarks.md). No call of OpenSSL 3.0
 * decrypts into the caller's memory, and it hands a read key to no one
 * for TLS 1.3. So once the handshake is over, the daemon reads the
 * socket itself and opens each record with the same key (derived from
 * the traffic secret, RFC 8446 7.3) straight into the buffer the frame's
 * pages go to: one pass for the decryption and the copy. Its bytes count
 * only once its tag is checked, and a record that fails the check is
 * wiped from that buffer (open_one()).
 *
 * Every record is checked as OpenSSL would: its header, its length, its
 * tag under the next sequence number, its content type. At most 32
 * empty records in a row are taken, as by OpenSSL (OPEN_MAX_EMPTY), and
 * at most 32 KeyUpdates with no data between, as by BoringSSL
 * (OPEN_MAX_KEY_UPDATES). Application data is all it passes on; the
 * peer's close_notify ends the stream as EOF; a KeyUpdate that asks
 * nothing of us moves to the next traffic secret (RFC 8446 4.6.3; a
 * source sends one every TLS_REKEY_RECORDS records). Any other alert or
 * post-handshake message, a KeyUpdate that asks for ours (our writes are
 * OpenSSL's, which this reader cannot make answer), or anything that
 * does not authenticate fails the connection. A record stream taken from
 * the middle would fail at the first record: the sequence number is part
 * of the nonce.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

#include "daemon/log.h"
#include "daemon/tls.h"

/* RFC 8446 5.2: a record's ciphertext is at most 2^14 + 256 bytes. */
#define REC_MAX (TLS_SEAL_PLAIN_MAX + 256)
/* What one read from the socket may bring, and a record that began. */
#define RAW_CAP ((256u << 10) + TLS_SEAL_HDR + REC_MAX)
/*
 * Empty records in a row (application data of no bytes) that the opener
 * takes: the next one fails the stream. Each costs a decryption and
 * brings the caller nothing, so without a limit a peer could keep a
 * reader opening records for as long as it cares to send them, in one
 * read as long as the socket keeps up. OpenSSL 3.0 has the same limit
 * (MAX_EMPTY_RECORDS in ssl/record/ssl3_record.c: the 33rd empty record
 * in a row fails, any record with content ends the run).
 */
#define OPEN_MAX_EMPTY 32
/*
 * KeyUpdates with no application data between that the opener takes:
 * the next one fails the stream. A KeyUpdate ends a run of empty records,
 * so without this a peer could send 32 empty records and a KeyUpdate,
 * again and again, and keep a reader opening records for ever (each
 * update costs a key derivation besides). OpenSSL 3.0 has no such limit:
 * 1.1.1 allowed 32 key updates a connection and dropped the count in
 * 1.1.1b, since a long connection may need more. This is BoringSSL's
 * (kMaxKeyUpdates): 32 in a row, application data ends a run. Our
 * sources send records of data between any two of theirs.
 */
#define OPEN_MAX_KEY_UPDATES 32

struct tls_open {
	EVP_CIPHER_CTX *ctx;
	const SSL_CIPHER *suite;
	uint8_t secret[EVP_MAX_MD_SIZE]; /* the peer's, for its next one */
	size_t slen;
	uint8_t iv[12];
	uint64_t seq;
	uint64_t updates; /* key updates taken */
	unsigned empty;	  /* empty records in a row (OPEN_MAX_EMPTY) */
	unsigned rekeys;  /* KeyUpdates with no data between */
	uint8_t *raw;	  /* bytes read from the socket, not yet opened */
	size_t raw_off, raw_len;
	/* A record's plaintext past the caller's space, served first. */
	uint8_t spill[REC_MAX];
	size_t spill_off, spill_len;
	int failed; /* why says it; every later read fails the same way */
	char why[128];
};

/* Takes the key and IV of the traffic secret o holds: 0, or -1. */
static int
open_keys(struct tls_open *o)
{
	uint8_t key[32];
	const EVP_CIPHER *cipher =
		tls_traffic_keys(o->suite, o->secret, o->slen, key, o->iv);
	int ok = cipher != NULL &&
		 EVP_DecryptInit_ex(o->ctx, cipher, NULL, key, NULL);

	OPENSSL_cleanse(key, sizeof(key));
	return ok ? 0 : -1;
}

struct tls_open *
tls_open_new(const SSL_CIPHER *suite, const uint8_t *secret, size_t slen,
	     uint64_t seq)
{
	struct tls_open *o = xcalloc(1, sizeof(*o));

	o->suite = suite;
	o->seq = seq;
	if (slen > sizeof(o->secret) ||
	    (o->ctx = EVP_CIPHER_CTX_new()) == NULL) {
		tls_open_free(o);
		return NULL;
	}
	memcpy(o->secret, secret, slen);
	o->slen = slen;
	if (open_keys(o) < 0) {
		tls_open_free(o); /* another suite: left to OpenSSL */
		return NULL;
	}
	o->raw = xmalloc(RAW_CAP);
	return o;
}

void
tls_open_free(struct tls_open *o)
{
	if (o == NULL)
		return;
	EVP_CIPHER_CTX_free(o->ctx);
	free(o->raw);
	OPENSSL_cleanse(o, sizeof(*o));
	free(o);
}

/* Fails the stream for good: -1 for the caller. */
static long
open_fail(struct tls_open *o, const char *why)
{
	if (!o->failed)
		snprintf(o->why, sizeof(o->why), "%s", why);
	o->failed = 1;
	return -1;
}

/* Byte i of a record's inner plaintext, split between out and the spill. */
static uint8_t
inner_byte(const struct tls_open *o, const uint8_t *out, size_t a, size_t i)
{
	return i < a ? out[i] : o->spill[i - a];
}

/*
 * A handshake record after the handshake (its n bytes of content): a
 * KeyUpdate alone in it, which asks nothing of us, moves the stream to
 * the peer's next traffic secret from record 0 (RFC 8446 4.6.3, 7.2).
 * Anything else fails the stream. No application data: 0, or -1.
 */
static long
open_handshake(struct tls_open *o, const uint8_t *out, size_t a, size_t n)
{
	uint8_t next[EVP_MAX_MD_SIZE], m[5];
	const EVP_MD *md = SSL_CIPHER_get_handshake_digest(o->suite);

	o->spill_off = o->spill_len = 0;
	for (size_t i = 0; i < n && i < sizeof(m); i++)
		m[i] = inner_byte(o, out, a, i);
	if (n != sizeof(m) || m[0] != 24 || m[1] != 0 || m[2] != 0 || m[3] != 1)
		return open_fail(o, "TLS: a handshake message after the "
				    "handshake that is not a key update (a "
				    "ticket?), not taken on this connection");
	if (m[4] == 1)
		return open_fail(o, "TLS: the peer asked for our key update, "
				    "which this connection does not answer");
	if (m[4] != 0)
		return open_fail(o, "TLS: bad key update");
	if (o->rekeys == OPEN_MAX_KEY_UPDATES) {
		char why[96];

		snprintf(why, sizeof(why),
			 "TLS: more than %d key updates with no data between",
			 OPEN_MAX_KEY_UPDATES);
		return open_fail(o, why);
	}
	if (md == NULL || tls_expand_label(md, o->secret, o->slen,
					   "traffic upd", next, o->slen) < 0) {
		OPENSSL_cleanse(next, sizeof(next));
		return open_fail(o, "TLS: key update: no next secret");
	}
	memcpy(o->secret, next, o->slen);
	OPENSSL_cleanse(next, sizeof(next));
	if (open_keys(o) < 0)
		return open_fail(o, "TLS: key update: no next key");
	o->seq = 0;
	o->updates++;
	o->rekeys++;
	o->empty = 0; /* a record with content */
	return 0;
}

/*
 * What a record that authenticated says, by its content type: the bytes
 * of application data it brings (the part past a is in the spill), or -1
 * with the stream failed (close_notify: as EOF).
 */
static long
open_content(struct tls_open *o, const uint8_t *out, size_t a, size_t plen)
{
	size_t i = plen;
	uint8_t type;

	while (i > 0 && inner_byte(o, out, a, i - 1) == 0)
		i--; /* padding */
	if (i == 0)
		return open_fail(o, "TLS: record without a content type");
	type = inner_byte(o, out, a, --i);
	if (type == 23) {
		if (i > TLS_SEAL_PLAIN_MAX)
			return open_fail(o, "TLS: record overflow");
		if (i == 0 && o->empty == OPEN_MAX_EMPTY) {
			char why[96];

			snprintf(why, sizeof(why),
				 "TLS: more than %d empty records in a row",
				 OPEN_MAX_EMPTY);
			return open_fail(o, why);
		}
		if (i == 0)
			o->empty++;
		else
			o->empty = o->rekeys = 0;
		o->spill_off = 0;
		o->spill_len = i > a ? i - a : 0;
		return (long)(i > a ? a : i);
	}
	if (type == 21 && i == 2 && inner_byte(o, out, a, 1) == 0)
		return open_fail(o, "connection closed by peer");
	if (type == 21 && i == 2) {
		char why[96];

		snprintf(why, sizeof(why), "TLS: the peer sent alert %s",
			 SSL_alert_desc_string_long(inner_byte(o, out, a, 1)));
		return open_fail(o, why);
	}
	if (type == 22)
		return open_handshake(o, out, a, i);
	return open_fail(o, "TLS: bad record type");
}

/*
 * Opens the record at the head of raw into out (space bytes; the rest of
 * its plaintext to the spill). The bytes of application data placed in
 * out, -1 with the stream failed, or -2 when the record is not all there.
 *
 * The record is decrypted in place, into out, before its tag is checked:
 * AES-GCM checks the tag only at the end, and decrypting into a buffer of
 * our own first would cost the copy this file exists to save (OpenSSL
 * decrypts in place in its read buffer too, and then copies). That is
 * safe because nothing can see those bytes before the check: the tag is
 * checked in this same call, with no callback between; a caller counts
 * only the bytes tls_open_read() returns, which are those of records
 * that authenticated (a frame's sink, conn_read_tls(), is the daemon's
 * own memory, handed on only once its count says the frame is whole);
 * and a record that does not authenticate is wiped from out and the
 * spill before the stream fails, so no byte of it is left for anyone.
 */
static long
open_one(struct tls_open *o, uint8_t *out, size_t space)
{
	const uint8_t *h = o->raw + o->raw_off;
	size_t clen, plen, a;
	uint8_t nonce[12];
	int l;

	if (o->raw_len < TLS_SEAL_HDR)
		return -2;
	clen = (size_t)h[3] << 8 | h[4];
	if (h[0] != 23 || h[1] != 3 || h[2] != 3)
		return open_fail(o, "TLS: bad record header");
	if (clen < 1 + TLS_SEAL_TAG || clen > REC_MAX)
		return open_fail(o, "TLS: bad record length");
	if (o->raw_len < TLS_SEAL_HDR + clen)
		return -2;
	if (o->seq == UINT64_MAX)
		return open_fail(o, "TLS: record sequence number exhausted");
	plen = clen - TLS_SEAL_TAG;
	a = plen < space ? plen : space;
	tls_nonce(o->iv, o->seq, nonce);
	if (!EVP_DecryptInit_ex(o->ctx, NULL, NULL, NULL, nonce) ||
	    !EVP_DecryptUpdate(o->ctx, NULL, &l, h, TLS_SEAL_HDR) ||
	    !EVP_DecryptUpdate(o->ctx, out, &l, h + TLS_SEAL_HDR, (int)a) ||
	    (plen > a &&
	     !EVP_DecryptUpdate(o->ctx, o->spill, &l, h + TLS_SEAL_HDR + a,
				(int)(plen - a))) ||
	    !EVP_CIPHER_CTX_ctrl(o->ctx, EVP_CTRL_GCM_SET_TAG, TLS_SEAL_TAG,
				 (void *)(h + TLS_SEAL_HDR + plen)) ||
	    EVP_DecryptFinal_ex(o->ctx, out + a, &l) <= 0) {
		OPENSSL_cleanse(out, a);
		OPENSSL_cleanse(o->spill, plen - a);
		return open_fail(o, "TLS: decryption failed or bad record mac");
	}
	o->seq++;
	o->raw_off += TLS_SEAL_HDR + clen;
	o->raw_len -= TLS_SEAL_HDR + clen;
	return open_content(o, out, a, plen);
}

/* Reads what the socket holds behind the bytes not yet opened. */
static long
open_recv(struct tls_open *o, int fd)
{
	ssize_t r;

	if (o->raw_off > 0) {
		memmove(o->raw, o->raw + o->raw_off, o->raw_len);
		o->raw_off = 0;
	}
	r = recv(fd, o->raw + o->raw_len, RAW_CAP - o->raw_len, 0);
	if (r > 0) {
		o->raw_len += (size_t)r;
		return r;
	}
	if (r < 0 &&
	    (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	if (r < 0)
		return open_fail(o, strerror(errno));
	return open_fail(o, "connection closed by peer");
}

long
tls_open_read(struct tls_open *o, int fd, void *buf, size_t len, char *why,
	      size_t whylen)
{
	uint8_t *out = buf;
	size_t got = 0;
	long r;

	if (o->spill_len > 0) {
		got = o->spill_len < len ? o->spill_len : len;
		memcpy(out, o->spill + o->spill_off, got);
		o->spill_off += got;
		o->spill_len -= got;
	}
	while (got < len && !o->failed) {
		r = open_one(o, out + got, len - got);
		if (r == -2) {
			if (open_recv(o, fd) > 0)
				continue;
			break; /* nothing more until the socket brings it */
		}
		if (r < 0)
			break;
		got += (size_t)r;
	}
	if (got > 0)
		return (long)got; /* a failure waits for the next read */
	if (o->failed) {
		snprintf(why, whylen, "%s", o->why);
		return -1;
	}
	return 0;
}

size_t
tls_open_pending(const struct tls_open *o)
{
	size_t n = o->spill_len, off = o->raw_off, left = o->raw_len;

	/* Whole records read already: no read event announces them. */
	while (left >= TLS_SEAL_HDR) {
		size_t clen = (size_t)o->raw[off + 3] << 8 | o->raw[off + 4];

		if (left < TLS_SEAL_HDR + clen || clen < TLS_SEAL_TAG)
			break;
		n += clen - TLS_SEAL_TAG;
		off += TLS_SEAL_HDR + clen;
		left -= TLS_SEAL_HDR + clen;
	}
	return n;
}

int
tls_open_has_pending(const struct tls_open *o)
{
	return o->spill_len > 0 || o->raw_len > 0;
}

uint64_t
tls_open_updates(const struct tls_open *o)
{
	return o->updates;
}

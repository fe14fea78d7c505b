/*
 * The daemon's own TLS 1.3 records (daemon/tls_seal.c, daemon/tls_open.c)
 * over a socketpair. The opener derives its key from a traffic secret
 * itself; the sealer here gets the key and IV that OpenSSL's own TLS 1.3
 * key schedule (its "TLS13-KDF") derives from the same secret, so a
 * record that opens proves the two derivations agree. Then the hostile
 * cases: a changed byte, a skipped or replayed record, a bad header or
 * length, alerts, post-handshake messages, a record without a type, EOF
 * in the middle of a record. Each must fail the stream for good, and a
 * record that does not authenticate must leave nothing in the reader's
 * buffer. A key update of the peer's is taken, with OpenSSL's derivation
 * of the next secret on the sealing side. Runs of records that bring no
 * data, empty ones or KeyUpdates, fail past 32.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/tls.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/ssl.h>

#include "daemon/tls.h"
#include "tests/unit/unit.h"

static uint8_t secret[32];
static struct tls12_crypto_info_aes_gcm_128 info;

/* OpenSSL's HKDF-Expand-Label of sec (32 bytes), not ours. */
static void
ossl_label_of(const uint8_t *sec, const char *label, uint8_t *out, size_t len)
{
	int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
	EVP_KDF *kdf = EVP_KDF_fetch(NULL, "TLS13-KDF", NULL);
	EVP_KDF_CTX *k = EVP_KDF_CTX_new(kdf);
	OSSL_PARAM p[] = {
		OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
		OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST,
						 "SHA256", 0),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY,
						  (void *)sec, sizeof(secret)),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_PREFIX,
						  "tls13 ", 6),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_LABEL,
						  (void *)label, strlen(label)),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_DATA, "", 0),
		OSSL_PARAM_construct_end(),
	};

	CHECK(k != NULL && EVP_KDF_derive(k, out, len, p) > 0);
	EVP_KDF_CTX_free(k);
	EVP_KDF_free(kdf);
}

static void
ossl_label(const char *label, uint8_t *out, size_t len)
{
	ossl_label_of(secret, label, out, len);
}

/* A sealer with the key and IV OpenSSL derives from sec, from record seq. */
static struct tls_seal *
ossl_sealer(const uint8_t *sec, uint64_t seq)
{
	uint8_t iv[12];

	ossl_label_of(sec, "key", info.key, sizeof(info.key));
	ossl_label_of(sec, "iv", iv, sizeof(iv));
	info.info.version = TLS_1_3_VERSION;
	info.info.cipher_type = TLS_CIPHER_AES_GCM_128;
	memcpy(info.salt, iv, 4);
	memcpy(info.iv, iv + 4, 8);
	for (int i = 0; i < 8; i++)
		info.rec_seq[i] = (uint8_t)(seq >> (56 - 8 * i));
	return tls_seal_new(&info);
}

/* A sealer and an opener of one direction, from record number seq. */
struct pair {
	struct tls_seal *s;
	struct tls_open *o;
	int w, r; /* the socketpair: write end, read end (non-blocking) */
	uint8_t sec[32]; /* the sealer's traffic secret */
};

static void
pair_open(struct pair *p, uint64_t seq)
{
	const SSL_CIPHER *suite;
	SSL_CTX *ctx = SSL_CTX_new(TLS_method());
	SSL *ssl = SSL_new(ctx);
	int sv[2];

	memcpy(p->sec, secret, sizeof(p->sec));
	p->s = ossl_sealer(secret, seq);
	suite = SSL_CIPHER_find(ssl, (const unsigned char *)"\x13\x01");
	p->o = tls_open_new(suite, secret, sizeof(secret), seq);
	CHECK(p->s != NULL && p->o != NULL);
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	p->w = sv[0], p->r = sv[1];
	fcntl(p->r, F_SETFL, O_NONBLOCK);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
}

static void
pair_close(struct pair *p)
{
	tls_seal_free(p->s);
	tls_open_free(p->o);
	close(p->w);
	close(p->r);
}

/* Seals n bytes of type into a record and sends it; its bytes in rec. */
static size_t
send_rec(struct pair *p, uint8_t type, const void *in, size_t n, uint8_t *rec)
{
	size_t len = tls_seal_record(p->s, type, in, n, rec);

	CHECK(len == n + TLS_SEAL_OVERHEAD);
	CHECK(write(p->w, rec, len) == (ssize_t)len);
	return len;
}

/*
 * Sends a KeyUpdate that asks nothing of the reader, and seals from then
 * on under the next traffic secret, from record 0, as OpenSSL derives it.
 */
static void
send_key_update(struct pair *p)
{
	uint8_t rec[64], next[32];

	send_rec(p, 22, "\x18\x00\x00\x01\x00", 5, rec);
	ossl_label_of(p->sec, "traffic upd", next, sizeof(next));
	memcpy(p->sec, next, sizeof(p->sec));
	tls_seal_free(p->s);
	p->s = ossl_sealer(p->sec, 0);
}

/* Reads all it can; the bytes, or -1 with why. */
static long
read_all(struct pair *p, uint8_t *buf, size_t len, char *why)
{
	long r, got = 0;

	while ((size_t)got < len &&
	       (r = tls_open_read(p->o, p->r, buf + got, len - (size_t)got, why,
				  128)) > 0)
		got += r;
	return got > 0 ? got : (why[0] ? -1 : 0);
}

/* Expects the next read to fail with a reason containing want. */
static void
expect_fail(struct pair *p, const char *want)
{
	uint8_t buf[64];
	char why[128] = "";

	CHECK(tls_open_read(p->o, p->r, buf, sizeof(buf), why, sizeof(why)) ==
	      -1);
	CHECK(strstr(why, want) != NULL);
	if (strstr(why, want) == NULL)
		fprintf(stderr, "  wanted \"%s\", got \"%s\"\n", want, why);
	/* For good: the same answer again. */
	why[0] = '\0';
	CHECK(tls_open_read(p->o, p->r, buf, sizeof(buf), why, sizeof(why)) ==
	      -1);
	CHECK(strstr(why, want) != NULL);
}

/* 1 MiB in full records, read in odd sizes: the spill path. */
static void
test_stream(void)
{
	static uint8_t data[1 << 20], got[1 << 20],
		rec[TLS_SEAL_PLAIN_MAX + 64];
	struct pair p;
	char why[128] = "";
	size_t sent = 0, have = 0;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7 + (i >> 12));
	pair_open(&p, 5);
	while (sent < sizeof(data) || have < sizeof(data)) {
		size_t n = sizeof(data) - sent < TLS_SEAL_PLAIN_MAX
				   ? sizeof(data) - sent
				   : TLS_SEAL_PLAIN_MAX;
		long r;

		if (n > 0) {
			send_rec(&p, 23, data + sent, n, rec);
			sent += n;
		}
		/* 5000-byte reads straddle every record boundary. */
		while (have < sent &&
		       (r = tls_open_read(p.o, p.r, got + have,
					  sizeof(got) - have < 5000
						  ? sizeof(got) - have
						  : 5000,
					  why, sizeof(why))) > 0)
			have += (size_t)r;
		CHECK(why[0] == '\0');
		if (why[0])
			break;
	}
	CHECK(have == sizeof(data) && memcmp(data, got, sizeof(data)) == 0);
	/* Nothing more: "want more", not an error. */
	CHECK(tls_open_read(p.o, p.r, got, 10, why, sizeof(why)) == 0);
	/* An empty record and a padded one pass; the padding goes. */
	send_rec(&p, 23, "", 0, rec);
	{
		uint8_t in[8] = {'a', 'b', 'c', 23, 0, 0, 0, 0};
		size_t len = tls_seal_record(p.s, 0, in, sizeof(in), rec);

		/* Sealed with type 0: the inner type is the 23 in the data. */
		CHECK(write(p.w, rec, len) == (ssize_t)len);
		CHECK(read_all(&p, got, 16, why) == 3 &&
		      memcmp(got, "abc", 3) == 0);
	}
	pair_close(&p);
}

/* A changed byte, a skipped record, a replayed one: bad record mac. */
static void
test_forgeries(void)
{
	uint8_t rec[256], rec2[256], buf[64];
	struct pair p;
	size_t len;
	char why[128] = "";

	pair_open(&p, 0);
	len = tls_seal_record(p.s, 23, "hello", 5, rec);
	rec[len - 3] ^= 1; /* the tag */
	CHECK(write(p.w, rec, len) == (ssize_t)len);
	expect_fail(&p, "bad record mac");
	pair_close(&p);

	pair_open(&p, 0);
	len = tls_seal_record(p.s, 23, "hello", 5, rec);
	rec[TLS_SEAL_HDR + 1] ^= 0x80; /* the ciphertext */
	CHECK(write(p.w, rec, len) == (ssize_t)len);
	expect_fail(&p, "bad record mac");
	pair_close(&p);

	/* Record 0 dropped: record 1 does not open as record 0. */
	pair_open(&p, 0);
	tls_seal_record(p.s, 23, "one", 3, rec);
	send_rec(&p, 23, "two", 3, rec2);
	expect_fail(&p, "bad record mac");
	pair_close(&p);

	/* Record 0 twice: the replay does not open as record 1. */
	pair_open(&p, 0);
	len = send_rec(&p, 23, "one", 3, rec);
	CHECK(read_all(&p, buf, 3, why) == 3 && memcmp(buf, "one", 3) == 0);
	CHECK(write(p.w, rec, len) == (ssize_t)len);
	expect_fail(&p, "bad record mac");
	pair_close(&p);
}

/*
 * A record is decrypted in the reader's buffer before its tag is checked
 * (tls_open.c, open_one()). One that fails the check counts for nothing
 * and leaves none of its plaintext there, nor in the spill a later read
 * would serve. Only its tag is changed, so all of its plaintext would be
 * there but for the wipe: once whole in the buffer, once mostly spilled.
 */
static void
test_tag_first(void)
{
	static uint8_t plain[TLS_SEAL_PLAIN_MAX], buf[TLS_SEAL_PLAIN_MAX + 64],
		rec[TLS_SEAL_PLAIN_MAX + 64];
	const size_t spaces[] = {sizeof(buf), 100};
	struct pair p;
	size_t len;

	memset(plain, 'P', sizeof(plain));
	for (size_t i = 0; i < sizeof(spaces) / sizeof(spaces[0]); i++) {
		char why[128] = "";

		pair_open(&p, 0);
		send_rec(&p, 23, "abc", 3, rec);
		len = tls_seal_record(p.s, 23, plain, sizeof(plain), rec);
		rec[len - 1] ^= 1; /* the tag's last byte */
		CHECK(write(p.w, rec, len) == (ssize_t)len);
		memset(buf, 0xee, sizeof(buf));
		/* The good record's 3 bytes; the failure waits for the next read. */
		CHECK(tls_open_read(p.o, p.r, buf, spaces[i], why,
				    sizeof(why)) == 3);
		CHECK(memcmp(buf, "abc", 3) == 0);
		CHECK(memchr(buf, 'P', sizeof(buf)) == NULL);
		expect_fail(&p, "bad record mac");
		pair_close(&p);
	}
}

/* Headers and lengths checked before any decryption. */
static void
test_headers(void)
{
	uint8_t rec[TLS_SEAL_PLAIN_MAX + 512];
	struct pair p;
	size_t len;

	pair_open(&p, 0);
	len = tls_seal_record(p.s, 23, "x", 1, rec);
	rec[0] = 22; /* a plaintext handshake record after the handshake */
	CHECK(write(p.w, rec, len) == (ssize_t)len);
	expect_fail(&p, "bad record header");
	pair_close(&p);

	pair_open(&p, 0);
	len = tls_seal_record(p.s, 23, "x", 1, rec);
	rec[2] = 1; /* version 3.1 */
	CHECK(write(p.w, rec, len) == (ssize_t)len);
	expect_fail(&p, "bad record header");
	pair_close(&p);

	pair_open(&p, 0);
	memcpy(rec, "\x17\x03\x03\x41\x01", 5); /* 16641 > 2^14 + 256 */
	CHECK(write(p.w, rec, 5) == 5);
	expect_fail(&p, "bad record length");
	pair_close(&p);

	pair_open(&p, 0);
	memcpy(rec, "\x17\x03\x03\x00\x10", 5); /* shorter than a tag + 1 */
	CHECK(write(p.w, rec, 5) == 5);
	expect_fail(&p, "bad record length");
	pair_close(&p);
}

/* What a record that authenticates may still not be. */
static void
test_types(void)
{
	uint8_t rec[256], zero[4] = {0};
	struct pair p;
	size_t len;

	pair_open(&p, 0);
	send_rec(&p, 21, "\x01\x00", 2, rec); /* close_notify */
	expect_fail(&p, "connection closed by peer");
	pair_close(&p);

	pair_open(&p, 0);
	send_rec(&p, 21, "\x02\x28", 2, rec); /* handshake_failure */
	expect_fail(&p, "the peer sent alert");
	pair_close(&p);

	pair_open(&p, 0);
	send_rec(&p, 22, "\x04\x00\x00\x01\x00", 5, rec); /* a "ticket" */
	expect_fail(&p, "not a key update");
	pair_close(&p);

	pair_open(&p, 0);
	len = tls_seal_record(p.s, 0, zero, sizeof(zero), rec);
	CHECK(write(p.w, rec, len) == (ssize_t)len);
	expect_fail(&p, "without a content type");
	pair_close(&p);

	pair_open(&p, 0);
	send_rec(&p, 20, "\x01", 1, rec); /* change_cipher_spec, encrypted */
	expect_fail(&p, "bad record type");
	pair_close(&p);
}

/*
 * The peer's key updates (RFC 8446 4.6.3): after a KeyUpdate that asks
 * nothing, records come under the next traffic secret from number 0,
 * which OpenSSL's "traffic upd" derivation gives the sealer here.
 */
static void
test_key_update(void)
{
	uint8_t rec[256], buf[64], next[32], next2[32];
	char why[128] = "";
	struct pair p;

	ossl_label("traffic upd", next, sizeof(next));
	ossl_label_of(next, "traffic upd", next2, sizeof(next2));
	pair_open(&p, 7);
	send_rec(&p, 23, "abc", 3, rec);
	send_rec(&p, 22, "\x18\x00\x00\x01\x00", 5, rec);
	tls_seal_free(p.s);
	p.s = ossl_sealer(next, 0);
	send_rec(&p, 23, "defg", 4, rec);
	send_rec(&p, 22, "\x18\x00\x00\x01\x00", 5, rec);
	tls_seal_free(p.s);
	p.s = ossl_sealer(next2, 0);
	send_rec(&p, 23, "hi", 2, rec);
	CHECK(read_all(&p, buf, sizeof(buf), why) == 9);
	CHECK(memcmp(buf, "abcdefghi", 9) == 0);
	CHECK(tls_open_updates(p.o) == 2);
	pair_close(&p);

	/* A record under the old key after the update. */
	pair_open(&p, 0);
	send_rec(&p, 22, "\x18\x00\x00\x01\x00", 5, rec);
	send_rec(&p, 23, "old", 3, rec);
	expect_fail(&p, "bad record mac");
	pair_close(&p);

	/* One that asks for ours, which this reader cannot send. */
	pair_open(&p, 0);
	send_rec(&p, 22, "\x18\x00\x00\x01\x01", 5, rec);
	expect_fail(&p, "asked for our key update");
	pair_close(&p);

	pair_open(&p, 0);
	send_rec(&p, 22, "\x18\x00\x00\x01\x02", 5, rec);
	expect_fail(&p, "bad key update");
	pair_close(&p);

	/* Not alone in its record, or a length that is not 1. */
	pair_open(&p, 0);
	send_rec(&p, 22, "\x18\x00\x00\x01\x00\x18", 6, rec);
	expect_fail(&p, "not a key update");
	pair_close(&p);

	pair_open(&p, 0);
	send_rec(&p, 22, "\x18\x00\x00\x02\x00\x00", 6, rec);
	expect_fail(&p, "not a key update");
	pair_close(&p);
}

/*
 * Empty records (application data of no bytes) open to nothing, so a
 * reader could open them forever. As OpenSSL 3.0 does (MAX_EMPTY_RECORDS),
 * 32 in a row pass and the 33rd fails the stream; a record with content
 * ends a run, a KeyUpdate too.
 */
static void
test_empty_records(void)
{
	uint8_t rec[256], buf[64];
	char why[128] = "";
	struct pair p;

	pair_open(&p, 0);
	for (int run = 0; run < 2; run++) {
		for (int i = 0; i < 32; i++)
			send_rec(&p, 23, "", 0, rec);
		send_rec(&p, 23, "x", 1, rec);
	}
	CHECK(read_all(&p, buf, sizeof(buf), why) == 2);
	CHECK(memcmp(buf, "xx", 2) == 0 && why[0] == '\0');
	pair_close(&p);

	/* The bytes before the 33rd come out first; then it fails. */
	pair_open(&p, 0);
	send_rec(&p, 23, "a", 1, rec);
	for (int i = 0; i < 33; i++)
		send_rec(&p, 23, "", 0, rec);
	send_rec(&p, 23, "b", 1, rec);
	CHECK(tls_open_read(p.o, p.r, buf, sizeof(buf), why, sizeof(why)) == 1);
	expect_fail(&p, "more than 32 empty records in a row");
	pair_close(&p);

	pair_open(&p, 0);
	for (int i = 0; i < 32; i++)
		send_rec(&p, 23, "", 0, rec);
	send_key_update(&p);
	for (int i = 0; i < 32; i++)
		send_rec(&p, 23, "", 0, rec);
	send_rec(&p, 23, "y", 1, rec);
	CHECK(read_all(&p, buf, sizeof(buf), why) == 1 && buf[0] == 'y');
	CHECK(tls_open_updates(p.o) == 1 && why[0] == '\0');
	pair_close(&p);
}

/*
 * KeyUpdates in a row: 32 pass, the 33rd fails, as BoringSSL counts them
 * (OpenSSL 3.0 does not). Application data ends a run; empty records do
 * not, or runs of 32 empty records, each ended by a KeyUpdate, would go
 * on for ever.
 */
static void
test_key_update_runs(void)
{
	uint8_t rec[256], buf[64];
	char why[128] = "";
	struct pair p;

	pair_open(&p, 3);
	for (int run = 0; run < 2; run++) {
		for (int i = 0; i < 32; i++)
			send_key_update(&p);
		send_rec(&p, 23, "x", 1, rec);
	}
	CHECK(read_all(&p, buf, sizeof(buf), why) == 2);
	CHECK(memcmp(buf, "xx", 2) == 0 && why[0] == '\0');
	CHECK(tls_open_updates(p.o) == 64);
	pair_close(&p);

	pair_open(&p, 0);
	send_rec(&p, 23, "a", 1, rec);
	for (int i = 0; i < 33; i++)
		send_key_update(&p);
	send_rec(&p, 23, "b", 1, rec);
	CHECK(tls_open_read(p.o, p.r, buf, sizeof(buf), why, sizeof(why)) == 1);
	expect_fail(&p, "more than 32 key updates with no data between");
	CHECK(tls_open_updates(p.o) == 32);
	pair_close(&p);

	/* A read after each run: the counts hold from read to read. */
	pair_open(&p, 0);
	for (int i = 0; i < 33; i++) {
		for (int e = 0; e < 32; e++)
			send_rec(&p, 23, "", 0, rec);
		send_key_update(&p);
		if (i < 32)
			CHECK(tls_open_read(p.o, p.r, buf, sizeof(buf), why,
					    sizeof(why)) == 0);
	}
	expect_fail(&p, "more than 32 key updates with no data between");
	pair_close(&p);
}

/* EOF inside a record, and between records. */
static void
test_eof(void)
{
	uint8_t rec[256];
	struct pair p;
	size_t len;

	pair_open(&p, 0);
	len = tls_seal_record(p.s, 23, "hello", 5, rec);
	CHECK(write(p.w, rec, len - 4) == (ssize_t)len - 4);
	shutdown(p.w, SHUT_WR);
	expect_fail(&p, "connection closed by peer");
	pair_close(&p);

	pair_open(&p, 0);
	shutdown(p.w, SHUT_WR);
	expect_fail(&p, "connection closed by peer");
	pair_close(&p);
}

/* Keys the sealer must decline: not TLS 1.3, not AES-GCM. */
static void
test_declined(void)
{
	struct tls12_crypto_info_aes_gcm_128 bad = info;

	bad.info.version = TLS_1_2_VERSION;
	CHECK(tls_seal_new(&bad) == NULL);
	bad = info;
	bad.info.cipher_type = TLS_CIPHER_CHACHA20_POLY1305;
	CHECK(tls_seal_new(&bad) == NULL);
	CHECK(tls_seal_new(NULL) == NULL);
}

int
main(void)
{
	for (size_t i = 0; i < sizeof(secret); i++)
		secret[i] = (uint8_t)(0xa5 ^ i * 13);
	test_stream();
	test_forgeries();
	test_tag_first();
	test_headers();
	test_types();
	test_key_update();
	test_empty_records();
	test_key_update_runs();
	test_eof();
	test_declined();
	return UNIT_DONE();
}

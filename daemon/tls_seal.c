/*
 * TLS 1.3 records sealed by the daemon (see tls.h, "sealing").
 *
 * OpenSSL 3.0 hands the keys of a connection's sending direction to its
 * write BIO when that BIO offers the kernel's TLS offload (kTLS): the
 * same key, IV and record sequence number the kernel would take, in the
 * kernel's own struct (linux/tls.h). From then on OpenSSL writes the
 * application's plaintext to the BIO straight from the caller's buffer,
 * without copying it into a record buffer of its own, and the BIO makes
 * the records. This kernel has no kTLS, so the batch BIO does what the
 * kernel would: it seals each write here into a TLS 1.3 record (RFC 8446,
 * 5.2) in its own buffer, the encryption and the copy in one pass.
 *
 * Only AES-GCM, the suites the daemon prefers; for anything else the BIO
 * declines the keys and OpenSSL goes on sealing by itself.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <linux/tls.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/ssl.h>

#include "daemon/log.h"
#include "daemon/tls.h"

struct tls_seal {
	EVP_CIPHER_CTX *ctx;
	uint8_t iv[12]; /* the write IV: salt, then the per-connection part */
	uint64_t seq;	/* the next record's sequence number */
};

/* HKDF-Expand-Label(secret, label, "", len), RFC 8446 7.1. */
int
tls_expand_label(const EVP_MD *md, const uint8_t *secret, size_t slen,
		 const char *label, uint8_t *out, size_t len)
{
	uint8_t info[4 + 6 + 16];
	size_t ll = strlen(label), n = 0;
	int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY, ok;
	EVP_KDF *kdf;
	EVP_KDF_CTX *k;
	OSSL_PARAM p[5];

	if (ll > 16 || len > 255)
		return -1;
	info[n++] = 0;
	info[n++] = (uint8_t)len;
	info[n++] = (uint8_t)(6 + ll);
	memcpy(info + n, "tls13 ", 6);
	n += 6;
	memcpy(info + n, label, ll);
	n += ll;
	info[n++] = 0; /* no context */
	if ((kdf = EVP_KDF_fetch(NULL, "HKDF", NULL)) == NULL)
		return -1;
	k = EVP_KDF_CTX_new(kdf);
	EVP_KDF_free(kdf);
	if (k == NULL)
		return -1;
	p[0] = OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode);
	p[1] = OSSL_PARAM_construct_utf8_string(
		OSSL_KDF_PARAM_DIGEST, (char *)EVP_MD_get0_name(md), 0);
	p[2] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY,
						 (void *)secret, slen);
	p[3] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, n);
	p[4] = OSSL_PARAM_construct_end();
	ok = EVP_KDF_derive(k, out, len, p);
	EVP_KDF_CTX_free(k);
	return ok ? 0 : -1;
}

/* A sealer for cipher with this key and IV, the next record number seq. */
static struct tls_seal *
seal_make(const EVP_CIPHER *cipher, const uint8_t *key, const uint8_t iv[12],
	  uint64_t seq)
{
	struct tls_seal *s = xcalloc(1, sizeof(*s));

	if ((s->ctx = EVP_CIPHER_CTX_new()) == NULL ||
	    !EVP_EncryptInit_ex(s->ctx, cipher, NULL, key, NULL)) {
		tls_seal_free(s);
		return NULL;
	}
	memcpy(s->iv, iv, sizeof(s->iv));
	s->seq = seq;
	return s;
}

struct tls_seal *
tls_seal_new(const void *info)
{
	const struct tls_crypto_info *ci = info;
	const struct tls12_crypto_info_aes_gcm_128 *g128 = info;
	const struct tls12_crypto_info_aes_gcm_256 *g256 = info;
	const EVP_CIPHER *cipher;
	const uint8_t *key, *salt, *iv, *rec;
	uint8_t fulliv[12];
	uint64_t seq = 0;

	if (ci == NULL || ci->version != TLS_1_3_VERSION)
		return NULL;
	if (ci->cipher_type == TLS_CIPHER_AES_GCM_128) {
		cipher = EVP_aes_128_gcm();
		key = g128->key, salt = g128->salt, iv = g128->iv;
		rec = g128->rec_seq;
	} else if (ci->cipher_type == TLS_CIPHER_AES_GCM_256) {
		cipher = EVP_aes_256_gcm();
		key = g256->key, salt = g256->salt, iv = g256->iv;
		rec = g256->rec_seq;
	} else {
		return NULL;
	}
	memcpy(fulliv, salt, 4);
	memcpy(fulliv + 4, iv, 8);
	for (int i = 0; i < 8; i++)
		seq = seq << 8 | rec[i];
	return seal_make(cipher, key, fulliv, seq);
}

const EVP_CIPHER *
tls_traffic_keys(const SSL_CIPHER *suite, const uint8_t *secret, size_t slen,
		 uint8_t key[32], uint8_t iv[12])
{
	const EVP_MD *md = SSL_CIPHER_get_handshake_digest(suite);
	int nid = SSL_CIPHER_get_cipher_nid(suite);
	const EVP_CIPHER *cipher = nid == NID_aes_128_gcm   ? EVP_aes_128_gcm()
				   : nid == NID_aes_256_gcm ? EVP_aes_256_gcm()
							    : NULL;
	int klen = cipher != NULL ? EVP_CIPHER_get_key_length(cipher) : 0;

	if (md == NULL || klen <= 0 || klen > 32 ||
	    slen != (size_t)EVP_MD_get_size(md) ||
	    tls_expand_label(md, secret, slen, "key", key, (size_t)klen) < 0 ||
	    tls_expand_label(md, secret, slen, "iv", iv, 12) < 0) {
		OPENSSL_cleanse(key, 32);
		return NULL;
	}
	return cipher;
}

struct tls_seal *
tls_seal_next(const SSL_CIPHER *suite, const uint8_t *secret, size_t slen)
{
	uint8_t key[32], iv[12];
	const EVP_CIPHER *cipher =
		tls_traffic_keys(suite, secret, slen, key, iv);
	struct tls_seal *s =
		cipher != NULL ? seal_make(cipher, key, iv, 0) : NULL;

	OPENSSL_cleanse(key, sizeof(key));
	OPENSSL_cleanse(iv, sizeof(iv));
	return s;
}

void
tls_seal_free(struct tls_seal *s)
{
	if (s == NULL)
		return;
	EVP_CIPHER_CTX_free(s->ctx);
	OPENSSL_cleanse(s, sizeof(*s));
	free(s);
}

uint64_t
tls_seal_records(const struct tls_seal *s)
{
	return s->seq;
}

void
tls_nonce(const uint8_t iv[12], uint64_t seq, uint8_t nonce[12])
{
	memcpy(nonce, iv, 12);
	for (int i = 0; i < 8; i++)
		nonce[4 + i] ^= (uint8_t)(seq >> (56 - 8 * i));
}

/*
 * One record: header (the AEAD's additional data), then the plaintext
 * and its content type encrypted, then the tag. The nonce is the IV with
 * the sequence number XORed into its last 8 bytes, so no two records
 * under one key share one: the count must never wrap.
 */
size_t
tls_seal_record(struct tls_seal *s, uint8_t type, const void *in, size_t n,
		uint8_t *out)
{
	size_t clen = n + 1 + TLS_SEAL_TAG;
	uint8_t nonce[12];
	int l;

	if (n > TLS_SEAL_PLAIN_MAX || s->seq == UINT64_MAX)
		return 0;
	out[0] = 23; /* application_data: every TLS 1.3 record looks so */
	out[1] = 3, out[2] = 3;
	out[3] = (uint8_t)(clen >> 8), out[4] = (uint8_t)clen;
	tls_nonce(s->iv, s->seq, nonce);
	if (!EVP_EncryptInit_ex(s->ctx, NULL, NULL, NULL, nonce) ||
	    !EVP_EncryptUpdate(s->ctx, NULL, &l, out, TLS_SEAL_HDR) ||
	    (n > 0 &&
	     (!EVP_EncryptUpdate(s->ctx, out + TLS_SEAL_HDR, &l, in, (int)n) ||
	      (size_t)l != n)) ||
	    !EVP_EncryptUpdate(s->ctx, out + TLS_SEAL_HDR + n, &l, &type, 1) ||
	    l != 1 ||
	    !EVP_EncryptFinal_ex(s->ctx, out + TLS_SEAL_HDR + n + 1, &l) ||
	    !EVP_CIPHER_CTX_ctrl(s->ctx, EVP_CTRL_GCM_GET_TAG, TLS_SEAL_TAG,
				 out + TLS_SEAL_HDR + n + 1))
		return 0;
	s->seq++;
	return TLS_SEAL_HDR + clen;
}

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
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "daemon/log.h"
#include "daemon/tls.h"

struct tls_seal {
	EVP_CIPHER_CTX *ctx;
	uint8_t iv[12]; /* the write IV: salt, then the per-connection part */
	uint64_t seq;	/* the next record's sequence number */
};

struct tls_seal *
tls_seal_new(const void *info)
{
	const struct tls_crypto_info *ci = info;
	const struct tls12_crypto_info_aes_gcm_128 *g128 = info;
	const struct tls12_crypto_info_aes_gcm_256 *g256 = info;
	const EVP_CIPHER *cipher;
	const uint8_t *key, *salt, *iv, *seq;
	struct tls_seal *s;

	if (ci == NULL || ci->version != TLS_1_3_VERSION)
		return NULL;
	if (ci->cipher_type == TLS_CIPHER_AES_GCM_128) {
		cipher = EVP_aes_128_gcm();
		key = g128->key, salt = g128->salt, iv = g128->iv;
		seq = g128->rec_seq;
	} else if (ci->cipher_type == TLS_CIPHER_AES_GCM_256) {
		cipher = EVP_aes_256_gcm();
		key = g256->key, salt = g256->salt, iv = g256->iv;
		seq = g256->rec_seq;
	} else {
		return NULL;
	}
	s = xcalloc(1, sizeof(*s));
	if ((s->ctx = EVP_CIPHER_CTX_new()) == NULL ||
	    !EVP_EncryptInit_ex(s->ctx, cipher, NULL, key, NULL)) {
		tls_seal_free(s);
		return NULL;
	}
	memcpy(s->iv, salt, 4);
	memcpy(s->iv + 4, iv, 8);
	for (int i = 0; i < 8; i++)
		s->seq = s->seq << 8 | seq[i];
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
	memcpy(nonce, s->iv, sizeof(nonce));
	for (int i = 0; i < 8; i++)
		nonce[4 + i] ^= (uint8_t)(s->seq >> (56 - 8 * i));
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

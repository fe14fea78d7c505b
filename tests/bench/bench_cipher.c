/*
 * The cipher's own cost, for the TLS rows of `make bench`: CPU seconds to
 * encrypt and to decrypt SIZE bytes (default 1 GiB) with the cipher the
 * daemons' TLS 1.3 lanes negotiate first (AES-128-GCM, daemon/tls.c), in
 * records of the TLS maximum (16 KiB), through OpenSSL's EVP interface:
 * what the lanes could not spend less on, whatever else they do.
 *
 *   bench_cipher [SIZE]
 *   prints "bytes=N record=16384 cipher=AES-128-GCM enc_cpu=E dec_cpu=D
 *   cpu_s_per_gib=C" (C: both directions, per GiB).
 *
 * The records cycle through 1 MiB of pseudo-random plaintext, each with
 * its own nonce; every decrypted record's tag is checked.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "tests/bench/bench.h"

#define RECORD 16384
#define NREC 64 /* 1 MiB of records, reused */
#define TAG 16

static unsigned char plain[NREC][RECORD], sealed[NREC][RECORD], tags[NREC][TAG],
	out[RECORD];
static const unsigned char key[16] = "uffdd bench key";

/* The nonce of record i: 12 bytes, as TLS 1.3 derives one a record. */
static void
nonce(unsigned char iv[12], uint64_t i)
{
	memset(iv, 0x5a, 12);
	for (int b = 0; b < 8; b++)
		iv[4 + b] ^= (unsigned char)(i >> (8 * (7 - b)));
}

/* Seals (enc) or opens one record; 0, or -1 on a bad tag. */
static int
one_record(EVP_CIPHER_CTX *c, const EVP_CIPHER *aes, int enc, uint64_t i)
{
	unsigned char iv[12];
	int n = 0, fin = 0;
	size_t r = i % NREC;

	nonce(iv, r);
	if (!EVP_CipherInit_ex(c, aes, NULL, key, iv, enc))
		return -1;
	if (enc) {
		EVP_CipherUpdate(c, sealed[r], &n, plain[r], RECORD);
		EVP_CipherFinal_ex(c, sealed[r] + n, &fin);
		EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TAG, tags[r]);
		return 0;
	}
	EVP_CipherUpdate(c, out, &n, sealed[r], RECORD);
	EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TAG, tags[r]);
	return EVP_CipherFinal_ex(c, out + n, &fin) > 0 ? 0 : -1;
}

/* CPU seconds to seal or open `bytes` worth of records. */
static double
run(EVP_CIPHER_CTX *c, const EVP_CIPHER *aes, int enc, uint64_t bytes)
{
	double t0 = cpu_s(RUSAGE_SELF);

	for (uint64_t i = 0; i < bytes / RECORD; i++)
		if (one_record(c, aes, enc, i) < 0) {
			fprintf(stderr,
				"bench_cipher: record %" PRIu64
				": tag does not match\n",
				i);
			exit(1);
		}
	return cpu_s(RUSAGE_SELF) - t0;
}

int
main(int argc, char **argv)
{
	uint64_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : 1ULL << 30;
	EVP_CIPHER *aes = EVP_CIPHER_fetch(NULL, "AES-128-GCM", NULL);
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	double enc, dec;

	if (aes == NULL || c == NULL || bytes < NREC * RECORD) {
		fprintf(stderr, "usage: bench_cipher [BYTES >= 1 MiB] "
				"(and OpenSSL's AES-128-GCM)\n");
		return 2;
	}
	srand(1);
	for (size_t r = 0; r < NREC; r++)
		for (size_t k = 0; k < RECORD; k++)
			plain[r][k] = (unsigned char)rand();
	/* Every record sealed once first, so that opening has its input. */
	run(c, aes, 1, NREC * RECORD);
	enc = run(c, aes, 1, bytes);
	dec = run(c, aes, 0, bytes);
	printf("bytes=%" PRIu64 " record=%d cipher=AES-128-GCM enc_cpu=%.3f "
	       "dec_cpu=%.3f cpu_s_per_gib=%.3f\n",
	       bytes, RECORD, enc, dec,
	       (enc + dec) / ((double)bytes / (1 << 30)));
	EVP_CIPHER_CTX_free(c);
	EVP_CIPHER_free(aes);
	return 0;
}

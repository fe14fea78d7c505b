/*
 * The daemon's TLS opener alone (daemon/tls_open.c), for changes to it:
 * CPU seconds for the reading thread to take SIZE bytes (default 1 GiB)
 * of full records (16 KiB, AES-128-GCM) out of a socketpair with
 * tls_open_read(), 256 KiB a call as a bulk lane's reader asks: the
 * receive, the decryption into the caller's buffer and the opener's own
 * checks. A second thread seals the records with daemon/tls_seal.c and
 * writes them; only the reader's CPU is counted.
 *
 *   bench_open [SIZE]
 *   prints "bytes=N record=16384 open_cpu=C cpu_s_per_gib=G".
 *
 * On a machine too busy for CPU times to compare two builds, count the
 * opener's instructions instead, which load does not change:
 *   valgrind --tool=callgrind --toggle-collect=tls_open_read \
 *       tests/bench/bench_open 67108864
 */
#include "config.h"

#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include "daemon/tls.h"
#include "tests/bench/bench.h"

static uint8_t secret[32];
static const SSL_CIPHER *suite;
static uint64_t nrec;
static int wfd;

/* Seals nrec records of TLS_SEAL_PLAIN_MAX bytes and writes them. */
static void *
writer(void *arg)
{
	static uint8_t plain[TLS_SEAL_PLAIN_MAX],
		rec[TLS_SEAL_PLAIN_MAX + TLS_SEAL_OVERHEAD];
	struct tls_seal *s = tls_seal_next(suite, secret, sizeof(secret));

	(void)arg;
	if (s == NULL) {
		fprintf(stderr, "bench_open: no sealer\n");
		exit(1);
	}
	for (size_t k = 0; k < sizeof(plain); k++)
		plain[k] = (uint8_t)(k * 7 + (k >> 9));
	for (uint64_t i = 0; i < nrec; i++) {
		size_t len = tls_seal_record(s, 23, plain, sizeof(plain), rec);

		for (size_t off = 0; off < len;) {
			ssize_t w = write(wfd, rec + off, len - off);

			if (w <= 0) {
				perror("bench_open: write");
				exit(1);
			}
			off += (size_t)w;
		}
	}
	tls_seal_free(s);
	return NULL;
}

int
main(int argc, char **argv)
{
	static uint8_t buf[256 << 10];
	uint64_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : 1ULL << 30;
	uint64_t got = 0;
	SSL_CTX *ctx = SSL_CTX_new(TLS_method());
	SSL *ssl = ctx != NULL ? SSL_new(ctx) : NULL;
	struct tls_open *o;
	pthread_t th;
	char why[128];
	double t0, cpu;
	int sv[2];

	nrec = bytes / TLS_SEAL_PLAIN_MAX;
	if (ssl == NULL || nrec == 0) {
		fprintf(stderr, "usage: bench_open [BYTES >= 16 KiB]\n");
		return 2;
	}
	for (size_t i = 0; i < sizeof(secret); i++)
		secret[i] = (uint8_t)(0xa5 ^ i * 13);
	suite = SSL_CIPHER_find(ssl, (const unsigned char *)"\x13\x01");
	o = tls_open_new(suite, secret, sizeof(secret), 0);
	if (o == NULL || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0 ||
	    fcntl(sv[1], F_SETFL, O_NONBLOCK) < 0) {
		fprintf(stderr, "bench_open: set-up failed\n");
		return 1;
	}
	wfd = sv[0];
	if (pthread_create(&th, NULL, writer, NULL) != 0)
		return 1;
	t0 = cpu_s(RUSAGE_THREAD);
	while (got < nrec * TLS_SEAL_PLAIN_MAX) {
		long r = tls_open_read(o, sv[1], buf, sizeof(buf), why,
				       sizeof(why));

		if (r < 0) {
			fprintf(stderr, "bench_open: %s\n", why);
			return 1;
		}
		if (r == 0) {
			struct pollfd p = {.fd = sv[1], .events = POLLIN};

			poll(&p, 1, -1);
		}
		got += (uint64_t)r;
	}
	cpu = cpu_s(RUSAGE_THREAD) - t0;
	pthread_join(th, NULL);
	printf("bytes=%" PRIu64 " record=%d open_cpu=%.3f cpu_s_per_gib=%.3f\n",
	       got, TLS_SEAL_PLAIN_MAX, cpu, cpu / ((double)got / (1 << 30)));
	tls_open_free(o);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	close(sv[0]);
	close(sv[1]);
	return 0;
}

/*
 * The TLS files read into a context (tls.h, tls_init_fds): the CA
 * bundle, our certificate chain and our key, each from a descriptor. The
 * privileged part opens them for a confined engine's reload (it may not
 * read a key only root may), so the engine never opens them by path
 * then; at start-up the engine opens them itself, while still root.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>

#include "daemon/log.h"
#include "daemon/tls_files.h"

/* At most this much of one file is read: a CA bundle, a chain, a key. */
#define PEM_MAX (4u << 20)

/* The file at fd (named what), whole, in a memory BIO; NULL: said. */
static BIO *
pem_of(int fd, const char *what)
{
	BIO *b = BIO_new(BIO_s_secmem()); /* cleared when freed */
	char buf[16384];
	off_t at = 0;
	ssize_t n;

	if (b == NULL) {
		log_warnx("TLS: %s: no memory", what);
		return NULL;
	}
	while ((n = pread(fd, buf, sizeof(buf), at)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n > 0 && (size_t)at + (size_t)n > PEM_MAX)
			errno = EFBIG;
		if (n < 0 || (size_t)at + (size_t)n > PEM_MAX ||
		    BIO_write(b, buf, (int)n) != (int)n) {
			log_warnx("TLS: %s: %s", what,
				  n < 0 || errno == EFBIG ? strerror(errno)
							  : "no memory");
			OPENSSL_cleanse(buf, sizeof(buf));
			BIO_free(b);
			return NULL;
		}
		at += n;
	}
	OPENSSL_cleanse(buf, sizeof(buf));
	return b;
}

/* Logs OpenSSL's reason under what; -1. */
static int
pem_fail(const char *what, const char *why)
{
	unsigned long e = ERR_get_error();
	char buf[256];

	ERR_error_string_n(e, buf, sizeof(buf));
	ERR_clear_error();
	log_warnx("TLS: %s: %s", what, e ? buf : why);
	return -1;
}

/*
 * After a run of PEM reads: the file's end (no further block), or one that
 * does not parse (-1).
 */
static int
pem_end(const char *what)
{
	unsigned long e = ERR_peek_last_error();

	if (e == 0 || (ERR_GET_LIB(e) == ERR_LIB_PEM &&
		       ERR_GET_REASON(e) == PEM_R_NO_START_LINE)) {
		ERR_clear_error();
		return 0;
	}
	return pem_fail(what, "does not parse");
}

/* No pass phrase: a daemon has nobody to ask. */
static int
no_passphrase(char *buf, int size, int rwflag, void *u)
{
	(void)buf, (void)size, (void)rwflag, (void)u;
	return -1;
}

/* Every certificate of the bundle trusted, and named to clients. */
static int
load_ca(SSL_CTX *c, BIO *b, const char *what)
{
	STACK_OF(X509_NAME) *names = sk_X509_NAME_new_null();
	X509_STORE *st = SSL_CTX_get_cert_store(c);
	X509 *x;
	int n = 0;

	if (names == NULL)
		return pem_fail(what, "no memory");
	while ((x = PEM_read_bio_X509(b, NULL, no_passphrase, NULL)) != NULL) {
		X509_NAME *nm = X509_NAME_dup(X509_get_subject_name(x));
		int ok = nm != NULL && X509_STORE_add_cert(st, x) &&
			 sk_X509_NAME_push(names, nm) > 0;

		X509_free(x);
		if (!ok) {
			X509_NAME_free(nm);
			sk_X509_NAME_pop_free(names, X509_NAME_free);
			return pem_fail(what, "cannot be trusted");
		}
		n++;
	}
	if (pem_end(what) < 0 || n == 0) {
		sk_X509_NAME_pop_free(names, X509_NAME_free);
		return n == 0 ? pem_fail(what, "no certificate in it") : -1;
	}
	SSL_CTX_set_client_CA_list(c, names);
	return 0;
}

/* Our certificate, then the chain that follows it in the file. */
static int
load_chain(SSL_CTX *c, BIO *b, const char *what)
{
	X509 *x = PEM_read_bio_X509_AUX(b, NULL, no_passphrase, NULL);
	int ok = x != NULL && SSL_CTX_use_certificate(c, x);

	X509_free(x);
	if (!ok)
		return pem_fail(what, "no certificate in it");
	while ((x = PEM_read_bio_X509(b, NULL, no_passphrase, NULL)) != NULL)
		if (!SSL_CTX_add0_chain_cert(c, x)) {
			X509_free(x);
			return pem_fail(what, "its chain");
		}
	return pem_end(what);
}

static int
load_key(SSL_CTX *c, BIO *b, const char *what)
{
	EVP_PKEY *k = PEM_read_bio_PrivateKey(b, NULL, no_passphrase, NULL);
	int ok = k != NULL && SSL_CTX_use_PrivateKey(c, k);

	EVP_PKEY_free(k);
	return ok ? 0 : pem_fail(what, "no key in it");
}

int
tls_files_load(SSL_CTX *c, const struct tls_files *f)
{
	static int (*const load[3])(SSL_CTX *, BIO *, const char *) = {
		load_ca, load_chain, load_key};
	const int fds[3] = {f->ca_fd, f->cert_fd, f->key_fd};
	const char *names[3] = {f->ca, f->cert, f->key};

	for (int i = 0; i < 3; i++) {
		BIO *b = pem_of(fds[i], names[i]);
		int rc = b != NULL ? load[i](c, b, names[i]) : -1;

		BIO_free(b); /* a memory BIO: its bytes are freed with it */
		if (rc < 0)
			return -1;
	}
	return 0;
}

int
tls_files_open(struct tls_files *f, const char *ca, const char *cert,
	       const char *key)
{
	const char *paths[3] = {ca, cert, key};
	int *fds[3] = {&f->ca_fd, &f->cert_fd, &f->key_fd};

	*f = (struct tls_files){ca, cert, key, -1, -1, -1};
	if (ca == NULL || cert == NULL || key == NULL) {
		log_warnx("TLS needs --ca, --cert and --key (or --insecure "
			  "for plaintext on loopback)");
		return -1;
	}
	for (int i = 0; i < 3; i++)
		if ((*fds[i] = open(paths[i],
				    O_RDONLY | O_CLOEXEC | O_NOCTTY)) < 0) {
			log_warnx("TLS: %s: %s", paths[i], strerror(errno));
			tls_files_close(f);
			return -1;
		}
	return 0;
}

void
tls_files_close(struct tls_files *f)
{
	int *fds[3] = {&f->ca_fd, &f->cert_fd, &f->key_fd};

	for (int i = 0; i < 3; i++)
		if (*fds[i] >= 0) {
			close(*fds[i]);
			*fds[i] = -1;
		}
}

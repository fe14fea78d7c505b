/*
 * The TLS files, each by its descriptor (named for the log), and their
 * reading into a context (tls_files.c, for tls.c).
 */
#ifndef UFFDD_TLS_FILES_H
#define UFFDD_TLS_FILES_H

struct tls_files {
	const char *ca, *cert, *key;
	int ca_fd, cert_fd, key_fd;
};

struct ssl_ctx_st;
/* The CA bundle, our chain and our key put in c: 0, or -1 said. */
int tls_files_load(struct ssl_ctx_st *c, const struct tls_files *f);
/*
 * Opens the three files (all three named, or -1 said) into f: the same
 * descriptors can then be checked and handed on, never opened again.
 */
int tls_files_open(struct tls_files *f, const char *ca, const char *cert,
		   const char *key);
/* Closes those of f's descriptors that are open. */
void tls_files_close(struct tls_files *f);

#endif

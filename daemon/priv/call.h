/*
 * An engine's request being served (serve.c), as the operations served in
 * files of their own (dsetup.c) see it.
 */
#ifndef UFFDD_PRIV_CALL_H
#define UFFDD_PRIV_CALL_H

#include <stddef.h>

struct grant;
struct imsg;
struct privop_hdr;

/* What it asked, and the answer taking shape. */
struct call {
	const struct privop_hdr *h;
	const void *req;
	size_t len;
	struct grant *g;
	struct imsg *m;
	int fd, fd2;	 /* descriptors the answer carries, or -1 */
	const void *out; /* the answer's struct, outlen bytes */
	size_t outlen;
};

#endif

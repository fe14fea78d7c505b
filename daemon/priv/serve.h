/*
 * The engine's requests for what needs privilege (privop.h), served by the
 * privileged part: each names a grant (grant.h), and is checked against
 * it before anything is done.
 */
#ifndef UFFDD_PRIV_SERVE_H
#define UFFDD_PRIV_SERVE_H

#include <stddef.h>

struct grant;
struct imsg;
struct privop_hdr;

/*
 * A request being served: what it asked, and the answer taking shape
 * (for the operations served in files of their own: dsetup.h).
 */
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

/* Threads an injection gave up on are let go once they stop (a timer). */
void serve_reap_later(void);

/*
 * Answers every request waiting on the engine's rpc socket: 1, or 0 at
 * its end of file (the engine is gone).
 */
int serve_requests(int sock);

#endif

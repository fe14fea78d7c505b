/*
 * The engine's privileged requests, served (serve.h). Each names a grant;
 * nothing is done for one that names none, nor on a grant's process that
 * is not the one checked any more (procref.h). The engine is not trusted:
 * every request is checked whole, and each operation against what the
 * grant allows.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

#include "daemon/imsg.h"
#include "daemon/log.h"
#include "daemon/privop.h"
#include "daemon/priv/grant.h"
#include "daemon/priv/serve.h"

/* A request being served: what it asked, and the answer taking shape. */
struct call {
	const struct privop_hdr *h;
	const void *req;
	size_t len;
	struct grant *g;
	struct imsg *m;
};

/* SIGSTOP, SIGCONT, SIGKILL of the grant's process, through its pidfd. */
static int
do_signal(struct call *c)
{
	const struct privop_signal *r = c->req;

	if (c->len != sizeof(*r))
		return EBADMSG;
	if (r->sig != SIGSTOP && r->sig != SIGCONT && r->sig != SIGKILL)
		return EPERM;
	if (c->g->t.pidfd < 0)
		return ESRCH;
	return procref_signal(&c->g->t, r->sig) == 0 ? 0 : errno;
}

/* The operations, by type: each answers an errno value (0: done). */
static int (*const ops[])(struct call *) = {
	[PRIVOP_SIGNAL] = do_signal,
};

static void
serve_one(int sock, struct imsg *m)
{
	struct call c = {.m = m};
	int err;

	if (m->h.type != PRIVOP_REQUEST || m->h.len < sizeof(*c.h)) {
		err = EBADMSG;
	} else {
		c.h = (const void *)m->data;
		c.req = m->data + sizeof(*c.h);
		c.len = m->h.len - sizeof(*c.h);
		if (c.h->type >= sizeof(ops) / sizeof(ops[0]) ||
		    ops[c.h->type] == NULL)
			err = EOPNOTSUPP;
		else if ((c.g = grant_find(c.h->grant)) == NULL || c.g->dropped)
			err = ESRCH;
		else
			err = ops[c.h->type](&c);
	}
	imsg_send(sock, PRIVOP_REPLY, m->h.id, err, NULL, 0, NULL, 0);
}

int
serve_requests(int sock)
{
	struct imsg m;
	int r;

	for (int i = 0; i < 64; i++) {
		if ((r = imsg_recv(sock, &m)) < 0 && errno == EBADMSG) {
			log_warnx("engine: a request that does not hold "
				  "together: refused");
			continue;
		}
		if (r <= 0)
			return r == 0 ? 0 : 1;
		serve_one(sock, &m);
		imsg_clear(&m);
	}
	return 1;
}

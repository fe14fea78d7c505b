/*
 * Peer connections between daemons: listening, connecting, address policy
 * (peer.c). An accepted connection's first frame goes to the source role.
 */
#ifndef UFFDD_PEER_H
#define UFFDD_PEER_H

#include <stddef.h>

#include "daemon/conn.h"

/* Listens on each HOST:PORT of a comma-separated list. */
int peer_listen(const char *list);
void peer_close_listeners(void);
/*
 * The source of an attach --image, as its hostport: this daemon's own
 * source role, reached over a socket pair (peer_connect()).
 */
#define PEER_LOCAL "local-image"
/*
 * Starts a connection to hostport (or PEER_LOCAL), whose certificate must have the SHA-256
 * pin if one is given (tls.h); frames and errors (including a refused
 * connect) arrive through the callbacks. NULL with err filled on bad input.
 */
struct conn *peer_connect(const char *hostport, const char *pin,
			  const char *name, conn_frame_cb, conn_close_cb,
			  void *arg, char *err, size_t errlen);
/* The demand lane: TCP_NODELAY, and frames written in the call (conn.h). */
void peer_set_nodelay(struct conn *);
/*
 * Bytes sent on c and not acknowledged for secs seconds (0: the kernel's
 * default, many minutes) close it: how a sender notices a peer that went
 * silent when nothing it reads would tell it.
 */
void peer_set_user_timeout(struct conn *, unsigned secs);

#endif

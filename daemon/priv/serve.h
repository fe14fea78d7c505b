/*
 * The engine's requests for what needs privilege (privop.h), served by the
 * privileged part: each names a grant (grant.h), and is checked against
 * it before anything is done.
 */
#ifndef UFFDD_PRIV_SERVE_H
#define UFFDD_PRIV_SERVE_H

/*
 * Answers every request waiting on the engine's rpc socket: 1, or 0 at
 * its end of file (the engine is gone).
 */
int serve_requests(int sock);

#endif

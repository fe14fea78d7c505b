/*
 * The control socket, in the privileged part (docs/privsep.md): every
 * request of uffd-client is read here, checked (authz.h) and, when the
 * caller may make it, forwarded to the engine with the grant it opened
 * (grant.h); the engine's replies are written back to the client.
 */
#ifndef UFFDD_PRIV_CTLSOCK_H
#define UFFDD_PRIV_CTLSOCK_H

#include <stdint.h>
#include <sys/types.h>

struct imsg;

int ctlsock_listen(const char *path);
/* Applies conf.control_mode and conf.control_gid to the socket. */
int ctlsock_apply_mode(void);
void ctlsock_close(void);
/* A message of the engine about control clients (ctlmsg.h). */
void ctlsock_engine_msg(struct imsg *);
/*
 * The engine (pid) is (re)started on socket sock: requests go there (-1:
 * it is gone). No request may name the engine's process.
 */
void ctlsock_engine(int sock, pid_t pid);

#endif

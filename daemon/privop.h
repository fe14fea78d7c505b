/*
 * What the engine asks of the privileged part (docs/privsep.md): every
 * operation that needs privilege, on a process named by its grant (the
 * procref's grant), never by a pid. A request is answered before the
 * engine goes on.
 */
#ifndef UFFDD_PRIVOP_H
#define UFFDD_PRIVOP_H

#include <stdint.h>

enum privop_type {
	PRIVOP_REPLY = 1, /* privileged part -> engine: err, payload, fds */
};

/* The engine's end of the rpc socket pair. */
void privop_init(int sock);
void privop_close(void);

#endif

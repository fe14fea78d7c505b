/*
 * The engine's side of privileged operations (privop.h): a request to the
 * privileged part, answered before the engine goes on.
 */
#include "config.h"

#include <unistd.h>

#include "daemon/privop.h"

static int sock = -1;

void
privop_init(int fd)
{
	sock = fd;
}

void
privop_close(void)
{
	if (sock >= 0)
		close(sock);
	sock = -1;
}

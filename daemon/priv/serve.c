/* The engine's privileged requests, served (serve.h). */
#include "config.h"

#include <errno.h>

#include "daemon/imsg.h"
#include "daemon/log.h"
#include "daemon/privop.h"
#include "daemon/priv/grant.h"
#include "daemon/priv/serve.h"

int
serve_requests(int sock)
{
	struct imsg m;
	int r;

	for (int i = 0; i < 64; i++) {
		if ((r = imsg_recv(sock, &m)) < 0 && errno == EBADMSG) {
			log_warnx("engine: a request that does not hold "
				  "together: refused");
			imsg_send(sock, PRIVOP_REPLY, 0, EBADMSG, NULL, 0, NULL,
				  0);
			continue;
		}
		if (r <= 0)
			return r == 0 ? 0 : 1;
		imsg_send(sock, PRIVOP_REPLY, m.h.id, EOPNOTSUPP, NULL, 0, NULL,
			  0);
		imsg_clear(&m);
	}
	return 1;
}

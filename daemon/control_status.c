/* STATUS, in the engine: the migrations the caller may see (control.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/control.h"
#include "daemon/log.h"
#include "daemon/migration.h"
#include "daemon/role.h"

static void
status(uint64_t serial, const Uffdd__StatusRequest *req)
{
	Uffdd__StatusReply rep = UFFDD__STATUS_REPLY__INIT;
	Uffdd__MigrationStatus *st, **ptrs;
	Uffdd__Range **lbufs, ***lptrs;
	Uffdd__ThreadBlock **tbufs, ***tptrs;
	struct migration *m;
	size_t n = 0, i = 0;

	TAILQ_FOREACH (m, &migrations, link)
		n++;
	st = xcalloc(n, sizeof(*st));
	ptrs = xcalloc(n, sizeof(*ptrs));
	lbufs = xcalloc(n, sizeof(*lbufs));
	lptrs = xcalloc(n, sizeof(*lptrs));
	tbufs = xcalloc(n, sizeof(*tbufs));
	tptrs = xcalloc(n, sizeof(*tptrs));
	TAILQ_FOREACH (m, &migrations, link) {
		if (req->id[0] && strcmp(req->id, m->id) != 0)
			continue;
		/* IDs are credentials: only for who may touch the process. */
		if (!control_may_see(m))
			continue;
		uffdd__migration_status__init(&st[i]);
		migration_status(m, &st[i]);
		st[i].n_lost = migration_lost_ranges(m, &lbufs[i], &lptrs[i]);
		st[i].lost = lptrs[i];
		st[i].n_threads = migration_threads(m, &tbufs[i], &tptrs[i]);
		st[i].threads = tptrs[i];
		/* The working set goes to who asks for this one migration. */
		if (req->id[0] && m->ws) {
			st[i].n_working_set = m->ws->n;
			st[i].working_set = m->ws->keys;
		}
		/* None recorded (or lost in a restart): nothing to wait for. */
		st[i].working_set_closed = migration_ws_closed(m);
		ptrs[i] = &st[i];
		i++;
	}
	if (req->id[0] && i == 0) {
		control_reply_error(serial, ERR_UNKNOWN_ID,
				    "unknown migration ID %s", log_id(req->id));
	} else {
		rep.n_migrations = i;
		rep.migrations = ptrs;
		static char *feat[] = {FEATURE_PRECOPY, FEATURE_DEFERRED};

		rep.n_features = 2;
		rep.features = feat;
		control_reply(serial, FRAME_CTL_STATUS_REPLY, &rep.base);
	}
	for (size_t k = 0; k < i; k++) {
		free(lbufs[k]);
		free(lptrs[k]);
		free(tbufs[k]);
		free(tptrs[k]);
	}
	free(lbufs);
	free(lptrs);
	free(tbufs);
	free(tptrs);
	free(ptrs);
	free(st);
}

static void
status_request(uint64_t serial, const struct authz_caller *who,
	       struct procref *t, const ProtobufCMessage *msg)
{
	status(serial, (const Uffdd__StatusRequest *)msg);
}

static const struct role_request status_ops = {
	.type = FRAME_CTL_STATUS,
	.verb = "status",
	.request = status_request,
};

void
control_status_register(void)
{
	role_register_request(&status_ops);
}

/*
 * STATUS, in the engine: the migrations the caller may see; and METRICS,
 * the daemon's counts (control.h).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/control.h"
#include "daemon/log.h"
#include "daemon/metrics_text.h"
#include "daemon/migration.h"
#include "daemon/role.h"
#include "daemon/wptrack.h"

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
		char *feat[4];

		rep.features = feat;
		feat[rep.n_features++] = FEATURE_PRECOPY;
		feat[rep.n_features++] = FEATURE_PRECOPY_TRACK;
		feat[rep.n_features++] = FEATURE_DEFERRED;
		/* Only where this kernel can (wptrack.h). */
		if (wptrack_mode() == WPTRACK_ASYNC)
			feat[rep.n_features++] = FEATURE_PRECOPY_SHARED;
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

/* METRICS: the text uffdd --metrics serves, one line a string. */
static void
metrics(uint64_t serial)
{
	Uffdd__MetricsReply rep = UFFDD__METRICS_REPLY__INIT;
	size_t len, n = 0;
	char *text = metrics_text(1, &len), *p, *save = NULL;

	for (size_t i = 0; i < len; i++)
		n += text[i] == '\n';
	rep.lines = xcalloc(n + 1, sizeof(*rep.lines));
	for (p = strtok_r(text, "\n", &save); p != NULL;
	     p = strtok_r(NULL, "\n", &save))
		rep.lines[rep.n_lines++] = p;
	control_reply(serial, FRAME_CTL_METRICS_REPLY, &rep.base);
	free(rep.lines);
	free(text);
}

static void
status_request(uint64_t serial, const struct authz_caller *who,
	       struct procref *t, const ProtobufCMessage *msg)
{
	status(serial, (const Uffdd__StatusRequest *)msg);
}

static void
metrics_request(uint64_t serial, const struct authz_caller *who,
		struct procref *t, const ProtobufCMessage *msg)
{
	metrics(serial);
}

static const struct role_request status_ops = {
	.type = FRAME_CTL_STATUS,
	.verb = "status",
	.request = status_request,
};

static const struct role_request metrics_ops = {
	.type = FRAME_CTL_METRICS,
	.verb = "metrics",
	.request = metrics_request,
};

void
control_status_register(void)
{
	role_register_request(&status_ops);
	role_register_request(&metrics_ops);
}

/*
 * libFuzzer target: the source role's peer-message handlers (daemon/source/)
 * as a destination reaches them. A real child process of known contents
 * (fuzz_role.h) is exported with the daemon's own code, which freezes it and
 * classifies its pages; each input is then what a destination sends on a
 * demand lane (a socketpair in place of TCP), through source_hello() and the
 * lane's handler. Every page the source answers with is checked: inside the
 * region table, and byte for byte what the target holds.
 *
 * Input: one flag byte, then the demand lane's bytes.
 *   bit 0: the input brings its own HELLO (else one with the real ID goes
 *          first); bit 1: that HELLO resumes; bit 2: a bulk lane follows.
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/bufferevent.h>

#include "daemon/log.h"
#include "daemon/conn.h"
#include "daemon/migration.h"
#include "daemon/loop.h"
#include "daemon/source.h"
#include "tests/fuzz/fuzz_role.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static pid_t target;
static struct migration *mig;

/* What peer.c does with a new connection: HELLO first, to the role. */
static void
first_frame(struct conn *c, const struct frame_hdr *h, ProtobufCMessage *msg,
	    void *arg)
{
	(void)arg;
	if (h->type != FRAME_HELLO) {
		conn_send_error(c, ERR_PROTOCOL, "expected HELLO");
		conn_finish(c);
		return;
	}
	source_hello(c, (const Uffdd__Hello *)msg);
}

static void
first_close(struct conn *c, const char *why, void *arg)
{
	(void)why, (void)arg;
	conn_free(c);
}

/* A lane to the source: our end in l, the daemon's end to the role. */
static void
open_lane(struct fz_lane *l,
	  void (*on_frame)(const struct frame_hdr *, ProtobufCMessage *,
			   const uint8_t *))
{
	struct bufferevent *bev;
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 ||
	    evutil_make_socket_nonblocking(sv[1]) < 0)
		abort();
	bev = bufferevent_socket_new(base, sv[1], BEV_OPT_CLOSE_ON_FREE);
	if (bev == NULL)
		abort();
	conn_new(base, bev, "fuzz destination", first_frame, first_close, NULL);
	memset(l, 0, sizeof(*l));
	l->fd = sv[0];
	l->on_frame = on_frame;
}

/* The oracle: a page outside the table, or with other bytes, aborts. */
static void
check_frame(const struct frame_hdr *h, ProtobufCMessage *msg,
	    const uint8_t *data)
{
	static uint8_t want[FZ_PAGE];
	static const uint8_t zero[FZ_PAGE];
	const Uffdd__PageData *pd = (const Uffdd__PageData *)msg;
	uint64_t npages;

	if (h->type == FRAME_REGIONS) {
		const Uffdd__RegionTable *t = (const Uffdd__RegionTable *)msg;

		if (t->n_regions != 2 ||
		    t->regions[0]->start != FZ_ANON_START ||
		    t->regions[1]->start != FZ_SHM_START) {
			dprintf(fz_err, "fuzz: region table changed\n");
			abort();
		}
		return;
	}
	if (h->type != FRAME_PAGE_DATA)
		return;
	npages = pd->region == 0 ? FZ_ANON_PAGES : FZ_SHM_PAGES;
	if (pd->region > 1 || pd->npages == 0 || pd->page >= npages ||
	    pd->npages > npages - pd->page ||
	    h->data_len != (pd->zero ? 0 : (uint64_t)pd->npages * FZ_PAGE)) {
		dprintf(fz_err,
			"fuzz: source sent region %u pages %llu+%u (%u "
			"bytes) outside its table\n",
			pd->region, (unsigned long long)pd->page, pd->npages,
			h->data_len);
		abort();
	}
	for (uint64_t i = 0; i < pd->npages; i++) {
		uint64_t p = pd->page + i;
		const uint8_t *have = pd->zero ? zero : data + i * FZ_PAGE;

		if (fz_has_data(pd->region, p))
			fz_fill(pd->region, p, want);
		else
			memset(want, 0, sizeof(want));
		if (memcmp(have, want, FZ_PAGE) != 0) {
			dprintf(fz_err,
				"fuzz: source sent wrong bytes for region %u "
				"page %llu%s\n",
				pd->region, (unsigned long long)p,
				pd->zero ? " (as a zero page)" : "");
			abort();
		}
	}
}

/* Exports the target again when the last migration of it has ended. */
static void export(void)
{
	Uffdd__ExportRequest req = UFFDD__EXPORT_REQUEST__INIT;
	Uffdd__Range r = UFFDD__RANGE__INIT, *rp = &r;

	if (mig != NULL && mig->state != MIG_COMPLETE &&
	    mig->state != MIG_FAILED)
		return;
	migration_free_all(); /* records only: released and reaped */
	r.start = FZ_ANON_START;
	r.end = FZ_END;
	req.pid = target;
	req.n_ranges = 1;
	req.ranges = &rp;
	req.keep_source = 1; /* the same process serves the next export */
	fz_reply_id[0] = '\0';
	fz_export(&req);
	if ((mig = migration_find(fz_reply_id, ROLE_SOURCE)) == NULL) {
		dprintf(fz_err, "fuzz: export failed: %s\n", fz_reply_err);
		abort();
	}
}

/* Our HELLO for a lane, with the migration's real ID. */
static uint8_t *
hello(int lane, int resume, size_t *len)
{
	Uffdd__Hello h = UFFDD__HELLO__INIT;

	h.version = UFFDD_PROTO_VERSION;
	h.lane = lane;
	h.resume = resume;
	h.migration_id = mig->id;
	return frame_pack(FRAME_HELLO, &h.base, 0, len);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_lane lanes[2];
	uint8_t *out, *hb = NULL;
	size_t hlen = 0;
	int flags;

	if (base == NULL) {
		fz_setup();
		target = fz_spawn_target(1);
	}
	if (size < 1)
		return 0;
	export();
	flags = data[0];
	if (!(flags & 1))
		hb = hello(UFFDD__LANE__LANE_DEMAND, (flags & 2) != 0, &hlen);
	out = malloc(hlen + size - 1);
	if (out == NULL)
		abort();
	if (hlen)
		memcpy(out, hb, hlen);
	memcpy(out + hlen, data + 1, size - 1);
	free(hb);
	open_lane(&lanes[0], check_frame);
	lanes[0].out = out;
	lanes[0].n = hlen + size - 1;
	fz_pump(lanes, 1, NULL, NULL);
	if (flags & 4) {
		open_lane(&lanes[1], check_frame);
		lanes[1].out = hb = hello(UFFDD__LANE__LANE_BULK, 0, &hlen);
		lanes[1].n = hlen;
		fz_pump(lanes, 2, NULL, NULL);
		fz_lane_close(&lanes[1]);
		free(hb);
	}
	fz_lane_close(&lanes[0]);
	fz_pump(NULL, 0, NULL, NULL); /* the source sees the lanes go */
	free(out);
	return 0;
}

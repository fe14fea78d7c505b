/*
 * libFuzzer target: the destination role's peer-message handlers
 * (daemon/dest/) as a source reaches them. Each input is an attach, with
 * the daemon's own code, to a real child process (fuzz_role.h): the daemon
 * connects to us over loopback TCP, and the input plays the source: HELLO,
 * the region table (which attach matches against the target, then takes a
 * real userfaultfd in it by injection and registers the regions), PAGE_DATA,
 * zero runs, ERROR and the rest, installed with real UFFDIO_COPY and
 * ZEROPAGE into the target. What follows FZ_BULK_MARK in the input goes on
 * the bulk lane once the daemon opens it.
 *
 * Whatever the input, the daemon must not crash, must send well-formed
 * frames, and once the migration has ended (completed, failed, or cancelled
 * when the input is spent) the target must be alive and hold no userfaultfd.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/dest.h"
#include "daemon/log.h"
#include "daemon/conn.h"
#include "daemon/migration.h"
#include "daemon/loop.h"
#include "tests/fuzz/fuzz_role.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static pid_t target;
static int listener = -1;
static char from[64];

/* Loopback only, as a plaintext daemon demands. */
static void
listen_loopback(void)
{
	struct sockaddr_in sin = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sin);

	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	listener =
		socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (listener < 0 || bind(listener, (struct sockaddr *)&sin, sl) < 0 ||
	    listen(listener, 16) < 0 ||
	    getsockname(listener, (struct sockaddr *)&sin, &sl) < 0)
		abort();
	snprintf(from, sizeof(from), "127.0.0.1:%d", ntohs(sin.sin_port));
}

/* The daemon's connections: demand lane, bulk lane, the rest refused. */
struct lanes {
	struct fz_lane l[2];
	int opened;
};

static int
accept_lanes(void *arg)
{
	struct lanes *ls = arg;
	int fd;

	fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return 0;
	if (ls->opened < 2 && ls->l[ls->opened].out != NULL)
		ls->l[ls->opened].fd = fd;
	else
		close(fd); /* a reconnect: this source is gone */
	ls->opened++;
	return 1;
}

/* Nothing to check per frame: decoding them (fz_pump) is the check. */
static void
any_frame(const struct frame_hdr *h, ProtobufCMessage *msg, const uint8_t *data)
{
	(void)h, (void)msg, (void)data;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Uffdd__AttachRequest req = UFFDD__ATTACH_REQUEST__INIT;
	Uffdd__Range r = UFFDD__RANGE__INIT, *rp = &r;
	static const uint8_t empty[1];
	struct lanes ls;
	struct migration *m;
	const uint8_t *mark;
	size_t ml = strlen(FZ_BULK_MARK);
	int held;

	if (base == NULL) {
		fz_setup();
		target = fz_spawn_target(0);
		listen_loopback();
	}
	memset(&ls, 0, sizeof(ls));
	ls.l[0].fd = ls.l[1].fd = -1;
	ls.l[0].on_frame = ls.l[1].on_frame = any_frame;
	ls.l[0].out = size ? data : empty;
	ls.l[0].n = size;
	mark = memmem(data, size, FZ_BULK_MARK, ml);
	if (mark != NULL) {
		ls.l[0].n = (size_t)(mark - data);
		ls.l[1].out = mark + ml;
		ls.l[1].n = size - ls.l[0].n - ml;
	}
	r.start = FZ_ANON_START;
	r.end = FZ_END;
	req.pid = target;
	req.from = from;
	req.id = FZ_ID;
	req.n_ranges = 1;
	req.ranges = &rp;
	fz_attach(&req);
	fz_pump(ls.l, 2, accept_lanes, &ls);
	fz_lane_close(&ls.l[0]);
	fz_lane_close(&ls.l[1]);
	/* A lane the daemon opens from now on is refused, not kept open. */
	ls.l[0].out = ls.l[1].out = NULL;
	fz_pump(NULL, 0, accept_lanes, &ls);
	m = migration_find(FZ_ID, ROLE_DEST);
	if (m != NULL && m->impl != NULL)
		dest_cancel(m, "fuzz input spent");
	fz_pump(NULL, 0, accept_lanes, &ls);
	migration_free_all(); /* records only: released and reaped */
	/* Without UFFDIO_POISON a failed destination stops its target. */
	kill(target, SIGCONT);
	held = fz_target_has_uffd(target);
	if (held != 0) {
		dprintf(fz_err,
			"fuzz: target %d %s after the migration ended\n",
			(int)target,
			held < 0 ? "is gone" : "still holds a userfaultfd");
		abort();
	}
	return 0;
}

/*
 * libFuzzer target: the control protocol, end to end through the daemon's
 * own control socket (daemon/priv/ctlsock.c, authz.c, grant.c, conn.c)
 * and, over a socket pair as in the daemon, the engine's side of it
 * (daemon/control.c): each input is what a local client writes after
 * connecting. Export and attach reach stubs here (the roles need real
 * processes); status, errors, framing, forwarding and the authorization
 * check run for real.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/conffile.h"
#include "daemon/control.h"
#include "daemon/priv/ctlsock.h"
#include "daemon/imsg.h"
#include "daemon/log.h"
#include "daemon/conn.h"
#include "daemon/migration.h"
#include "daemon/loop.h"
#include "daemon/probe.h"
#include "daemon/procref.h"
#include "daemon/role.h"
#include "daemon/wptrack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct uffdd_conf conf;
struct event_base *base;

/* The roles, answered as a role would answer a process it cannot use. */
static void
stub_request(uint64_t serial, const struct authz_caller *who, struct procref *t,
	     const ProtobufCMessage *req)
{
	procref_close(t);
	control_reply_error(serial, ERR_NO_PROCESS, "process %d: stub",
			    (int)t->pid);
}

static int
export_pid(const ProtobufCMessage *req)
{
	return ((const Uffdd__ExportRequest *)req)->pid;
}

static int
attach_pid(const ProtobufCMessage *req)
{
	return ((const Uffdd__AttachRequest *)req)->pid;
}

static const struct role_ops stub_source = {
	.role = ROLE_SOURCE,
	.name = "source",
	.request_type = FRAME_CTL_EXPORT,
	.verb = "export",
	.request_pid = export_pid,
	.request = stub_request,
};
static const struct role_ops stub_dest = {
	.role = ROLE_DEST,
	.name = "destination",
	.request_type = FRAME_CTL_ATTACH,
	.verb = "attach",
	.request_pid = attach_pid,
	.request = stub_request,
};

static void
stop(void)
{
}

/* Status reports the kernel's features; probing them is not fuzzed. */
const char *
probe_summary(void)
{
	return "fuzz";
}

/* Nor is the write tracker status names (precopy-shared). */
enum wptrack_mode
wptrack_mode(void)
{
	return WPTRACK_OFF;
}

static char path[108];
static int sv[2];
static struct event *parent_ev;

/* What the engine side says, read by the privileged side as the daemon does. */
static void
from_engine(evutil_socket_t fd, short what, void *arg)
{
	struct imsg m;

	while (imsg_recv(fd, &m) > 0) {
		ctlsock_engine_msg(&m);
		imsg_clear(&m);
	}
}

static void
remove_socket(void)
{
	unlink(path);
}

static void
setup(void)
{
	struct migration *m;

	log_init(1, -1);
	role_register(&stub_source);
	role_register(&stub_dest);
	control_status_register();
	conf.control_mode = 0600;
	conf.control_gid = (gid_t)-1;
	if ((base = event_base_new()) == NULL ||
	    event_base_priority_init(base, PRIO_COUNT) < 0)
		abort();
	snprintf(path, sizeof(path), "/tmp/uffdd-fuzz-control.%d.sock",
		 (int)getpid());
	if (ctlsock_listen(path) < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		abort();
	/* Both parts in one process, on one event base. */
	ctlsock_engine(sv[0], -1);
	control_init(sv[1], stop, stop);
	evutil_make_socket_nonblocking(sv[0]);
	parent_ev =
		event_new(base, sv[0], EV_READ | EV_PERSIST, from_engine, NULL);
	event_add(parent_ev, NULL);
	atexit(remove_socket);
	/* Something for status to list: ours, and one of no process. */
	m = migration_new(ROLE_SOURCE, NULL);
	m->pid = getpid();
	m = migration_new(ROLE_DEST, "0123456789abcdef0123456789abcdef");
	m->pid = 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	char reply[4096];
	int fd;

	if (base == NULL)
		setup();
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0)
		abort();
	if (size > 0 && write(fd, data, size) != (ssize_t)size)
		abort();
	shutdown(fd, SHUT_WR);
	/* Accept, read, answer, see the end: a few turns of the loop. */
	for (int i = 0; i < 10; i++) {
		event_base_loop(base, EVLOOP_NONBLOCK);
		while (recv(fd, reply, sizeof(reply), MSG_DONTWAIT) > 0)
			;
	}
	close(fd);
	for (int i = 0; i < 3; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
	return 0;
}

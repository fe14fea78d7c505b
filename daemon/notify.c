/*
 * systemd notifications (see notify.h). The protocol is one datagram per
 * message on an AF_UNIX socket whose path ('/...') or abstract name ('@...')
 * is in $NOTIFY_SOCKET; written here because the library list is fixed and
 * the protocol is a dozen lines.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/notify.h"

static struct sockaddr_un addr;
static socklen_t addr_len;
static int fd = -1;
static uint64_t watchdog_usec;
static struct event *watchdog_ev;
static void (*watchdog_status)(char *, size_t);

void
notify_init(void)
{
	const char *path = getenv("NOTIFY_SOCKET");
	const char *usec = getenv("WATCHDOG_USEC");
	const char *wpid = getenv("WATCHDOG_PID");
	size_t len;

	if (usec != NULL &&
	    (wpid == NULL || strtol(wpid, NULL, 10) == (long)getpid()))
		watchdog_usec = strtoull(usec, NULL, 10);
	unsetenv("WATCHDOG_USEC");
	unsetenv("WATCHDOG_PID");
	if (path == NULL)
		return;
	len = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || len < 2 ||
	    len >= sizeof(addr.sun_path)) {
		log_warnx("NOTIFY_SOCKET=%s: not a socket path or abstract "
			  "name; not notifying systemd",
			  path);
		unsetenv("NOTIFY_SOCKET");
		return;
	}
	addr.sun_family = AF_UNIX;
	memcpy(addr.sun_path, path, len);
	if (path[0] == '@')
		addr.sun_path[0] = '\0'; /* abstract namespace */
	addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		log_warn("NOTIFY_SOCKET: socket");
	unsetenv("NOTIFY_SOCKET");
}

void
notify_send(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	int n;

	if (fd < 0)
		return;
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(msg))
		n = (int)strlen(msg);
	/* systemd may be busy; a lost keep-alive is retried next tick. */
	if (sendto(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT,
		   (struct sockaddr *)&addr, addr_len) < 0)
		log_debug("NOTIFY_SOCKET: %s", strerror(errno));
}

static void
watchdog_cb(evutil_socket_t s, short ev, void *arg)
{
	char status[256] = "";

	if (watchdog_status)
		watchdog_status(status, sizeof(status));
	notify_send("WATCHDOG=1\nSTATUS=%s", status);
}

void
notify_watchdog_start(struct event_base *b, void (*status)(char *, size_t))
{
	/* Half the interval, as sd_watchdog_enabled(3) advises. */
	uint64_t half = watchdog_usec / 2;
	struct timeval tv = {(time_t)(half / 1000000),
			     (suseconds_t)(half % 1000000)};

	if (fd < 0 || watchdog_usec == 0)
		return;
	watchdog_status = status;
	watchdog_ev = event_new(b, -1, EV_PERSIST, watchdog_cb, NULL);
	if (watchdog_ev == NULL)
		fatalx("event_new");
	/* The watchdog must run even when bulk work keeps the loop busy. */
	event_priority_set(watchdog_ev, 0);
	event_add(watchdog_ev, &tv);
}

void
notify_stop(void)
{
	if (watchdog_ev) {
		event_free(watchdog_ev);
		watchdog_ev = NULL;
	}
	if (fd >= 0) {
		close(fd);
		fd = -1;
	}
}

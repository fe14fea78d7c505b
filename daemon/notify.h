/*
 * The systemd notification protocol, by hand (no libsystemd): datagrams to
 * $NOTIFY_SOCKET. Without that variable every call does nothing.
 */
#ifndef UFFDD_NOTIFY_H
#define UFFDD_NOTIFY_H

#include <event2/event.h>

#include "daemon/log.h"

/*
 * Reads $NOTIFY_SOCKET and $WATCHDOG_USEC (for this PID only, as
 * $WATCHDOG_PID says) and unsets them, so that no child inherits them.
 */
void notify_init(void);
/* Sends one message, "KEY=value" lines (READY=1, STATUS=..., ...). */
void notify_send(const char *fmt, ...) ATTR_PRINTF(1, 2);
/*
 * Starts WATCHDOG=1 keep-alives at half the interval systemd asked for,
 * each with a STATUS= line from status(). Does nothing without a watchdog.
 */
void notify_watchdog_start(struct event_base *, void (*status)(char *, size_t));
void notify_stop(void);

#endif

/* Logging to stderr (foreground, journald) or syslog, and fatal exits. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "daemon/log.h"
#include "proto/frame.h"

static int log_to_stderr = 1;
static int log_verbose;

void
log_init(int foreground, int verbosity)
{
	log_to_stderr = foreground;
	log_verbose = verbosity;
	if (!foreground)
		openlog("uffdd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

static void
vlog(int pri, const char *fmt, va_list ap, int with_errno)
{
	char msg[1024];
	int saved = errno;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	/*
	 * One line of printable text, whatever a peer or a target put in
	 * it: a newline in a file name must not forge a log line, nor an
	 * escape sequence reach the operator's terminal.
	 */
	text_clean(msg);
	if (log_to_stderr) {
		if (with_errno)
			fprintf(stderr, "uffdd: %s: %s\n", msg,
				strerror(saved));
		else
			fprintf(stderr, "uffdd: %s\n", msg);
	} else if (with_errno) {
		syslog(pri, "%s: %s", msg, strerror(saved));
	} else {
		syslog(pri, "%s", msg);
	}
	errno = saved;
}

#define LOGFN(name, pri, err, gate)      \
	void name(const char *fmt, ...)  \
	{                                \
		va_list ap;              \
		if (!(gate))             \
			return;          \
		va_start(ap, fmt);       \
		vlog(pri, fmt, ap, err); \
		va_end(ap);              \
	}

LOGFN(log_warn, LOG_WARNING, 1, 1)
LOGFN(log_warnx, LOG_WARNING, 0, 1)
LOGFN(log_info, LOG_INFO, 0, 1)
LOGFN(log_debug, LOG_DEBUG, 0, log_verbose > 0)

void
fatal(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_CRIT, fmt, ap, 1);
	va_end(ap);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_CRIT, fmt, ap, 0);
	va_end(ap);
	exit(1);
}

void *
xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz ? sz : 1);

	if (p == NULL)
		fatal("calloc %zu x %zu", n, sz);
	return p;
}

void *
xmalloc(size_t sz)
{
	void *p = malloc(sz ? sz : 1);

	if (p == NULL)
		fatal("malloc %zu", sz);
	return p;
}

void *
xrealloc(void *old, size_t sz)
{
	void *p = realloc(old, sz ? sz : 1);

	if (p == NULL)
		fatal("realloc %zu", sz);
	return p;
}

char *
xstrdup(const char *s)
{
	char *p = strdup(s);

	if (p == NULL)
		fatal("strdup");
	return p;
}

int
xasprintf(char **ret, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(ret, fmt, ap);
	va_end(ap);
	if (n < 0)
		fatal("asprintf");
	return n;
}

const char *
log_id(const char *id)
{
	static char buf[4][16];
	static int slot;
	char *b = buf[slot++ & 3];

	snprintf(b, sizeof(buf[0]), "%.8s…", id ? id : "");
	return b;
}

/*
 * Logging to stderr (foreground), the journal with fields (journal.h) or
 * syslog, and fatal exits.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

#include "daemon/journal.h"
#include "daemon/log.h"
#include "proto/frame.h"

/* A migration ID (migration.h): 32 hex digits. */
#define MIG_ID_MAX 32

static int log_to_stderr = 1;
static int log_verbose;
/*
 * UFFDD_LOG_TIMESTAMPS=1: each stderr line starts with the wall-clock time
 * in UTC to the microsecond, so that one daemon's lines can be ordered
 * against another's and against a test's own (the journal and syslog stamp
 * theirs). Off by default: a supervisor's stream already has times.
 */
#define LOG_TIMESTAMPS_ENV "UFFDD_LOG_TIMESTAMPS"
static int log_stamps;
/* The journal's socket (log_journal()), and whether stderr is it too. */
static int journal_fd = -1;
static int journal_only;
static int (*log_about_fn)(const char *, struct log_about *);

/* log_id()'s last IDs, whole, with what it printed for each. */
#define LOG_IDS 4
static char id_short[LOG_IDS][16];
static char id_full[LOG_IDS][MIG_ID_MAX + 1];
static unsigned id_slot;

void
log_init(int foreground, int verbosity)
{
	const char *stamps = getenv(LOG_TIMESTAMPS_ENV);

	log_to_stderr = foreground;
	log_verbose = verbosity;
	log_stamps = stamps != NULL && strcmp(stamps, "1") == 0;
	if (!foreground)
		openlog("uffdd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

int
log_journal(int mode)
{
	const char *path = getenv(JOURNAL_SOCKET_ENV);
	int is_stderr = journal_is_stderr();

	if (mode < 0 || (mode == 0 && !is_stderr))
		return 0;
	if (path == NULL || *path == '\0')
		path = JOURNAL_SOCKET;
	if ((journal_fd = journal_open(path)) < 0) {
		log_warn("journal: %s: logging to stderr only", path);
		return -1;
	}
	journal_only = is_stderr;
	return 0;
}

void
log_set_about(int (*about)(const char *, struct log_about *))
{
	log_about_fn = about;
}

/*
 * The migration a line names: the newest of log_id()'s IDs whose short
 * form is in it. Only hex IDs: a peer's word is not a field.
 */
static const char *
line_id(const char *line)
{
	for (unsigned i = 1; i <= LOG_IDS; i++) {
		unsigned s = (id_slot - i) % LOG_IDS;

		if (strspn(id_full[s], "0123456789abcdef") >= 8 &&
		    strstr(line, id_short[s]) != NULL)
			return id_full[s];
	}
	return NULL;
}

/* One line as a journal entry: 0, or -1 when it could not go. */
static int
journal_line(int pri, const char *msgid, const char *peer, const char *line)
{
	struct journal_field f[9];
	struct log_about a = {NULL, NULL, 0};
	char prio[4], pid[16], mid[9];
	const char *id = line_id(line);
	size_t n = 0;

	snprintf(prio, sizeof(prio), "%d", pri);
	f[n++] = (struct journal_field){"MESSAGE", line};
	f[n++] = (struct journal_field){"PRIORITY", prio};
	f[n++] = (struct journal_field){"SYSLOG_IDENTIFIER", "uffdd"};
	if (msgid)
		f[n++] = (struct journal_field){"MESSAGE_ID", msgid};
	if (id) {
		snprintf(mid, sizeof(mid), "%.8s", id);
		f[n++] = (struct journal_field){"MIGRATION_ID", mid};
		if (log_about_fn == NULL || log_about_fn(id, &a) < 0)
			a = (struct log_about){NULL, NULL, 0};
	}
	if (a.role)
		f[n++] = (struct journal_field){"ROLE", a.role};
	if (peer == NULL && a.peer && *a.peer)
		peer = a.peer;
	if (peer)
		f[n++] = (struct journal_field){"PEER", peer};
	if (a.pid > 0) {
		snprintf(pid, sizeof(pid), "%d", (int)a.pid);
		f[n++] = (struct journal_field){"PID", pid};
	}
	return journal_send(journal_fd, f, n);
}

/* A line to stderr after its time: 2026-01-31T23:59:59.123456Z. */
static void
stamped(const char *line)
{
	struct timespec ts;
	struct tm tm;
	char when[32];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	fprintf(stderr, "%s.%06ldZ uffdd: %s\n", when, ts.tv_nsec / 1000, line);
}

static void
vlog(int pri, const char *msgid, const char *peer, const char *fmt, va_list ap,
     int with_errno)
{
	char msg[1024], line[1280];
	int saved = errno;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	/*
	 * One line of printable text, whatever a peer or a target put in
	 * it: a newline in a file name must not forge a log line, nor an
	 * escape sequence reach the operator's terminal.
	 */
	text_clean(msg);
	if (with_errno)
		snprintf(line, sizeof(line), "%s: %s", msg, strerror(saved));
	else
		snprintf(line, sizeof(line), "%s", msg);
	/* The journal's own stream would show the line twice. */
	if (journal_fd >= 0 && journal_line(pri, msgid, peer, line) == 0 &&
	    journal_only) {
		errno = saved;
		return;
	}
	if (log_to_stderr && log_stamps)
		stamped(line);
	else if (log_to_stderr)
		fprintf(stderr, "uffdd: %s\n", line);
	else
		syslog(pri, "%s", line);
	errno = saved;
}

#define LOGFN(name, pri, err, gate)                  \
	void name(const char *fmt, ...)              \
	{                                            \
		va_list ap;                          \
		if (!(gate))                         \
			return;                      \
		va_start(ap, fmt);                   \
		vlog(pri, NULL, NULL, fmt, ap, err); \
		va_end(ap);                          \
	}

LOGFN(log_warn, LOG_WARNING, 1, 1)
LOGFN(log_warnx, LOG_WARNING, 0, 1)
LOGFN(log_info, LOG_INFO, 0, 1)
LOGFN(log_debug, LOG_DEBUG, 0, log_verbose > 0)

void
log_event(const char *msgid, const char *peer, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_WARNING, msgid, peer, fmt, ap, 0);
	va_end(ap);
}

void
fatal(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_CRIT, NULL, NULL, fmt, ap, 1);
	va_end(ap);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_CRIT, NULL, NULL, fmt, ap, 0);
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
	unsigned s = id_slot++ % LOG_IDS;

	snprintf(id_short[s], sizeof(id_short[s]), "%.8s…", id ? id : "");
	snprintf(id_full[s], sizeof(id_full[s]), "%s", id ? id : "");
	return id_short[s];
}

/* Logging and the fixed error vocabulary: fatal, warn, info, debug. */
#ifndef UFFDD_LOG_H
#define UFFDD_LOG_H

#include <stdarg.h>
#include <stddef.h>
#include <sys/types.h>

#define ATTR_PRINTF(f, a) __attribute__((format(printf, f, a)))

void log_init(int foreground, int verbosity);
/*
 * Lines go to the journal by its native protocol, with fields (below):
 * mode 1 always (stderr keeps its lines unless it is the journal), 0 when
 * stderr is the journal's stream, -1 never. Called once, before the
 * sandbox: the socket is opened here. 0, or -1 said on stderr.
 */
int log_journal(int mode);

/*
 * What a line is about, for its journal fields: a line that names a
 * migration by log_id() gets MIGRATION_ID (those 8 digits: the whole ID
 * is a credential), and ROLE, PEER and PID from the hook the migration
 * table sets, where it knows the ID (the engine).
 */
struct log_about {
	const char *role; /* "source" or "destination" */
	const char *peer;
	pid_t pid; /* the migrated process */
};
void log_set_about(int (*about)(const char *id, struct log_about *));

/*
 * Stable MESSAGE_IDs of the events operators alert on: journalctl
 * MESSAGE_ID=... finds them whatever the words of the line.
 */
#define LOG_MSGID_MIGRATION_FAILED "c7e9a80e2fdb84cfade2b15d8029d663"
#define LOG_MSGID_PAGES_POISONED "57a98fdeafe4ebd648885ca6e4f1fe2a"
#define LOG_MSGID_PEER_REFUSED "c2d4814363f496bf086566e9d2f061ef"
#define LOG_MSGID_SOURCE_CONTINUED "ec47aa49bd6b933e98d93ff7dee0e4df"
/* A warning that is such an event; peer (or NULL) its PEER field. */
void log_event(const char *msgid, const char *peer, const char *, ...)
	ATTR_PRINTF(3, 4);
void log_warn(const char *, ...) ATTR_PRINTF(1, 2);
void log_warnx(const char *, ...) ATTR_PRINTF(1, 2);
void log_info(const char *, ...) ATTR_PRINTF(1, 2);
void log_debug(const char *, ...) ATTR_PRINTF(1, 2);
__attribute__((noreturn)) void fatal(const char *, ...) ATTR_PRINTF(1, 2);
__attribute__((noreturn)) void fatalx(const char *, ...) ATTR_PRINTF(1, 2);

/* Allocation failures are handled here, once: the daemon cannot go on. */
void *xcalloc(size_t, size_t);
void *xmalloc(size_t);
void *xrealloc(void *, size_t);
char *xstrdup(const char *);
int xasprintf(char **, const char *, ...) ATTR_PRINTF(2, 3);

/* Shortens a migration ID for logs: IDs are credentials. */
const char *log_id(const char *id);

#endif

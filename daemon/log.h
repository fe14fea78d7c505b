/* Logging and the fixed error vocabulary: fatal, warn, info, debug. */
#ifndef UFFDD_LOG_H
#define UFFDD_LOG_H

#include <stdarg.h>
#include <stddef.h>

#define ATTR_PRINTF(f, a) __attribute__((format(printf, f, a)))

void log_init(int foreground, int verbosity);
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

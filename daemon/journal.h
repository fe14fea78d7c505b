/*
 * The journal's native protocol (journald's own socket): one datagram a
 * log line, its fields KEY=value lines, so that an operator can ask for
 * one migration's lines (journalctl MIGRATION_ID=...). No libsystemd.
 */
#ifndef UFFDD_JOURNAL_H
#define UFFDD_JOURNAL_H

#include <stddef.h>

#define JOURNAL_SOCKET "/run/systemd/journal/socket"
/* The environment variable that names another socket (tests). */
#define JOURNAL_SOCKET_ENV "UFFDD_JOURNAL_SOCKET"

struct journal_field {
	const char *key; /* upper case, digits and '_' */
	const char *value;
};

/* Whether stderr is the journal's stream: JOURNAL_STREAM names its dev:ino. */
int journal_is_stderr(void);
/*
 * A datagram socket connected to path, close-on-exec and non-blocking
 * (a journal that cannot keep up drops lines rather than stop the
 * daemon); -1 with errno set.
 */
int journal_open(const char *path);
/*
 * Sends one entry of n fields; a value with a newline goes in the binary
 * form. 0, or -1 with errno set (the caller writes the line elsewhere).
 */
int journal_send(int fd, const struct journal_field *f, size_t n);

#endif

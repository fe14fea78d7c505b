/*
 * The configuration: built-in defaults, then /etc/uffdd/uffdd.conf, then
 * command-line flags, key by key. Flags and file keys share their names.
 */
#ifndef UFFDD_CONFFILE_H
#define UFFDD_CONFFILE_H

#include <stddef.h>
#include <stdio.h>

#include "daemon/uffdd.h"

#define CONFFILE_DEFAULT_PATH "/etc/uffdd/uffdd.conf"

/* Fills in the built-in defaults; every string is owned by c. */
void conffile_defaults(struct uffdd_conf *c);
/* Frees c's strings. */
void conffile_clear(struct uffdd_conf *c);
/* Sets one key from text, as a flag or a file line would. */
int conffile_set(struct uffdd_conf *c, const char *key, const char *value,
		 char *err, size_t errlen);
/*
 * Reads a file into c (zeroed by the caller): "key value" lines, # comments,
 * values bare or "quoted". A missing file is an error only if must_exist.
 * Errors read "FILE:LINE: what".
 */
int conffile_load(const char *path, int must_exist, struct uffdd_conf *c,
		  char *err, size_t errlen);
/* Whether key was set in c (by a flag or a line). */
int conffile_is_set(const struct uffdd_conf *c, const char *key);
/* Forgets that key was set in c: a merge from c then leaves it alone. */
void conffile_forget(struct uffdd_conf *c, const char *key);
/* Copies into dst every key that was set in src. */
void conffile_merge(struct uffdd_conf *dst, const struct uffdd_conf *src);
/* Writes c in the file's syntax: the effective configuration. */
void conffile_print(FILE *, const struct uffdd_conf *c);
/* The name of the first restart-only key that differs, or NULL. */
const char *conffile_restart_key(const struct uffdd_conf *a,
				 const struct uffdd_conf *b);

#endif

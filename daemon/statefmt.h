/*
 * The state-file format (docs/state-files.md), one reader and one writer
 * for both roles. A file is
 *
 *	uffdd-state 1			the format and its version
 *	key=value			one record a line, each key once
 *	...
 *	sha256 HEX			of every byte before this line
 *
 * A list is one record an entry, with indexed keys: range.0, range.1, ...
 * A value is decimal numbers separated by single blanks, or one string in
 * which every byte outside 0x21-0x7e, and every %, =, is written %XX. So
 * no value can end its line or start another record, whatever a peer put
 * in it, and the reader takes nothing it has not checked.
 */
#ifndef UFFDD_STATEFMT_H
#define UFFDD_STATEFMT_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/log.h"

#define STATE_MAGIC "uffdd-state"
#define STATE_VERSION 1
/* A key, with its index: name.N */
#define STATE_KEY_MAX 48
/* Larger files are refused unread. */
#define STATE_FILE_MAX (256u << 20)

/* Writing: records go to a buffer, whose checksum state_out_end() adds. */
struct state_out {
	char *buf;
	size_t len, cap;
};

/* Starts a file: the version line. */
void state_out_begin(struct state_out *);
void state_put_str(struct state_out *, const char *key, const char *val);
void state_put_u64(struct state_out *, const char *key, uint64_t v);
void state_put_u64s(struct state_out *, const char *key, const uint64_t *v,
		    size_t n);
/* Ends it: the checksum line. */
void state_out_end(struct state_out *);
void state_out_free(struct state_out *);
/* "name.i" in buf, for a list's records. */
const char *state_key(char buf[STATE_KEY_MAX], const char *name, size_t i);

/*
 * Reading: the whole file is checked and split into records first. Every
 * error is kept as "FILE:LINE: what" (the first one only; later calls do
 * nothing once there is one): state_error() says it, "" if none.
 */
struct state_tbl;

/*
 * Parses len bytes of a file shown as name in messages. Never NULL; a file
 * that does not parse gives a table with no records and its error set.
 */
struct state_tbl *state_parse(const char *name, const char *buf, size_t len);
void state_free(struct state_tbl *);
const char *state_error(const struct state_tbl *);
/* The name given to state_parse(), for the roles' own messages. */
const char *state_name(const struct state_tbl *);
/* Whether the key has a record (nothing is marked read). */
int state_has(const struct state_tbl *, const char *key);
/*
 * The value of key, which must be there: one decimal number within
 * [min, max]; n numbers; one string (unescaped, no NUL, shorter than len).
 * 0, or -1 with the error set.
 */
int state_u64(struct state_tbl *, const char *key, uint64_t min, uint64_t max,
	      uint64_t *v);
int state_u64s(struct state_tbl *, const char *key, uint64_t *v, size_t n);
int state_str(struct state_tbl *, const char *key, char *buf, size_t len);
/* How many of name.0, name.1, ... there are, without a gap. */
size_t state_count(const struct state_tbl *, const char *name);
/*
 * name.0, name.1, ...: START END each, page-aligned, START < END, into a
 * new array *out of *n (one spare zeroed entry). 0, or -1 with the error
 * set (*out is the caller's to free either way).
 */
struct range;
int state_ranges(struct state_tbl *, const char *name, struct range **out,
		 size_t *n);
/* Sets the error at key's line (or the file's); returns -1. */
int state_bad(struct state_tbl *, const char *key, const char *fmt, ...)
	ATTR_PRINTF(3, 4);
/* -1 with the error set at the first record nothing has read. */
int state_all_read(struct state_tbl *);

#endif

/*
 * Configuration file and flags (see conffile.h). The grammar is small and
 * strict, so that a typo stops the daemon instead of being ignored:
 *
 *	line   = [ key value ] [ "#" comment ]
 *	key    = [a-z-]+, one of keys[] below, at most once per file
 *	value  = bare word (no blanks, '#' or '"') | '"' chars '"'
 *
 * Inside quotes, \" and \\ stand for " and \. Anything else is an error
 * with the file name and line number.
 */
#include "config.h"

#include <errno.h>
#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/conffile.h"
#include "daemon/log.h"
#include "daemon/region.h"

#define CONF_LINE_MAX 4096
#define CONF_VALUE_MAX 1024

enum key_type {
	T_STR,
	T_BOOL,
	T_MODE,
	T_GROUP,
	T_LEVEL,
	T_SECS, /* int seconds, min to max */
	T_RATE,
	T_COUNT, /* int, min to max */
	T_SIZE,	 /* uint64_t bytes (suffix K, M or G), min to max */
	T_AUTO,	 /* int: auto 0, yes 1, no -1 */
};

/*
 * Every key, once: file keys and long flags share these names. restart:
 * a reload cannot change it (sockets are bound, files open). min and max
 * bound T_SECS, T_COUNT and T_SIZE values.
 */
static const struct key {
	const char *name;
	enum key_type type;
	size_t off;
	int restart;
	const char *help;
	uint64_t min, max;
} keys[] = {
	{"listen", T_STR, offsetof(struct uffdd_conf, listen), 1,
	 "HOST:PORT peers connect to", 0, 0},
	{"control", T_STR, offsetof(struct uffdd_conf, control), 1,
	 "control socket path", 0, 0},
	{"control-mode", T_MODE, offsetof(struct uffdd_conf, control_mode), 0,
	 "control socket mode, octal", 0, 0},
	{"control-group", T_GROUP, offsetof(struct uffdd_conf, control_gid), 0,
	 "control socket group", 0, 0},
	{"admin-group", T_GROUP, offsetof(struct uffdd_conf, admin_gid), 0,
	 "callers in it at connect act on any process", 0, 0},
	{"state-dir", T_STR, offsetof(struct uffdd_conf, state_dir), 1,
	 "per-migration state files", 0, 0},
	{"engine-user", T_STR, offsetof(struct uffdd_conf, engine_user), 1,
	 "the engine runs as this user, confined (none: as root)", 0, 0},
	{"ca", T_STR, offsetof(struct uffdd_conf, ca), 0, "CA certificates", 0,
	 0},
	{"cert", T_STR, offsetof(struct uffdd_conf, cert), 0,
	 "certificate chain", 0, 0},
	{"key", T_STR, offsetof(struct uffdd_conf, key), 0, "private key", 0,
	 0},
	{"pin", T_STR, offsetof(struct uffdd_conf, pin), 0,
	 "source certificate SHA-256", 0, 0},
	{"insecure", T_BOOL, offsetof(struct uffdd_conf, insecure), 1,
	 "plaintext on loopback", 0, 0},
	{"log-level", T_LEVEL, offsetof(struct uffdd_conf, verbose), 0,
	 "info or debug", 0, 0},
	{"log-journal", T_AUTO, offsetof(struct uffdd_conf, log_journal), 1,
	 "lines with fields to the journal: auto (when stderr is it)", 0, 0},
	{"pause-deadline", T_SECS, offsetof(struct uffdd_conf, pause_deadline),
	 0, "seconds a destination waits for an unreachable source", 1, 86400},
	{"bulk-rate", T_RATE, offsetof(struct uffdd_conf, bulk_rate), 0,
	 "bytes a second on each bulk lane, 0: unlimited", 0, 0},
	{"pagemap-scan", T_BOOL, offsetof(struct uffdd_conf, pagemap_scan), 0,
	 "classify with PAGEMAP_SCAN where the kernel has it", 0, 0},
	/*
	 * Input limits. The ceilings are what the protocol and the buffers
	 * were sized for: a region table fits one message, a demand answer
	 * one data frame of 4 KiB pages, and a connection's output must take
	 * at least one whole frame (5 MiB) to make progress.
	 */
	{"max-regions", T_COUNT, offsetof(struct uffdd_conf, lim.max_regions),
	 0, "regions per migration, both roles", 1, REGION_TABLE_MAX},
	{"max-request-pages", T_COUNT,
	 offsetof(struct uffdd_conf, lim.max_request_pages), 0,
	 "pages one demand request may ask for", REQUEST_PAGES_MIN,
	 FRAME_DATA_MAX / 4096},
	{"max-pending", T_COUNT, offsetof(struct uffdd_conf, lim.max_pending),
	 0, "peer connections before HELLO, in all", 1, 4096},
	{"max-pending-per-address", T_COUNT,
	 offsetof(struct uffdd_conf, lim.max_pending_per_addr), 0,
	 "peer connections before HELLO from one address", 1, 4096},
	{"hello-timeout", T_COUNT,
	 offsetof(struct uffdd_conf, lim.hello_timeout), 0,
	 "seconds from accept to a peer's HELLO, TLS handshake included", 1,
	 300},
	{"max-output", T_SIZE, offsetof(struct uffdd_conf, lim.max_output), 0,
	 "unsent bytes a connection may queue before it stops reading",
	 8u << 20, 1u << 30},
	{"poll-us", T_COUNT, offsetof(struct uffdd_conf, poll_us), 0,
	 "microseconds the loop polls after demand traffic, 0: never", 0, 1000},
	{"zero-detect", T_BOOL, offsetof(struct uffdd_conf, zero_detect), 0,
	 "source: send data pages whose bytes are all zero as ZERO", 0, 0},
	{"bulk-installer", T_BOOL, offsetof(struct uffdd_conf, installer), 0,
	 "destination: install bulk frames on a thread of their own", 0, 0},
	{"bulk-installer-nice", T_COUNT,
	 offsetof(struct uffdd_conf, installer_nice), 1,
	 "nice levels the bulk installer runs below the daemon", 0, 19},
	{"metrics", T_STR, offsetof(struct uffdd_conf, metrics), 1,
	 "[ADDR:]PORT of the HTTP metrics endpoint (loopback if no ADDR)", 0,
	 0},
};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

#define FIELD(c, k, type) ((type *)(void *)((char *)(c) + (k)->off))

static const struct key *
find_key(const char *name)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (strcmp(keys[i].name, name) == 0)
			return &keys[i];
	return NULL;
}

void
conffile_defaults(struct uffdd_conf *c)
{
	memset(c, 0, sizeof(*c));
	c->control = xstrdup("/run/uffdd/control.sock");
	c->state_dir = xstrdup("/run/uffdd");
	c->control_mode = 0600;
	c->control_gid = (gid_t)-1;
	c->admin_gid = (gid_t)-1;
	c->pause_deadline = 300;
	c->pagemap_scan = 1;
	c->lim.max_regions = REGION_TABLE_MAX;
	c->lim.max_request_pages = 512;
	c->lim.max_pending = 64;
	c->lim.max_pending_per_addr = 8;
	c->lim.hello_timeout = 10;
	c->poll_us = 100;
	c->installer = 1;
	c->installer_nice = 10;
	c->lim.max_output = 32u << 20;
}

/* A number with an optional K, M or G suffix; -1 if v is not one. */
static int
parse_size(const char *v, unsigned long long *out)
{
	unsigned long long r;
	char *end;
	int shift = 0;

	if (*v < '0' || *v > '9')
		return -1;
	errno = 0;
	r = strtoull(v, &end, 10);
	if (*end == 'K' || *end == 'k')
		shift = 10, end++;
	else if (*end == 'M' || *end == 'm')
		shift = 20, end++;
	else if (*end == 'G' || *end == 'g')
		shift = 30, end++;
	if (errno || *end || r > (~0ULL >> shift))
		return -1;
	*out = r << shift;
	return 0;
}

void
conffile_clear(struct uffdd_conf *c)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (keys[i].type == T_STR) {
			free(*FIELD(c, &keys[i], char *));
			*FIELD(c, &keys[i], char *) = NULL;
		}
}

/* v as a whole number in base; -1 if anything else is in it. */
static int
parse_long(const char *v, int base, long *n)
{
	char *end;

	errno = 0;
	*n = strtol(v, &end, base);
	return errno || end == v || *end ? -1 : 0;
}

/* A value of the wrong form: "KEY: WANT, not "V"", and -1. */
static int refuse(char *err, size_t errlen, const struct key *k, const char *v,
		  const char *want, ...) __attribute__((format(printf, 5, 6)));

static int
refuse(char *err, size_t errlen, const struct key *k, const char *v,
       const char *want, ...)
{
	char what[256];
	va_list ap;

	va_start(ap, want);
	vsnprintf(what, sizeof(what), want, ap);
	va_end(ap);
	snprintf(err, errlen, "%s: %s, not \"%s\"", k->name, what, v);
	return -1;
}

/* A string: not empty, and short enough to print on a line. */
static int
set_str(struct uffdd_conf *c, const struct key *k, const char *v, char *err,
	size_t errlen)
{
	if (*v == '\0') {
		snprintf(err, errlen, "%s: empty value", k->name);
		return -1;
	}
	/* Printed with escapes, it must still fit a line. */
	if (strlen(v) > CONF_VALUE_MAX) {
		snprintf(err, errlen, "%s: longer than %d characters", k->name,
			 CONF_VALUE_MAX);
		return -1;
	}
	free(*FIELD(c, k, char *));
	*FIELD(c, k, char *) = xstrdup(v);
	return 0;
}

/* The words a T_BOOL or T_LEVEL value may be, and what each stores. */
static const struct word {
	enum key_type type;
	const char *word;
	int value;
} words[] = {
	{T_BOOL, "yes", 1},   {T_BOOL, "true", 1},   {T_BOOL, "on", 1},
	{T_BOOL, "no", 0},    {T_BOOL, "false", 0},  {T_BOOL, "off", 0},
	{T_LEVEL, "info", 0}, {T_LEVEL, "debug", 1}, {T_AUTO, "auto", 0},
	{T_AUTO, "yes", 1},   {T_AUTO, "no", -1},
};

/* The word a T_BOOL, T_LEVEL or T_AUTO value prints as. */
static const char *
word_of(enum key_type type, int value)
{
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (words[i].type == type && words[i].value == value)
			return words[i].word;
	return "?";
}

/* One of the words of the key's type (yes or no; info or debug). */
static int
set_word(struct uffdd_conf *c, const struct key *k, const char *v, char *err,
	 size_t errlen)
{
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (words[i].type == k->type && strcmp(words[i].word, v) == 0) {
			*FIELD(c, k, int) = words[i].value;
			return 0;
		}
	return refuse(err, errlen, k, v,
		      k->type == T_BOOL	  ? "want yes or no"
		      : k->type == T_AUTO ? "want auto, yes or no"
					  : "want info or debug");
}

/* A file mode in octal, permission bits only. */
static int
set_mode(struct uffdd_conf *c, const struct key *k, const char *v, char *err,
	 size_t errlen)
{
	long n;

	if (parse_long(v, 8, &n) < 0 || n < 0 || n > 0777)
		return refuse(err, errlen, k, v,
			      "want an octal mode 0000-0777");
	*FIELD(c, k, mode_t) = (mode_t)n;
	return 0;
}

/* A group by name, else by number. */
static int
set_group(struct uffdd_conf *c, const struct key *k, const char *v, char *err,
	  size_t errlen)
{
	struct group *gr = getgrnam(v);
	long n;

	if (gr != NULL) {
		*FIELD(c, k, gid_t) = gr->gr_gid;
		return 0;
	}
	if (parse_long(v, 10, &n) < 0 || n < 0 || n >= 0x7fffffffL) {
		snprintf(err, errlen, "%s: no such group \"%s\"", k->name, v);
		return -1;
	}
	*FIELD(c, k, gid_t) = (gid_t)n;
	return 0;
}

/* A whole number within the key's bounds: seconds (T_SECS), or a count. */
static int
set_int(struct uffdd_conf *c, const struct key *k, const char *v, char *err,
	size_t errlen)
{
	long n;

	if (parse_long(v, 10, &n) == 0 && n >= (long)k->min &&
	    n <= (long)k->max) {
		*FIELD(c, k, int) = (int)n;
		return 0;
	}
	return refuse(err, errlen, k, v,
		      k->type == T_SECS ? "want seconds, %llu to %llu"
					: "want a number from %llu to %llu",
		      (unsigned long long)k->min, (unsigned long long)k->max);
}

/*
 * Bytes (suffix K, M or G): a second, 0 (no limit) or at least a page
 * (T_RATE); or within the key's bounds, whole MiB (T_SIZE).
 */
static int
set_bytes(struct uffdd_conf *c, const struct key *k, const char *v, char *err,
	  size_t errlen)
{
	unsigned long long r;

	if (parse_size(v, &r) == 0 &&
	    (k->type == T_RATE ? r == 0 || r >= 4096
			       : r >= k->min && r <= k->max)) {
		*FIELD(c, k, uint64_t) = r;
		return 0;
	}
	if (k->type == T_RATE)
		return refuse(err, errlen, k, v,
			      "want bytes a second (suffix K, M or G), 0 or "
			      "at least 4096");
	return refuse(err, errlen, k, v,
		      "want bytes (suffix K, M or G) from %lluM to %lluM",
		      (unsigned long long)k->min >> 20,
		      (unsigned long long)k->max >> 20);
}

/* The parser of each key type: checks v and stores it in its field. */
static int (*const setters[])(struct uffdd_conf *, const struct key *,
			      const char *, char *, size_t) = {
	[T_STR] = set_str,     [T_BOOL] = set_word,  [T_MODE] = set_mode,
	[T_GROUP] = set_group, [T_LEVEL] = set_word, [T_SECS] = set_int,
	[T_RATE] = set_bytes,  [T_COUNT] = set_int,  [T_SIZE] = set_bytes,
	[T_AUTO] = set_word,
};

/* One key's value, from a file or a flag, checked by its type. */
int
conffile_set(struct uffdd_conf *c, const char *name, const char *v, char *err,
	     size_t errlen)
{
	const struct key *k = find_key(name);

	if (k == NULL) {
		snprintf(err, errlen, "unknown key \"%s\"", name);
		return -1;
	}
	if (setters[k->type](c, k, v, err, errlen) < 0)
		return -1;
	c->set |= 1u << (k - keys);
	return 0;
}

/*
 * Splits one line into key and value in place. Returns 0 with *key NULL
 * for a blank or comment line, -1 with err filled for a malformed one.
 */
static int
split_line(char *p, char **key, char **value, char *err, size_t errlen)
{
	char *w;

	*key = *value = NULL;
	p += strspn(p, " \t");
	if (*p == '\0' || *p == '#')
		return 0;
	*key = p;
	p += strspn(p, "abcdefghijklmnopqrstuvwxyz-");
	if (p == *key || (*p != ' ' && *p != '\t')) {
		snprintf(err, errlen, "expected \"key value\"");
		return -1;
	}
	*p++ = '\0';
	p += strspn(p, " \t");
	if (*p == '"') {
		*value = w = ++p;
		for (;; p++) {
			if (*p == '\0') {
				snprintf(err, errlen, "unterminated quote");
				return -1;
			}
			if (*p == '"')
				break;
			if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
				p++;
			*w++ = *p;
		}
		*w = '\0';
		p++;
	} else {
		*value = p;
		p += strcspn(p, " \t#\"");
		if (p == *value) {
			snprintf(err, errlen, "%s: missing value", *key);
			return -1;
		}
		if (*p == '"') {
			snprintf(err, errlen, "%s: stray quote in value", *key);
			return -1;
		}
		if (*p != '\0')
			*p++ = '\0';
	}
	p += strspn(p, " \t");
	if (*p != '\0' && *p != '#') {
		snprintf(err, errlen,
			 "%s: one value only (quote it if it "
			 "has blanks)",
			 *key);
		return -1;
	}
	return 0;
}

/* The lines of f (named path), each set in c; f closed. */
static int
load_stream(FILE *f, const char *path, struct uffdd_conf *c, char *err,
	    size_t errlen)
{
	char line[CONF_LINE_MAX], why[256];
	unsigned lineno = 0;
	int rc = 0;

	while (fgets(line, sizeof(line), f) != NULL) {
		size_t len = strlen(line);
		const struct key *k;
		char *key, *value;

		lineno++;
		if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
			snprintf(why, sizeof(why), "line too long");
			goto bad;
		}
		line[strcspn(line, "\r\n")] = '\0';
		if (split_line(line, &key, &value, why, sizeof(why)) < 0)
			goto bad;
		if (key == NULL)
			continue;
		if ((k = find_key(key)) != NULL &&
		    (c->set & (1u << (k - keys)))) {
			snprintf(why, sizeof(why), "%s given twice", key);
			goto bad;
		}
		if (conffile_set(c, key, value, why, sizeof(why)) < 0)
			goto bad;
	}
	if (ferror(f)) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		rc = -1;
	}
	fclose(f);
	return rc;
bad:
	snprintf(err, errlen, "%s:%u: %s", path, lineno, why);
	fclose(f);
	return -1;
}

int
conffile_load(const char *path, int must_exist, struct uffdd_conf *c, char *err,
	      size_t errlen)
{
	FILE *f;

	if ((f = fopen(path, "re")) == NULL) {
		if (errno == ENOENT && !must_exist)
			return 0;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	return load_stream(f, path, c, err, errlen);
}

int
conffile_load_fd(int fd, const char *path, struct uffdd_conf *c, char *err,
		 size_t errlen)
{
	int own = dup(fd);
	FILE *f;

	if (own < 0 || lseek(own, 0, SEEK_SET) < 0 ||
	    (f = fdopen(own, "r")) == NULL) {
		snprintf(err, errlen, "%s (handed over): %s", path,
			 strerror(errno));
		if (own >= 0)
			close(own);
		return -1;
	}
	return load_stream(f, path, c, err, errlen);
}

int
conffile_is_set(const struct uffdd_conf *c, const char *key)
{
	const struct key *k = find_key(key);

	return k != NULL && (c->set & (1u << (k - keys))) != 0;
}

void
conffile_forget(struct uffdd_conf *c, const char *key)
{
	const struct key *k = find_key(key);

	if (k != NULL)
		c->set &= ~(1u << (k - keys));
}

void
conffile_merge(struct uffdd_conf *dst, const struct uffdd_conf *src)
{
	for (size_t i = 0; i < NKEYS; i++) {
		const struct key *k = &keys[i];

		if (!(src->set & (1u << i)))
			continue;
		switch (k->type) {
		case T_STR:
			free(*FIELD(dst, k, char *));
			*FIELD(dst, k, char *) =
				xstrdup(*FIELD(src, k, char *const));
			break;
		case T_BOOL:
		case T_LEVEL:
		case T_AUTO:
		case T_SECS:
		case T_COUNT:
			*FIELD(dst, k, int) = *FIELD(src, k, const int);
			break;
		case T_RATE:
		case T_SIZE:
			*FIELD(dst, k, uint64_t) =
				*FIELD(src, k, const uint64_t);
			break;
		case T_MODE:
			*FIELD(dst, k, mode_t) = *FIELD(src, k, const mode_t);
			break;
		case T_GROUP:
			*FIELD(dst, k, gid_t) = *FIELD(src, k, const gid_t);
			break;
		}
		dst->set |= 1u << i;
	}
}

/* Quotes a string value the way conffile_load reads it back. */
static void
print_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

void
conffile_print(FILE *f, const struct uffdd_conf *c)
{
	for (size_t i = 0; i < NKEYS; i++) {
		const struct key *k = &keys[i];

		switch (k->type) {
		case T_STR: {
			const char *s = *FIELD(c, k, char *const);

			if (s == NULL) {
				fprintf(f, "# %s (unset: %s)\n", k->name,
					k->help);
				continue;
			}
			fprintf(f, "%s ", k->name);
			print_str(f, s);
			fputc('\n', f);
			break;
		}
		case T_BOOL:
			fprintf(f, "%s %s\n", k->name,
				*FIELD(c, k, const int) ? "yes" : "no");
			break;
		case T_SECS:
		case T_COUNT:
			fprintf(f, "%s %d\n", k->name, *FIELD(c, k, const int));
			break;
		case T_RATE:
		case T_SIZE:
			fprintf(f, "%s %llu\n", k->name,
				(unsigned long long)*FIELD(c, k,
							   const uint64_t));
			break;
		case T_MODE:
			fprintf(f, "%s %04o\n", k->name,
				(unsigned)*FIELD(c, k, const mode_t));
			break;
		case T_GROUP:
			if (*FIELD(c, k, const gid_t) == (gid_t)-1)
				fprintf(f, "# %s (unset: %s)\n", k->name,
					k->help);
			else
				fprintf(f, "%s %lu\n", k->name,
					(unsigned long)*FIELD(c, k,
							      const gid_t));
			break;
		case T_LEVEL:
		case T_AUTO:
			fprintf(f, "%s %s\n", k->name,
				word_of(k->type, *FIELD(c, k, const int)));
			break;
		}
	}
}

const char *
conffile_restart_key(const struct uffdd_conf *a, const struct uffdd_conf *b)
{
	for (size_t i = 0; i < NKEYS; i++) {
		const struct key *k = &keys[i];

		if (!k->restart)
			continue;
		if (k->type == T_STR) {
			const char *x = *FIELD(a, k, char *const);
			const char *y = *FIELD(b, k, char *const);

			if ((x == NULL) != (y == NULL) ||
			    (x != NULL && strcmp(x, y) != 0))
				return k->name;
		} else if (*FIELD(a, k, const int) != *FIELD(b, k, const int)) {
			return k->name;
		}
	}
	return NULL;
}

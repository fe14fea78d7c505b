/* The state-file format: writer, reader and accessors (statefmt.h). */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "daemon/statefmt.h"
#include "proto/range.h"

#define SUM_PREFIX "sha256 "
#define SUM_HEX 64
/*
 * Digits of a list's index: more entries than a writer could ever make
 * (a key the writer cannot write would be fatal()).
 */
#define INDEX_DIGITS 15

struct rec {
	const char *key, *val;
	unsigned line;
	int read;
};

struct state_tbl {
	char *name;
	char *buf; /* the file's copy: keys and values end in NULs */
	struct rec *recs;
	struct rec **sorted; /* by key, for lookups */
	size_t n;
	char err[512];
};

/* Lower-case hex SHA-256 of p[0..n) into out[SUM_HEX + 1]. */
static void
sum_hex(const char *p, size_t n, char *out)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;

	if (EVP_Digest(p, n, md, &mdlen, EVP_sha256(), NULL) != 1 ||
	    mdlen * 2 != SUM_HEX)
		fatalx("state file: SHA-256 unavailable in OpenSSL");
	for (unsigned i = 0; i < mdlen; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* name, or name.N: lower case and '_', an index without leading zeros. */
static int
key_ok(const char *k, size_t n)
{
	size_t i = 0, d;

	if (n == 0 || n >= STATE_KEY_MAX || k[0] < 'a' || k[0] > 'z')
		return 0;
	while (i < n && ((k[i] >= 'a' && k[i] <= 'z') || k[i] == '_'))
		i++;
	if (i == n)
		return 1;
	if (k[i++] != '.' || i == n)
		return 0;
	for (d = i; d < n; d++)
		if (k[d] < '0' || k[d] > '9')
			return 0;
	return (k[i] != '0' || n - i == 1) && n - i <= INDEX_DIGITS;
}

/* Writer. */

static void
out_add(struct state_out *o, const char *p, size_t n)
{
	if (o->len + n + 1 > o->cap) {
		o->cap = (o->len + n + 1) * 2 + 4096;
		if ((o->buf = realloc(o->buf, o->cap)) == NULL)
			fatal("state file buffer");
	}
	memcpy(o->buf + o->len, p, n);
	o->len += n;
	o->buf[o->len] = '\0';
}

static void
out_key(struct state_out *o, const char *key)
{
	/* Keys are the daemon's own words: a bad one is a bug here. */
	if (!key_ok(key, strlen(key)))
		fatalx("state file: bad key \"%s\"", key);
	out_add(o, key, strlen(key));
	out_add(o, "=", 1);
}

void
state_out_begin(struct state_out *o)
{
	char line[64];

	*o = (struct state_out){0};
	snprintf(line, sizeof(line), "%s %d\n", STATE_MAGIC, STATE_VERSION);
	out_add(o, line, strlen(line));
}

void
state_put_str(struct state_out *o, const char *key, const char *val)
{
	out_key(o, key);
	for (const unsigned char *p = (const unsigned char *)val; *p; p++) {
		char esc[4];

		if (*p > 0x20 && *p < 0x7f && *p != '%' && *p != '=') {
			out_add(o, (const char *)p, 1);
			continue;
		}
		snprintf(esc, sizeof(esc), "%%%02X", *p);
		out_add(o, esc, 3);
	}
	out_add(o, "\n", 1);
}

void
state_put_u64s(struct state_out *o, const char *key, const uint64_t *v,
	       size_t n)
{
	out_key(o, key);
	for (size_t i = 0; i < n; i++) {
		char num[24];

		snprintf(num, sizeof(num), "%s%llu", i ? " " : "",
			 (unsigned long long)v[i]);
		out_add(o, num, strlen(num));
	}
	out_add(o, "\n", 1);
}

void
state_put_u64(struct state_out *o, const char *key, uint64_t v)
{
	state_put_u64s(o, key, &v, 1);
}

void
state_out_end(struct state_out *o)
{
	char sum[SUM_HEX + 1];

	sum_hex(o->buf, o->len, sum);
	out_add(o, SUM_PREFIX, strlen(SUM_PREFIX));
	out_add(o, sum, SUM_HEX);
	out_add(o, "\n", 1);
}

void
state_out_free(struct state_out *o)
{
	free(o->buf);
	*o = (struct state_out){0};
}

const char *
state_key(char buf[STATE_KEY_MAX], const char *name, size_t i)
{
	snprintf(buf, STATE_KEY_MAX, "%s.%zu", name, i);
	return buf;
}

/* Reader. */

static void tbl_err(struct state_tbl *, unsigned line, const char *fmt, ...)
	ATTR_PRINTF(3, 4);

static void
tbl_err(struct state_tbl *t, unsigned line, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->err[0])
		return;
	n = line ? snprintf(t->err, sizeof(t->err), "%s:%u: ", t->name, line)
		 : snprintf(t->err, sizeof(t->err), "%s: ", t->name);
	if (n < 0 || (size_t)n >= sizeof(t->err))
		return;
	va_start(ap, fmt);
	vsnprintf(t->err + n, sizeof(t->err) - (size_t)n, fmt, ap);
	va_end(ap);
}

/*
 * A value as the writer makes it: printable ASCII, %XX escapes, no '=',
 * blanks only single and between fields. NULL, or what is wrong.
 */
static const char *
val_bad(const char *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)v[i];

		if (c == ' ' && (i == 0 || i + 1 == n || v[i + 1] == ' '))
			return "a blank at the start or end of the value, or "
			       "two in a row";
		if (c < 0x20 || c > 0x7e)
			return "a control or non-ASCII byte not escaped";
		if (c == '=')
			return "an '=' in the value not escaped";
		if (c == '%' && (i + 2 >= n ||
				 !strchr("0123456789abcdefABCDEF", v[i + 1]) ||
				 !strchr("0123456789abcdefABCDEF", v[i + 2]) ||
				 !v[i + 1] || !v[i + 2]))
			return "a '%' not followed by two hex digits";
	}
	return NULL;
}

/* Splits line [p, p + n) (no newline) into a record. */
static int
add_rec(struct state_tbl *t, char *p, size_t n, unsigned line)
{
	char *eq = memchr(p, '=', n);
	const char *why;

	if (eq == NULL) {
		tbl_err(t, line, "not a key=value record");
		return -1;
	}
	if (!key_ok(p, (size_t)(eq - p))) {
		tbl_err(t, line,
			"malformed key (want lower-case letters and '_', "
			"then .N for a list, before the '=')");
		return -1;
	}
	if ((why = val_bad(eq + 1, n - (size_t)(eq - p) - 1)) != NULL) {
		tbl_err(t, line, "%s", why);
		return -1;
	}
	*eq = '\0';
	p[n] = '\0';
	t->recs[t->n++] = (struct rec){p, eq + 1, line, 0};
	return 0;
}

/* The first line: the format and a version this reader knows. */
static int
check_version(struct state_tbl *t, const char *p, size_t n)
{
	size_t m = strlen(STATE_MAGIC);
	char ver[16];

	if (n <= m + 1 || memcmp(p, STATE_MAGIC " ", m + 1) != 0) {
		tbl_err(t, 1,
			"not a uffdd state file (no \"%s VERSION\" first "
			"line)",
			STATE_MAGIC);
		return -1;
	}
	snprintf(ver, sizeof(ver), "%d", STATE_VERSION);
	p += m + 1;
	n -= m + 1;
	if (n != strlen(ver) || memcmp(p, ver, n) != 0) {
		/* Shown only if it is a number: no stray bytes in the log. */
		if (n <= 9 && strspn(p, "0123456789") == n)
			tbl_err(t, 1,
				"format version %.*s; this uffdd reads version "
				"%d only",
				(int)n, p, STATE_VERSION);
		else
			tbl_err(t, 1, "a format version that is no number");
		return -1;
	}
	return 0;
}

/* The last line: the checksum of every byte before it. */
static int
check_sum(struct state_tbl *t, const char *buf, size_t body, size_t len,
	  unsigned line)
{
	size_t pl = strlen(SUM_PREFIX);
	char sum[SUM_HEX + 1];

	if (len - body != pl + SUM_HEX + 1 ||
	    memcmp(buf + body, SUM_PREFIX, pl) != 0) {
		tbl_err(t, line,
			"the last line is not the checksum (\"%sHEX\"): the "
			"file was cut short or added to",
			SUM_PREFIX);
		return -1;
	}
	sum_hex(buf, body, sum);
	if (memcmp(buf + body + pl, sum, SUM_HEX) != 0) {
		tbl_err(t, line,
			"checksum mismatch: the file was changed or damaged "
			"since uffdd wrote it");
		return -1;
	}
	return 0;
}

static int
by_key(const void *a, const void *b)
{
	const struct rec *x = *(struct rec *const *)a;
	const struct rec *y = *(struct rec *const *)b;
	int c = strcmp(x->key, y->key);

	return c ? c : (x->line > y->line) - (x->line < y->line);
}

/* Sorted by key for lookups; a key that is there twice is refused. */
static int
index_recs(struct state_tbl *t)
{
	t->sorted = xcalloc(t->n ? t->n : 1, sizeof(*t->sorted));
	for (size_t i = 0; i < t->n; i++)
		t->sorted[i] = &t->recs[i];
	qsort(t->sorted, t->n, sizeof(*t->sorted), by_key);
	for (size_t i = 1; i < t->n; i++)
		if (strcmp(t->sorted[i]->key, t->sorted[i - 1]->key) == 0) {
			tbl_err(t, t->sorted[i]->line,
				"key %s repeated (first at line %u)",
				t->sorted[i]->key, t->sorted[i - 1]->line);
			return -1;
		}
	return 0;
}

/* The records: lines 2 to the one before the checksum (buf[..body)). */
static int
split_lines(struct state_tbl *t, size_t body)
{
	unsigned line = 2;
	size_t lines = 0;
	char *p = t->buf + strcspn(t->buf, "\n") + 1;

	for (size_t i = 0; i < body; i++)
		lines += t->buf[i] == '\n';
	t->recs = xcalloc(lines, sizeof(*t->recs));
	for (; p < t->buf + body; line++) {
		char *nl = memchr(p, '\n', (size_t)(t->buf + body - p));

		if (add_rec(t, p, (size_t)(nl - p), line) < 0)
			return -1;
		p = nl + 1;
	}
	return 0;
}

/* The file's shape: version first, checksum last, newline-ended lines. */
static int
parse(struct state_tbl *t, size_t len)
{
	unsigned lines = 0;
	size_t body = 0;

	if (len > STATE_FILE_MAX) {
		tbl_err(t, 0, "%zu bytes, more than a state file holds (%u)",
			len, STATE_FILE_MAX);
		return -1;
	}
	for (size_t i = 0; i < len; i++) {
		if (t->buf[i] == '\0') {
			tbl_err(t, lines + 1, "a NUL byte");
			return -1;
		}
		if (t->buf[i] == '\n' && i + 1 < len) {
			lines++;
			body = i + 1;
		}
	}
	if (len == 0 || t->buf[len - 1] != '\n') {
		tbl_err(t, lines + 1,
			"the file does not end with a newline: cut short");
		return -1;
	}
	/* Version first: another version may have another checksum. */
	if (body == 0) {
		tbl_err(t, 1, "not a uffdd state file (one line)");
		return -1;
	}
	if (check_version(t, t->buf, strcspn(t->buf, "\n")) < 0 ||
	    check_sum(t, t->buf, body, len, lines + 1) < 0)
		return -1;
	return split_lines(t, body) < 0 ? -1 : index_recs(t);
}

struct state_tbl *
state_parse(const char *name, const char *buf, size_t len)
{
	struct state_tbl *t = xcalloc(1, sizeof(*t));

	t->name = xstrdup(name);
	t->buf = xmalloc(len + 1);
	memcpy(t->buf, buf, len);
	t->buf[len] = '\0';
	if (parse(t, len) < 0)
		t->n = 0;
	return t;
}

void
state_free(struct state_tbl *t)
{
	if (t == NULL)
		return;
	free(t->name);
	free(t->buf);
	free(t->recs);
	free(t->sorted);
	free(t);
}

const char *
state_error(const struct state_tbl *t)
{
	return t->err;
}

const char *
state_name(const struct state_tbl *t)
{
	return t->name;
}

static struct rec *
find(const struct state_tbl *t, const char *key)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(t->sorted[mid]->key, key);

		if (c == 0)
			return t->sorted[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

int
state_has(const struct state_tbl *t, const char *key)
{
	return find(t, key) != NULL;
}

/* The record of key, marked read; the error set if it is missing. */
static struct rec *
need(struct state_tbl *t, const char *key)
{
	struct rec *r = find(t, key);

	if (r == NULL)
		tbl_err(t, 0, "no %s record", key);
	else
		r->read = 1;
	return r;
}

/* One decimal field at *p, up to a blank or the end; *p moves past it. */
static int
field_u64(const char **p, uint64_t *v)
{
	const char *s = *p;
	size_t n = strcspn(s, " ");
	char *end;

	if (n == 0 || n > 20 || strspn(s, "0123456789") != n ||
	    (s[0] == '0' && n > 1))
		return -1;
	errno = 0;
	*v = strtoull(s, &end, 10);
	if (errno || end != s + n)
		return -1;
	*p = s + n + (s[n] == ' ');
	return 0;
}

int
state_u64s(struct state_tbl *t, const char *key, uint64_t *v, size_t n)
{
	struct rec *r = need(t, key);
	const char *p;

	if (r == NULL)
		return -1;
	p = r->val;
	for (size_t i = 0; i < n; i++)
		if (*p == '\0' || field_u64(&p, &v[i]) < 0) {
			tbl_err(t, r->line,
				"%s: want %zu decimal number%s (no sign, no "
				"leading zeros, at most 2^64-1)",
				key, n, n == 1 ? "" : "s");
			return -1;
		}
	if (*p != '\0') {
		tbl_err(t, r->line, "%s: more than %zu number%s", key, n,
			n == 1 ? "" : "s");
		return -1;
	}
	return 0;
}

int
state_ranges(struct state_tbl *t, const char *name, struct range **out,
	     size_t *n)
{
	uint64_t ps = (uint64_t)sysconf(_SC_PAGESIZE), v[2];
	char key[STATE_KEY_MAX];

	*n = state_count(t, name);
	*out = xcalloc(*n + 1, sizeof(**out));
	for (size_t i = 0; i < *n; i++) {
		if (state_u64s(t, state_key(key, name, i), v, 2) < 0)
			return -1;
		if (v[0] >= v[1] || v[0] % ps || v[1] % ps)
			return state_bad(t, key,
					 "%s: not a page-aligned START END "
					 "with START < END",
					 key);
		(*out)[i] = (struct range){v[0], v[1]};
	}
	return 0;
}

int
state_u64(struct state_tbl *t, const char *key, uint64_t min, uint64_t max,
	  uint64_t *v)
{
	if (state_u64s(t, key, v, 1) < 0)
		return -1;
	if (*v < min || *v > max)
		return state_bad(
			t, key, "%s: %llu is out of range (%llu to %llu)", key,
			(unsigned long long)*v, (unsigned long long)min,
			(unsigned long long)max);
	return 0;
}

static int
hexval(char c)
{
	return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}

int
state_str(struct state_tbl *t, const char *key, char *buf, size_t len)
{
	struct rec *r = need(t, key);
	size_t n = 0;

	if (r == NULL)
		return -1;
	for (const char *p = r->val; *p; p++) {
		int c = (unsigned char)*p;

		if (c == ' ')
			return state_bad(t, key, "%s: a blank not escaped",
					 key);
		if (c == '%') {
			c = hexval(p[1]) << 4 | hexval(p[2]);
			p += 2;
		}
		if (c == 0)
			return state_bad(t, key, "%s: a NUL byte (%%00)", key);
		if (n + 1 >= len)
			return state_bad(t, key, "%s: longer than %zu bytes",
					 key, len - 1);
		buf[n++] = (char)c;
	}
	buf[n] = '\0';
	return 0;
}

size_t
state_count(const struct state_tbl *t, const char *name)
{
	char key[STATE_KEY_MAX];
	size_t n = 0;

	while (find(t, state_key(key, name, n)))
		n++;
	return n;
}

int
state_bad(struct state_tbl *t, const char *key, const char *fmt, ...)
{
	const struct rec *r = key ? find(t, key) : NULL;
	char why[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	tbl_err(t, r ? r->line : 0, "%s", why);
	return -1;
}

int
state_all_read(struct state_tbl *t)
{
	for (size_t i = 0; i < t->n; i++)
		if (!t->recs[i].read) {
			tbl_err(t, t->recs[i].line,
				"unknown record %s (or one this migration "
				"cannot have)",
				t->recs[i].key);
			return -1;
		}
	return t->err[0] ? -1 : 0;
}

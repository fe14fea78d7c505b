/*
 * The arguments commands share (IDs, pids, ranges, timeouts), checked
 * before anything is asked of a daemon: a wrong one is its usage line.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "proto/frame.h"
#include "proto/range.h"

/* A migration ID: 32 hex digits (an empty one would mean "all"). */
void
check_id(const char *s, const char *u)
{
	size_t n = strspn(s, "0123456789abcdefABCDEF");

	if (n != 32 || s[n] != '\0') {
		fprintf(stderr,
			"uffd-client: '%s': not a migration ID (32 hex "
			"digits)\n",
			s);
		die_usage(u);
	}
}

/* A process ID: a positive decimal number the kernel could have given. */
pid_t
parse_pid(const char *s, const char *u)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || end == s || v <= 0 || v > 0x3fffffff) {
		fprintf(stderr, "uffd-client: %s: not a process ID\n", s);
		die_usage(u);
	}
	return (pid_t)v;
}

/* A timeout in seconds: more than 0, at most 1e9. */
double
parse_timeout(const char *s, const char *u)
{
	char *end;
	double t = strtod(s, &end);

	if (*end || end == s || !(t > 0) || t > 1e9)
		die_usage(u);
	return t;
}

/* Adds --range START-END to a request's ranges. */
Uffdd__Range **
add_range(Uffdd__Range **rs, size_t *n, const char *arg, const char *u)
{
	struct range r;
	Uffdd__Range *pr;

	if (range_parse(arg, &r) < 0) {
		fprintf(stderr,
			"uffd-client: --range %s: want START-END in "
			"hex, page aligned, START < END\n",
			arg);
		die_usage(u);
	}
	rs = realloc(rs, (*n + 1) * sizeof(*rs));
	pr = malloc(sizeof(*pr));
	if (rs == NULL || pr == NULL)
		exit(1);
	uffdd__range__init(pr);
	pr->start = r.start;
	pr->end = r.end;
	rs[(*n)++] = pr;
	return rs;
}

/* The ranges add_range() made. */
void
free_ranges(Uffdd__Range **rs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(rs[i]);
	free(rs);
}

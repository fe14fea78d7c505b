/* Parsing of START-END address ranges. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "proto/range.h"

int
range_parse(const char *s, struct range *r)
{
	uint64_t ps = (uint64_t)sysconf(_SC_PAGESIZE);
	char *end;

	errno = 0;
	r->start = strtoull(s, &end, 16);
	if (errno || end == s || *end != '-')
		return -1;
	s = end + 1;
	r->end = strtoull(s, &end, 16);
	if (errno || end == s || *end != '\0')
		return -1;
	if (r->end <= r->start || r->start % ps || r->end % ps)
		return -1;
	return 0;
}

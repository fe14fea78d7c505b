/* Address ranges as given with --range START-END, shared by client and daemon. */
#ifndef UFFDD_RANGE_H
#define UFFDD_RANGE_H

#include <stdint.h>

struct range {
	uint64_t start, end;
};

/*
 * Parses "START-END" (hexadecimal, 0x optional, both page aligned,
 * START < END). Returns 0 or -1.
 */
int range_parse(const char *s, struct range *r);

#endif

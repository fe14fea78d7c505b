/* Latency histogram and clock. */
#include "config.h"

#include <time.h>

#include "daemon/stats.h"

static unsigned
hist_index(uint64_t v)
{
	unsigned e, idx;

	if (v < 8)
		return (unsigned)v;
	e = 63u - (unsigned)__builtin_clzll(v);
	idx = (e - 2) * 8 + (unsigned)((v >> (e - 3)) & 7);
	return idx < HIST_BUCKETS ? idx : HIST_BUCKETS - 1;
}

/* The middle of a bucket's value range. */
static uint64_t
hist_value(unsigned idx)
{
	unsigned e, sub;
	uint64_t lo;

	if (idx < 8)
		return idx;
	e = idx / 8 + 2;
	sub = idx % 8;
	lo = (8ULL + sub) << (e - 3);
	return lo + ((1ULL << (e - 3)) >> 1);
}

void
hist_add(struct hist *h, uint64_t v)
{
	h->bucket[hist_index(v)]++;
	h->n++;
}

uint64_t
hist_quantile(const struct hist *h, double q)
{
	uint64_t want, seen = 0;

	if (h->n == 0)
		return 0;
	want = (uint64_t)(q * (double)h->n);
	if (want >= h->n)
		want = h->n - 1;
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		seen += h->bucket[i];
		if (seen > want)
			return hist_value(i);
	}
	return hist_value(HIST_BUCKETS - 1);
}

uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

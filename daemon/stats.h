/* Latency histogram: log-linear buckets, 8 per power of two (~12% error). */
#ifndef UFFDD_STATS_H
#define UFFDD_STATS_H

#include <stdint.h>

#define HIST_BUCKETS 512

struct hist {
	uint64_t n;
	uint64_t bucket[HIST_BUCKETS];
};

void hist_add(struct hist *, uint64_t value);
/* The value below which a fraction q (0..1) of the samples lie; 0 if none. */
uint64_t hist_quantile(const struct hist *, double q);
uint64_t now_ns(void);

#endif

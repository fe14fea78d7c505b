/* The daemon's counters and histograms (metrics.h). */
#include "config.h"

#include "daemon/metrics.h"

struct metrics metrics;

uint64_t
metrics_bound_ns(uint64_t base, unsigned k)
{
	return base << k;
}

/* Counts ns in the first bucket whose bound holds it, else in +Inf. */
static void
observe(struct metrics_hist *h, uint64_t base, unsigned n, uint64_t ns)
{
	unsigned k = 0;

	while (k < n && ns > metrics_bound_ns(base, k))
		k++;
	h->bucket[k]++;
	h->count++;
	h->sum_ns += ns;
}

void
metrics_fault(int role, uint64_t ns)
{
	if (role >= 0 && role < METRICS_ROLES)
		observe(&metrics.fault[role], METRICS_FAULT_BASE_NS,
			METRICS_FAULT_BUCKETS, ns);
}

void
metrics_long(struct metrics_hist *h, uint64_t ns)
{
	observe(h, METRICS_LONG_BASE_NS, METRICS_LONG_BUCKETS, ns);
}

void
metrics_image_read(int uring, uint64_t bytes)
{
	metrics.image_reads[uring != 0]++;
	metrics.image_read_bytes[uring != 0] += bytes;
}

void
metrics_pages(int role, int demand, enum metrics_kind kind, uint64_t n,
	      uint64_t bytes)
{
	int lane = demand ? METRICS_DEMAND : METRICS_BULK;

	if (role < 0 || role >= METRICS_ROLES || kind >= METRICS_KINDS)
		return;
	metrics.pages[role][lane][kind] += n;
	metrics.page_bytes[role][lane] += bytes;
}

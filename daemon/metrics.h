/*
 * The daemon's own counters and histograms, for operators' monitoring
 * (metrics_text.c renders them with the migration table's totals). Events
 * are counted where they happen; nothing here knows a migration, so that
 * every part may count without an include circle. No label is a
 * migration ID: the status command has those.
 */
#ifndef UFFDD_METRICS_H
#define UFFDD_METRICS_H

#include <stdint.h>

/* As enum mig_role (migration.h): source 0, destination 1. */
#define METRICS_ROLES 2

/*
 * Demand fault latency: log2 buckets from 16 us to 1.05 s (16 us << k),
 * as QEMU's postcopy-latency-dist; attach to full residency and the
 * pre-copy's freeze: 1 ms << k up to 17 min.
 */
#define METRICS_FAULT_BUCKETS 17
#define METRICS_FAULT_BASE_NS 16000ull
#define METRICS_LONG_BUCKETS 21
#define METRICS_LONG_BASE_NS 1000000ull
#define METRICS_BUCKETS_MAX 21

struct metrics_hist {
	uint64_t count;
	uint64_t sum_ns;
	uint64_t bucket[METRICS_BUCKETS_MAX + 1]; /* each its own; last +Inf */
};

/* The reasons a TLS handshake failed, and a control request was refused. */
enum metrics_tls_fail {
	METRICS_TLS_PEER_CERT, /* the peer's certificate did not verify */
	METRICS_TLS_PROTOCOL,  /* anything else: version, alert, garbage */
	METRICS_TLS_TIMEOUT,   /* no HELLO within hello-timeout */
	METRICS_TLS_FAIL_N,
};
enum metrics_refusal {
	METRICS_REFUSED_PERMISSION, /* the caller may not act on it */
	METRICS_REFUSED_INVALID,    /* a request wrong in itself, or unknown */
	METRICS_REFUSED_OTHER,	    /* the process, the kernel, the source */
	METRICS_REFUSED_N,
};

/*
 * What a page moved as: its bytes (data); a ZERO marker the other end maps
 * a zero page for (zero); a ZERO marker for a page no one has: never
 * populated at the source, left unpopulated at the destination (hole).
 */
enum metrics_kind { METRICS_DATA, METRICS_ZERO, METRICS_HOLE, METRICS_KINDS };
/* The lane a page moved on: asked for by a fault, or streamed. */
enum metrics_lane { METRICS_DEMAND, METRICS_BULK, METRICS_LANES };
/* A working-set page: sent before any fault asked, or after one did. */
enum metrics_ws { METRICS_WS_AHEAD, METRICS_WS_LATE, METRICS_WS_N };

struct metrics {
	struct metrics_hist fault[METRICS_ROLES];
	uint64_t pages[METRICS_ROLES][METRICS_LANES][METRICS_KINDS];
	uint64_t page_bytes[METRICS_ROLES][METRICS_LANES]; /* data pages' */
	uint64_t working_set[METRICS_WS_N];
	struct metrics_hist residency;	  /* destination: attach to complete */
	struct metrics_hist freeze;	  /* source: pre-copy freeze time */
	uint64_t ended[METRICS_ROLES][2]; /* [role][0 complete, 1 failed] */
	uint64_t lane_failures[METRICS_ROLES];
	uint64_t tls_handshakes;
	uint64_t tls_failures[METRICS_TLS_FAIL_N];
	uint64_t refused[METRICS_REFUSED_N]; /* control replies: errors */
	/* A restore's reads of its image file: [0] pread, [1] io_uring. */
	uint64_t image_reads[2], image_read_bytes[2];
};

extern struct metrics metrics;

/* One demand fault of role (0 source, 1 destination), served in ns. */
void metrics_fault(int role, uint64_t ns);
/* n pages of kind moved on a lane by role; bytes: the data pages' own. */
void metrics_pages(int role, int demand, enum metrics_kind, uint64_t n,
		   uint64_t bytes);
/* One read of an image file, through the ring (uring) or pread. */
void metrics_image_read(int uring, uint64_t bytes);
/* One sample of a long histogram (residency, freeze). */
void metrics_long(struct metrics_hist *, uint64_t ns);
/* The upper bound of bucket k of a histogram whose first is base, in ns. */
uint64_t metrics_bound_ns(uint64_t base, unsigned k);

#endif

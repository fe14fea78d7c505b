/*
 * Renders the counters (metrics.h), the migration table's totals and the
 * process's own figures in the OpenMetrics text format. The two formats
 * differ in little: a counter's family is named without _total in
 * OpenMetrics, and OpenMetrics ends with "# EOF".
 */
#include "config.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/metrics_text.h"
#include "daemon/migration.h"
#include "version.h"

static const char *const roles[METRICS_ROLES] = {"source", "destination"};

struct out {
	FILE *f;
	int om;
};

/*
 * A family's TYPE and HELP lines. The older format names a counter's
 * family as its sample (_total), and has no info type: a gauge of 1.
 */
static void
family(struct out *o, const char *name, const char *type, const char *help)
{
	const char *suffix = "";

	if (!o->om && strcmp(type, "counter") == 0) {
		suffix = "_total";
	} else if (!o->om && strcmp(type, "info") == 0) {
		suffix = "_info";
		type = "gauge";
	}
	fprintf(o->f, "# TYPE %s%s %s\n# HELP %s%s %s\n", name, suffix, type,
		name, suffix, help);
}

/* A counter by role, from each role's migration totals. */
static void
per_role(struct out *o, const char *name, const char *help,
	 const struct mig_totals *t, size_t off, double scale)
{
	family(o, name, "counter", help);
	for (int r = 0; r < METRICS_ROLES; r++) {
		uint64_t v =
			*(const uint64_t *)(const void *)((const char *)&t[r] +
							  off);

		if (scale == 1)
			fprintf(o->f, "%s_total{role=\"%s\"} %llu\n", name,
				roles[r], (unsigned long long)v);
		else
			fprintf(o->f, "%s_total{role=\"%s\"} %.9f\n", name,
				roles[r], (double)v * scale);
	}
}

/* A histogram's samples; labels "" or `role="x",`. */
static void
hist(struct out *o, const char *name, const char *labels,
     const struct metrics_hist *h, uint64_t base, unsigned n)
{
	uint64_t cum = 0;
	size_t ll = strlen(labels);

	for (unsigned k = 0; k < n; k++) {
		cum += h->bucket[k];
		fprintf(o->f, "%s_bucket{%sle=\"%.9g\"} %llu\n", name, labels,
			(double)metrics_bound_ns(base, k) / 1e9,
			(unsigned long long)cum);
	}
	fprintf(o->f, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels,
		(unsigned long long)h->count);
	/* Without labels, the braces go: `name_count 3`. */
	fprintf(o->f, "%s_count%s%.*s%s %llu\n", name, ll ? "{" : "",
		ll ? (int)ll - 1 : 0, labels, ll ? "}" : "",
		(unsigned long long)h->count);
	fprintf(o->f, "%s_sum%s%.*s%s %.9f\n", name, ll ? "{" : "",
		ll ? (int)ll - 1 : 0, labels, ll ? "}" : "",
		(double)h->sum_ns / 1e9);
}

/* Migrations now held, by role and state; and those that ended. */
static void
held(struct out *o)
{
	const struct migration *m;

	family(o, "uffdd_migrations", "gauge",
	       "Migrations this daemon holds, by role and state.");
	for (int r = 0; r < METRICS_ROLES; r++)
		for (int s = MIG_CONNECTING; s <= MIG_FAILED; s++) {
			unsigned n = 0;

			TAILQ_FOREACH (m, &migrations, link)
				n += (int)m->role == r && (int)m->state == s;
			fprintf(o->f,
				"uffdd_migrations{role=\"%s\",state=\"%s\"} "
				"%u\n",
				roles[r], migration_state_name(s), n);
		}
	family(o, "uffdd_migrations_ended", "counter",
	       "Migrations that completed or failed, by role.");
	for (int r = 0; r < METRICS_ROLES; r++)
		fprintf(o->f,
			"uffdd_migrations_ended_total{role=\"%s\",state="
			"\"complete\"} %llu\n"
			"uffdd_migrations_ended_total{role=\"%s\",state="
			"\"failed\"} %llu\n",
			roles[r], (unsigned long long)metrics.ended[r][0],
			roles[r], (unsigned long long)metrics.ended[r][1]);
}

#define TOT(field) offsetof(struct mig_totals, field)

/* What the migrations moved and lost, from the table's totals. */
static void
moved(struct out *o)
{
	struct mig_totals t[METRICS_ROLES];

	migration_totals(ROLE_SOURCE, &t[0]);
	migration_totals(ROLE_DEST, &t[1]);
	per_role(o, "uffdd_demand_faults",
		 "Demand faults (destination) and page requests served "
		 "(source).",
		 t, TOT(demand_faults), 1);
	per_role(o, "uffdd_discarded_pages",
		 "Pages the target discarded itself, never fetched.", t,
		 TOT(discarded_pages), 1);
	per_role(o, "uffdd_lost_pages",
		 "Pages that will never arrive: poisoned where the kernel can.",
		 t, TOT(pages_lost), 1);
	per_role(o, "uffdd_reconnects", "Lanes connected again.", t,
		 TOT(reconnects), 1);
	per_role(o, "uffdd_blocktime_seconds",
		 "Time target threads were blocked on missing pages.", t,
		 TOT(blocked_ns), 1e-9);
	per_role(o, "uffdd_precopy_rounds", "Pre-copy rounds done.", t,
		 TOT(precopy_rounds), 1);
	per_role(o, "uffdd_precopy_bytes",
		 "Page bytes sent in pre-copy rounds.", t, TOT(precopy_bytes),
		 1);
}

/*
 * Pages by lane and kind, and the data pages' bytes by lane: counted as
 * they move (metrics.h), so they only grow while the engine runs.
 */
static void
pages(struct out *o)
{
	static const char *const lane[METRICS_LANES] = {"demand", "bulk"};
	static const char *const kind[METRICS_KINDS] = {"data", "zero", "hole"};

	family(o, "uffdd_pages", "counter",
	       "Pages moved, by lane (demand: a fault asked; bulk: streamed) "
	       "and kind (data: with its bytes; zero: a ZERO marker mapped as "
	       "a zero page; hole: a ZERO marker for a page never populated "
	       "at the source, or left unpopulated at the destination).");
	for (int r = 0; r < METRICS_ROLES; r++)
		for (int l = 0; l < METRICS_LANES; l++)
			for (int k = 0; k < METRICS_KINDS; k++)
				fprintf(o->f,
					"uffdd_pages_total{role=\"%s\",lane="
					"\"%s\",kind=\"%s\"} %llu\n",
					roles[r], lane[l], kind[k],
					(unsigned long long)
						metrics.pages[r][l][k]);
	family(o, "uffdd_bytes", "counter",
	       "Bytes of the data pages moved, by lane.");
	for (int r = 0; r < METRICS_ROLES; r++)
		for (int l = 0; l < METRICS_LANES; l++)
			fprintf(o->f,
				"uffdd_bytes_total{role=\"%s\",lane=\"%s\"} "
				"%llu\n",
				roles[r], lane[l],
				(unsigned long long)metrics.page_bytes[r][l]);
}

/* A counter family with one label: NAME_total{LABEL="names[i]"} v[i]. */
static void
counter_by(struct out *o, const char *name, const char *help, const char *label,
	   const char *const *names, const uint64_t *v, int n)
{
	family(o, name, "counter", help);
	for (int i = 0; i < n; i++)
		fprintf(o->f, "%s_total{%s=\"%s\"} %llu\n", name, label,
			names[i], (unsigned long long)v[i]);
}

/* Counts of events: lanes, TLS, control. */
static void
events(struct out *o)
{
	static const char *const tls_why[METRICS_TLS_FAIL_N] = {
		"peer_certificate", "protocol", "timeout"};
	static const char *const refused[METRICS_REFUSED_N] = {
		"permission", "invalid", "other"};
	static const char *const io[2] = {"pread", "io_uring"};
	static const char *const ws[METRICS_WS_N] = {"ahead", "late"};

	counter_by(o, "uffdd_lane_failures",
		   "Lanes lost before their migration completed.", "role",
		   roles, metrics.lane_failures, METRICS_ROLES);
	family(o, "uffdd_tls_handshakes", "counter",
	       "TLS handshakes completed with peers.");
	fprintf(o->f, "uffdd_tls_handshakes_total %llu\n",
		(unsigned long long)metrics.tls_handshakes);
	counter_by(o, "uffdd_tls_handshake_failures",
		   "Peer connections whose TLS handshake failed, by reason.",
		   "reason", tls_why, metrics.tls_failures, METRICS_TLS_FAIL_N);
	counter_by(o, "uffdd_image_reads",
		   "A restore's reads of its image file, by how: pread or "
		   "io_uring.",
		   "io", io, metrics.image_reads, 2);
	counter_by(o, "uffdd_image_read_bytes",
		   "Bytes a restore read from its image file, by how.", "io",
		   io, metrics.image_read_bytes, 2);
	counter_by(o, "uffdd_working_set_pages",
		   "A restore's working-set pages: sent in the set's order "
		   "before any fault asked (ahead), or already sent when their "
		   "turn came, a fault or the stream around one first (late).",
		   "outcome", ws, metrics.working_set, METRICS_WS_N);
	counter_by(o, "uffdd_control_refusals",
		   "Control requests refused, by reason.", "reason", refused,
		   metrics.refused, METRICS_REFUSED_N);
}

/* The histograms: no label per migration, so their count stays small. */
static void
histograms(struct out *o)
{
	char labels[32];

	family(o, "uffdd_demand_fault_latency_seconds", "histogram",
	       "Demand faults, fault to page installed (destination), "
	       "request to answer sent (source).");
	for (int r = 0; r < METRICS_ROLES; r++) {
		snprintf(labels, sizeof(labels), "role=\"%s\",", roles[r]);
		hist(o, "uffdd_demand_fault_latency_seconds", labels,
		     &metrics.fault[r], METRICS_FAULT_BASE_NS,
		     METRICS_FAULT_BUCKETS);
	}
	family(o, "uffdd_residency_seconds", "histogram",
	       "Destination: attach to every page present, of completed "
	       "migrations.");
	hist(o, "uffdd_residency_seconds", "", &metrics.residency,
	     METRICS_LONG_BASE_NS, METRICS_LONG_BUCKETS);
	family(o, "uffdd_precopy_freeze_seconds", "histogram",
	       "Source: pre-copy freeze time, source stopped to switchover.");
	hist(o, "uffdd_precopy_freeze_seconds", "", &metrics.freeze,
	     METRICS_LONG_BASE_NS, METRICS_LONG_BUCKETS);
}

/* The engine's own CPU time and resident memory. */
static void
process(struct out *o)
{
	struct rusage ru;
	unsigned long long size, rss = 0;
	FILE *f;

	if (getrusage(RUSAGE_SELF, &ru) == 0) {
		family(o, "process_cpu_seconds", "counter",
		       "CPU time of the daemon's engine, user and system.");
		fprintf(o->f, "process_cpu_seconds_total %.6f\n",
			(double)ru.ru_utime.tv_sec +
				(double)ru.ru_stime.tv_sec +
				((double)ru.ru_utime.tv_usec +
				 (double)ru.ru_stime.tv_usec) /
					1e6);
	}
	if ((f = fopen("/proc/self/statm", "r")) != NULL) {
		if (fscanf(f, "%llu %llu", &size, &rss) == 2) {
			family(o, "process_resident_memory_bytes", "gauge",
			       "Resident memory of the daemon's engine.");
			fprintf(o->f, "process_resident_memory_bytes %llu\n",
				rss * (unsigned long long)sysconf(
					      _SC_PAGESIZE));
		}
		fclose(f);
	}
}

char *
metrics_text(int om, size_t *len)
{
	struct out o = {NULL, om};
	char *buf = NULL;

	if ((o.f = open_memstream(&buf, len)) == NULL)
		fatal("open_memstream");
	family(&o, "uffdd_build", "info", "The daemon's version.");
	fprintf(o.f, "uffdd_build_info{version=\"%s\"} 1\n", UFFDD_VERSION);
	held(&o);
	moved(&o);
	pages(&o);
	events(&o);
	histograms(&o);
	process(&o);
	if (om)
		fputs("# EOF\n", o.f);
	if (fclose(o.f) != 0)
		fatal("metrics text");
	return buf;
}

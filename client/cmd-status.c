/* status [ID] [--json]: the daemon's migrations, as text or as JSON. */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "client/client.h"
#include "proto/frame.h"

/* A byte count for people: B, KiB, MiB, GiB or TiB, one decimal. */
const char *
human_bytes(double b, char *buf, size_t len)
{
	static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int i = 0;

	while (b >= 1024 && i < 4) {
		b /= 1024;
		i++;
	}
	snprintf(buf, len, "%.1f %s", b, u[i]);
	return buf;
}

/*
 * The status lines that list things (the threads that waited longest, the
 * pages lost, the pre-copy rounds), each shown only when it has any.
 */
static void
print_status_lists(const Uffdd__MigrationStatus *s)
{
	char b1[32], b2[32];

	if (s->n_threads) {
		printf("  blocktime    %.1f ms in all;", s->blocktime_ms);
		for (size_t i = 0; i < s->n_threads && i < 4; i++)
			printf(" tid %d %.1f ms (%" PRIu64 " faults)%s",
			       s->threads[i]->tid, s->threads[i]->ms,
			       s->threads[i]->faults,
			       i + 1 < s->n_threads && i < 3 ? "," : "");
		printf("%s\n", s->n_threads > 4 ? " ..." : "");
	}
	if (s->pages_lost) {
		printf("  LOST         %" PRIu64 " pages:", s->pages_lost);
		for (size_t i = 0; i < s->n_lost; i++)
			printf(" 0x%" PRIx64 "-0x%" PRIx64, s->lost[i]->start,
			       s->lost[i]->end);
		printf("%s\n", s->n_lost >= 16 ? " ..." : "");
	}
	if (s->precopy_rounds || strcmp(s->state, "precopy") == 0) {
		printf("  pre-copy     %u rounds, %s", s->precopy_rounds,
		       human_bytes((double)s->precopy_bytes, b1, sizeof(b1)));
		for (size_t i = 0; i < s->n_precopy_round_bytes; i++)
			printf("%s%s", i ? ", " : " (per round: ",
			       human_bytes((double)s->precopy_round_bytes[i],
					   b2, sizeof(b2)));
		printf("%s\n", s->n_precopy_round_bytes ? ")" : "");
	}
}

/* One migration's status, as people read it. */
void
print_status_text(const Uffdd__MigrationStatus *s)
{
	double pct = s->pages_total ? 100.0 * (double)s->pages_present /
					      (double)s->pages_total
				    : 0;
	char b1[32], b2[32];

	printf("migration %s (%s, pid %d%s%s)\n", s->id, s->role, s->pid,
	       s->peer[0] ? ", peer " : "", s->peer);
	printf("  state        %s%s%s\n", s->state, s->reason[0] ? ": " : "",
	       s->reason);
	if (s->deferred)
		printf("  deferred     waiting for go; destination %s%s\n",
		       s->attached ? "attached" : "not attached yet",
		       s->precopy_ready ? "; pre-copy rounds converged, "
					  "ready to switch over"
					: "");
	printf("  pages        %" PRIu64 " / %" PRIu64 " %s (%.1f%%), %" PRIu64
	       " remaining\n",
	       s->pages_present, s->pages_total,
	       strcmp(s->role, "source") == 0 ? "sent" : "present", pct,
	       s->pages_total - s->pages_present);
	if (strcmp(s->role, "source") == 0)
		printf("  demand       %" PRIu64 " requests, %" PRIu64
		       " pages\n",
		       s->demand_faults, s->demand_pages);
	else
		printf("  demand       %" PRIu64 " faults, %" PRIu64 " pages, "
		       "latency p50 %.0f us, p99 %.0f us\n",
		       s->demand_faults, s->demand_pages, s->latency_p50_us,
		       s->latency_p99_us);
	printf("  prefetched   %" PRIu64 " pages\n", s->prefetched_pages);
	printf("  zero pages   %" PRIu64, s->zero_pages);
	if (s->zero_content_pages)
		printf(" (%" PRIu64 " of them data found all zero)",
		       s->zero_content_pages);
	printf("\n");
	if (s->discarded_pages)
		printf("  discarded    %" PRIu64
		       " pages (the target gave them back)\n",
		       s->discarded_pages);
	if (s->reconnects)
		printf("  reconnects   %u\n", s->reconnects);
	printf("  kernel       %s\n", s->kernel);
	if (s->hinted_pages)
		printf("  hinted       %" PRIu64
		       " demand pages installed young "
		       "(ACCESS_LIKELY)\n",
		       s->hinted_pages);
	print_status_lists(s);
	if (s->downtime_ms > 0)
		printf("  freeze       %.1f ms (source stopped to %s)\n",
		       s->downtime_ms,
		       strcmp(s->role, "source") == 0 ? "switchover sent"
						      : "target running");
	printf("  moved        %s in %.2f s (%s/s)\n",
	       human_bytes((double)s->bytes, b1, sizeof(b1)), s->elapsed_s,
	       human_bytes(s->elapsed_s > 0 ? (double)s->bytes / s->elapsed_s
					    : 0,
			   b2, sizeof(b2)));
}

/* A string from the daemon, as JSON: printable UTF-8, as on a terminal. */
static json_object *
json_text(const char *text)
{
	char *copy = strdup(text);
	json_object *o;

	if (copy == NULL) {
		perror("uffd-client");
		exit(1);
	}
	/* JSON text is UTF-8 without controls: what is not goes as '?'. */
	text_clean(copy);
	o = json_object_new_string(copy);
	free(copy);
	return o;
}

/* A number printed with a fixed count of decimals, as it always was. */
static json_object *
json_fixed(int decimals, double v)
{
	char buf[64];

	snprintf(buf, sizeof(buf), "%.*f", decimals, v);
	return json_object_new_double_s(v, buf);
}

/* The threads that waited longest for pages, and where pages were lost. */
static void
json_threads_lost(json_object *o, const Uffdd__MigrationStatus *s)
{
	json_object *threads = json_object_new_array();
	json_object *lost = json_object_new_array();

	for (size_t i = 0; i < s->n_threads; i++) {
		json_object *t = json_object_new_object();

		json_object_object_add(t, "tid",
				       json_object_new_int(s->threads[i]->tid));
		json_object_object_add(t, "ms",
				       json_fixed(3, s->threads[i]->ms));
		json_object_object_add(
			t, "faults",
			json_object_new_uint64(s->threads[i]->faults));
		json_object_array_add(threads, t);
	}
	json_object_object_add(o, "threads", threads);
	for (size_t i = 0; i < s->n_lost; i++) {
		json_object *r = json_object_new_array();

		json_object_array_add(
			r, json_object_new_uint64(s->lost[i]->start));
		json_object_array_add(r,
				      json_object_new_uint64(s->lost[i]->end));
		json_object_array_add(lost, r);
	}
	json_object_object_add(o, "lost", lost);
}

/* Pre-copy's keys: rounds, bytes (in all and per round), freeze time. */
static void
json_precopy(json_object *o, const Uffdd__MigrationStatus *s)
{
	json_object *rounds = json_object_new_array();

	for (size_t i = 0; i < s->n_precopy_round_bytes; i++)
		json_object_array_add(
			rounds,
			json_object_new_uint64(s->precopy_round_bytes[i]));
	json_object_object_add(o, "precopy_rounds",
			       json_object_new_uint64(s->precopy_rounds));
	json_object_object_add(o, "precopy_bytes",
			       json_object_new_uint64(s->precopy_bytes));
	json_object_object_add(o, "precopy_round_bytes", rounds);
	json_object_object_add(o, "downtime_ms", json_fixed(3, s->downtime_ms));
}

/*
 * One migration's status as a JSON object, its keys in the order scripts
 * have always seen them (newer keys last).
 */
static json_object *
status_json(const Uffdd__MigrationStatus *s)
{
	json_object *o = json_object_new_object();
	const struct {
		const char *key;
		uint64_t v;
	} counts[] = {
		{"pages_total", s->pages_total},
		{"pages_present", s->pages_present},
		{"pages_remaining", s->pages_total - s->pages_present},
		{"demand_faults", s->demand_faults},
		{"demand_pages", s->demand_pages},
		{"prefetched_pages", s->prefetched_pages},
		{"discarded_pages", s->discarded_pages},
		{"zero_pages", s->zero_pages},
		{"bytes", s->bytes},
	};

	json_object_object_add(o, "id", json_text(s->id));
	json_object_object_add(o, "role", json_text(s->role));
	json_object_object_add(o, "state", json_text(s->state));
	json_object_object_add(o, "reason", json_text(s->reason));
	json_object_object_add(o, "peer", json_text(s->peer));
	json_object_object_add(o, "pid", json_object_new_int(s->pid));
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
		json_object_object_add(o, counts[i].key,
				       json_object_new_uint64(counts[i].v));
	json_object_object_add(o, "elapsed_s", json_fixed(6, s->elapsed_s));
	json_object_object_add(
		o, "throughput_bps",
		json_fixed(0, s->elapsed_s > 0 ? (double)s->bytes / s->elapsed_s
					       : 0));
	json_object_object_add(o, "latency_p50_us",
			       json_fixed(1, s->latency_p50_us));
	json_object_object_add(o, "latency_p99_us",
			       json_fixed(1, s->latency_p99_us));
	json_object_object_add(o, "pages_lost",
			       json_object_new_uint64(s->pages_lost));
	json_object_object_add(o, "reconnects",
			       json_object_new_uint64(s->reconnects));
	json_object_object_add(o, "hinted_pages",
			       json_object_new_uint64(s->hinted_pages));
	json_object_object_add(o, "zero_content_pages",
			       json_object_new_uint64(s->zero_content_pages));
	json_object_object_add(o, "blocktime_ms",
			       json_fixed(3, s->blocktime_ms));
	json_threads_lost(o, s);
	json_object_object_add(o, "kernel", json_text(s->kernel));
	json_precopy(o, s);
	json_object_object_add(o, "deferred",
			       json_object_new_boolean(s->deferred));
	json_object_object_add(o, "attached",
			       json_object_new_boolean(s->attached));
	json_object_object_add(o, "precopy_ready",
			       json_object_new_boolean(s->precopy_ready));
	return o;
}

/*
 * The reply as JSON on one line: the migration asked for as an object, all
 * of them (or an unknown ID: none) as an array. Compact, no space after
 * ':' or ',': scripts match it with sed and grep.
 */
static void
print_status_json(const Uffdd__StatusReply *rep, int one)
{
	json_object *o;

	if (one && rep->n_migrations == 1) {
		o = status_json(rep->migrations[0]);
	} else {
		o = json_object_new_array();
		for (size_t i = 0; i < rep->n_migrations; i++)
			json_object_array_add(o,
					      status_json(rep->migrations[i]));
	}
	printf("%s\n", json_object_to_json_string_ext(
			       o, JSON_C_TO_STRING_PLAIN |
					  JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
}
/* The status of migration id, or of all ("" or NULL). */
static Uffdd__StatusReply *
get_status(int fd, const char *id)
{
	Uffdd__StatusRequest req = UFFDD__STATUS_REQUEST__INIT;

	req.id = (char *)(id ? id : "");
	return (Uffdd__StatusReply *)call(fd, FRAME_CTL_STATUS, &req.base,
					  FRAME_CTL_STATUS_REPLY);
}

/* status [ID] [--json] */
int
cmd_status(const struct cmd_entry *self, int argc, char **argv)
{
	static const struct option o[] = {{"json", no_argument, NULL, 'j'},
					  {NULL, 0, NULL, 0}};
	Uffdd__StatusReply *rep;
	int json = 0, ch, fd;

	while ((ch = getopt_long(argc, argv, "j", o, NULL)) != -1) {
		if (ch != 'j')
			die_usage(self->usage);
		json = 1;
	}
	if (argc - optind > 1)
		die_usage(self->usage);
	if (optind < argc)
		check_id(argv[optind], self->usage);
	fd = connect_daemon();
	rep = get_status(fd, optind < argc ? argv[optind] : NULL);
	if (json) {
		print_status_json(rep, optind < argc);
	} else if (rep->n_migrations == 0) {
		printf("no migrations\n");
	} else {
		for (size_t i = 0; i < rep->n_migrations; i++)
			print_status_text(rep->migrations[i]);
	}
	frame_free(&rep->base);
	close(fd);
	return 0;
}

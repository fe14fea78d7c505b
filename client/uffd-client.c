/* uffd-client: a thin command line over uffdd's control socket. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "proto/frame.h"
#include "proto/range.h"
#include "client/client.h"

#define DEFAULT_CONTROL "/run/uffdd/control.sock"

const char *control_path;

struct cmd {
	const char *name;
	const char *usage;
	int (*fn)(int argc, char **argv);
};

void
die_usage(const char *u)
{
	fprintf(stderr, "usage: uffd-client [--control PATH] %s\n", u);
	exit(2);
}

static int quiet_connect; /* wait_for() says it once itself */

/* Connects to the daemon at control_path; -1 (reported) when it cannot. */
int
connect_daemon_try(void)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	int fd;

	if (strlen(control_path) >= sizeof(sun.sun_path)) {
		fprintf(stderr, "uffd-client: control socket path too long\n");
		return -1;
	}
	strcpy(sun.sun_path, control_path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		if (quiet_connect)
			;
		else if (errno == ENOENT || errno == ECONNREFUSED)
			fprintf(stderr,
				"uffd-client: uffdd is not running (no "
				"daemon at %s): start it (systemctl start "
				"uffdd) or point --control/UFFDD_CONTROL at "
				"its socket\n",
				control_path);
		else if (errno == EACCES || errno == EPERM)
			fprintf(stderr,
				"uffd-client: %s: permission denied: "
				"the control socket is for root\n",
				control_path);
		else
			fprintf(stderr, "uffd-client: %s: %s\n", control_path,
				strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* Connects to the daemon at control_path; exits when it cannot. */
int
connect_daemon(void)
{
	int fd = connect_daemon_try();

	if (fd < 0)
		exit(1);
	return fd;
}

/*
 * Sends a request and waits for its reply. An Error reply is printed and
 * returns NULL; so does a broken connection. Every string of the reply
 * (reasons, region names, peers: some a peer's words) is made printable
 * UTF-8 first, control characters and invalid bytes '?' (text_clean()),
 * as the daemon's log has them: nothing reaches the terminal raw.
 */
ProtobufCMessage *
call_try(int fd, uint16_t type, const ProtobufCMessage *req, uint16_t want)
{
	ProtobufCMessage *rep;
	uint16_t got;

	if (frame_send_fd(fd, type, req) < 0 ||
	    frame_recv_fd(fd, &got, &rep) < 0) {
		fprintf(stderr, "uffd-client: uffdd at %s: %s\n", control_path,
			errno == ECONNRESET ? "closed the connection"
					    : strerror(errno));
		return NULL;
	}
	frame_clean_strings(rep);
	if (got == FRAME_ERROR) {
		fprintf(stderr, "uffd-client: %s\n",
			((Uffdd__Error *)rep)->message);
		frame_free(rep);
		return NULL;
	}
	if (got != want) {
		fprintf(stderr, "uffd-client: unexpected %s reply\n",
			frame_type_name(got));
		frame_free(rep);
		return NULL;
	}
	return rep;
}

/* call_try() for commands that end at the first error. */
ProtobufCMessage *
call(int fd, uint16_t type, const ProtobufCMessage *req, uint16_t want)
{
	ProtobufCMessage *rep = call_try(fd, type, req, want);

	if (rep == NULL)
		exit(1);
	return rep;
}

/* A migration ID: 32 hex digits (an empty one would mean "all"). */
static void
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

static pid_t
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

static Uffdd__Range **
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

static void
free_ranges(Uffdd__Range **rs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(rs[i]);
	free(rs);
}

static const char *
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

static void
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
	if (s->reconnects)
		printf("  reconnects   %u\n", s->reconnects);
	printf("  kernel       %s\n", s->kernel);
	if (s->hinted_pages)
		printf("  hinted       %" PRIu64
		       " demand pages installed young "
		       "(ACCESS_LIKELY)\n",
		       s->hinted_pages);
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
	printf("  moved        %s in %.2f s (%s/s)\n",
	       human_bytes((double)s->bytes, b1, sizeof(b1)), s->elapsed_s,
	       human_bytes(s->elapsed_s > 0 ? (double)s->bytes / s->elapsed_s
					    : 0,
			   b2, sizeof(b2)));
}

static void
json_str(const char *k, const char *text, int comma)
{
	char *copy = strdup(text), *v = copy;

	if (copy == NULL) {
		perror("uffd-client");
		exit(1);
	}
	/* JSON text is UTF-8 without controls: what is not goes as '?'. */
	text_clean(copy);
	printf("\"%s\":\"", k);
	for (; *v; v++) {
		if (*v == '"' || *v == '\\')
			putchar('\\');
		putchar(*v);
	}
	printf("\"%s", comma ? "," : "");
	free(copy);
}

static void
print_status_json(const Uffdd__MigrationStatus *s)
{
	printf("{");
	json_str("id", s->id, 1);
	json_str("role", s->role, 1);
	json_str("state", s->state, 1);
	json_str("reason", s->reason, 1);
	json_str("peer", s->peer, 1);
	printf("\"pid\":%d,\"pages_total\":%" PRIu64
	       ",\"pages_present\":%" PRIu64 ",\"pages_remaining\":%" PRIu64
	       ",\"demand_faults\":%" PRIu64 ",\"demand_pages\":%" PRIu64
	       ",\"prefetched_pages\":%" PRIu64 ",\"zero_pages\":%" PRIu64
	       ",\"bytes\":%" PRIu64
	       ",\"elapsed_s\":%.6f,\"throughput_bps\":%.0f"
	       ",\"latency_p50_us\":%.1f,\"latency_p99_us\":%.1f"
	       ",\"pages_lost\":%" PRIu64 ",\"reconnects\":%u,",
	       s->pid, s->pages_total, s->pages_present,
	       s->pages_total - s->pages_present, s->demand_faults,
	       s->demand_pages, s->prefetched_pages, s->zero_pages, s->bytes,
	       s->elapsed_s,
	       s->elapsed_s > 0 ? (double)s->bytes / s->elapsed_s : 0,
	       s->latency_p50_us, s->latency_p99_us, s->pages_lost,
	       s->reconnects);
	printf("\"hinted_pages\":%" PRIu64 ",\"zero_content_pages\":%" PRIu64
	       ",",
	       s->hinted_pages, s->zero_content_pages);
	printf("\"blocktime_ms\":%.3f,\"threads\":[", s->blocktime_ms);
	for (size_t i = 0; i < s->n_threads; i++)
		printf("%s{\"tid\":%d,\"ms\":%.3f,\"faults\":%" PRIu64 "}",
		       i ? "," : "", s->threads[i]->tid, s->threads[i]->ms,
		       s->threads[i]->faults);
	printf("],");
	printf("\"lost\":[");
	for (size_t i = 0; i < s->n_lost; i++)
		printf("%s[%" PRIu64 ",%" PRIu64 "]", i ? "," : "",
		       s->lost[i]->start, s->lost[i]->end);
	printf("],");
	json_str("kernel", s->kernel, 0);
	printf("}");
}

static Uffdd__StatusReply *
get_status(int fd, const char *id)
{
	Uffdd__StatusRequest req = UFFDD__STATUS_REQUEST__INIT;

	req.id = (char *)(id ? id : "");
	return (Uffdd__StatusReply *)call(fd, FRAME_CTL_STATUS, &req.base,
					  FRAME_CTL_STATUS_REPLY);
}

static int
cmd_status(int argc, char **argv)
{
	static const char *u = "status [ID] [--json]";
	static const struct option o[] = {{"json", no_argument, NULL, 'j'},
					  {NULL, 0, NULL, 0}};
	Uffdd__StatusReply *rep;
	int json = 0, ch, fd;

	while ((ch = getopt_long(argc, argv, "j", o, NULL)) != -1) {
		if (ch != 'j')
			die_usage(u);
		json = 1;
	}
	if (argc - optind > 1)
		die_usage(u);
	if (optind < argc)
		check_id(argv[optind], u);
	fd = connect_daemon();
	rep = get_status(fd, optind < argc ? argv[optind] : NULL);
	if (json) {
		if (optind < argc && rep->n_migrations == 1) {
			print_status_json(rep->migrations[0]);
		} else {
			printf("[");
			for (size_t i = 0; i < rep->n_migrations; i++) {
				if (i)
					printf(",");
				print_status_json(rep->migrations[i]);
			}
			printf("]");
		}
		printf("\n");
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

/*
 * A bar redrawn in place on a terminal; elsewhere (logs, CI) one plain line
 * a second, so that progress is visible there too.
 */
static void
progress(const Uffdd__MigrationStatus *s, int tty)
{
	static time_t last;
	double f = s->pages_total
			   ? (double)s->pages_present / (double)s->pages_total
			   : 0;
	char b1[32], b2[32];
	int w = 30, fill = (int)(f * w);

	human_bytes((double)s->bytes, b1, sizeof(b1));
	human_bytes(s->elapsed_s > 0 ? (double)s->bytes / s->elapsed_s : 0, b2,
		    sizeof(b2));
	if (tty) {
		fprintf(stderr,
			"\r[%.*s%*s] %5.1f%%  %s  %s/s  faults %" PRIu64 "  ",
			fill, "##############################", w - fill, "",
			100 * f, b1, b2, s->demand_faults);
	} else if (time(NULL) != last) {
		last = time(NULL);
		fprintf(stderr, "  %5.1f%%  %s  %s/s  faults %" PRIu64 "  %s\n",
			100 * f, b1, b2, s->demand_faults, s->state);
	}
}

/* How long wait_for() waits for a daemon that went away to come back. */
#define REJOIN_SECS 120

static double
since(const struct timespec *t0)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t0->tv_sec) +
	       (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

/*
 * The daemon went away (restarted, say: migrations survive that): wait
 * for it to answer again, up to REJOIN_SECS or the timeout. Returns the
 * new connection, or -1.
 */
static int
rejoin(double timeout, const struct timespec *t0)
{
	struct timespec lost, tick = {0, 500 * 1000 * 1000};
	int fd;

	fprintf(stderr, "uffd-client: lost uffdd at %s; waiting for it\n",
		control_path);
	clock_gettime(CLOCK_MONOTONIC, &lost);
	quiet_connect = 1;
	while ((fd = connect_daemon_try()) < 0 && since(&lost) < REJOIN_SECS &&
	       (timeout <= 0 || since(t0) < timeout))
		nanosleep(&tick, NULL);
	quiet_connect = 0;
	if (fd < 0)
		fprintf(stderr, "uffd-client: uffdd at %s did not come back\n",
			control_path);
	return fd;
}

/* Polls status until the migration ends; 0 complete, 1 failed, 3 timeout. */
int
wait_for(const char *id, double timeout)
{
	struct timespec t0, now, tick = {0, 100 * 1000 * 1000};
	int fd = connect_daemon(), tty = isatty(2), rc;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		Uffdd__StatusRequest req = UFFDD__STATUS_REQUEST__INIT;
		Uffdd__StatusReply *rep;
		const Uffdd__MigrationStatus *s;

		req.id = (char *)id;
		rep = (Uffdd__StatusReply *)call_try(fd, FRAME_CTL_STATUS,
						     &req.base,
						     FRAME_CTL_STATUS_REPLY);
		if (rep == NULL) {
			close(fd);
			if ((fd = rejoin(timeout, &t0)) < 0)
				return 1;
			continue;
		}

		/* [0] is the migration itself; forked children follow. */
		if (rep->n_migrations == 0) {
			fprintf(stderr, "uffd-client: unknown migration ID\n");
			frame_free(&rep->base);
			exit(1);
		}
		s = rep->migrations[0];
		progress(s, tty);
		if (strcmp(s->state, "complete") == 0 ||
		    strcmp(s->state, "failed") == 0) {
			if (tty)
				fprintf(stderr, "\n");
			if (strcmp(s->state, "failed") == 0) {
				fprintf(stderr,
					"uffd-client: migration %s "
					"failed: %s\n",
					id, s->reason);
				rc = 1;
			} else {
				print_status_text(s);
				rc = 0;
			}
			frame_free(&rep->base);
			break;
		}
		frame_free(&rep->base);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (timeout > 0 &&
		    (double)(now.tv_sec - t0.tv_sec) +
				    (double)(now.tv_nsec - t0.tv_nsec) / 1e9 >
			    timeout) {
			if (tty)
				fprintf(stderr, "\n");
			fprintf(stderr,
				"uffd-client: migration %s not done "
				"after %.0f s\n",
				id, timeout);
			rc = 3;
			break;
		}
		nanosleep(&tick, NULL);
	}
	close(fd);
	return rc;
}

static int
cmd_wait(int argc, char **argv)
{
	static const char *u = "wait ID [--timeout SEC]";
	static const struct option o[] = {
		{"timeout", required_argument, NULL, 't'}, {NULL, 0, NULL, 0}};
	double timeout = 0;
	char *end;
	int ch;

	while ((ch = getopt_long(argc, argv, "t:", o, NULL)) != -1) {
		if (ch != 't')
			die_usage(u);
		timeout = strtod(optarg, &end);
		if (*end || end == optarg || !(timeout > 0) || timeout > 1e9)
			die_usage(u);
	}
	if (argc - optind != 1)
		die_usage(u);
	check_id(argv[optind], u);
	return wait_for(argv[optind], timeout);
}

static int
cmd_export(int argc, char **argv)
{
	static const char *u = "export PID [--range START-END]... "
			       "[--keep-source]";
	static const struct option o[] = {
		{"range", required_argument, NULL, 'r'},
		{"keep-source", no_argument, NULL, 'k'},
		{NULL, 0, NULL, 0}};
	Uffdd__ExportRequest req = UFFDD__EXPORT_REQUEST__INIT;
	Uffdd__ExportReply *rep;
	int ch, fd;

	while ((ch = getopt_long(argc, argv, "r:k", o, NULL)) != -1) {
		if (ch == 'r')
			req.ranges =
				add_range(req.ranges, &req.n_ranges, optarg, u);
		else if (ch == 'k')
			req.keep_source = 1;
		else
			die_usage(u);
	}
	if (argc - optind != 1)
		die_usage(u);
	req.pid = parse_pid(argv[optind], u);
	fd = connect_daemon();
	rep = (Uffdd__ExportReply *)call(fd, FRAME_CTL_EXPORT, &req.base,
					 FRAME_CTL_EXPORT_REPLY);
	printf("%s\n", rep->id);
	frame_free(&rep->base);
	free_ranges(req.ranges, req.n_ranges);
	close(fd);
	return 0;
}

void
print_regions(const char *what, Uffdd__Region **r, size_t n, FILE *f)
{
	for (size_t i = 0; i < n; i++)
		fprintf(f,
			"%s 0x%" PRIx64 "-0x%" PRIx64 " %s (%" PRIu64
			" pages)\n",
			what, r[i]->start, r[i]->start + r[i]->length,
			r[i]->name,
			r[i]->length / (r[i]->page_size ? r[i]->page_size : 1));
}

static int
cmd_attach(int argc, char **argv)
{
	static const char *u = "attach PID --from HOST:PORT --id ID "
			       "[--range START-END]... [--map SRC:DST]... "
			       "[--pin SHA256] [--wait]";
	static const struct option o[] = {
		{"from", required_argument, NULL, 'F'},
		{"id", required_argument, NULL, 'i'},
		{"range", required_argument, NULL, 'r'},
		{"wait", no_argument, NULL, 'w'},
		{"map", required_argument, NULL, 'm'},
		{"pin", required_argument, NULL, 'p'},
		{NULL, 0, NULL, 0}};
	Uffdd__AttachRequest req = UFFDD__ATTACH_REQUEST__INIT;
	Uffdd__AttachReply *rep;
	int ch, fd, wait = 0, rc = 0;
	char id[64];

	while ((ch = getopt_long(argc, argv, "F:i:r:w", o, NULL)) != -1) {
		switch (ch) {
		case 'F':
			req.from = optarg;
			break;
		case 'i':
			req.id = optarg;
			break;
		case 'p':
			/* The daemon checks it: one parser, in tls.c. */
			req.pin = optarg;
			break;
		case 'r':
			req.ranges =
				add_range(req.ranges, &req.n_ranges, optarg, u);
			break;
		case 'w':
			wait = 1;
			break;
		case 'm': {
			Uffdd__RegionMap *mp = malloc(sizeof(*mp));
			char *end;

			if (mp == NULL)
				exit(1);
			uffdd__region_map__init(mp);
			errno = 0;
			mp->src_start = strtoull(optarg, &end, 16);
			if (errno || *end != ':' || end == optarg) {
				fprintf(stderr,
					"uffd-client: --map %s: want "
					"SRC_START:DST_START in hex\n",
					optarg);
				die_usage(u);
			}
			mp->dst_start = strtoull(end + 1, &end, 16);
			if (errno || *end || mp->dst_start == 0 ||
			    mp->src_start % 4096 || mp->dst_start % 4096) {
				fprintf(stderr,
					"uffd-client: --map %s: want "
					"page-aligned SRC_START:DST_START in "
					"hex\n",
					optarg);
				die_usage(u);
			}
			req.maps = realloc(req.maps, (req.n_maps + 1) *
							     sizeof(*req.maps));
			if (req.maps == NULL)
				exit(1);
			req.maps[req.n_maps++] = mp;
			break;
		}
		default:
			die_usage(u);
		}
	}
	if (argc - optind != 1 || req.from[0] == '\0' || req.id[0] == '\0')
		die_usage(u);
	/* One source region onto one target address, each at most once. */
	for (size_t i = 0; i < req.n_maps; i++)
		for (size_t j = i + 1; j < req.n_maps; j++)
			if (req.maps[i]->src_start == req.maps[j]->src_start ||
			    req.maps[i]->dst_start == req.maps[j]->dst_start) {
				fprintf(stderr,
					"uffd-client: --map %" PRIx64
					":%" PRIx64 " and %" PRIx64 ":%" PRIx64
					" name the same %s\n",
					req.maps[i]->src_start,
					req.maps[i]->dst_start,
					req.maps[j]->src_start,
					req.maps[j]->dst_start,
					req.maps[i]->src_start ==
							req.maps[j]->src_start
						? "source region"
						: "target address");
				die_usage(u);
			}
	req.pid = parse_pid(argv[optind], u);
	fd = connect_daemon();
	rep = (Uffdd__AttachReply *)call(fd, FRAME_CTL_ATTACH, &req.base,
					 FRAME_CTL_ATTACH_REPLY);
	print_regions("attached", rep->matched, rep->n_matched, stdout);
	print_regions("unmatched", rep->unmatched, rep->n_unmatched, stdout);
	snprintf(id, sizeof(id), "%s", rep->id);
	frame_free(&rep->base);
	free_ranges(req.ranges, req.n_ranges);
	for (size_t i = 0; i < req.n_maps; i++)
		free(req.maps[i]);
	free(req.maps);
	close(fd);
	if (wait)
		rc = wait_for(id, 0);
	return rc;
}

static const struct cmd cmds[] = {
	{"export", "export PID [--range START-END]... [--keep-source]",
	 cmd_export},
	{"attach",
	 "attach PID --from HOST:PORT --id ID [--range START-END]... "
	 "[--map SRC:DST]... [--pin SHA256] [--wait]",
	 cmd_attach},
	{"status", "status [ID] [--json]", cmd_status},
	{"wait", "wait ID [--timeout SEC]", cmd_wait},
	{"migrate-qemu",
	 "migrate-qemu --src-qmp SOCK --dst-qmp SOCK --src-control PATH "
	 "--dst-control PATH --src-peer HOST:PORT [--no-resume] "
	 "[--timeout SEC]",
	 cmd_migrate_qemu},
	{"qmp", "qmp SOCK COMMAND [ARGUMENTS-JSON]", cmd_qmp},
};

static void
usage(FILE *f)
{
	fprintf(f, "usage: uffd-client [--control PATH] COMMAND [ARGS]\n\n"
		   "commands:\n");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(f, "  %s\n", cmds[i].usage);
	fprintf(f,
		"\nThe control socket is --control, else $UFFDD_CONTROL, "
		"else %s.\n",
		DEFAULT_CONTROL);
}

int
main(int argc, char **argv)
{
	int i = 1;

	/* A daemon that goes away is an error to report, not a signal. */
	signal(SIGPIPE, SIG_IGN);
	control_path = getenv("UFFDD_CONTROL");
	if (control_path == NULL || *control_path == '\0')
		control_path = DEFAULT_CONTROL;
	while (i < argc && argv[i][0] == '-') {
		if (strcmp(argv[i], "--control") == 0 && i + 1 < argc) {
			control_path = argv[i + 1];
			i += 2;
		} else if (strncmp(argv[i], "--control=", 10) == 0) {
			control_path = argv[i] + 10;
			i++;
		} else if (strcmp(argv[i], "--help") == 0 ||
			   strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (i >= argc) {
		usage(stderr);
		return 2;
	}
	for (size_t k = 0; k < sizeof(cmds) / sizeof(cmds[0]); k++) {
		if (strcmp(argv[i], cmds[k].name) == 0) {
			optind = 1;
			return cmds[k].fn(argc - i, argv + i);
		}
	}
	fprintf(stderr, "uffd-client: unknown command %s\n", argv[i]);
	usage(stderr);
	return 2;
}

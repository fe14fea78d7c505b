/*
 * attach PID --from HOST:PORT --id ID ...: a process to fill post-copy
 * from a source daemon's export; attach PID --image FILE ...: from a
 * snapshot image, which the daemon serves to itself.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/client.h"
#include "proto/frame.h"

/*
 * attach --record-working-set defaults: what a target faults in its first
 * 10 seconds, at most 65536 pages (the daemon's limit, MIG_WS_MAX: one
 * status frame carries them).
 */
#define WS_FAULTS_DEFAULT 65536
#define WS_SECS_DEFAULT 10

/* A positive number of at most max for option name; else usage. */
static uint32_t
parse_u32(const char *arg, const char *name, unsigned long max, const char *u)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(arg, &end, 10);
	if (errno || *end || end == arg || v == 0 || v > max) {
		fprintf(stderr, "uffd-client: %s %s: want 1 to %lu\n", name,
			arg, max);
		die_usage(u);
	}
	return (uint32_t)v;
}

/* A working set is stored in the image restored from: --image only. */
static void
check_ws(Uffdd__AttachRequest *req, const char *image, const char *u)
{
	if ((req->ws_faults || req->ws_secs) && !req->record_working_set)
		die_usage(u);
	if (req->record_working_set && image == NULL)
		die_usage(u);
	if (req->record_working_set && req->ws_faults == 0)
		req->ws_faults = WS_FAULTS_DEFAULT;
	if (req->record_working_set && req->ws_secs == 0)
		req->ws_secs = WS_SECS_DEFAULT;
}

/* The regions a reply names, one line each. */
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

/*
 * --map NAME=DST_START: the source region named NAME (export --range
 * START-END=NAME) at DST_START. Its name is malloc'd, freed with it.
 */
static int
name_map(Uffdd__RegionMap *mp, const char *arg, const char *u)
{
	const char *eq = strchr(arg, '=');
	char *end;

	if (eq == NULL)
		return 0;
	errno = 0;
	mp->dst_start = strtoull(eq + 1, &end, 16);
	if (eq == arg || errno || *end || end == eq + 1 || mp->dst_start == 0 ||
	    mp->dst_start % 4096) {
		fprintf(stderr,
			"uffd-client: --map %s: want NAME=DST_START, "
			"DST_START page aligned in hex\n",
			arg);
		die_usage(u);
	}
	if ((mp->src_name = strndup(arg, (size_t)(eq - arg))) == NULL)
		exit(1);
	return 1;
}

/*
 * Adds --map SRC_START:DST_START (hex, page aligned) or NAME=DST_START
 * to the request.
 */
static void
add_map(Uffdd__AttachRequest *req, const char *arg, const char *u)
{
	Uffdd__RegionMap *mp = malloc(sizeof(*mp));
	char *end;

	if (mp == NULL)
		exit(1);
	uffdd__region_map__init(mp);
	if (name_map(mp, arg, u))
		goto add;
	errno = 0;
	mp->src_start = strtoull(arg, &end, 16);
	if (errno || *end != ':' || end == arg) {
		fprintf(stderr,
			"uffd-client: --map %s: want "
			"SRC_START:DST_START in hex\n",
			arg);
		die_usage(u);
	}
	mp->dst_start = strtoull(end + 1, &end, 16);
	if (errno || *end || mp->dst_start == 0 || mp->src_start % 4096 ||
	    mp->dst_start % 4096) {
		fprintf(stderr,
			"uffd-client: --map %s: want "
			"page-aligned SRC_START:DST_START in "
			"hex\n",
			arg);
		die_usage(u);
	}
add:
	req->maps = realloc(req->maps, (req->n_maps + 1) * sizeof(*req->maps));
	if (req->maps == NULL)
		exit(1);
	req->maps[req->n_maps++] = mp;
}

/* Whether two maps name the same source region (by address or name). */
static int
same_source(const Uffdd__RegionMap *a, const Uffdd__RegionMap *b)
{
	if (a->src_name[0] || b->src_name[0])
		return strcmp(a->src_name, b->src_name) == 0;
	return a->src_start == b->src_start;
}

/* A map as it was given: NAME=DST or SRC:DST. */
static void
map_text(const Uffdd__RegionMap *m, char *buf, size_t len)
{
	if (m->src_name[0])
		snprintf(buf, len, "%s=%" PRIx64, m->src_name, m->dst_start);
	else
		snprintf(buf, len, "%" PRIx64 ":%" PRIx64, m->src_start,
			 m->dst_start);
}

/* One source region onto one target address, each at most once. */
static void
check_maps(const Uffdd__AttachRequest *req, const char *u)
{
	char a[320], b[320];

	for (size_t i = 0; i < req->n_maps; i++)
		for (size_t j = i + 1; j < req->n_maps; j++) {
			int src = same_source(req->maps[i], req->maps[j]);

			if (!src &&
			    req->maps[i]->dst_start != req->maps[j]->dst_start)
				continue;
			map_text(req->maps[i], a, sizeof(a));
			map_text(req->maps[j], b, sizeof(b));
			fprintf(stderr,
				"uffd-client: --map %s and %s name the same "
				"%s\n",
				a, b, src ? "source region" : "target address");
			die_usage(u);
		}
}

/* The options of attach into req, image and wait (argv's rest: PID). */
static void
attach_options(int argc, char **argv, Uffdd__AttachRequest *req,
	       const char **image, int *wait, const char *u)
{
	static const struct option o[] = {
		{"from", required_argument, NULL, 'F'},
		{"id", required_argument, NULL, 'i'},
		{"range", required_argument, NULL, 'r'},
		{"wait", no_argument, NULL, 'w'},
		{"map", required_argument, NULL, 'm'},
		{"pin", required_argument, NULL, 'p'},
		{"image", required_argument, NULL, 'I'},
		{"record-working-set", no_argument, NULL, 'R'},
		{"ws-faults", required_argument, NULL, 'N'},
		{"ws-secs", required_argument, NULL, 'S'},
		{"wait-export", required_argument, NULL, 'E'},
		{"hold-bulk", no_argument, NULL, 'H'},
		{"precopy-no-hold", no_argument, NULL, 'P'},
		{NULL, 0, NULL, 0}};
	int ch;

	while ((ch = getopt_long(argc, argv, "F:i:r:w", o, NULL)) != -1) {
		switch (ch) {
		case 'F':
			req->from = optarg;
			break;
		case 'i':
			req->id = optarg;
			break;
		case 'p':
			/* The daemon checks it: one parser, in tls.c. */
			req->pin = optarg;
			break;
		case 'r':
			req->ranges = add_range(req->ranges, &req->n_ranges,
						optarg, u);
			break;
		case 'w':
			*wait = 1;
			break;
		case 'm':
			add_map(req, optarg, u);
			break;
		case 'I':
			*image = optarg;
			break;
		case 'R':
			req->record_working_set = 1;
			break;
		case 'N':
			req->ws_faults =
				parse_u32(optarg, "--ws-faults", 65536, u);
			break;
		case 'S':
			req->ws_secs = parse_u32(optarg, "--ws-secs", 3600, u);
			break;
		case 'E':
			req->export_wait_secs =
				parse_u32(optarg, "--wait-export", 3600, u);
			break;
		case 'H':
			req->hold_bulk = 1;
			break;
		case 'P':
			req->precopy_no_hold = 1;
			break;
		default:
			die_usage(u);
		}
	}
}

/* attach PID --from HOST:PORT --id ID ... [--wait] */
int
cmd_attach(const struct cmd_entry *self, int argc, char **argv)
{
	const char *u = self->usage, *image = NULL;
	Uffdd__AttachRequest req = UFFDD__ATTACH_REQUEST__INIT;
	Uffdd__AttachReply *rep;
	int fd, wait = 0, rc = 0;
	char id[64];

	attach_options(argc, argv, &req, &image, &wait, u);
	if (argc - optind != 1)
		die_usage(u);
	/* From a source daemon, or from an image: one or the other. */
	if (image ? req.from[0] || req.id[0] || req.pin[0] || !*image ||
			    req.export_wait_secs
		  : req.from[0] == '\0' || req.id[0] == '\0')
		die_usage(u);
	check_ws(&req, image, u);
	check_maps(&req, u);
	req.pid = parse_pid(argv[optind], u);
	req.image = image != NULL;
	fd = connect_daemon();
	if (image)
		rep = (Uffdd__AttachReply *)call_with_file(
			fd, FRAME_CTL_ATTACH, &req.base, FRAME_CTL_ATTACH_REPLY,
			image);
	else
		rep = (Uffdd__AttachReply *)call(fd, FRAME_CTL_ATTACH,
						 &req.base,
						 FRAME_CTL_ATTACH_REPLY);
	print_regions("attached", rep->matched, rep->n_matched, stdout);
	print_regions("unmatched", rep->unmatched, rep->n_unmatched, stdout);
	/* Attached: said now, not when --wait ends (stdout may be a file). */
	fflush(stdout);
	snprintf(id, sizeof(id), "%s", rep->id);
	frame_free(&rep->base);
	free_ranges(req.ranges, req.n_ranges);
	for (size_t i = 0; i < req.n_maps; i++) {
		if (req.maps[i]->src_name[0])
			free(req.maps[i]->src_name);
		free(req.maps[i]);
	}
	free(req.maps);
	close(fd);
	if (req.record_working_set)
		rc = image_learn(id, image);
	if (wait && rc == 0)
		rc = wait_for(id, 0);
	return rc;
}

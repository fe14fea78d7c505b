/*
 * export PID [--range START-END]... [--keep-source] [--id ID] [--deferred]
 * [--precopy [--max-rounds N] [--precopy-threshold BYTES]
 * [--track[-unstopped] PID]]:
 * a process to serve; export --image FILE: a snapshot image to serve.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/client.h"
#include "proto/frame.h"

/* A count or size: decimal, with an optional K, M or G (powers of 1024). */
static uint64_t
parse_count(const char *opt, const char *s, const char *u)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (end != s && (*end == 'K' || *end == 'M' || *end == 'G')) {
		int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : 30;

		if (v > (~0ULL >> shift))
			errno = ERANGE;
		v <<= shift;
		end++;
	}
	if (errno || end == s || *end || s[0] == '-' || v == 0) {
		fprintf(stderr, "uffd-client: %s %s: want a number above 0\n",
			opt, s);
		die_usage(u);
	}
	return v;
}

/*
 * Whether the daemon knows a feature (pre-copy, deferred exports and
 * given IDs): an older one ignores the request's fields it does not know
 * and would export the process frozen, under an ID of its own.
 */
static int
daemon_knows(const char *feature)
{
	Uffdd__StatusRequest req = UFFDD__STATUS_REQUEST__INIT;
	Uffdd__StatusReply *rep;
	int fd = connect_daemon(), yes = 0;

	req.id = "";
	rep = (Uffdd__StatusReply *)call(fd, FRAME_CTL_STATUS, &req.base,
					 FRAME_CTL_STATUS_REPLY);
	for (size_t i = 0; i < rep->n_features; i++)
		if (strcmp(rep->features[i], feature) == 0)
			yes = 1;
	frame_free(&rep->base);
	close(fd);
	return yes;
}

/*
 * --range START-END[=NAME]: NAME, if given, names the one mapping in the
 * range in the region table (a destination maps it by name: --map
 * NAME=DST_START). It points into argv.
 */
static Uffdd__Range **
add_named_range(Uffdd__Range **rs, size_t *n, const char *arg, const char *u)
{
	const char *eq = strchr(arg, '=');
	char *r;

	if (eq == NULL)
		return add_range(rs, n, arg, u);
	if (eq[1] == '\0' || strchr(eq + 1, '=')) {
		fprintf(stderr,
			"uffd-client: --range %s: want START-END=NAME, with a "
			"NAME that is not empty and has no '='\n",
			arg);
		die_usage(u);
	}
	if ((r = strndup(arg, (size_t)(eq - arg))) == NULL)
		exit(1);
	rs = add_range(rs, n, r, u);
	free(r);
	rs[*n - 1]->name = (char *)(eq + 1);
	return rs;
}

/* Whether the daemon knows what the request asks for; else says so. */
static int
daemon_takes(const Uffdd__ExportRequest *req)
{
	const char *what = NULL;

	if ((req->deferred || req->id[0]) && !daemon_knows(FEATURE_DEFERRED))
		what = "--deferred and --id";
	else if (req->precopy && !daemon_knows(FEATURE_PRECOPY))
		what = "--precopy";
	else if (req->track_pid && !daemon_knows(FEATURE_PRECOPY_TRACK))
		what = "--track";
	if (what == NULL)
		return 1;
	fprintf(stderr,
		"uffd-client: export: the daemon at %s does not know %s (an "
		"older uffdd); nothing was exported\n",
		control_path, what);
	return 0;
}

/*
 * --id ID: checked here, and lower-cased: the daemon makes its IDs in
 * lower case, and a destination names the migration byte for byte.
 */
static char *
export_id(char *id, const char *u)
{
	check_id(id, u);
	for (char *p = id; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	return id;
}

/*
 * export --image: the file handed to the daemon, which serves it as it
 * is, so nothing may narrow or keep it (other, set: another option or an
 * argument came with it).
 */
static int
export_image(Uffdd__ExportRequest *req, const char *image, int other,
	     const char *u)
{
	Uffdd__ExportReply *rep;
	int fd;

	if (req->deferred) {
		fprintf(stderr, "uffd-client: --deferred goes not with "
				"--image: an image is served as it is\n");
		die_usage(u);
	}
	if (other || !*image || req->n_ranges || req->keep_source ||
	    req->precopy || req->threshold_bytes || req->track_pid ||
	    req->id[0])
		die_usage(u);
	req->image = 1;
	fd = connect_daemon();
	rep = (Uffdd__ExportReply *)call_with_file(
		fd, FRAME_CTL_EXPORT, &req->base, FRAME_CTL_EXPORT_REPLY,
		image);
	printf("%s\n", rep->id);
	frame_free(&rep->base);
	close(fd);
	return 0;
}

/* The options that go with --precopy only, checked; rounds set. */
static void
precopy_options(Uffdd__ExportRequest *req, uint64_t rounds, const char *u)
{
	if ((rounds || req->threshold_bytes || req->track_pid) &&
	    !req->precopy) {
		fprintf(stderr,
			"uffd-client: --max-rounds, --precopy-threshold "
			"and --track[-unstopped] go with --precopy\n");
		die_usage(u);
	}
	if (rounds > 1000) {
		fprintf(stderr, "uffd-client: --max-rounds: at most 1000\n");
		die_usage(u);
	}
	req->max_rounds = (uint32_t)rounds;
}

/* export PID [--range START-END]... [--keep-source] [--precopy ...],
 * or export --image FILE */
int
cmd_export(const struct cmd_entry *self, int argc, char **argv)
{
	const char *u = self->usage;
	static const struct option o[] = {
		{"range", required_argument, NULL, 'r'},
		{"keep-source", no_argument, NULL, 'k'},
		{"precopy", no_argument, NULL, 'p'},
		{"max-rounds", required_argument, NULL, 'n'},
		{"precopy-threshold", required_argument, NULL, 't'},
		{"image", required_argument, NULL, 'I'},
		{"id", required_argument, NULL, 'i'},
		{"deferred", no_argument, NULL, 'd'},
		{"track", required_argument, NULL, 'T'},
		{"track-unstopped", required_argument, NULL, 'U'},
		{NULL, 0, NULL, 0}};
	Uffdd__ExportRequest req = UFFDD__EXPORT_REQUEST__INIT;
	Uffdd__ExportReply *rep;
	uint64_t rounds = 0;
	const char *image = NULL;
	int ch, fd;

	while ((ch = getopt_long(argc, argv, "r:k", o, NULL)) != -1) {
		if (ch == 'r')
			req.ranges = add_named_range(req.ranges, &req.n_ranges,
						     optarg, u);
		else if (ch == 'k')
			req.keep_source = 1;
		else if (ch == 'p')
			req.precopy = 1;
		else if (ch == 'n')
			rounds = parse_count("--max-rounds", optarg, u);
		else if (ch == 't')
			req.threshold_bytes =
				parse_count("--precopy-threshold", optarg, u);
		else if (ch == 'I')
			image = optarg;
		else if (ch == 'i')
			req.id = export_id(optarg, u);
		else if (ch == 'd')
			req.deferred = 1;
		else if (ch == 'T' || ch == 'U') {
			if (req.track_pid)
				die_usage(u); /* one tracked process */
			req.track_pid = parse_pid(optarg, u);
			req.track_unstopped = ch == 'U';
		} else
			die_usage(u);
	}
	if (image)
		return export_image(&req, image, argc != optind || rounds, u);
	if (argc - optind != 1)
		die_usage(u);
	precopy_options(&req, rounds, u);
	req.pid = parse_pid(argv[optind], u);
	if (!daemon_takes(&req)) {
		free_ranges(req.ranges, req.n_ranges);
		return 1;
	}
	fd = connect_daemon();
	rep = (Uffdd__ExportReply *)call(fd, FRAME_CTL_EXPORT, &req.base,
					 FRAME_CTL_EXPORT_REPLY);
	printf("%s\n", rep->id);
	frame_free(&rep->base);
	free_ranges(req.ranges, req.n_ranges);
	close(fd);
	return 0;
}

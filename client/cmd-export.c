/* export PID [--range START-END]... [--keep-source]: a process to serve. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <unistd.h>

#include "client/client.h"
#include "proto/frame.h"

/* export PID [--range START-END]... [--keep-source] */
int
cmd_export(const struct cmd_entry *self, int argc, char **argv)
{
	const char *u = self->usage;
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

/*
 * metrics: the daemon's counters and histograms in the OpenMetrics text
 * format, as uffdd --metrics serves them over HTTP, from the control
 * socket (for a host with no endpoint, or a one-off look).
 */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <unistd.h>

#include "client/client.h"
#include "proto/frame.h"

int
cmd_metrics(const struct cmd_entry *self, int argc, char **argv)
{
	Uffdd__MetricsRequest req = UFFDD__METRICS_REQUEST__INIT;
	Uffdd__MetricsReply *rep;
	int fd;

	if (getopt(argc, argv, "") != -1 || optind != argc)
		die_usage(self->usage);
	fd = connect_daemon();
	rep = (Uffdd__MetricsReply *)call(fd, FRAME_CTL_METRICS, &req.base,
					  FRAME_CTL_METRICS_REPLY);
	for (size_t i = 0; i < rep->n_lines; i++)
		printf("%s\n", rep->lines[i]);
	frame_free(&rep->base);
	close(fd);
	return 0;
}

/*
 * go [--prepare] ID: a deferred export (export --deferred) takes its
 * process's memory from now on (with --prepare: the process is stopped
 * and checked now, the go to come takes the memory); for a deferred
 * pre-copy, go switches over (the freeze, the last pages, SWITCHOVER;
 * it returns once the destination has taken it). cancel ID: a deferred
 * export ends before its go, the process untouched; release ID: an
 * attach --hold-bulk's target runs, its bulk stream may start.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/client.h"
#include "proto/frame.h"

/*
 * One GO, CANCEL or RELEASE for the ID on the command line; its reply.
 * GO alone takes --prepare before the ID.
 */
static Uffdd__GoReply *
go_call(const struct cmd_entry *self, int argc, char **argv, uint16_t type,
	uint16_t want, double *ms)
{
	Uffdd__GoRequest req = UFFDD__GO_REQUEST__INIT;
	struct timespec a, b;
	ProtobufCMessage *rep;
	int fd;

	if (type == FRAME_CTL_GO && argc == 3 &&
	    strcmp(argv[1], "--prepare") == 0) {
		req.prepare = 1;
		argc--;
		argv++;
	}
	if (argc != 2)
		die_usage(self->usage);
	check_id(argv[1], self->usage);
	req.id = argv[1];
	fd = connect_daemon();
	clock_gettime(CLOCK_MONOTONIC, &a);
	rep = call(fd, type, &req.base, want);
	clock_gettime(CLOCK_MONOTONIC, &b);
	close(fd);
	*ms = (double)(b.tv_sec - a.tv_sec) * 1e3 +
	      (double)(b.tv_nsec - a.tv_nsec) / 1e6;
	return (Uffdd__GoReply *)rep;
}

int
cmd_go(const struct cmd_entry *self, int argc, char **argv)
{
	double ms;
	Uffdd__GoReply *rep = go_call(self, argc, argv, FRAME_CTL_GO,
				      FRAME_CTL_GO_REPLY, &ms);

	if (argc == 3)
		printf("prepared %s for go: %.3f ms round trip, %.3f ms in "
		       "the daemon; its process is stopped\n",
		       rep->id, ms, (double)rep->work_us / 1e3);
	else
		printf("go %s: %.3f ms round trip, %.3f ms in the daemon, %u "
		       "queued page requests answered\n",
		       rep->id, ms, (double)rep->work_us / 1e3, rep->queued);
	frame_free(&rep->base);
	return 0;
}

int
cmd_cancel(const struct cmd_entry *self, int argc, char **argv)
{
	double ms;
	Uffdd__GoReply *rep = go_call(self, argc, argv, FRAME_CTL_CANCEL,
				      FRAME_CTL_CANCEL_REPLY, &ms);

	printf("cancelled %s\n", rep->id);
	frame_free(&rep->base);
	return 0;
}

int
cmd_release(const struct cmd_entry *self, int argc, char **argv)
{
	double ms;
	Uffdd__GoReply *rep = go_call(self, argc, argv, FRAME_CTL_RELEASE,
				      FRAME_CTL_RELEASE_REPLY, &ms);

	printf("released %s: its bulk stream may start\n", rep->id);
	frame_free(&rep->base);
	return 0;
}

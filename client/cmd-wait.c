/*
 * wait ID [--timeout SEC]: follows a migration until it ends, with its
 * progress on stderr; a daemon that restarts meanwhile is waited for.
 */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/client.h"
#include "proto/frame.h"

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

/* Seconds since t0, on the monotonic clock. */
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

/*
 * The record to wait for: [0] is the migration itself, forked children
 * follow; an attach --image's daemon holds the ID twice, as the image's
 * source and as the destination: the latter is the one.
 */
static const Uffdd__MigrationStatus *
wanted(const Uffdd__StatusReply *rep)
{
	const Uffdd__MigrationStatus *s = rep->migrations[0];

	for (size_t i = rep->n_migrations; i-- > 0;)
		if (strcmp(rep->migrations[i]->role, "destination") == 0)
			s = rep->migrations[i];
	return s;
}

/* The wait's exit status if migration s has ended (said), else -1. */
static int
ended(const Uffdd__MigrationStatus *s, const char *id, int tty)
{
	int failed = strcmp(s->state, "failed") == 0;

	if (!failed && strcmp(s->state, "complete") != 0)
		return -1;
	if (tty)
		fprintf(stderr, "\n");
	if (failed) {
		fprintf(stderr, "uffd-client: migration %s failed: %s\n", id,
			s->reason);
		return 1;
	}
	print_status_text(s);
	return 0;
}

/* A destination with every page in, its end near (unless its lanes are down). */
static int
near_end(const Uffdd__MigrationStatus *s)
{
	return strcmp(s->role, "destination") == 0 &&
	       (strcmp(s->state, "running") == 0 ||
		strcmp(s->state, "committing") == 0) &&
	       s->pages_present >= s->pages_total;
}

/*
 * Polls status until the migration ends; 0 complete, 1 failed, 3 timeout.
 * Every 100 ms, and every 10 ms for a second once a running (or
 * committing) destination has every page in: the end, the completion's
 * commit, is then milliseconds away, unless its lanes are down.
 */
int
wait_for(const char *id, double timeout)
{
	struct timespec t0, busy = {0, 0}, tick = {0, 100 * 1000 * 1000},
			    near = {0, 10 * 1000 * 1000}, *next = &tick;
	int fd = connect_daemon(), tty = isatty(2), rc, answered, nears = 0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		Uffdd__StatusRequest req = UFFDD__STATUS_REQUEST__INIT;
		Uffdd__StatusReply *rep;
		const Uffdd__MigrationStatus *s;

		req.id = (char *)id;
		rep = (Uffdd__StatusReply *)call_try(
			fd, FRAME_CTL_STATUS, &req.base, FRAME_CTL_STATUS_REPLY,
			&answered);
		/*
		 * Busy: the daemon restarts its engine, which takes the
		 * migration up again; asked again until the timeout.
		 */
		if (rep == NULL && answered == 2 &&
		    (timeout <= 0 || since(&t0) < timeout)) {
			if (busy.tv_sec == 0)
				clock_gettime(CLOCK_MONOTONIC, &busy);
			if (since(&busy) < REJOIN_SECS) {
				nanosleep(&tick, NULL);
				continue;
			}
		}
		if (rep != NULL)
			busy.tv_sec = 0;
		/* Refused (an unknown ID): said, and nothing to wait for. */
		if (rep == NULL && answered) {
			close(fd);
			return 1;
		}
		if (rep == NULL) {
			close(fd);
			if ((timeout > 0 && since(&t0) > timeout) ||
			    (fd = rejoin(timeout, &t0)) < 0)
				return 1;
			continue;
		}

		/* No record at all: the ID is not known here. */
		if (rep->n_migrations == 0) {
			fprintf(stderr, "uffd-client: unknown migration ID\n");
			frame_free(&rep->base);
			exit(1);
		}
		s = wanted(rep);
		progress(s, tty);
		if ((rc = ended(s, id, tty)) >= 0) {
			frame_free(&rep->base);
			break;
		}
		next = near_end(s) && nears++ < 100 ? &near : &tick;
		frame_free(&rep->base);
		if (timeout > 0 && since(&t0) > timeout) {
			if (tty)
				fprintf(stderr, "\n");
			fprintf(stderr,
				"uffd-client: migration %s not done "
				"after %.0f s\n",
				id, timeout);
			rc = 3;
			break;
		}
		nanosleep(next, NULL);
	}
	close(fd);
	return rc;
}

/* wait ID [--timeout SEC] */
int
cmd_wait(const struct cmd_entry *self, int argc, char **argv)
{
	static const struct option o[] = {
		{"timeout", required_argument, NULL, 't'}, {NULL, 0, NULL, 0}};
	double timeout = 0;
	int ch;

	while ((ch = getopt_long(argc, argv, "t:", o, NULL)) != -1) {
		if (ch != 't')
			die_usage(self->usage);
		timeout = parse_timeout(optarg, self->usage);
	}
	if (argc - optind != 1)
		die_usage(self->usage);
	check_id(argv[optind], self->usage);
	return wait_for(argv[optind], timeout);
}

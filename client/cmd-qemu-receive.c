/*
 * migrate-qemu receive: the destination host's half of a QEMU migration
 * between two hosts (docs/qemu-two-hosts.md; its other half is send). It
 * touches only this host's QEMU, uffdd and RAM files, and may start
 * before send does:
 *
 *   1. QEMU (started with -incoming defer): x-ignore-shared, its RAM
 *      blocks found, migrate-incoming on --incoming;
 *   2. attach to QEMU's RAM, each block mapped by name (qemu:BLOCK, as
 *      send exports it), waiting for the export to exist: the
 *      userfaultfd is made and both lanes are up before the source stops;
 *   3. QEMU loads the device state and starts the guest at once, told
 *      so by a cont before (none with --no-resume: a QEMU started with
 *      -S then leaves it paused);
 *   4. every page resident.
 */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/client.h"
#include "client/qemu-halves.h"
#include "client/qmp.h"

static void
receive_args(const struct cmd_entry *self, int argc, char **argv,
	     struct receive *r)
{
	static const struct option o[] = {
		{"qmp", required_argument, NULL, 'q'},
		{"id", required_argument, NULL, 'i'},
		{"from", required_argument, NULL, 'f'},
		{"incoming", required_argument, NULL, 'I'},
		{"no-resume", no_argument, NULL, 'n'},
		{"timeout", required_argument, NULL, 't'},
		{NULL, 0, NULL, 0}};
	int ch;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "", o, NULL)) != -1) {
		if (ch == 'q')
			r->qmp = optarg;
		else if (ch == 'i')
			check_id(r->id = optarg, self->usage);
		else if (ch == 'f')
			r->from = optarg;
		else if (ch == 'I')
			r->incoming = optarg;
		else if (ch == 'n')
			r->resume = 0;
		else if (ch == 't')
			r->timeout = parse_timeout(optarg, self->usage);
		else
			die_usage(self->usage);
	}
	if (optind != argc || !r->qmp || !r->id || !r->from || !r->incoming ||
	    !strchr(r->from, ':') || !strchr(r->incoming, ':'))
		die_usage(self->usage);
}

/*
 * A QEMU waiting for an incoming migration, its RAM blocks, a daemon that
 * answers; then it listens for the device state.
 */
int
receive_open(struct receive *r)
{
	char uri[300];
	int fd;

	control_path = r->ctl;
	if ((r->q = qmp_open(r->qmp)) == NULL ||
	    query_str(r->q, "query-status", "status", r->st, sizeof(r->st)) < 0)
		return -1;
	if (strcmp(r->st, "inmigrate") != 0) {
		fprintf(stderr,
			"uffd-client: destination QEMU is %s: start it "
			"with -incoming defer\n",
			r->st);
		return -1;
	}
	if (ramblocks(r->q, r->b, &r->n) < 0)
		return -1;
	if ((fd = connect_daemon_try()) < 0)
		return -1;
	close(fd);
	if (set_capability(r->q, "x-ignore-shared", 1) < 0)
		return -1;
	r->ignoring = 1;
	snprintf(uri, sizeof(uri), "tcp:%s", r->incoming);
	if (exec_uri(r->q, "migrate-incoming", uri) < 0)
		return -1;
	r->listening = 1;
	/* Port 0 (migrate-qemu --precopy): the one QEMU took. */
	if ((r->port = listen_port(r->q)) < 0)
		return -1;
	return 0;
}

/* Whether every block was attached; else says which were not. */
static int
all_attached(const struct receive *r, const Uffdd__AttachReply *rep)
{
	print_regions("attached", rep->matched, rep->n_matched, stderr);
	if (rep->n_unmatched)
		print_regions("unmatched", rep->unmatched, rep->n_unmatched,
			      stderr);
	if (rep->n_matched == r->n && rep->n_unmatched == 0)
		return 1;
	fprintf(stderr,
		"uffd-client: %zu of this QEMU's %zu RAM blocks matched the "
		"source's by name, and %zu of the source's did not: the "
		"two QEMUs must have the same RAM blocks (ids and sizes)\n",
		rep->n_matched, r->n, rep->n_unmatched);
	return 0;
}

/* The daemon attaches to QEMU's RAM, block by block by name. */
int
receive_attach(struct receive *r)
{
	Uffdd__AttachRequest req = UFFDD__ATTACH_REQUEST__INIT;
	Uffdd__RegionMap m[MAX_BLOCKS], *mp[MAX_BLOCKS];
	Uffdd__AttachReply *rep;
	int ok;

	for (size_t i = 0; i < r->n; i++) {
		uffdd__region_map__init(&m[i]);
		snprintf(r->names[i], sizeof(r->names[i]), "qemu:%s",
			 r->b[i].id);
		m[i].src_name = r->names[i];
		m[i].dst_start = r->b[i].addr;
		mp[i] = &m[i];
	}
	req.pid = qmp_pid(r->q);
	req.from = (char *)r->from;
	req.id = (char *)r->id;
	req.maps = mp;
	req.n_maps = r->n;
	req.hold_bulk = 1; /* until the guest runs: receive_run() */
	/*
	 * A pre-copy (send --precopy) leaves QEMU running during the rounds:
	 * it touches no guest RAM before the device state, and must answer
	 * QMP and take the source QEMU's connection meanwhile.
	 */
	req.precopy_no_hold = 1;
	req.export_wait_secs = (uint32_t)(r->timeout > 3600 ? 3600
					  : r->timeout < 1  ? 1
							    : r->timeout);
	flow_say("attaching QEMU pid %d to migration %s from %s (waiting up "
		 "to %u s for its export)",
		 (int)req.pid, r->id, r->from, req.export_wait_secs);
	rep = (Uffdd__AttachReply *)flow_request(
		r->ctl, FRAME_CTL_ATTACH, &req.base, FRAME_CTL_ATTACH_REPLY);
	if (rep == NULL)
		return -1;
	r->attached = 1;
	ok = all_attached(r, rep);
	frame_free(&rep->base);
	if (!ok)
		return -1;
	flow_say("destination QEMU attached: guest RAM arrives post-copy");
	return 0;
}

/*
 * The bulk lane, held since the attach so that QEMU's load and start keep
 * the CPUs, is read (the daemon reads it by itself 10 s after the first
 * fault if this fails).
 */
static void
release_bulk(struct receive *r)
{
	Uffdd__GoRequest req = UFFDD__GO_REQUEST__INIT;
	ProtobufCMessage *rep;

	req.id = (char *)r->id;
	rep = flow_request(r->ctl, FRAME_CTL_RELEASE, &req.base,
			   FRAME_CTL_RELEASE_REPLY);
	if (rep != NULL)
		frame_free(rep);
}

/*
 * A cont while QEMU waits for its migration has it start the guest
 * itself, at once, when the source's guest was running (QEMU started with
 * -S would not): the one left for after the load is for a source that was
 * paused. None with --no-resume.
 */
int
receive_cont(struct receive *r)
{
	r->t0 = flow_now();
	if (r->resume && qmp_execute(r->q, "cont", NULL, NULL) < 0)
		return -1;
	return 0;
}

/* QEMU has loaded the device state; it runs, unless --no-resume. */
int
receive_loaded(struct receive *r)
{
	for (;;) {
		/* A QEMU uffdd stopped would not answer. */
		if ((r->stopped = flow_dest_stopped(qmp_pid(r->q))))
			return -1;
		if (query_str(r->q, "query-status", "status", r->st,
			      sizeof(r->st)) < 0)
			return -1;
		if (strcmp(r->st, "inmigrate") != 0)
			break;
		if (r->timeout > 0 && flow_now() - r->t0 > r->timeout) {
			fprintf(stderr,
				"uffd-client: no device state came within "
				"%.0f s (is migrate-qemu send running?)\n",
				r->timeout);
			return -1;
		}
		usleep(5000);
	}
	r->ran = strcmp(r->st, "running") == 0;
	if (!r->ran && r->resume) {
		if (qmp_execute(r->q, "cont", NULL, NULL) < 0)
			return -1;
		r->ran = 1;
	}
	r->t_run = flow_now();
	flow_say(r->ran ? "destination guest running"
			: "destination guest left paused (--no-resume)");
	release_bulk(r);
	return 0;
}

/*
 * Every page resident here, and vouched for by the source (its COMMIT). A
 * failure may have stopped QEMU here (the source ran: its RAM may be
 * torn).
 */
int
receive_finish(struct receive *r)
{
	int rc;

	control_path = r->ctl;
	if ((rc = wait_for(r->id, r->timeout)) != 0) {
		r->failed = rc == 1;
		r->stopped = r->failed && flow_dest_stopped(qmp_pid(r->q));
		return -1;
	}
	flow_say("every page resident %.3f s after the device state came",
		 flow_now() - r->t_run);
	return 0;
}

/* What a failure leaves, said: the guest is on one host or the other. */
void
receive_undo(struct receive *r)
{
	if (r->stopped)
		return; /* flow_dest_stopped() said it all */
	if (r->failed && r->t_run > 0) {
		fprintf(stderr,
			"uffd-client: migration %s failed (the reason above): "
			"the guest runs here, a page it lost poisoned\n",
			r->id);
		return;
	}
	if (r->t_run > 0) {
		fprintf(stderr,
			"uffd-client: the guest is here: migration %s goes on "
			"in the daemons (uffd-client --control %s wait %s)\n",
			r->id, r->ctl, r->id);
		return;
	}
	if (r->q != NULL && r->ignoring && !r->listening)
		set_capability(r->q, "x-ignore-shared", 0);
	if (r->listening)
		fprintf(stderr,
			"uffd-client: the destination QEMU was never "
			"started%s; "
			"it waits for an incoming migration: quit it, start "
			"a new one with -incoming defer and migrate "
			"again\n",
			r->attached ? " (its RAM, attached, is the "
				      "migration's: do not use it)"
				    : "");
}

static int (*const receive_steps[])(struct receive *) = {
	receive_open,	receive_attach, receive_cont,
	receive_loaded, receive_finish,
};

int
qemu_receive(const struct cmd_entry *self, int argc, char **argv)
{
	struct receive r = {.timeout = 300, .resume = 1, .ctl = control_path};
	size_t n = sizeof(receive_steps) / sizeof(receive_steps[0]), done = 0;

	receive_args(self, argc, argv, &r);
	while (done < n && receive_steps[done](&r) == 0)
		done++;
	if (done < n)
		receive_undo(&r);
	qmp_close(r.q);
	return done == n ? 0 : 1;
}

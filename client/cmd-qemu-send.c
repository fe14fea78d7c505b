/*
 * migrate-qemu send: the source host's half of a QEMU migration between
 * two hosts (docs/qemu-two-hosts.md). It touches only this host's QEMU
 * (QMP), uffdd (--control) and RAM files, and meets the destination only
 * through uffdd's peer connection and QEMU's own migration stream.
 * Everything that can be done while the guest runs is done before it
 * stops:
 *
 *   1. QEMU: x-ignore-shared, events, pause-before-switchover; its
 *      file-backed RAM blocks found;
 *   2. a holder maps the RAM files and is exported deferred, each block's
 *      range named qemu:BLOCK (the destination maps it by that name),
 *      under --id or a fresh ID, printed: nothing is read yet;
 *   3. wait until the destination has attached (lanes up, regions taken);
 *      prepare: the daemon stops the holder and checks its maps now, so
 *      that go, in the stop window, need not. With --precopy instead:
 *      the files are pre-copied from the attach on (QEMU's writes
 *      tracked in QEMU, which is not stopped by uffdd), and the guest
 *      stops once the rounds converged; go then sends what it wrote last
 *      and returns once the destination switched over;
 *   4. QEMU's migration starts, the guest running: the connection to the
 *      destination QEMU and the little RAM that is not in the files go
 *      before the stop; QEMU stops the guest and pauses before the
 *      switchover;
 *   5. go: the daemon takes the files as they are; QEMU sends the rest
 *      (device state), and the destination runs;
 *   6. every page resident at the destination: the source QEMU quits.
 *
 * SIGINT, SIGTERM or SIGHUP before the destination runs ends it as a
 * failure does (send_undo): the source guest runs on, its capabilities
 * as they were, the export cancelled; then send ends by that signal.
 */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "client/client.h"
#include "client/qemu-halves.h"
#include "client/qmp.h"

static void
send_args(const struct cmd_entry *self, int argc, char **argv, struct send *s)
{
	static const struct option o[] = {
		{"qmp", required_argument, NULL, 'q'},
		{"to", required_argument, NULL, 'o'},
		{"id", required_argument, NULL, 'i'},
		{"timeout", required_argument, NULL, 't'},
		{"precopy", no_argument, NULL, 'p'},
		{NULL, 0, NULL, 0}};
	int ch;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "", o, NULL)) != -1) {
		if (ch == 'q')
			s->qmp = optarg;
		else if (ch == 'o')
			s->to = optarg;
		else if (ch == 'i')
			check_id(s->want_id = optarg, self->usage);
		else if (ch == 't')
			s->timeout = parse_timeout(optarg, self->usage);
		else if (ch == 'p')
			s->precopy = 1;
		else
			die_usage(self->usage);
	}
	if (optind != argc || !s->qmp || !s->to || !strchr(s->to, ':'))
		die_usage(self->usage);
}

/*
 * --precopy where the daemon's kernel cannot track QEMU's writes to the
 * RAM files (no FEATURE_PRECOPY_SHARED): the guest moves post-copy, said
 * so. 0, or -1 when the daemon does not answer.
 */
static int
send_can_precopy(struct send *s)
{
	int has;

	if (!s->precopy)
		return 0;
	if ((has = daemon_feature(s->ctl, FEATURE_PRECOPY_SHARED)) < 0)
		return -1;
	if (has)
		return 0;
	s->precopy = 0;
	flow_say("--precopy: the source daemon cannot track writes to shared "
		 "memory on its kernel (Linux 6.7 or later needed): the guest "
		 "moves post-copy instead");
	return 0;
}

/* QEMU on QMP, a guest to move, its RAM blocks, a daemon that answers. */
int
send_open(struct send *s)
{
	int fd;

	control_path = s->ctl;
	if ((s->q = qmp_open(s->qmp)) == NULL ||
	    ramblocks(s->q, s->b, &s->n) < 0 ||
	    query_str(s->q, "query-status", "status", s->st, sizeof(s->st)) < 0)
		return -1;
	if (strcmp(s->st, "running") != 0 && strcmp(s->st, "paused") != 0) {
		fprintf(stderr,
			"uffd-client: source QEMU is %s, not running or "
			"paused: nothing to migrate from it\n",
			s->st);
		return -1;
	}
	if ((fd = connect_daemon_try()) < 0)
		return -1;
	close(fd);
	s->running = strcmp(s->st, "running") == 0;
	if (set_capability(s->q, "x-ignore-shared", 1) < 0)
		return -1;
	s->ignoring = 1;
	if (set_capability(s->q, "events", 1) < 0 ||
	    set_capability(s->q, "pause-before-switchover", 1) < 0)
		return -1;
	return send_can_precopy(s);
}

/* The holder, exported deferred with its blocks named: s->id. */
int
send_export(struct send *s)
{
	Uffdd__ExportRequest req = UFFDD__EXPORT_REQUEST__INIT;
	Uffdd__Range r[MAX_BLOCKS], *rp[MAX_BLOCKS];
	Uffdd__ExportReply *rep;

	if ((s->holder = holder_start(s->b, s->n)) < 0)
		return -1;
	for (size_t i = 0; i < s->n; i++) {
		uffdd__range__init(&r[i]);
		r[i].start = s->b[i].holder;
		r[i].end = s->b[i].holder + s->b[i].size;
		snprintf(s->names[i], sizeof(s->names[i]), "qemu:%s",
			 s->b[i].id);
		r[i].name = s->names[i];
		rp[i] = &r[i];
	}
	req.pid = s->holder;
	req.ranges = rp;
	req.n_ranges = s->n;
	req.deferred = 1;
	/*
	 * --precopy: rounds over the files while the guest runs, QEMU's
	 * writes tracked in QEMU (it writes the files through its own
	 * mappings), which pauses the guest itself: not stopped by uffdd.
	 */
	req.precopy = s->precopy;
	req.track_pid = s->precopy ? (int32_t)qmp_pid(s->q) : 0;
	req.track_unstopped = s->precopy;
	req.id = (char *)(s->want_id ? s->want_id : "");
	rep = (Uffdd__ExportReply *)flow_request(
		s->ctl, FRAME_CTL_EXPORT, &req.base, FRAME_CTL_EXPORT_REPLY);
	if (rep == NULL)
		return -1;
	snprintf(s->id, sizeof(s->id), "%s", rep->id);
	frame_free(&rep->base);
	printf("%s\n", s->id);
	fflush(stdout);
	for (size_t i = 0; i < s->n; i++)
		flow_say("RAM block %s: %" PRIu64 " MiB, exported as %s",
			 s->b[i].id, s->b[i].size >> 20, s->names[i]);
	flow_say("source RAM exported, deferred%s: migration %s",
		 s->precopy ? ", pre-copied from the attach on" : "", s->id);
	return 0;
}

/* The export's status says its destination attached. */
static int
says_attached(const Uffdd__MigrationStatus *m)
{
	return m->attached;
}

/* The export's status says its pre-copy converged (ready for go). */
static int
says_ready(const Uffdd__MigrationStatus *m)
{
	return m->precopy_ready;
}

/*
 * Whether the export's status says so: 1, 0 not yet, -1 when the export
 * is gone or failed (said why). *rounds: its pre-copy rounds so far.
 */
static int
status_says(struct send *s, int (*says)(const Uffdd__MigrationStatus *),
	    uint32_t *rounds)
{
	Uffdd__StatusRequest req = UFFDD__STATUS_REQUEST__INIT;
	Uffdd__StatusReply *rep;
	int rc = 0;

	req.id = s->id;
	rep = (Uffdd__StatusReply *)flow_request(
		s->ctl, FRAME_CTL_STATUS, &req.base, FRAME_CTL_STATUS_REPLY);
	if (rep == NULL)
		return -1;
	if (rep->n_migrations == 0 ||
	    strcmp(rep->migrations[0]->state, "failed") == 0) {
		fprintf(stderr, "uffd-client: export %s %s%s%s\n", s->id,
			rep->n_migrations ? "failed" : "is gone",
			rep->n_migrations ? ": " : "",
			rep->n_migrations ? rep->migrations[0]->reason : "");
		rc = -1;
	} else {
		*rounds = rep->migrations[0]->precopy_rounds;
		rc = says(rep->migrations[0]) ? 1 : 0;
	}
	frame_free(&rep->base);
	return rc;
}

/*
 * Waits, the guest running, until the export's status says so (what:
 * for messages), within --timeout; 0, or -1 said why.
 */
static int
send_wait(struct send *s, int (*says)(const Uffdd__MigrationStatus *),
	  const char *what, uint32_t *rounds)
{
	double t0 = flow_now();
	int rc;

	while ((rc = status_says(s, says, rounds)) == 0) {
		if (flow_stop_signal())
			return -1;
		if (!process_alive(qmp_pid(s->q))) {
			fprintf(stderr,
				"uffd-client: source QEMU pid %d is "
				"gone\n",
				(int)qmp_pid(s->q));
			return -1;
		}
		if (s->timeout > 0 && flow_now() - t0 > s->timeout) {
			fprintf(stderr, "uffd-client: %s %s within %.0f s\n",
				s->id, what, s->timeout);
			return -1;
		}
		usleep(20000);
	}
	return rc < 0 ? -1 : 0;
}

/* Waits, the guest running, until the destination has attached. */
int
send_wait_dest(struct send *s)
{
	double t0 = flow_now();
	uint32_t rounds;

	flow_say("waiting for the destination to attach (migrate-qemu "
		 "receive --id %s)",
		 s->id);
	if (send_wait(s, says_attached, "had no destination attached",
		      &rounds) < 0)
		return -1;
	flow_say("destination attached, %.1f s after the export",
		 flow_now() - t0);
	return 0;
}

/* --precopy: waits, the guest running, until the rounds converged. */
int
send_wait_ready(struct send *s)
{
	double t0 = flow_now();
	uint32_t rounds = 0;

	if (!s->precopy)
		return 0;
	if (send_wait(s, says_ready, "did not converge", &rounds) < 0)
		return -1;
	flow_say("pre-copy converged: %u rounds in %.1f s; the guest stops now",
		 rounds, flow_now() - t0);
	return 0;
}

/*
 * QEMU's migration starts with the guest running: the connection and the
 * RAM outside the files go now. QEMU stops the guest and waits before the
 * switchover: from here the source guest is stopped.
 */
int
send_switch(struct send *s)
{
	char uri[300];

	snprintf(uri, sizeof(uri), "tcp:%s", s->to);
	if (exec_uri(s->q, "migrate", uri) < 0)
		return -1;
	s->migrating = 1;
	if (migration_reach(s->q, "pre-switchover", flow_now(), s->st,
			    sizeof(s->st)) < 0)
		return -1;
	s->t_stop = flow_now();
	return 0;
}

/* One GO for the export, req's other fields set by the caller; its reply. */
static Uffdd__GoReply *
ask_go(struct send *s, Uffdd__GoRequest *req)
{
	req->id = s->id;
	return (Uffdd__GoReply *)flow_request(s->ctl, FRAME_CTL_GO, &req->base,
					      FRAME_CTL_GO_REPLY);
}

/*
 * Go's first half while the guest runs: the holder, which does nothing
 * until go anyway, is stopped (and, but for a pre-copy, whose rounds go
 * on over QEMU's writes, its maps checked), the milliseconds that go
 * would otherwise spend in the guest's stop window.
 */
int
send_prepare(struct send *s)
{
	Uffdd__GoRequest req = UFFDD__GO_REQUEST__INIT;
	Uffdd__GoReply *rep;

	req.prepare = 1;
	if ((rep = ask_go(s, &req)) == NULL)
		return -1;
	flow_say("holder stopped for go: %.1f ms in the daemon",
		 (double)rep->work_us / 1e3);
	frame_free(&rep->base);
	return 0;
}

/* The guest is stopped: the daemon takes its RAM files as they are now. */
int
send_go(struct send *s)
{
	Uffdd__GoRequest req = UFFDD__GO_REQUEST__INIT;
	Uffdd__GoReply *rep;

	req.hold_bulk = !s->precopy; /* a pre-copy's stream is its rounds */
	if ((rep = ask_go(s, &req)) == NULL)
		return -1;
	s->went = 1;
	if (s->precopy)
		flow_say("source vCPUs stopped; go: the last pages written "
			 "sent and the destination switched over, %.1f ms in "
			 "the daemon",
			 (double)rep->work_us / 1e3);
	else
		flow_say("source vCPUs stopped; go: %.1f ms in the daemon, %u "
			 "page requests waiting answered",
			 (double)rep->work_us / 1e3, rep->queued);
	frame_free(&rep->base);
	return 0;
}

/*
 * The bulk stream, held at go so that the stop window keeps the CPUs,
 * starts (the daemon starts it by itself BULK_HOLD_SECS after go).
 */
static void
release_bulk(struct send *s)
{
	Uffdd__GoRequest req = UFFDD__GO_REQUEST__INIT;
	Uffdd__GoReply *rep;

	req.release_bulk = 1;
	if ((rep = ask_go(s, &req)) != NULL)
		frame_free(&rep->base);
}

/* QEMU's device state to the destination QEMU: then it is the guest. */
int
send_devstate(struct send *s)
{
	json_object *a = json_object_new_object(), *r = NULL, *ram, *v;
	uint64_t bytes = 0;

	json_object_object_add(a, "state",
			       json_object_new_string("pre-switchover"));
	if (qmp_execute(s->q, "migrate-continue", a, NULL) < 0 ||
	    migration_reach(s->q, "completed", flow_now(), s->st,
			    sizeof(s->st)) < 0)
		return -1;
	s->sent = 1;
	holder_keep();
	if (!s->precopy) /* a pre-copy's go held nothing */
		release_bulk(s);
	if (qmp_execute(s->q, "query-migrate", NULL, &r) == 0 &&
	    json_object_object_get_ex(r, "ram", &ram) &&
	    json_object_object_get_ex(ram, "transferred", &v))
		bytes = (uint64_t)json_object_get_int64(v);
	json_object_put(r);
	flow_say("device state sent to %s: %" PRIu64 " bytes by QEMU, %.0f ms "
		 "after the source stopped",
		 s->to, bytes, (flow_now() - s->t_stop) * 1000);
	return 0;
}

/*
 * Every page resident at the destination, and the destination's
 * acknowledgement of the COMMIT here: the source QEMU quits.
 */
int
send_finish(struct send *s)
{
	int rc;

	control_path = s->ctl;
	if ((rc = wait_for(s->id, s->timeout)) != 0) {
		s->failed = rc == 1;
		return -1;
	}
	s->resident = 1;
	flow_say("every page resident %.3f s after the source stopped",
		 flow_now() - s->t_stop);
	return source_quit(s->q);
}

/* A deferred export that never went ends; the guest was never moved. */
static void
send_cancel(struct send *s)
{
	Uffdd__GoRequest req = UFFDD__GO_REQUEST__INIT;
	ProtobufCMessage *rep;

	req.id = s->id;
	rep = flow_request(s->ctl, FRAME_CTL_CANCEL, &req.base,
			   FRAME_CTL_CANCEL_REPLY);
	if (rep != NULL)
		frame_free(rep);
}

/*
 * QEMU's migration, if it started and has not completed, is cancelled and
 * waited for: QEMU runs the guest it stopped again by itself. 1 when it
 * completed all the same (the destination has the device state), else 0.
 */
static int
send_unmigrate(struct send *s)
{
	double t0 = flow_now();

	if (s->q == NULL || !s->migrating)
		return 0;
	qmp_execute(s->q, "migrate_cancel", NULL, NULL);
	while (flow_now() - t0 < 5 && query_str(s->q, "query-migrate", "status",
						s->st, sizeof(s->st)) == 0) {
		if (strcmp(s->st, "completed") == 0)
			return 1;
		if (strcmp(s->st, "cancelled") == 0 ||
		    strcmp(s->st, "failed") == 0)
			break;
		usleep(5000);
	}
	return 0;
}

/* The source guest runs again if it ran before; said so. */
static void
send_resume(struct send *s)
{
	char st[64] = "";

	if (s->q == NULL || !s->running ||
	    query_str(s->q, "query-status", "status", st, sizeof(st)) < 0)
		return;
	if (strcmp(st, "running") == 0 ||
	    qmp_execute(s->q, "cont", NULL, NULL) == 0)
		flow_say("failed before switchover: source guest runs again");
}

/*
 * A failure undone as far as it can be: until QEMU has sent the device
 * state, the source is the guest, and runs on; after, the destination is.
 */
void
send_undo(struct send *s)
{
	if (!s->sent && send_unmigrate(s))
		s->sent = 1;
	if (s->failed) {
		fprintf(stderr,
			"uffd-client: migration %s failed (the reason above); "
			"the source QEMU is left stopped, and process %d (its "
			"RAM files) too. If the destination's uffdd stopped "
			"its "
			"QEMU (its status says so), this one holds the newest "
			"guest RAM: resume it (QMP cont) or migrate it again\n",
			s->id, (int)s->holder);
		return;
	}
	if (s->sent) {
		fprintf(stderr,
			"uffd-client: the destination QEMU has the guest: "
			"migration %s goes on in the daemons (uffd-client "
			"--control %s wait %s); the source QEMU is left "
			"stopped, and process %d serves its RAM files until "
			"the migration completes\n",
			s->id, s->ctl, s->id, (int)s->holder);
		return;
	}
	if (s->id[0] && !s->went)
		send_cancel(s);
	if (s->holder > 0) {
		/* After go, its end fails the migration at both daemons. */
		kill(s->holder, SIGKILL);
		waitpid(s->holder, NULL, 0);
		s->holder = -1;
	}
	if (s->q != NULL && s->ignoring) {
		set_capability(s->q, "x-ignore-shared", 0);
		set_capability(s->q, "pause-before-switchover", 0);
	}
	send_resume(s);
	if (s->migrating)
		fprintf(stderr, "uffd-client: the destination QEMU never ran: "
				"its migration fails; quit it\n");
}

/* The steps, in order; the first that fails ends it. */
static int (*const send_steps[])(struct send *) = {
	send_open,   send_export, send_wait_dest, send_wait_ready, send_prepare,
	send_switch, send_go,	  send_devstate,  send_finish,
};

int
qemu_send(const struct cmd_entry *self, int argc, char **argv)
{
	struct send s = {.holder = -1, .timeout = 300, .ctl = control_path};
	size_t n = sizeof(send_steps) / sizeof(send_steps[0]), done = 0;

	send_args(self, argc, argv, &s);
	flow_defer_signals();
	while (done < n && !flow_stop_signal() && send_steps[done](&s) == 0)
		done++;
	if (done < n) {
		if (flow_stop_signal())
			fprintf(stderr, "uffd-client: %s: stopping\n",
				strsignal(flow_stop_signal()));
		send_undo(&s);
	} else if (s.holder > 0) {
		/* The daemon kills it once the COMMIT is acknowledged. */
		holder_reap(s.holder, HOLDER_REAP_SECS, s.ctl, s.id);
	}
	qmp_close(s.q);
	flow_end_by_signal();
	return done == n ? 0 : 1;
}

/*
 * migrate-qemu: the QEMU postcopy flow (docs/operations.md), one command.
 * Guest RAM lives in shared files (memory-backend-file, share=on); QEMU
 * moves device state only (x-ignore-shared) and uffdd moves the RAM:
 *
 *   1. both QEMUs: x-ignore-shared; RAM blocks found by QOM and matched
 *      by backend id (the RAM block name), never by address;
 *   2. source: stop, wait for STOP (the vCPUs no longer write guest RAM);
 *   3. a holder process maps the source RAM files and is exported: the
 *      source daemon serves the files from it while the source QEMU stays
 *      free to send its device state (export freezes what it exports);
 *   4. destination: attach to QEMU's RAM mappings (--map, the addresses
 *      differ), then migrate-incoming: the device-state load may read
 *      guest RAM already (kvmvapic), and every page it reads faults in;
 *   5. source: migrate; when the destination has loaded, cont;
 *   6. wait until every page is resident, then quit the source QEMU.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "client/client.h"
#include "client/qemu.h"
#include "client/qmp.h"

/* Everything the flow holds, from its command line to its end. */
struct flow {
	const char *sq, *dq, *sc, *dc, *peer; /* QMP sockets, controls */
	int resume;
	int precopy; /* --precopy: the flow of qemu-local.c instead */
	double timeout;
	struct qmp *src, *dst;
	struct ramblock sb[MAX_BLOCKS], db[MAX_BLOCKS];
	size_t ns, nd;
	char st[64]; /* the last QEMU status read */
	char id[64]; /* the migration, once exported */
	pid_t holder;
	uint64_t qemu_bytes;
	double t_stop, t_dev, t_run; /* stopped, device state sent, run */
	/* How far it went, for what a failure must undo. */
	int stopped_src, dst_ran, resident, ignoring;
	/* The migration failed at the destination; uffdd stopped its QEMU. */
	int failed, dst_stopped;
};

/* The command line, into f; a wrong one is the usage line. */
static void
parse_args(const struct cmd_entry *self, int argc, char **argv, struct flow *f)
{
	static const struct option o[] = {
		{"src-qmp", required_argument, NULL, 's'},
		{"dst-qmp", required_argument, NULL, 'd'},
		{"src-control", required_argument, NULL, 'S'},
		{"dst-control", required_argument, NULL, 'D'},
		{"src-peer", required_argument, NULL, 'p'},
		{"no-resume", no_argument, NULL, 'n'},
		{"timeout", required_argument, NULL, 't'},
		{"precopy", no_argument, NULL, 'P'},
		{NULL, 0, NULL, 0}};
	/* The options that name a socket or a peer, and where each goes. */
	const struct {
		int ch;
		const char **to;
	} named[] = {{'s', &f->sq},
		     {'d', &f->dq},
		     {'S', &f->sc},
		     {'D', &f->dc},
		     {'p', &f->peer}};
	const size_t nnamed = sizeof(named) / sizeof(named[0]);
	int ch;

	while ((ch = getopt_long(argc, argv, "", o, NULL)) != -1) {
		size_t i = 0;

		while (i < nnamed && named[i].ch != ch)
			i++;
		if (i < nnamed)
			*named[i].to = optarg;
		else if (ch == 'n')
			f->resume = 0;
		else if (ch == 'P')
			f->precopy = 1;
		else if (ch == 't')
			f->timeout = parse_timeout(optarg, self->usage);
		else
			die_usage(self->usage);
	}
	if (optind != argc || !f->sq || !f->dq || !f->sc || !f->dc || !f->peer)
		die_usage(self->usage);
}

/* Both QEMUs on QMP, and their RAM blocks. */
static int
open_qemus(struct flow *f)
{
	if ((f->src = qmp_open(f->sq)) == NULL ||
	    (f->dst = qmp_open(f->dq)) == NULL)
		return -1;
	if (ramblocks(f->src, f->sb, &f->ns) < 0 ||
	    ramblocks(f->dst, f->db, &f->nd) < 0)
		return -1;
	return 0;
}

/*
 * Each source block to the destination's of the same name and size (the
 * addresses differ between the QEMUs), in a file of its own.
 */
static int
match_blocks(struct flow *f)
{
	struct ramblock *sb = f->sb, *db = f->db;

	if (ramfiles_apart(sb, f->ns, db, f->nd) < 0)
		return -1;
	for (size_t i = 0; i < f->ns; i++) {
		size_t j;

		for (j = 0; j < f->nd; j++)
			if (strcmp(sb[i].id, db[j].id) == 0)
				break;
		if (j == f->nd || db[j].size != sb[i].size) {
			fprintf(stderr,
				"uffd-client: RAM block %s (%" PRIu64
				" bytes) has no match of the same size in "
				"the destination QEMU\n",
				sb[i].id, sb[i].size);
			return -1;
		}
		sb[i].holder = 0;
		db[j].match = i;
		flow_say("RAM block %s: %" PRIu64
			 " MiB, source pid %d at 0x%" PRIx64
			 ", destination pid %d at 0x%" PRIx64,
			 sb[i].id, sb[i].size >> 20, (int)qmp_pid(f->src),
			 sb[i].addr, (int)qmp_pid(f->dst), db[j].addr);
	}
	if (f->nd != f->ns) {
		fprintf(stderr, "uffd-client: the destination QEMU has RAM "
				"blocks the source lacks\n");
		return -1;
	}
	return 0;
}

/* Whether the daemon at control socket path answers. */
static int
daemon_answers(const char *path)
{
	int fd;

	control_path = path;
	if ((fd = connect_daemon_try()) < 0)
		return 0;
	close(fd);
	return 1;
}

/*
 * Before anything stops: the destination waits for an incoming migration,
 * the source is a guest to move (running, or paused by its operator), and
 * both daemons answer. Then both QEMUs leave the shared RAM to uffdd.
 */
static int
preflight(struct flow *f)
{
	if (query_str(f->dst, "query-status", "status", f->st, sizeof(f->st)) <
	    0)
		return -1;
	if (strcmp(f->st, "inmigrate") != 0) {
		fprintf(stderr,
			"uffd-client: destination QEMU is %s: start it "
			"with -incoming defer\n",
			f->st);
		return -1;
	}
	if (query_str(f->src, "query-status", "status", f->st, sizeof(f->st)) <
	    0)
		return -1;
	if (strcmp(f->st, "running") != 0 && strcmp(f->st, "paused") != 0) {
		fprintf(stderr,
			"uffd-client: source QEMU is %s, not running or "
			"paused: nothing to migrate from it\n",
			f->st);
		return -1;
	}
	if (!daemon_answers(f->sc) || !daemon_answers(f->dc))
		return -1;
	if (set_capability(f->src, "x-ignore-shared", 1) < 0 ||
	    set_capability(f->dst, "x-ignore-shared", 1) < 0)
		return -1;
	f->ignoring = 1;
	return 0;
}

/* Switchover starts: the source vCPUs stop writing guest RAM. */
static int
stop_source(struct flow *f)
{
	f->t_stop = flow_now();
	f->stopped_src = strcmp(f->st, "running") == 0;
	if (qemu_stop(f->src, f->st) < 0)
		return -1;
	flow_say("source vCPUs stopped");
	return 0;
}

/* The holder is started and exported by the source daemon: f->id. */
static int
export_holder(struct flow *f)
{
	Uffdd__ExportRequest ereq = UFFDD__EXPORT_REQUEST__INIT;
	Uffdd__Range ranges[MAX_BLOCKS], *rangep[MAX_BLOCKS];
	Uffdd__ExportReply *erep;

	f->holder = holder_start(f->sb, f->ns);
	if (f->holder < 0)
		return -1;
	for (size_t i = 0; i < f->ns; i++) {
		uffdd__range__init(&ranges[i]);
		ranges[i].start = f->sb[i].holder;
		ranges[i].end = f->sb[i].holder + f->sb[i].size;
		rangep[i] = &ranges[i];
	}
	ereq.pid = f->holder;
	ereq.ranges = rangep;
	ereq.n_ranges = f->ns;
	erep = (Uffdd__ExportReply *)flow_request(
		f->sc, FRAME_CTL_EXPORT, &ereq.base, FRAME_CTL_EXPORT_REPLY);
	if (erep == NULL)
		return -1;
	snprintf(f->id, sizeof(f->id), "%s", erep->id);
	frame_free(&erep->base);
	flow_say("source RAM exported: migration %s", f->id);
	return 0;
}

/*
 * Whether the destination daemon attached every RAM block: an unmatched
 * one, or one fewer matched, would not move.
 */
static int
attached_all(const struct flow *f, const Uffdd__AttachReply *arep)
{
	print_regions("attached", arep->matched, arep->n_matched, stderr);
	if (arep->n_unmatched == 0 && arep->n_matched < f->ns) {
		fprintf(stderr,
			"uffd-client: %zu of %zu RAM blocks were exported "
			"and attached: the rest would not move\n",
			arep->n_matched, f->ns);
		return 0;
	}
	if (arep->n_unmatched) {
		print_regions("unmatched", arep->unmatched, arep->n_unmatched,
			      stderr);
		fprintf(stderr, "uffd-client: some source RAM was not "
				"matched in the destination QEMU\n");
		return 0;
	}
	return 1;
}

/* The destination daemon attaches to QEMU's RAM, holder onto QEMU maps. */
static int
attach_dest(struct flow *f)
{
	Uffdd__AttachRequest areq = UFFDD__ATTACH_REQUEST__INIT;
	Uffdd__RegionMap maps[MAX_BLOCKS], *mapp[MAX_BLOCKS];
	Uffdd__AttachReply *arep;
	int ok;

	for (size_t j = 0; j < f->nd; j++) {
		uffdd__region_map__init(&maps[j]);
		maps[j].src_start = f->sb[f->db[j].match].holder;
		maps[j].dst_start = f->db[j].addr;
		mapp[j] = &maps[j];
	}
	areq.pid = qmp_pid(f->dst);
	areq.from = (char *)f->peer;
	areq.id = f->id;
	areq.maps = mapp;
	areq.n_maps = f->nd;
	arep = (Uffdd__AttachReply *)flow_request(
		f->dc, FRAME_CTL_ATTACH, &areq.base, FRAME_CTL_ATTACH_REPLY);
	if (arep == NULL)
		return -1;
	ok = attached_all(f, arep);
	frame_free(&arep->base);
	if (!ok)
		return -1;
	flow_say("destination QEMU attached: guest RAM arrives post-copy");
	return 0;
}

/*
 * The source QEMU sends its device state. Device state only: this takes
 * milliseconds. A source that never gets there (a pause-before-switchover
 * capability set earlier, a QEMU wedged) must not keep the guest stopped
 * for good.
 */
static int
send_devstate(struct flow *f)
{
	char uri[64];
	int port;

	if ((port = incoming_port(f->dst)) < 0)
		return -1;
	snprintf(uri, sizeof(uri), "tcp:127.0.0.1:%d", port);
	if (exec_uri(f->src, "migrate", uri) < 0)
		return -1;
	f->t_dev = flow_now();
	return devstate_wait(f->src, f->t_dev, f->st, sizeof(f->st),
			     &f->qemu_bytes);
}

/* The destination QEMU has loaded the device state: f->st is its status. */
static int
dest_loaded(struct flow *f)
{
	for (;;) {
		/* A QEMU uffdd stopped would not answer. */
		if ((f->dst_stopped = flow_dest_stopped(qmp_pid(f->dst))))
			return -1;
		if (query_str(f->dst, "query-status", "status", f->st,
			      sizeof(f->st)) < 0)
			return -1;
		if (strcmp(f->st, "inmigrate") != 0)
			break;
		if (flow_now() - f->t_dev > DEVSTATE_SECS) {
			fprintf(stderr,
				"uffd-client: the destination QEMU is still "
				"inmigrate after %d s\n",
				DEVSTATE_SECS);
			return -1;
		}
		usleep(20000);
	}
	if (strcmp(f->st, "running") == 0) {
		f->dst_ran = 1; /* it started on its own */
		holder_keep();
	}
	flow_say("device state moved to the destination (%s): %" PRIu64
		 " bytes by QEMU",
		 f->st, f->qemu_bytes);
	return 0;
}

/* The destination guest runs, unless --no-resume leaves it paused. */
static int
run_dest(struct flow *f)
{
	if ((f->dst_stopped = flow_dest_stopped(qmp_pid(f->dst))))
		return -1;
	if (f->resume && strcmp(f->st, "running") != 0 &&
	    qmp_execute(f->dst, "cont", NULL, NULL) < 0)
		return -1;
	if (f->resume) {
		f->dst_ran = 1;
		holder_keep();
		f->t_run = flow_now();
		flow_say("destination guest running, %.0f ms after the source "
			 "stopped",
			 (f->t_run - f->t_stop) * 1000);
	} else {
		flow_say("destination guest left paused (--no-resume)");
	}
	return 0;
}

/*
 * Every page resident at the destination, and vouched for by the source
 * (its COMMIT): the source QEMU quits. A failure may have stopped the
 * destination QEMU (the source ran: its RAM may be torn).
 */
static int
finish(struct flow *f)
{
	int rc;

	control_path = f->dc;
	rc = wait_for(f->id, f->timeout);
	if (rc == 1) {
		f->failed = 1;
		f->dst_stopped = flow_dest_stopped(qmp_pid(f->dst));
	}
	if (rc != 0)
		return -1;
	f->resident = 1;
	flow_say("every page resident %.3f s after switchover",
		 flow_now() - (f->resume ? f->t_run : f->t_stop));
	return source_quit(f->src);
}

/*
 * A failure undone as far as it can be. Until the destination guest has
 * run, the source is still the guest: a failure before then resumes it
 * rather than leaving it stopped.
 */
static void
undo(struct flow *f)
{
	if (f->src != NULL && !f->dst_ran && !f->resident && f->ignoring)
		/* A later migration of it must move its shared RAM again. */
		set_capability(f->src, "x-ignore-shared", 0);
	if (f->src != NULL && f->stopped_src && !f->dst_ran && !f->resident) {
		if (qmp_execute(f->src, "cont", NULL, NULL) == 0)
			flow_say("failed before switchover: source guest "
				 "resumed");
	} else if (f->dst_stopped) {
		fprintf(stderr,
			"uffd-client: migration %s failed; the source QEMU "
			"(pid %d) is left stopped, and process %d (its RAM "
			"files) too\n",
			f->id, (int)qmp_pid(f->src), (int)f->holder);
	} else if (f->failed) {
		fprintf(stderr,
			"uffd-client: migration %s failed (the reason above): "
			"the destination guest runs on, a page it lost "
			"poisoned; the source QEMU is left stopped\n",
			f->id);
	} else if (f->resident && !f->dst_ran) {
		fprintf(stderr,
			"uffd-client: the paused destination holds every page "
			"(--no-resume): the source QEMU is left stopped, not "
			"resumed\n");
	} else if (f->dst_ran) {
		fprintf(stderr,
			"uffd-client: the destination guest runs: migration "
			"%s goes on in the daemons (uffd-client --control %s "
			"wait %s); the source QEMU is left stopped, and "
			"process %d serves its RAM files until the migration "
			"completes\n",
			f->id, f->dc, f->id, (int)f->holder);
	}
}

/* The steps of the flow, in order; the first that fails ends it. */
static int (*const steps[])(struct flow *) = {
	open_qemus,  match_blocks,  preflight,	 stop_source, export_holder,
	attach_dest, send_devstate, dest_loaded, run_dest,    finish,
};

/* migrate-qemu: the steps, then what a failure leaves to undo. */
int
cmd_migrate_qemu(const struct cmd_entry *self, int argc, char **argv)
{
	struct flow f = {.resume = 1, .holder = -1};
	size_t done = 0;

	if (argc > 1 && strcmp(argv[1], "send") == 0)
		return qemu_send(self, argc - 1, argv + 1);
	if (argc > 1 && strcmp(argv[1], "receive") == 0)
		return qemu_receive(self, argc - 1, argv + 1);
	parse_args(self, argc, argv, &f);
	if (f.precopy)
		return qemu_local(f.sq, f.dq, f.sc, f.dc, f.peer, f.resume,
				  f.timeout > 0 ? f.timeout : 300);
	while (done < sizeof(steps) / sizeof(steps[0]) && steps[done](&f) == 0)
		done++;
	if (done < sizeof(steps) / sizeof(steps[0]))
		undo(&f);
	if (f.holder > 0 && !f.dst_ran) {
		/* The source guest is still the guest: it goes. */
		kill(f.holder, SIGKILL);
		waitpid(f.holder, NULL, 0);
	} else if (f.holder > 0 && done == sizeof(steps) / sizeof(steps[0])) {
		/* The source daemon kills it once the COMMIT is acknowledged. */
		holder_reap(f.holder, HOLDER_REAP_SECS, f.sc, f.id);
	}
	qmp_close(f.src);
	qmp_close(f.dst);
	return done == sizeof(steps) / sizeof(steps[0]) ? 0 : 1;
}

/* uffdd: post-copy memory migration daemon. main() and process setup. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/conffile.h"
#include "daemon/confrun.h"
#include "daemon/engine.h"
#include "daemon/priv/parent.h"
#include "daemon/dest.h"
#include "daemon/fdpass.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/migration.h"
#include "daemon/notify.h"
#include "daemon/pagemap.h"
#include "daemon/peer.h"
#include "daemon/probe.h"
#include "daemon/region.h"
#include "daemon/source.h"
#include "daemon/state.h"
#include "daemon/stats.h"
#include "daemon/tls.h"
#include "daemon/tracee.h"
#include "daemon/worker.h"
#include "version.h"

/*
 * The help: its three %s are the defaults of the control socket, the state
 * directory and the configuration file.
 */
static const char usage_text[] =
	"usage: uffdd [--listen HOST:PORT] [--control PATH] "
	"[--state-dir DIR]\n"
	"             [--engine-user USER] [--control-mode MODE]\n"
	"             [--control-group GROUP] [--admin-group GROUP]\n"
	"             [--ca FILE --cert FILE --key FILE [--pin SHA256]]"
	"\n"
	"             [--insecure] [--config FILE] [-n] "
	"[-f|--foreground]\n"
	"             [--pause-deadline SEC] [--bulk-rate RATE] "
	"[--pagemap-scan yes|no]\n"
	"             [--max-regions N] [--max-request-pages N]\n"
	"             [--max-pending N] [--max-pending-per-address N]\n"
	"             [--hello-timeout SEC] [--max-output BYTES]\n"
	"             [--poll-us N] [--zero-detect yes|no] "
	"[--metrics [ADDR:]PORT]\n"
	"             [--bulk-installer yes|no] [--bulk-installer-nice N]\n"
	"             [--log-level LEVEL] [--log-journal auto|yes|no] [-v]\n"
	"             [-h|--help] [--version]\n"
	"\n"
	"  --listen HOST:PORT  accept peer daemons there (source "
	"role); a comma-\n"
	"                      separated list for several addresses\n"
	"  --control PATH      control socket for uffd-client "
	"(default %s)\n"
	"  --control-mode MODE control socket mode, octal (default "
	"0600)\n"
	"  --control-group GRP control socket group (name or number)\n"
	"  --admin-group GRP   its members at connect act on any "
	"process, as root\n"
	"  --state-dir DIR     per-migration state files (default %s)\n"
	"  --engine-user USER  run the engine (peers, images, the data "
	"path) as\n"
	"                      USER, with no capabilities, NoNewPrivs and "
	"a\n"
	"                      seccomp filter; its state files go in "
	"DIR/engine\n"
	"                      (default: none, the engine runs as root)\n"
	"  --ca FILE           CA certificate(s) every peer's "
	"certificate must\n"
	"                      chain to (PEM)\n"
	"  --cert FILE         this daemon's certificate chain (PEM), "
	"shown as\n"
	"                      server and as client\n"
	"  --key FILE          its private key (PEM)\n"
	"  --pin SHA256        accept a source by this certificate "
	"fingerprint\n"
	"                      instead of the name in --from\n"
	"  --insecure          plaintext peer connections, loopback "
	"only; the\n"
	"                      file's TLS keys are set aside\n"
	"  --config FILE       configuration file (default %s);\n"
	"                      flags override it, SIGHUP reloads it\n"
	"  --check, -n         check the configuration, print the "
	"effective one\n"
	"                      and exit\n"
	"  --foreground, -f    stay in the foreground, log to stderr\n"
	"  --pause-deadline S  a destination whose source stays "
	"unreachable\n"
	"                      this long fails the migration and "
	"poisons\n"
	"                      missing pages; a pre-copy's source "
	"waits as\n"
	"                      long for its destination (default "
	"300)\n"
	"  --bulk-rate RATE    limit each source bulk lane to RATE "
	"bytes/s\n"
	"                      (suffix K, M, G; 0, the default: "
	"unlimited;\n"
	"                      else at least 4096)\n"
	"  --pagemap-scan yes|no  classify anonymous pages with "
	"PAGEMAP_SCAN\n"
	"                      where the kernel has it (default yes)\n"
	"  --no-pagemap-scan   the same as --pagemap-scan no\n"
	"  --max-regions N     regions per migration, both roles "
	"(default 4096,\n"
	"                      at most 4096)\n"
	"  --max-request-pages N  pages one demand request may ask "
	"for (default\n"
	"                      512, 256 to 1024)\n"
	"  --max-pending N     peer connections before HELLO, in all "
	"(default 64)\n"
	"  --max-pending-per-address N  the same from one address "
	"(default 8)\n"
	"  --hello-timeout SEC seconds from accept to a peer's HELLO, "
	"TLS included\n"
	"                      (default 10)\n"
	"  --max-output BYTES  unsent output after which a connection "
	"stops\n"
	"                      reading requests (default 32M, 8M to "
	"1G)\n"
	"  --poll-us N         after a demand request or answer, look "
	"for the\n"
	"                      next event for N microseconds before "
	"sleeping\n"
	"                      (default 100, 0 to 1000; 0: never; ends "
	"when\n"
	"                      another task wants the CPU, unless "
	"pinned)\n"
	"  --zero-detect yes|no  source: send prefetched data pages "
	"whose bytes\n"
	"                      are all zero as ZERO markers (default "
	"no)\n"
	"  --bulk-installer yes|no  destination: install bulk pages on a "
	"thread\n"
	"                      of their own, below the event loop, while "
	"the\n"
	"                      target faults, one thread waiting at most "
	"(default\n"
	"                      yes)\n"
	"  --bulk-installer-nice N  that thread's nice value above the "
	"daemon's\n"
	"                      (default 10, 0 to 19)\n"
	"  --metrics [ADDR:]PORT  serve GET /metrics there over HTTP, "
	"OpenMetrics\n"
	"                      text (no ADDR: 127.0.0.1; default: off)\n"
	"  --log-level LEVEL   info or debug (default info)\n"
	"  --log-journal auto|yes|no  each line to the journal with its "
	"fields\n"
	"                      (MIGRATION_ID, ROLE, PEER, PID, MESSAGE_ID); "
	"auto,\n"
	"                      the default: when stderr is the journal\n"
	"  -v, --verbose       more logging (debug)\n"
	"  -h, --help          this text\n"
	"  --version           the version, and the git commit built "
	"from\n";

static void
usage(FILE *f)
{
	fprintf(f, usage_text, "/run/uffdd/control.sock", "/run/uffdd",
		CONFFILE_DEFAULT_PATH);
}

/* --engine CTL,RPC (internal): the engine's socket pairs' ends. */
static int
engine_fds(const char *arg, int engine[2], char *err, size_t errlen)
{
	if (sscanf(arg, "%d,%d", &engine[0], &engine[1]) == 2 &&
	    engine[0] > 2 && engine[1] > 2)
		return 0;
	snprintf(err, errlen, "engine: want CTL,RPC descriptors");
	return -1;
}

/* The flags: each a config key of the same name, but a few. */
static const struct option opts[] = {
	{"listen", required_argument, NULL, 'l'},
	{"control", required_argument, NULL, 'c'},
	{"control-mode", required_argument, NULL, 'K'},
	{"control-group", required_argument, NULL, 'K'},
	{"admin-group", required_argument, NULL, 'K'},
	{"state-dir", required_argument, NULL, 's'},
	{"engine-user", required_argument, NULL, 'K'},
	{"insecure", no_argument, NULL, 'I'},
	{"ca", required_argument, NULL, 'K'},
	{"cert", required_argument, NULL, 'K'},
	{"key", required_argument, NULL, 'K'},
	{"pin", required_argument, NULL, 'K'},
	{"log-level", required_argument, NULL, 'K'},
	{"log-journal", required_argument, NULL, 'K'},
	{"pause-deadline", required_argument, NULL, 'K'},
	{"bulk-rate", required_argument, NULL, 'K'},
	{"pagemap-scan", required_argument, NULL, 'K'},
	{"no-pagemap-scan", no_argument, NULL, 'N'},
	{"max-regions", required_argument, NULL, 'K'},
	{"max-request-pages", required_argument, NULL, 'K'},
	{"max-pending", required_argument, NULL, 'K'},
	{"max-pending-per-address", required_argument, NULL, 'K'},
	{"hello-timeout", required_argument, NULL, 'K'},
	{"max-output", required_argument, NULL, 'K'},
	{"poll-us", required_argument, NULL, 'K'},
	{"zero-detect", required_argument, NULL, 'K'},
	{"bulk-installer", required_argument, NULL, 'K'},
	{"bulk-installer-nice", required_argument, NULL, 'K'},
	{"metrics", required_argument, NULL, 'K'},
	{"config", required_argument, NULL, 'F'},
	{"check", no_argument, NULL, 'n'},
	{"foreground", no_argument, NULL, 'f'},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, 'V'},
	/* Internal: run as the engine (docs/privsep.md). */
	{"engine", required_argument, NULL, 'E'},
	{NULL, 0, NULL, 0},
};

static int
parse_args(int argc, char **argv, int *check, int engine[2])
{
	struct uffdd_conf *cli = conf_cli();
	char err[256];
	int ch, idx, rc;

	cli->control_gid = (gid_t)-1;
	cli->admin_gid = (gid_t)-1;
	while ((ch = getopt_long(argc, argv, "l:c:s:Infvh", opts, &idx)) !=
	       -1) {
		switch (ch) {
		case 'l':
		case 'c':
		case 's':
			rc = conffile_set(cli,
					  ch == 'l'   ? "listen"
					  : ch == 'c' ? "control"
						      : "state-dir",
					  optarg, err, sizeof(err));
			break;
		case 'I':
			rc = conffile_set(cli, "insecure", "yes", err,
					  sizeof(err));
			break;
		case 'K':
			rc = conffile_set(cli, opts[idx].name, optarg, err,
					  sizeof(err));
			break;
		case 'F':
			conf_set_path(optarg);
			rc = 0;
			break;
		case 'n':
			*check = 1;
			rc = 0;
			break;
		case 'N':
			rc = conffile_set(cli, "pagemap-scan", "no", err,
					  sizeof(err));
			break;
		case 'f':
			cli->foreground = 1;
			rc = 0;
			break;
		case 'v':
			cli->verbose++;
			rc = 0;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf("uffdd %s\n", UFFDD_VERSION);
			exit(0);
		case 'E':
			rc = engine_fds(optarg, engine, err, sizeof(err));
			break;
		default:
			usage(stderr);
			return -1;
		}
		if (rc < 0) {
			fprintf(stderr, "uffdd: --%s\n", err);
			return -1;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return -1;
	}
	return 0;
}

int
main(int argc, char **argv)
{
	int check = 0, engine[2] = {-1, -1};
	char err[512];

	if (parse_args(argc, argv, &check, engine) < 0)
		return 2;
	if (conf_build(&conf, err, sizeof(err)) < 0) {
		fprintf(stderr, "uffdd: %s\n", err);
		return 1;
	}
	log_init(1, conf.verbose);
	if (!check)
		log_journal(conf.log_journal);
	if (check) {
		/* The TLS files are part of the configuration: load them. */
		if (!conf.insecure &&
		    tls_init(conf.ca, conf.cert, conf.key, conf.pin) < 0)
			return 1;
		conffile_print(stdout, &conf);
		tls_free();
		return 0;
	}
	if (geteuid() != 0)
		fatalx("must run as root: it reads and writes other processes' "
		       "memory");
	if (engine[0] >= 0) {
		int rc = engine_main(engine[0], engine[1]);

		conffile_clear(conf_cli());
		return rc;
	}
	return parent_main(argc, argv);
}

/* uffdd: post-copy memory migration daemon. main() and process setup. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/log.h"
#include "daemon/pagemap.h"
#include "daemon/probe.h"
#include "daemon/uffdd.h"

struct uffdd_conf conf = {
	.control = "/run/uffdd/control.sock",
	.state_dir = "/run/uffdd",
	.pause_deadline = 300,
};
struct event_base *base;

static void
usage(FILE *f)
{
	fprintf(f,
		"usage: uffdd [--listen HOST:PORT] [--control PATH] "
		"[--state-dir DIR]\n"
		"             [--insecure] [--pause-deadline SEC] "
		"[--bulk-rate RATE]\n"
		"             [--no-pagemap-scan] [--foreground] [-v] "
		"[--help]\n"
		"\n"
		"  --listen HOST:PORT  accept peer daemons there (source "
		"role)\n"
		"  --control PATH      control socket for uffd-client "
		"(default %s)\n"
		"  --state-dir DIR     per-migration state files (default %s)\n"
		"  --insecure          plaintext peer connections, loopback "
		"only;\n"
		"                      required until TLS is built\n"
		"  --pause-deadline S  a destination whose source stays "
		"unreachable\n"
		"                      this long fails the migration and "
		"poisons\n"
		"                      missing pages (default 300)\n"
		"  --bulk-rate RATE    limit each source bulk lane to RATE "
		"bytes/s\n"
		"                      (suffix K, M, G; default unlimited)\n"
		"  --no-pagemap-scan   classify pages with batched pagemap "
		"reads even\n"
		"                      where the PAGEMAP_SCAN ioctl exists\n"
		"  --foreground, -f    stay in the foreground, log to stderr\n"
		"  -v                  more logging\n",
		"/run/uffdd/control.sock", "/run/uffdd");
}

static void
on_signal(evutil_socket_t sig, short ev, void *arg)
{
	log_info("signal %d: shutting down", (int)sig);
	event_base_loopexit(base, NULL);
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"listen", required_argument, NULL, 'l'},
		{"control", required_argument, NULL, 'c'},
		{"state-dir", required_argument, NULL, 's'},
		{"insecure", no_argument, NULL, 'I'},
		{"pause-deadline", required_argument, NULL, 'P'},
		{"bulk-rate", required_argument, NULL, 'R'},
		{"no-pagemap-scan", no_argument, NULL, 'N'},
		{"foreground", no_argument, NULL, 'f'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct event *sigterm, *sigint;
	int ch;

	while ((ch = getopt_long(argc, argv, "l:c:s:IP:R:Nfvh", opts, NULL)) !=
	       -1) {
		switch (ch) {
		case 'l':
			conf.listen = optarg;
			break;
		case 'c':
			conf.control = optarg;
			break;
		case 's':
			conf.state_dir = optarg;
			break;
		case 'I':
			conf.insecure = 1;
			break;
		case 'N':
			pagemap_force_read = 1;
			break;
		case 'P': {
			char *end;
			long v = strtol(optarg, &end, 10);

			if (*end || v < 1 || v > 86400)
				fatalx("--pause-deadline %s: want seconds, "
				       "1 to 86400",
				       optarg);
			conf.pause_deadline = (int)v;
			break;
		}
		case 'R': {
			char *end;
			unsigned long long v = strtoull(optarg, &end, 10);

			if (*end == 'K' || *end == 'k')
				v <<= 10, end++;
			else if (*end == 'M' || *end == 'm')
				v <<= 20, end++;
			else if (*end == 'G' || *end == 'g')
				v <<= 30, end++;
			if (*end || v < 4096)
				fatalx("--bulk-rate %s: want bytes a second "
				       "(suffix K, M or G), at least 4096",
				       optarg);
			conf.bulk_rate = v;
			break;
		}
		case 'f':
			conf.foreground = 1;
			break;
		case 'v':
			conf.verbose++;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	log_init(1, conf.verbose);
	if (geteuid() != 0)
		fatalx("must run as root: it reads and writes other processes' "
		       "memory");
	if (!conf.insecure)
		fatalx("peer connections need TLS, which this build does not "
		       "have yet: pass --insecure (plaintext, loopback only)");
	if (mkdir(conf.state_dir, 0700) < 0 && errno != EEXIST)
		fatal("state directory %s", conf.state_dir);
	if (!conf.foreground && daemon(0, 0) < 0)
		fatal("daemon");
	log_init(conf.foreground, conf.verbose);
	signal(SIGPIPE, SIG_IGN);

	if ((base = event_base_new()) == NULL)
		fatalx("event_base_new");
	if (event_base_priority_init(base, PRIO_COUNT) < 0)
		fatalx("event_base_priority_init");
	probe_kernel();
	if (control_listen(conf.control) < 0)
		return 1;
	if (conf.listen && peer_listen(conf.listen) < 0) {
		control_close();
		return 1;
	}
	sigterm = evsignal_new(base, SIGTERM, on_signal, NULL);
	sigint = evsignal_new(base, SIGINT, on_signal, NULL);
	evsignal_add(sigterm, NULL);
	evsignal_add(sigint, NULL);
	state_restore_all();
	log_info("ready: control %s", conf.control);

	event_base_dispatch(base);

	control_close();
	peer_close_listeners();
	migration_free_all();
	event_free(sigterm);
	event_free(sigint);
	event_base_free(base);
	return 0;
}

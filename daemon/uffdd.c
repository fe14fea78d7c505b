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

#include "daemon/log.h"
#include "daemon/probe.h"
#include "daemon/uffdd.h"

struct uffdd_conf conf = {
	.control = "/run/uffdd/control.sock",
	.state_dir = "/run/uffdd",
};
struct event_base *base;

static void
usage(FILE *f)
{
	fprintf(f,
		"usage: uffdd [--listen HOST:PORT] [--control PATH] "
		"[--state-dir DIR]\n"
		"             [--insecure] [--foreground] [-v] [--help]\n"
		"\n"
		"  --listen HOST:PORT  accept peer daemons there (source "
		"role)\n"
		"  --control PATH      control socket for uffd-client "
		"(default %s)\n"
		"  --state-dir DIR     per-migration state files (default %s)\n"
		"  --insecure          plaintext peer connections, loopback "
		"only;\n"
		"                      required until TLS is built\n"
		"  --foreground, -f    stay in the foreground, log to stderr\n"
		"  -v                  more logging\n",
		"/run/uffdd/control.sock", "/run/uffdd");
}

/* State files: one per migration, replaced atomically. */
void
state_write(const struct migration *m)
{
	char *path, *tmp;
	FILE *f;

	xasprintf(&path, "%s/%s.state", conf.state_dir, m->id);
	xasprintf(&tmp, "%s.tmp", path);
	if ((f = fopen(tmp, "we")) != NULL) {
		fprintf(f, "id=%s\nrole=%s\npid=%d\npeer=%s\nstate=%s\n", m->id,
			m->role == ROLE_SOURCE ? "source" : "destination",
			(int)m->pid, m->peer, migration_state_name(m->state));
		if (fclose(f) == 0 && rename(tmp, path) == 0)
			goto out;
	}
	log_warn("state file %s", path);
	unlink(tmp);
out:
	free(tmp);
	free(path);
}

void
state_remove(const struct migration *m)
{
	char *path;

	xasprintf(&path, "%s/%s.state", conf.state_dir, m->id);
	unlink(path);
	free(path);
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
		{"foreground", no_argument, NULL, 'f'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct event *sigterm, *sigint;
	int ch;

	while ((ch = getopt_long(argc, argv, "l:c:s:Ifvh", opts, NULL)) != -1) {
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
	/*
	 * Lane buffers come and go in chunks of hundreds of KiB. Above
	 * glibc's mmap threshold, and with its trimming, each one was fresh
	 * memory from the kernel, faulted in and zeroed page by page (a
	 * fifth of the bulk lane's CPU). Keep them on the heap and reuse it.
	 */
	mallopt(M_MMAP_THRESHOLD, 16 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);

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

/* uffdd: post-copy memory migration daemon. main() and process setup. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/log.h"
#include "daemon/probe.h"
#include "daemon/tls.h"
#include "daemon/uffdd.h"

struct uffdd_conf conf = {
	.control = "/run/uffdd/control.sock",
	.control_mode = 0600,
	.control_gid = (gid_t)-1,
	.state_dir = "/run/uffdd",
};
struct event_base *base;

static void
usage(FILE *f)
{
	fprintf(f,
		"usage: uffdd [--listen HOST:PORT] [--control PATH] "
		"[--state-dir DIR]\n"
		"             [--control-mode MODE] [--control-group GROUP]\n"
		"             [--ca FILE --cert FILE --key FILE [--pin SHA256]]"
		"\n"
		"             [--insecure] [--foreground] [-v] [--help]\n"
		"\n"
		"  --listen HOST:PORT  accept peer daemons there (source "
		"role)\n"
		"  --control PATH      control socket for uffd-client "
		"(default %s)\n"
		"  --control-mode MODE control socket mode, octal (default "
		"0600)\n"
		"  --control-group GRP control socket group (name or number)\n"
		"  --state-dir DIR     per-migration state files (default %s)\n"
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
		"only\n"
		"  --foreground, -f    stay in the foreground, log to stderr\n"
		"  -v                  more logging\n",
		"/run/uffdd/control.sock", "/run/uffdd");
}

/* An octal file mode, permission bits only. */
static int
parse_mode(const char *s, mode_t *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 8);
	if (errno || end == s || *end || v < 0 || v > 0777) {
		fprintf(stderr, "uffdd: mode %s: want octal 0000-0777\n", s);
		return -1;
	}
	*out = (mode_t)v;
	return 0;
}

/* A group name, or a number. */
static int
parse_group(const char *s, gid_t *out)
{
	struct group *gr = getgrnam(s);
	char *end;
	long v;

	if (gr != NULL) {
		*out = gr->gr_gid;
		return 0;
	}
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 0 || v >= (long)(gid_t)-1) {
		fprintf(stderr, "uffdd: group %s: no such group\n", s);
		return -1;
	}
	*out = (gid_t)v;
	return 0;
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
		{"control-mode", required_argument, NULL, 'M'},
		{"control-group", required_argument, NULL, 'G'},
		{"state-dir", required_argument, NULL, 's'},
		{"insecure", no_argument, NULL, 'I'},
		{"ca", required_argument, NULL, 'A'},
		{"cert", required_argument, NULL, 'C'},
		{"key", required_argument, NULL, 'K'},
		{"pin", required_argument, NULL, 'P'},
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
		case 'M':
			if (parse_mode(optarg, &conf.control_mode) < 0)
				return 2;
			break;
		case 'G':
			if (parse_group(optarg, &conf.control_gid) < 0)
				return 2;
			break;
		case 's':
			conf.state_dir = optarg;
			break;
		case 'I':
			conf.insecure = 1;
			break;
		case 'A':
			conf.ca = optarg;
			break;
		case 'C':
			conf.cert = optarg;
			break;
		case 'K':
			conf.key = optarg;
			break;
		case 'P':
			conf.pin = optarg;
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
	/* TLS files required unless --insecure; never both, to be clear. */
	if (conf.insecure && (conf.ca || conf.cert || conf.key || conf.pin))
		fatalx("--insecure (plaintext) and --ca/--cert/--key/--pin "
		       "(TLS) exclude each other");
	if (!conf.insecure &&
	    tls_init(conf.ca, conf.cert, conf.key, conf.pin) < 0)
		return 1;
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
	log_info("ready: control %s", conf.control);

	event_base_dispatch(base);

	control_close();
	peer_close_listeners();
	migration_free_all();
	event_free(sigterm);
	event_free(sigint);
	event_base_free(base);
	tls_free();
	return 0;
}

/*
 * The engine's process (engine.h): set-up, its signals and the privileged
 * part's word, the loop, shut-down.
 */
#include "config.h"

#include <libgen.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/conffile.h"
#include "daemon/confrun.h"
#include "daemon/control.h"
#include "daemon/ctlmsg.h"
#include "daemon/dest.h"
#include "daemon/engine.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/metrics_http.h"
#include "daemon/migration.h"
#include "daemon/wplinger.h"
#include "daemon/pagemap.h"
#include "daemon/peer.h"
#include "daemon/privop.h"
#include "daemon/probe.h"
#include "daemon/region.h"
#include "daemon/sandbox.h"
#include "daemon/source.h"
#include "daemon/state.h"
#include "daemon/statedir.h"
#include "daemon/tls.h"
#include "daemon/worker.h"

/* What the engine is doing now, for systemd's STATUS= line. */
static void
status_line(char *buf, size_t len)
{
	struct migration *m;
	int n = 0, active = 0;

	TAILQ_FOREACH (m, &migrations, link) {
		n++;
		active += m->state == MIG_RUNNING || m->state == MIG_PAUSED ||
			  m->state == MIG_CONNECTING;
	}
	snprintf(buf, len, "%d migrations, %d active; peers on %s", n, active,
		 conf.listen ? conf.listen : "(none)");
}

static void
stop(void)
{
	event_base_loopexit(base, NULL);
}

static void
on_signal(evutil_socket_t sig, short ev, void *arg)
{
	stop();
}

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define SANITIZED 1
#endif

/*
 * The state directory, opened as root: the engine's own, <state-dir>/engine
 * of its user, when it is confined (engine-user); else <state-dir>.
 */
static int
engine_state_dir(char *err, size_t errlen)
{
	uid_t uid;
	gid_t gid;

	if (conf.engine_user == NULL)
		return state_dir_open(conf.state_dir, geteuid(), err, errlen);
	if (sandbox_user(conf.engine_user, &uid, &gid, err, errlen) < 0)
		return -1;
	return state_dir_open_for(conf.state_dir, "engine", uid, gid, err,
				  errlen);
}

/* The directory holding path, read-only, for the sandbox's list. */
static void
read_dir_of(const char *path, char bufs[][PATH_MAX], struct sandbox_dir *d,
	    size_t *n)
{
	if (path == NULL)
		return;
	snprintf(bufs[*n], PATH_MAX, "%s", path);
	d[*n].path = dirname(bufs[*n]);
	d[*n].write = 0;
	(*n)++;
}

/*
 * The engine confined (sandbox.h) once it holds what needed root: its TLS
 * key read, its ports bound, its state directory open, the kernel probed.
 * From here on it writes only its state directory, reads its
 * configuration's directories (a reload), /proc and /sys, and acts on
 * processes only through the privileged part. Under the sanitizers their
 * reports go to stderr, which the engine can still write.
 */
static int
engine_confine(void)
{
	char bufs[8][PATH_MAX], err[512];
	struct sandbox_dir d[8];
	size_t n = 0;
	int landlocked;

	snprintf(bufs[n], PATH_MAX, "%s/engine", conf.state_dir);
	d[n].path = bufs[n];
	d[n++].write = 1;
	d[n].path = "/proc";
	d[n++].write = 0;
	d[n].path = "/sys";
	d[n++].write = 0;
	read_dir_of(conf_file_path(), bufs, d, &n);
	read_dir_of(conf.cert, bufs, d, &n);
	read_dir_of(conf.ca, bufs, d, &n);
	read_dir_of(conf.key, bufs, d, &n);
#ifdef SANITIZED
	__sanitizer_set_report_fd((void *)(intptr_t)STDERR_FILENO);
#endif
	if (sandbox_enter(conf.engine_user, d, n, &landlocked, err,
			  sizeof(err)) < 0) {
		log_warnx("engine: cannot confine it as %s: %s",
			  conf.engine_user, err);
		return -1;
	}
	log_info("engine confined: user %s (uid %u), no capabilities, "
		 "NoNewPrivs, seccomp%s",
		 conf.engine_user, (unsigned)getuid(),
		 landlocked ? ", Landlock" : "");
	return 0;
}

/*
 * Hands the settings that live outside conf to their modules; the rest
 * (peer.c, source/) read conf at each use, so a reload reaches them too.
 */
static void
apply_limits(void)
{
	pagemap_force_read = !conf.pagemap_scan;
	region_table_max = (unsigned)conf.lim.max_regions;
	conn_out_max = (size_t)conf.lim.max_output;
}

/*
 * Rereads the file and the TLS files (the privileged part says when:
 * SIGHUP reaches it), from the descriptors it opened, checked and handed
 * over (ctlmsg.h), never by path: a confined engine may not read them,
 * and a path read now could name another file than the one checked.
 * Anything invalid keeps the running configuration whole.
 */
static void
reload(int fds[RELOAD_FILES])
{
	struct uffdd_conf next;
	struct tls_files f = {.ca_fd = fds[RELOAD_CA],
			      .cert_fd = fds[RELOAD_CERT],
			      .key_fd = fds[RELOAD_KEY]};
	int rc = conf_reload(&next, fds[RELOAD_CONF]);

	if (fds[RELOAD_CONF] >= 0)
		close(fds[RELOAD_CONF]);
	if (rc == 0 && !next.insecure) {
		f.ca = next.ca;
		f.cert = next.cert;
		f.key = next.key;
		/*
		 * Only what the privileged part checked and handed over: a
		 * file opened here by path could be another than it checked.
		 */
		if (f.ca_fd < 0 || f.cert_fd < 0 || f.key_fd < 0) {
			log_warnx("reload: the privileged part handed no TLS "
				  "files");
			rc = -1;
		} else {
			rc = tls_init_fds(&f, next.pin);
		}
		if (rc < 0) {
			log_warnx("reload: TLS settings refused; keeping the "
				  "running configuration");
			conffile_clear(&next);
		}
	}
	tls_files_close(&f);
	if (rc < 0)
		return;
	conffile_clear(&conf);
	conf = next;
	log_init(conf.foreground, conf.verbose);
	apply_limits();
	log_info("reloaded %s", conf_file_path());
}

/* Tells the privileged part what the engine is doing, now and then. */
static void
status_cb(evutil_socket_t fd, short what, void *arg)
{
	char line[256];

	status_line(line, sizeof(line));
	control_say(CTL_STATUS, line);
}

int
engine_main(int ctl, int rpc)
{
	struct event *sigterm, *sigint, *status_ev;
	struct timeval tv = {1, 0};
	char err[512], line[256];

	if (!conf.insecure &&
	    tls_init(conf.ca, conf.cert, conf.key, conf.pin) < 0)
		return 1;
	/* Before anything is exported or attached: it holds credentials. */
	if (engine_state_dir(err, sizeof(err)) < 0) {
		log_warnx("%s", err);
		return 1;
	}
	log_init(conf.foreground, conf.verbose);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGHUP, SIG_IGN); /* the privileged part says CTL_RELOAD */
	/*
	 * Lane buffers come and go in chunks of hundreds of KiB. Above
	 * glibc's mmap threshold, and with its trimming, each one was fresh
	 * memory from the kernel, faulted in and zeroed page by page (a
	 * fifth of the bulk lane's CPU). Keep them on the heap and reuse it.
	 */
	mallopt(M_MMAP_THRESHOLD, 16 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);

	base = loop_base_new();
	apply_limits();
	probe_kernel();
	if (conf.listen && peer_listen(conf.listen) < 0)
		return 1;
	if (conf.metrics && metrics_http_listen(conf.metrics) < 0)
		return 1;
	if (conf.engine_user && engine_confine() < 0)
		return 1;
	sigterm = evsignal_new(base, SIGTERM, on_signal, NULL);
	sigint = evsignal_new(base, SIGINT, on_signal, NULL);
	status_ev = event_new(base, -1, EV_PERSIST, status_cb, NULL);
	evsignal_add(sigterm, NULL);
	evsignal_add(sigint, NULL);
	event_add(status_ev, &tv);
	control_init(ctl, stop, reload);
	privop_init(rpc);
	source_register();
	dest_register();
	control_status_register();
	state_restore_all();
	snprintf(line, sizeof(line), "ready; peers on %s, control %s",
		 conf.listen ? conf.listen : "(none)", conf.control);
	control_say(CTL_READY, line);
	status_cb(-1, 0, NULL);

	run_loop();
	loop_hold_stop_signals();

	/* First: their ends answer clients and free what the jobs made. */
	worker_stop_all();
	source_snapshot_close_all();
	peer_close_listeners();
	metrics_http_close();
	migration_free_all();
	dest_installer_stop();
	wptrack_release_all();
	conn_free_finishing();
	control_close();
	privop_close();
	event_free(sigterm);
	event_free(sigint);
	event_free(status_ev);
	event_base_free(base);
	tls_free();
	state_dir_close();
	conffile_clear(&conf);
	return 0;
}

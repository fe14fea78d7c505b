/*
 * The privileged part's process (parent.h): start-up, the engine's life,
 * signals, shut-down. The engine is this program again, run with
 * --engine CTL,RPC: a fresh address space, where nothing of this
 * process's memory is left for a bug in a parser to reach.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <event2/event.h>

#include "daemon/conffile.h"
#include "daemon/confrun.h"
#include "daemon/conn.h"
#include "daemon/dest.h"
#include "daemon/engine.h"
#include "daemon/source.h"
#include "daemon/ctlmsg.h"
#include "daemon/imsg.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/notify.h"
#include "daemon/priv/ctlsock.h"
#include "daemon/priv/dsetup.h"
#include "daemon/priv/grant.h"
#include "daemon/priv/parent.h"
#include "daemon/priv/record.h"
#include "daemon/priv/serve.h"
#include "daemon/tls.h"
#include "daemon/tracee.h"

/* The engine's end of each socket pair, as the engine finds them. */
#define ENGINE_CTL_FD 3
#define ENGINE_RPC_FD 4
/* An engine that dies this soon after its start is started again later. */
#define RESTART_SECS 1
/* How long a stopping engine may take to save its migrations. */
#define STOP_SECS 30

static struct {
	pid_t pid;
	int ctl, rpc; /* our ends */
	struct event *ctl_ev, *rpc_ev, *restart_ev, *stop_ev;
	int ready;	  /* said READY=1 once */
	int stopping;	  /* SIGTERM: not started again */
	int failed;	  /* it died before it was ready: the daemon exits */
	time_t started;	  /* monotonic seconds */
	char status[256]; /* its last STATUS= line */
} eng = {.pid = -1, .ctl = -1, .rpc = -1};

static char **engine_argv;

static time_t
now_secs(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec;
}

/* What the engine says of itself, and of control clients. */
static void
engine_msg(struct imsg *m)
{
	const struct ctl_status *st;

	switch (m->h.type) {
	case CTL_READY:
	case CTL_STATUS:
		if ((st = imsg_payload(m, sizeof(*st))) == NULL)
			break;
		/* It took up what it restores: the rest of the grants go. */
		if (m->h.type == CTL_READY)
			grant_drop_unclaimed(record_remove);
		snprintf(eng.status, sizeof(eng.status), "%.*s",
			 (int)strnlen(st->line, sizeof(st->line)), st->line);
		if (m->h.type == CTL_STATUS || eng.ready)
			break;
		eng.ready = 1;
		log_info("ready: control %s", conf.control);
		notify_send("READY=1\nSTATUS=%s", eng.status);
		break;
	default:
		ctlsock_engine_msg(m);
	}
}

static void
ctl_cb(evutil_socket_t fd, short what, void *arg)
{
	struct imsg m;
	int r;

	/* A few at a time: the control clients are served in between. */
	for (int i = 0; i < 64; i++) {
		if ((r = imsg_recv(fd, &m)) < 0 && errno == EBADMSG) {
			log_warnx("engine: a message that does not hold "
				  "together: dropped");
			continue;
		}
		if (r == 0) {
			/* Gone: SIGCHLD tells the rest. */
			event_del(eng.ctl_ev);
			return;
		}
		if (r < 0)
			break;
		engine_msg(&m);
		imsg_clear(&m);
	}
}

static void
rpc_cb(evutil_socket_t fd, short what, void *arg)
{
	/* At its end of file the engine is gone: SIGCHLD tells the rest. */
	if (serve_requests(fd) == 0)
		event_del(eng.rpc_ev);
}

/* Closes our ends of the engine's socket pairs. */
static void
engine_close(void)
{
	if (eng.ctl_ev != NULL)
		event_free(eng.ctl_ev);
	if (eng.rpc_ev != NULL)
		event_free(eng.rpc_ev);
	eng.ctl_ev = eng.rpc_ev = NULL;
	if (eng.ctl >= 0)
		close(eng.ctl);
	if (eng.rpc >= 0)
		close(eng.rpc);
	eng.ctl = eng.rpc = -1;
	ctlsock_engine(-1, -1);
}

/*
 * In the child: the two ends at their fixed numbers, everything else of
 * ours closed (all of it is close-on-exec), then the engine. It dies with
 * us: a parent killed by SIGKILL must not leave an engine that holds the
 * peer port and every descriptor.
 */
static void
exec_engine(int ctl, int rpc, pid_t parent)
{
	if (dup2(ctl, ENGINE_CTL_FD) < 0 || dup2(rpc, ENGINE_RPC_FD) < 0)
		_exit(127);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
		_exit(127);
	execv("/proc/self/exe", engine_argv);
	_exit(127);
}

static int
engine_start(void)
{
	int ctl[2], rpc[2];
	pid_t self = getpid(), pid;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) < 0)
		return -1;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, rpc) < 0) {
		close(ctl[0]);
		close(ctl[1]);
		return -1;
	}
	if ((pid = fork()) < 0) {
		close(ctl[0]);
		close(ctl[1]);
		close(rpc[0]);
		close(rpc[1]);
		return -1;
	}
	if (pid == 0)
		exec_engine(ctl[1], rpc[1], self);
	close(ctl[1]);
	close(rpc[1]);
	eng.pid = pid;
	eng.ctl = ctl[0];
	eng.rpc = rpc[0];
	eng.started = now_secs();
	evutil_make_socket_nonblocking(eng.ctl);
	evutil_make_socket_nonblocking(eng.rpc);
	eng.ctl_ev =
		event_new(base, eng.ctl, EV_READ | EV_PERSIST, ctl_cb, NULL);
	eng.rpc_ev =
		event_new(base, eng.rpc, EV_READ | EV_PERSIST, rpc_cb, NULL);
	if (eng.ctl_ev == NULL || eng.rpc_ev == NULL)
		fatalx("event_new");
	event_priority_set(eng.rpc_ev, PRIO_FAULT);
	event_priority_set(eng.ctl_ev, PRIO_CONTROL);
	event_add(eng.ctl_ev, NULL);
	event_add(eng.rpc_ev, NULL);
	ctlsock_engine(eng.ctl, eng.pid);
	log_debug("engine started: pid %d", (int)pid);
	return 0;
}

static void
restart_cb(evutil_socket_t fd, short what, void *arg)
{
	if (!eng.stopping && eng.pid < 0 && engine_start() < 0)
		fatal("starting the engine");
}

/* The engine ended: said loudly, and a new one started (not at SIGTERM). */
static void
engine_ended(int st)
{
	struct timeval tv = {RESTART_SECS, 0};

	eng.pid = -1;
	engine_close();
	/* Its destinations' holds end as they would have with it. */
	dsetup_engine_gone();
	/* Its grants wait for the next engine (PRIVOP_CLAIM). */
	grant_engine_gone();
	if (eng.stopping) {
		/* A stop that went wrong is the daemon's exit status too. */
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			log_warnx("engine ended with status 0x%x at shut-down",
				  (unsigned)st);
			eng.failed = 1;
		}
		event_base_loopexit(base, NULL);
		return;
	}
	if (!eng.ready) {
		/* It said why; the daemon did not start. */
		log_warnx("the engine failed to start: stopping");
		eng.failed = 1;
		event_base_loopexit(base, NULL);
		return;
	}
	if (WIFSIGNALED(st))
		log_warnx("engine killed by signal %d (%s): every migration it "
			  "served is paused; a new engine takes them up",
			  WTERMSIG(st), strsignal(WTERMSIG(st)));
	else
		log_warnx("engine exited with status %d: every migration it "
			  "served is paused; a new engine takes them up",
			  WEXITSTATUS(st));
	/*
	 * A test's made-up crash (UFFDD_TEST_EXIT_AT) happens once: the
	 * engine started next is the one that must take the migrations up.
	 */
	unsetenv("UFFDD_TEST_EXIT_AT");
	/* One that keeps dying at once is not started in a tight loop. */
	if (now_secs() - eng.started < RESTART_SECS)
		event_add(eng.restart_ev, &tv);
	else
		event_active(eng.restart_ev, 0, 0);
}

static void
on_chld(evutil_socket_t sig, short ev, void *arg)
{
	int st;

	while (eng.pid > 0 && waitpid(eng.pid, &st, WNOHANG) == eng.pid)
		engine_ended(st);
	/* A sole target kept for the engine stopped for a signal: on. */
	tracee_reap();
}

/* The engine did not stop in time: killed, and the loop left. */
static void
stop_late(evutil_socket_t fd, short what, void *arg)
{
	log_warnx("engine still running %d s after it was told to stop: "
		  "killed",
		  STOP_SECS);
	kill(eng.pid, SIGKILL);
	event_base_loopexit(base, NULL);
}

/*
 * SIGTERM: the engine is told to stop, and the loop goes on until it has
 * (engine_ended leaves it): it may still ask for the operations its
 * shut-down needs (a frozen process thawed, a target let go).
 */
static void
on_term(evutil_socket_t sig, short ev, void *arg)
{
	struct timeval tv = {STOP_SECS, 0};

	if (eng.stopping)
		return;
	notify_send("STOPPING=1");
	log_info("signal %d: shutting down", (int)sig);
	eng.stopping = 1;
	/* The engine saves its migrations: their grants are kept for them. */
	record_keep_all();
	if (eng.pid < 0) {
		event_base_loopexit(base, NULL);
		return;
	}
	if (eng.ctl < 0 ||
	    imsg_send(eng.ctl, CTL_STOP, 0, 0, NULL, 0, NULL, 0) < 0)
		kill(eng.pid, SIGTERM);
	evtimer_add(eng.stop_ev, &tv);
}

/*
 * What a reload reads, each file opened once: the configuration and its
 * TLS files. Checked here from these descriptors and handed to the engine
 * the same (reload_engine()), so that the engine reads what was checked,
 * not what the path names a moment later; and a confined engine may not
 * open a key only root may read, nor any file outside what it is given.
 */
struct reload_files {
	int conf_fd; /* -1: none (a default path with no file there) */
	struct tls_files tls;
};

static void
reload_files_close(struct reload_files *rf)
{
	if (rf->conf_fd >= 0)
		close(rf->conf_fd);
	rf->conf_fd = -1;
	tls_files_close(&rf->tls);
}

/*
 * The file read again, with its TLS files (rf: opened here): -1 (said)
 * when the running configuration stays, so that neither part takes a
 * half of it.
 */
static int
reload_checked(struct uffdd_conf *next, struct reload_files *rf)
{
	rf->conf_fd = open(conf_file_path(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
	rf->tls = (struct tls_files){.ca_fd = -1, .cert_fd = -1, .key_fd = -1};
	/* No descriptor: conf_reload() says why, or takes the defaults. */
	if (conf_reload(next, rf->conf_fd) < 0) {
		reload_files_close(rf);
		return -1;
	}
	if (!next->insecure &&
	    (tls_files_open(&rf->tls, next->ca, next->cert, next->key) < 0 ||
	     tls_init_fds(&rf->tls, next->pin) < 0)) {
		log_warnx("reload: TLS settings refused; keeping the running "
			  "configuration");
		conffile_clear(next);
		reload_files_close(rf);
		return -1;
	}
	return 0;
}

/* The engine told to reload, with the files rf holds (CTL_RELOAD). */
static void
reload_engine(const struct reload_files *rf)
{
	const int have[RELOAD_FILES] = {rf->conf_fd, rf->tls.ca_fd,
					rf->tls.cert_fd, rf->tls.key_fd};
	struct ctl_reload r;
	int fds[RELOAD_FILES];
	size_t n = 0;

	if (eng.ctl < 0)
		return;
	for (int i = 0; i < RELOAD_FILES; i++) {
		r.at[i] = have[i] >= 0 ? (int32_t)n : -1;
		if (have[i] >= 0)
			fds[n++] = have[i];
	}
	imsg_send(eng.ctl, CTL_RELOAD, 0, 0, &r, sizeof(r), n ? fds : NULL, n);
}

/*
 * SIGHUP: the control socket's mode and group and the admin group here,
 * the rest in the engine, which reads the same files once this one
 * checked them.
 */
static void
on_hup(evutil_socket_t sig, short ev, void *arg)
{
	struct reload_files rf;
	struct uffdd_conf next;

	notify_send("RELOADING=1");
	if (reload_checked(&next, &rf) == 0) {
		conffile_clear(&conf);
		conf = next;
		log_init(conf.foreground, conf.verbose);
		ctlsock_apply_mode();
		reload_engine(&rf);
		reload_files_close(&rf);
	}
	notify_send("READY=1");
}

/* systemd's STATUS= line: the engine's. */
static void
status_line(char *buf, size_t len)
{
	snprintf(buf, len, "%s", eng.status[0] ? eng.status : "starting");
}

/* After the loop: the engine's status, waited for (on_term stopped it). */
static void
engine_reap(void)
{
	int st;

	if (eng.pid < 0)
		return;
	kill(eng.pid, SIGKILL);
	waitpid(eng.pid, &st, 0);
	eng.pid = -1;
}

/* The engine's command line: ours, with --engine first. */
static void
make_engine_argv(int argc, char **argv)
{
	engine_argv = xcalloc((size_t)argc + 3, sizeof(char *));
	engine_argv[0] = argv[0];
	engine_argv[1] = "--engine";
	engine_argv[2] = "3,4";
	for (int i = 1; i < argc; i++)
		engine_argv[i + 2] = argv[i];
}

int
parent_main(int argc, char **argv)
{
	struct event *sigs[5];
	static const int signos[5] = {SIGTERM, SIGINT, SIGHUP, SIGCHLD, 0};
	static void (*const cbs[4])(evutil_socket_t, short, void *) = {
		on_term, on_term, on_hup, on_chld};

	make_engine_argv(argc, argv);
	/* Said here, before any part runs: the engine loads them again. */
	if (!conf.insecure &&
	    tls_init(conf.ca, conf.cert, conf.key, conf.pin) < 0)
		return 1;
	notify_init();
	if (!conf.foreground && daemon(0, 0) < 0)
		fatal("daemon");
	log_init(conf.foreground, conf.verbose);
	signal(SIGPIPE, SIG_IGN);
	base = loop_base_new();
	conn_out_max = (size_t)conf.lim.max_output;
	/* Their tables say which process each request names (role.h). */
	source_register();
	dest_register();
	if (ctlsock_listen(conf.control) < 0)
		return 1;
	for (int i = 0; signos[i]; i++) {
		sigs[i] = evsignal_new(base, signos[i], cbs[i], NULL);
		evsignal_add(sigs[i], NULL);
	}
	eng.restart_ev = event_new(base, -1, 0, restart_cb, NULL);
	eng.stop_ev = evtimer_new(base, stop_late, NULL);
	/*
	 * The last daemon's grants, before the engine restores its
	 * migrations: it takes each up by its grant, as after its own death.
	 */
	if (record_dir_open(conf.state_dir) == 0 && record_restore_all() > 0)
		log_info("grants of the last daemon opened again; the engine "
			 "takes their migrations up");
	if (engine_start() < 0)
		fatal("starting the engine");
	notify_watchdog_start(base, status_line);

	event_base_dispatch(base);
	loop_hold_stop_signals();

	eng.stopping = 1;
	engine_reap();
	engine_close();
	ctlsock_close();
	grant_free_all();
	record_dir_close();
	conn_free_finishing();
	for (int i = 0; signos[i]; i++)
		event_free(sigs[i]);
	event_free(eng.restart_ev);
	event_free(eng.stop_ev);
	notify_stop();
	event_base_free(base);
	free(engine_argv);
	tls_free();
	conffile_clear(&conf);
	return eng.failed ? 1 : 0;
}

/*
 * What the migrate-qemu flows share (cmd-migrate-qemu.c on one host, and
 * its send and receive halves on two): the clock, progress lines, the
 * holder of the source's RAM files, and requests to a daemon.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "client/client.h"
#include "client/qemu.h"

double
flow_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void
flow_say(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "migrate-qemu: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
}

static volatile sig_atomic_t holder_pid, holder_kept, stop_sig;
static int defer_signals;

/*
 * SIGINT, SIGTERM, SIGHUP: before the destination guest runs, the holder
 * is ours to remove (the source guest is still the guest); after, it is
 * the destination guest's RAM until the migration completes. With
 * flow_defer_signals(), before that point the first signal is only
 * noted: the caller undoes what it did (flow_stop_signal()); a second one
 * ends us at once, as without.
 */
static void
on_fatal_signal(int sig)
{
	if (defer_signals && !holder_kept && stop_sig == 0) {
		stop_sig = sig;
		return;
	}
	if (holder_pid > 0 && !holder_kept)
		kill((pid_t)holder_pid, SIGKILL);
	signal(sig, SIG_DFL);
	raise(sig);
}

static void catch_fatal_signals(void);

void
flow_defer_signals(void)
{
	defer_signals = 1;
	catch_fatal_signals();
}

int
flow_stop_signal(void)
{
	return stop_sig;
}

void
flow_end_by_signal(void)
{
	int sig = stop_sig;

	if (sig == 0)
		return;
	fflush(stdout);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* The fatal signals to on_fatal_signal(). */
static void
catch_fatal_signals(void)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_fatal_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
}

/*
 * The holder: a child that maps the source RAM files (shared; writable as
 * the source daemon serves only rw mappings, but it never writes)
 * and sleeps; it is what the source daemon exports and, at completion,
 * kills. A fatal signal to us kills it too, until holder_keep().
 */
pid_t
holder_start(struct ramblock *b, size_t n)
{
	pid_t pid;

	catch_fatal_signals();

	for (size_t i = 0; i < n; i++) {
		int fd = open(b[i].path, O_RDWR | O_CLOEXEC);
		void *p;

		if (fd < 0) {
			fprintf(stderr, "uffd-client: %s: %s\n", b[i].path,
				strerror(errno));
			return -1;
		}
		p = mmap(NULL, b[i].size, PROT_READ | PROT_WRITE, MAP_SHARED,
			 fd, 0);
		close(fd);
		if (p == MAP_FAILED) {
			fprintf(stderr, "uffd-client: mmap %s: %s\n", b[i].path,
				strerror(errno));
			return -1;
		}
		b[i].holder = (uint64_t)(uintptr_t)p;
	}
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "uffd-client: fork: %s\n", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);

		/*
		 * Holds no descriptor of ours: a QMP socket kept open here
		 * would keep QEMU's only QMP connection busy, a pipe would
		 * keep a reader of our output waiting.
		 */
		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
			dup2(null, 2);
		}
		close_range(3, ~0U, 0);
		/*
		 * Not killed with us, nor by a Ctrl-C at our terminal: once
		 * the destination guest runs, this serves its RAM until the
		 * source daemon kills it at completion, whatever becomes of
		 * us. Before that, we kill it on every way out (kill_holder).
		 */
		setsid();
		for (;;)
			pause();
	}
	for (size_t i = 0; i < n; i++)
		munmap((void *)(uintptr_t)b[i].holder, b[i].size);
	holder_pid = pid;
	return pid;
}

void
holder_keep(void)
{
	holder_kept = 1;
}

/*
 * The source daemon kills the holder once the destination acknowledged
 * its COMMIT: waited for at most secs, never for good (an acknowledgement
 * lost with a link comes later, with a resume). 0 once reaped, else -1,
 * said.
 */
int
holder_reap(pid_t holder, int secs, const char *ctl, const char *id)
{
	for (int i = 0; i < secs * 20; i++) {
		if (waitpid(holder, NULL, WNOHANG) == holder)
			return 0;
		usleep(50000);
	}
	fprintf(stderr,
		"uffd-client: process %d (the source's RAM files) is still "
		"there %d s after completion: the source daemon waits for the "
		"destination's acknowledgement (uffd-client --control %s "
		"status %s)\n",
		(int)holder, secs, ctl, id);
	return -1;
}

int
flow_dest_stopped(pid_t qemu)
{
	/*
	 * Stopped for good, not for an instant: the privileged part keeps a
	 * destination's main thread seized (it dies with uffdd), and every
	 * signal QEMU's threads send it (TCG's kicks) stops it in ptrace for
	 * microseconds.
	 */
	for (int i = 0; i < 5; i++) {
		if (qemu <= 0 || !process_stopped(qemu))
			return 0;
		usleep(20000);
	}
	fprintf(stderr,
		"uffd-client: uffdd stopped the destination QEMU (pid %d): "
		"its guest RAM may hold pages of two moments (the reason "
		"above). It answers nothing while stopped, and is left so: "
		"the source holds the newest guest RAM; quit this one, and "
		"resume the source guest (QMP cont) or migrate it again\n",
		(int)qemu);
	return 1;
}

/*
 * One request to the daemon at control socket path, on a connection of
 * its own: the reply, or NULL (said why). control_path is left at path.
 */
ProtobufCMessage *
flow_request(const char *path, uint16_t type, const ProtobufCMessage *req,
	     uint16_t want)
{
	ProtobufCMessage *rep;
	int fd;

	control_path = path;
	if ((fd = connect_daemon_try()) < 0)
		return NULL;
	rep = call_try(fd, type, req, want, NULL);
	close(fd);
	return rep;
}

int
daemon_feature(const char *ctl, const char *name)
{
	Uffdd__StatusRequest req = UFFDD__STATUS_REQUEST__INIT;
	Uffdd__StatusReply *rep;
	int has = 0;

	req.id = "";
	rep = (Uffdd__StatusReply *)flow_request(
		ctl, FRAME_CTL_STATUS, &req.base, FRAME_CTL_STATUS_REPLY);
	if (rep == NULL)
		return -1;
	for (size_t i = 0; i < rep->n_features; i++)
		has |= strcmp(rep->features[i], name) == 0;
	frame_free(&rep->base);
	return has;
}

int
qemu_stop(struct qmp *q, const char *status)
{
	if (strcmp(status, "running") != 0)
		return 0;
	if (qmp_execute(q, "stop", NULL, NULL) < 0 ||
	    qmp_wait_event(q, "STOP", 30000, NULL) < 0) {
		fprintf(stderr, "uffd-client: source QEMU did not stop its "
				"vCPUs\n");
		return -1;
	}
	return 0;
}

int
devstate_wait(struct qmp *q, double t0, char *st, size_t stlen, uint64_t *bytes)
{
	for (;;) {
		json_object *r = NULL, *v, *ram;

		if (flow_now() - t0 > DEVSTATE_SECS) {
			fprintf(stderr,
				"uffd-client: QEMU's device-state migration "
				"is %s after %d s\n",
				st, DEVSTATE_SECS);
			return -1;
		}
		if (qmp_execute(q, "query-migrate", NULL, &r) < 0)
			return -1;
		snprintf(st, stlen, "%s",
			 json_object_object_get_ex(r, "status", &v)
				 ? json_object_get_string(v)
				 : "");
		if (json_object_object_get_ex(r, "ram", &ram) &&
		    json_object_object_get_ex(ram, "transferred", &v))
			*bytes = (uint64_t)json_object_get_int64(v);
		json_object_put(r);
		if (strcmp(st, "completed") == 0)
			return 0;
		if (strcmp(st, "failed") == 0 || strcmp(st, "cancelled") == 0) {
			fprintf(stderr,
				"uffd-client: QEMU device-state migration "
				"%s (see the QEMUs' stderr)\n",
				st);
			return -1;
		}
		usleep(5000);
	}
}

int
source_quit(struct qmp *q)
{
	/* QEMU may hang up before it answers quit: what counts is its exit. */
	qmp_execute(q, "quit", NULL, NULL);
	for (int i = 0; i < 100 && process_alive(qmp_pid(q)); i++)
		usleep(100000);
	if (process_alive(qmp_pid(q))) {
		fprintf(stderr,
			"uffd-client: source QEMU pid %d did not quit; the "
			"destination holds every page, it may be killed\n",
			(int)qmp_pid(q));
		return -1;
	}
	flow_say("source QEMU has exited");
	return 0;
}

int
migration_reach(struct qmp *q, const char *want, double t0, char *st,
		size_t stlen)
{
	st[0] = '\0';
	for (;;) {
		int left = (int)((t0 + DEVSTATE_SECS - flow_now()) * 1000),
		    r = -1;
		json_object *d = NULL, *v;

		if (flow_stop_signal())
			return -1;
		/* A signal to us is looked at every 100 ms at most. */
		if (left > 0) {
			r = qmp_wait_event(q, "MIGRATION",
					   left < 100 ? left : 100, &d);
			if (r < 0 && errno == ETIMEDOUT)
				continue;
		}
		if (r < 0) {
			fprintf(stderr,
				"uffd-client: QEMU's migration did not reach "
				"%s within %d s (last: %s)\n",
				want, DEVSTATE_SECS, st[0] ? st : "none");
			return -1;
		}
		snprintf(st, stlen, "%s",
			 d != NULL && json_object_object_get_ex(d, "status", &v)
				 ? json_object_get_string(v)
				 : "");
		json_object_put(d);
		if (strcmp(st, want) == 0)
			return 0;
		if (strcmp(st, "failed") == 0 || strcmp(st, "cancelled") == 0) {
			fprintf(stderr,
				"uffd-client: QEMU's migration %s before "
				"%s (see the QEMUs' stderr)\n",
				st, want);
			return -1;
		}
	}
}

/* The fuzz targets' common part for the roles (see fuzz_role.h). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/authz.h"
#include "daemon/conffile.h"
#include "daemon/control.h"
#include "daemon/dest.h"
#include "daemon/log.h"
#include "daemon/conn.h"
#include "daemon/migration.h"
#include "daemon/loop.h"
#include "daemon/probe.h"
#include "daemon/procref.h"
#include "daemon/source.h"
#include "daemon/state.h"
#include "daemon/statedir.h"
#include "tests/fuzz/fuzz_role.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);

struct uffdd_conf conf;
int fz_err = 2;
char fz_reply_id[64];
char fz_reply_err[512];

/* The control socket is not fuzzed here: the replies are only kept. */
void
control_reply(uint64_t serial, uint16_t type, const ProtobufCMessage *msg)
{
	(void)serial;
	if (type == FRAME_CTL_EXPORT_REPLY)
		snprintf(fz_reply_id, sizeof(fz_reply_id), "%s",
			 ((const Uffdd__ExportReply *)msg)->id);
	else if (type == FRAME_CTL_ATTACH_REPLY)
		snprintf(fz_reply_id, sizeof(fz_reply_id), "%s",
			 ((const Uffdd__AttachReply *)msg)->id);
}

/* No control clients here: an ask (a snapshot's, a file's) fails at once. */
void
control_ask(uint64_t serial, uint16_t type, const ProtobufCMessage *msg,
	    int want_fd, unsigned secs, control_byte_cb cb, void *arg)
{
	(void)serial, (void)type, (void)msg, (void)want_fd, (void)secs;
	cb(arg, -1, 0, CONTROL_ASK_GONE, "the client went away");
}

int
control_client_here(uint64_t serial)
{
	(void)serial;
	return 1;
}

void
control_ask_cancel(uint64_t serial)
{
	(void)serial;
}

void
control_bind(uint64_t serial, enum mig_role role, const char *id)
{
	(void)serial, (void)role, (void)id;
}

/* The fuzzer's caller is root: it sees every migration. */
struct procref *
control_second(void)
{
	return NULL; /* the harness's requests name no second process */
}

int
control_may_see(const struct migration *m)
{
	(void)m;
	return 1;
}

void
control_reply_error(uint64_t serial, uint32_t code, const char *fmt, ...)
{
	va_list ap;

	(void)serial, (void)code;
	va_start(ap, fmt);
	vsnprintf(fz_reply_err, sizeof(fz_reply_err), fmt, ap);
	va_end(ap);
}

/* libFuzzer calls this before it reads -close_fd_mask. */
int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	fz_err = fcntl(2, F_DUPFD_CLOEXEC, 10);
	if (fz_err < 0)
		fz_err = 2;
	return 0;
}

pid_t
fz_spawn_target(int fill)
{
	pid_t parent = getpid(), pid;
	int ready[2];
	char c;

	if (pipe(ready) < 0 || (pid = fork()) < 0)
		abort();
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);
		uint8_t *a, *s;

		/*
		 * It dies with the fuzzer, and holds none of its descriptors:
		 * a pipe to the fuzzer's output kept open would keep whoever
		 * reads that output waiting.
		 */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent || null < 0 || dup2(null, 0) < 0 ||
		    dup2(null, 1) < 0 || dup2(null, 2) < 0)
			_exit(1);

		a = mmap((void *)FZ_ANON_START, FZ_ANON_PAGES * FZ_PAGE,
			 PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1,
			 0);
		s = mmap((void *)FZ_SHM_START, FZ_SHM_PAGES * FZ_PAGE,
			 PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1,
			 0);
		if (a != (void *)FZ_ANON_START || s != (void *)FZ_SHM_START)
			_exit(1);
		for (uint64_t p = 0; p < FZ_ANON_PAGES; p++)
			if (!fill)
				memset(a + p * FZ_PAGE, 0xee, FZ_PAGE);
			else if (fz_has_data(0, p))
				fz_fill(0, p, a + p * FZ_PAGE);
		for (uint64_t p = 0; p < FZ_SHM_PAGES; p++)
			if (!fill)
				memset(s + p * FZ_PAGE, 0xee, FZ_PAGE);
			else if (fz_has_data(1, p))
				fz_fill(1, p, s + p * FZ_PAGE);
		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		close_range(3, ~0U, 0);
		for (;;)
			pause();
	}
	close(ready[1]);
	if (read(ready[0], &c, 1) != 1) {
		dprintf(fz_err,
			"fuzz: the target could not map its regions "
			"at 0x%llx\n",
			(unsigned long long)FZ_ANON_START);
		abort();
	}
	close(ready[0]);
	return pid;
}

/* A root caller, as control.c would make of uid 0. */
static const struct authz_caller fz_root = {.privileged = 1};

void
fz_export(const Uffdd__ExportRequest *req)
{
	struct procref t;
	char err[128];

	if (procref_open(&t, req->pid, err, sizeof(err)) < 0) {
		snprintf(fz_reply_err, sizeof(fz_reply_err), "%s", err);
		return;
	}
	source_export(1, &fz_root, &t, req);
}

void
fz_attach(const Uffdd__AttachRequest *req)
{
	struct procref t;
	char err[128];

	if (procref_open(&t, req->pid, err, sizeof(err)) < 0) {
		snprintf(fz_reply_err, sizeof(fz_reply_err), "%s", err);
		return;
	}
	dest_attach(1, &fz_root, &t, req);
}

int
fz_target_has_uffd(pid_t pid)
{
	char path[64], link[64];
	struct dirent *e;
	int found = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	if (kill(pid, 0) < 0 || (d = opendir(path)) == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		char fd[300];
		ssize_t n;

		snprintf(fd, sizeof(fd), "%s/%s", path, e->d_name);
		n = readlink(fd, link, sizeof(link) - 1);
		if (n > 0 && (link[n] = '\0', strstr(link, "userfaultfd")))
			found = 1;
	}
	closedir(d);
	return found;
}

static char state_dir[64];

static void
remove_state_dir(void)
{
	rmdir(state_dir);
}

void
fz_setup(void)
{
	char err[512];

	log_init(1, -1);
	source_register();
	dest_register();
	conffile_defaults(&conf);
	conf.insecure = 1; /* plaintext lanes: TLS has its own tests */
	snprintf(state_dir, sizeof(state_dir), "/tmp/uffdd-fuzz.XXXXXX");
	if (mkdtemp(state_dir) == NULL)
		abort();
	atexit(remove_state_dir);
	free(conf.state_dir);
	conf.state_dir = xstrdup(state_dir);
	/* As uffdd.c does at start-up: every state file goes through it. */
	if (state_dir_open(conf.state_dir, geteuid(), err, sizeof(err)) < 0) {
		dprintf(fz_err, "fuzz: %s\n", err);
		abort();
	}
	signal(SIGPIPE, SIG_IGN);
	if ((base = event_base_new()) == NULL ||
	    event_base_priority_init(base, PRIO_COUNT) < 0)
		abort();
	probe_kernel();
}

void
fz_lane_close(struct fz_lane *l)
{
	if (l->fd >= 0)
		close(l->fd);
	free(l->in);
	l->fd = -1;
	l->in = NULL;
	l->len = l->cap = 0;
}

/* Reads what the daemon sent on l and checks each whole frame. */
static int
lane_read(struct fz_lane *l)
{
	int moved = 0;

	for (;;) {
		struct frame_hdr h;
		const char *why;
		ProtobufCMessage *msg;
		size_t whole;
		ssize_t n;

		if (l->cap - l->len < 65536) {
			l->cap = l->cap * 2 + 65536;
			if ((l->in = realloc(l->in, l->cap)) == NULL)
				abort();
		}
		n = recv(l->fd, l->in + l->len, l->cap - l->len, MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			moved |= !l->eof;
			l->eof = 1;
			return moved;
		}
		if (n < 0)
			return moved;
		l->len += (size_t)n;
		moved = 1;
		while (l->len >= FRAME_HDR_LEN) {
			if (frame_hdr_decode(l->in, &h, &why) < 0) {
				dprintf(fz_err,
					"fuzz: daemon sent a bad "
					"frame: %s\n",
					why);
				abort();
			}
			whole = FRAME_HDR_LEN + h.msg_len + (size_t)h.data_len;
			if (l->len < whole)
				break;
			msg = frame_unpack(h.type, l->in + FRAME_HDR_LEN,
					   h.msg_len);
			if (msg == NULL) {
				dprintf(fz_err,
					"fuzz: daemon sent a %s that "
					"does not decode\n",
					frame_type_name(h.type));
				abort();
			}
			if (l->on_frame)
				l->on_frame(&h, msg,
					    l->in + FRAME_HDR_LEN + h.msg_len);
			frame_free(msg);
			memmove(l->in, l->in + whole, l->len - whole);
			l->len -= whole;
		}
	}
}

void
fz_pump(struct fz_lane *lanes, int n, int (*more)(void *), void *arg)
{
	int idle = 0;

	/* Bounded: a daemon that never settles is reported as a timeout. */
	for (int turn = 0; turn < 100000 && idle < 16; turn++) {
		int moved = 0;

		for (int i = 0; i < n; i++) {
			struct fz_lane *l = &lanes[i];
			ssize_t w;

			if (l->fd < 0 || l->off >= l->n)
				continue;
			w = send(l->fd, l->out + l->off, l->n - l->off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);
			if (w > 0) {
				l->off += (size_t)w;
				moved = 1;
			} else if (w < 0 && errno != EAGAIN) {
				l->off = l->n; /* the daemon closed it */
			}
		}
		event_base_loop(base, EVLOOP_NONBLOCK);
		for (int i = 0; i < n; i++)
			if (lanes[i].fd >= 0)
				moved |= lane_read(&lanes[i]);
		if (more)
			moved |= more(arg);
		idle = moved ? 0 : idle + 1;
	}
}

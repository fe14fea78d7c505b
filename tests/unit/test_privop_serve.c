/*
 * The privileged part's answers to the engine's requests (daemon/priv/
 * serve.c), on real processes: each request is checked whole and against
 * its grant (its process, still the one checked; its role), and what it
 * gives back works. The engine is not trusted: malformed requests, unknown
 * or dropped grants and requests beyond a grant's role are refused; a
 * forked child becomes a grant only as its parent grant's child.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <event2/event.h>

#include "daemon/compat.h"
#include "daemon/conffile.h"
#include "daemon/imsg.h"
#include "daemon/inject.h"
#include "daemon/loop.h"
#include "daemon/privop.h"
#include "daemon/proc.h"
#include "daemon/procfile.h"
#include "daemon/procref.h"
#include "daemon/priv/dsetup.h"
#include "daemon/priv/grant.h"
#include "daemon/priv/record.h"
#include "daemon/priv/serve.h"
#include "daemon/tracee.h"
#include "daemon/uffd.h"
#include "daemon/wptrack.h"
#include "proto/frame.h"
#include "tests/unit/unit.h"

/* What the daemon's main() defines, for the parts linked here. */
struct event_base *base;
struct uffdd_conf conf;

static int sv[2];

/* A descriptor the next request carries, or -1. */
static int send_fd = -1;

/*
 * Sends one request as the engine would and serves it: the answer's errno
 * value, its payload in *data (malloc'd, or NULL) and its descriptor in
 * *fd (or -1).
 */
static int
ask(uint64_t grant, uint32_t type, const void *req, size_t len, int *fd,
    void **data, size_t *dlen)
{
	uint8_t buf[sizeof(struct privop_hdr) + PRIVOP_REQ_MAX];
	struct privop_hdr h = {.grant = grant, .type = type};
	struct imsg m;
	int err;

	memcpy(buf, &h, sizeof(h));
	if (len > 0)
		memcpy(buf + sizeof(h), req, len);
	CHECK(imsg_send(sv[0], PRIVOP_REQUEST, 9, 0, buf, sizeof(h) + len,
			send_fd >= 0 ? &send_fd : NULL, send_fd >= 0) == 0);
	send_fd = -1;
	CHECK(serve_requests(sv[1]) == 1);
	CHECK(imsg_recv(sv[0], &m) == 1);
	CHECK(m.h.type == PRIVOP_REPLY && m.h.id == 9);
	err = m.h.err;
	if (fd != NULL)
		*fd = m.nfd > 0 ? imsg_take_fd(&m, 0) : -1;
	if (data != NULL) {
		*data = m.h.len ? malloc(m.h.len) : NULL;
		if (*data != NULL)
			memcpy(*data, m.data, m.h.len);
		*dlen = m.h.len;
	}
	imsg_clear(&m);
	return err;
}

static int
open_file(uint64_t grant, uint32_t file, uint64_t start, uint64_t end, int *fd)
{
	struct privop_open r = {.file = file, .start = start, .end = end};

	return ask(grant, PRIVOP_OPEN, &r, sizeof(r), fd, NULL, NULL);
}

/*
 * A child that sleeps until killed, with a shared mapping to be found, and
 * a child of its own that sleeps too (its pid written after the mapping's
 * address).
 */
static pid_t
sleeper(int pipefd)
{
	pid_t pid = fork();

	if (pid == 0) {
		void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		pid_t kid = fork();

		if (kid == 0)
			for (;;)
				pause();
		if (p == MAP_FAILED || write(pipefd, &p, sizeof(p)) < 0 ||
		    write(pipefd, &kid, sizeof(kid)) < 0)
			_exit(1);
		for (;;)
			pause();
	}
	return pid;
}

/* A grant as a privileged caller's request (uid > 0: an unprivileged one's). */
static struct grant *
grant_by(pid_t pid, uint16_t frame_type, uid_t uid)
{
	struct authz_caller who = {.pid = getpid(),
				   .uid = uid,
				   .gid = uid,
				   .privileged = uid == 0};
	struct procref t;
	char err[128];

	CHECK(procref_open(&t, pid, err, sizeof(err)) == 0);
	return grant_new(frame_type, &who, &t);
}

static struct grant *
grant_of(pid_t pid, uint16_t frame_type)
{
	return grant_by(pid, frame_type, 0);
}

/* The files: opened for the grant, read through; mem-rw for an attach. */
static void
test_open(struct grant *ex, struct grant *at, uint64_t shm)
{
	char buf[256];
	struct stat st;
	dev_t dev;
	ino_t ino;
	int fd = -1, w;

	CHECK(open_file(ex->id, PRIVOP_FILE_MAPS, 0, 0, &fd) == 0 && fd >= 0);
	CHECK(read(fd, buf, sizeof(buf)) > 0);
	close(fd);
	CHECK(open_file(ex->id, PRIVOP_FILE_PAGEMAP, 0, 0, &fd) == 0);
	CHECK(pread(fd, buf, 8, (off_t)(shm / 4096 * 8)) == 8);
	close(fd);
	CHECK(open_file(ex->id, PRIVOP_FILE_MAP_FILE, shm, shm + 4096, &fd) ==
	      0);
	CHECK(fd >= 0 && fstat(fd, &st) == 0);
	close(fd);
	/* The watch, not the file; it says which file it watches. */
	CHECK(open_file(ex->id, PRIVOP_FILE_MAP_WATCH, shm, shm + 4096, &fd) ==
	      0);
	CHECK(fd >= 0 && read(fd, buf, sizeof(buf)) < 0 && errno == EAGAIN);
	CHECK(procfile_watch_file(fd, &dev, &ino) == 0);
	CHECK(dev == st.st_dev && ino == st.st_ino);
	close(fd);
	/* A descriptor with no watch says nothing. */
	CHECK(procfile_watch_file(0, &dev, &ino) == -1 && errno == ENOENT);
	/* A file on a disk (this program's): a device with a major number. */
	CHECK((fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC)) >= 0);
	CHECK(fstat(fd, &st) == 0);
	w = procfile_watch(fd);
	close(fd);
	CHECK(w >= 0 && procfile_watch_file(w, &dev, &ino) == 0);
	CHECK(dev == st.st_dev && ino == st.st_ino);
	if (w >= 0)
		close(w);
	CHECK(open_file(ex->id, PRIVOP_FILE_MAP_FILE, shm, shm, &fd) == EINVAL);
	CHECK(fd < 0);
	/* Only a destination's memory is written. */
	CHECK(open_file(ex->id, PRIVOP_FILE_MEM_RW, 0, 0, &fd) == EPERM);
	CHECK(fd < 0);
	CHECK(open_file(at->id, PRIVOP_FILE_MEM_RW, 0, 0, &fd) == 0);
	CHECK(fd >= 0 && pwrite(fd, "x", 1, (off_t)shm) == 1);
	close(fd);
	CHECK(open_file(ex->id, 99, 0, 0, &fd) == EINVAL);
}

/*
 * A child becomes a grant only as its parent's grant's child: its pidfd
 * and memory file come back, and its files open by its own grant.
 */
static void
test_child(struct grant *ex, struct grant *at, pid_t grandkid)
{
	struct privop_child r = {.pid = grandkid};
	struct privop_child_reply *a = NULL;
	size_t alen = 0;
	int fd = -1;

	CHECK(ask(ex->id, PRIVOP_CHILD, &r, sizeof(r), &fd, NULL, NULL) ==
	      EPERM);
	CHECK(fd < 0);
	r.pid = getpid(); /* the grant's process's parent, not its child */
	CHECK(ask(at->id, PRIVOP_CHILD, &r, sizeof(r), &fd, NULL, NULL) ==
	      EPERM);
	r.pid = 1;
	CHECK(ask(at->id, PRIVOP_CHILD, &r, sizeof(r), &fd, NULL, NULL) ==
	      EINVAL);
	r.pid = grandkid;
	/* Nobody (uid 65534) may not ptrace root's child, which has caps. */
	CHECK(ask(grant_by(at->t.pid, FRAME_CTL_ATTACH, 65534)->id,
		  PRIVOP_CHILD, &r, sizeof(r), &fd, NULL, NULL) == EPERM);
	CHECK(ask(at->id, PRIVOP_CHILD, &r, sizeof(r), &fd, (void **)&a,
		  &alen) == 0);
	CHECK(fd >= 0 && alen == sizeof(*a) && a != NULL && a->grant != 0);
	if (fd >= 0)
		close(fd);
	if (a != NULL && a->grant != 0) {
		CHECK(grant_find(a->grant) != NULL &&
		      grant_find(a->grant)->t.pid == grandkid);
		CHECK(open_file(a->grant, PRIVOP_FILE_MAPS, 0, 0, &fd) == 0);
		CHECK(fd >= 0);
		close(fd);
	}
	free(a);
}

/*
 * A process (a child of ours) whose page at the address it writes to
 * pipefd is registered with a userfaultfd, as a target's forked process
 * is; it sleeps until killed.
 */
static pid_t
registered(int pipefd)
{
	pid_t pid = fork();

	if (pid == 0) {
		struct uffdio_api api = {.api = UFFD_API};
		void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		struct uffdio_register reg = {
			.range = {.start = (uint64_t)(uintptr_t)p, .len = 4096},
			.mode = UFFDIO_REGISTER_MODE_MISSING};
		int ufd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);

		if (p == MAP_FAILED || ufd < 0 ||
		    ioctl(ufd, UFFDIO_API, &api) < 0 ||
		    ioctl(ufd, UFFDIO_REGISTER, &reg) < 0)
			p = NULL;
		if (write(pipefd, &p, sizeof(p)) < 0)
			_exit(1);
		for (;;)
			pause();
	}
	return pid;
}

/* PRIVOP_ORPHAN's answer: its grant (0: refused, *err why) and pid. */
static uint64_t
orphan(uint64_t g, struct privop_orphan *r, pid_t *pid, int *err)
{
	struct privop_child_reply *a = NULL;
	size_t alen = 0;
	uint64_t kg = 0;
	int fd = -1;

	*err = ask(g, PRIVOP_ORPHAN, r, sizeof(*r), &fd, (void **)&a, &alen);
	if (*err == 0 && a != NULL && alen == sizeof(*a)) {
		kg = a->grant;
		*pid = a->pid;
	}
	if (fd >= 0)
		close(fd);
	free(a);
	return kg;
}

/*
 * An orphan (PRIVOP_ORPHAN): found by its registration and the copy of the
 * migration's uffd it holds (none kept, or another: not found), started
 * since, its caller's to ptrace, by a destination's own grant; a process
 * of a grant already is not found again, nor one not registered there.
 */
static void
test_orphan(struct grant *ex, struct grant *at, int pfd[2])
{
	/* The migration's uffd, which the orphan holds as a fork copies it. */
	int fam = (int)syscall(SYS_userfaultfd, O_CLOEXEC), other, err, s;
	pid_t orph = registered(pfd[1]), got = 0;
	struct privop_orphan r = {0};
	unsigned long long st;
	uint64_t kg;
	void *p;

	/* Made after the fork: the orphan holds no copy of this one. */
	other = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
	CHECK(fam >= 0 && other >= 0);
	CHECK(read(pfd[0], &p, sizeof(p)) == sizeof(p) && p != NULL);
	st = proc_start(orph);
	r.addr = (uint64_t)(uintptr_t)p;
	r.not_before = st;
	/* No copy of the migration's uffd kept: nothing proves it is kin. */
	CHECK(orphan(at->id, &r, &got, &err) == 0 && err == ESRCH);
	grant_keep_uffd(at, other); /* one it does not hold */
	CHECK(orphan(at->id, &r, &got, &err) == 0 && err == ESRCH);
	grant_keep_uffd(at, fam);
	CHECK(orphan(ex->id, &r, &got, &err) == 0 && err == EPERM);
	r.pid = orph;
	CHECK(orphan(at->id, &r, &got, &err) == 0 && err == EINVAL);
	r.start = st + 1; /* another process at that pid */
	CHECK(orphan(at->id, &r, &got, &err) == 0 && err == ESRCH);
	r.start = st;
	r.addr += 4096; /* not registered there */
	CHECK(orphan(at->id, &r, &got, &err) == 0 && err == ESRCH);
	r.addr -= 4096;
	r.not_before = st + 1; /* started before the fork looked for */
	CHECK(orphan(at->id, &r, &got, &err) == 0 && err == ESRCH);
	r.not_before = st;
	/* Nobody (uid 65534) may not ptrace root's process. */
	CHECK(orphan(grant_by(at->t.pid, FRAME_CTL_ATTACH, 65534)->id, &r, &got,
		     &err) == 0 &&
	      err == ESRCH);
	/* Looked for: found, as a grant of its own, the attach's child. */
	r.pid = 0;
	r.start = 0;
	kg = orphan(at->id, &r, &got, &err);
	CHECK(err == 0 && kg != 0 && got == orph);
	CHECK(kg != 0 && grant_find(kg)->parent == at->id);
	/* Of a grant now: neither found again nor given twice. */
	CHECK(orphan(at->id, &r, &got, &err) == 0 && err == ESRCH);
	r.pid = orph;
	r.start = st;
	CHECK(orphan(at->id, &r, &got, &err) == 0 && err == EPERM);
	kill(orph, SIGKILL);
	waitpid(orph, &s, 0);
	close(fam);
	close(other);
}

/* /proc/PID/status's TracerPid: who holds pid's threads stopped. */
static long
tracer_of(pid_t pid)
{
	char path[64], line[256];
	long t = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "TracerPid: %ld", &t) == 1)
			break;
	fclose(f);
	return t;
}

/* Whether pid has a descriptor numbered fd. */
static int
has_fd(pid_t pid, int fd)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
	return access(path, F_OK) == 0;
}

static int
dest_end(uint64_t grant, uint32_t how, uint32_t precopy)
{
	struct privop_dest_end r = {.how = how, .precopy = precopy};

	return ask(grant, PRIVOP_DEST_END, &r, sizeof(r), NULL, NULL, NULL);
}

static int
discard(uint64_t grant, uint64_t start, uint64_t length, uint32_t remove)
{
	struct privop_dest_discard r = {
		.start = start, .length = length, .remove = remove};

	return ask(grant, PRIVOP_DEST_DISCARD, &r, sizeof(r), NULL, NULL, NULL);
}

/*
 * A destination's setup: the target's uffd, negotiated, comes back with
 * its copy's number; the threads stay stopped until the end; a discard
 * empties the page (a shared one: its page cache too), and the uffd
 * registers it. Then the target's copy is closed on request, once.
 */
static int
dest_setup(uint64_t grant, pid_t pid, int *fd)
{
	struct privop_dest_uffd r = {.features = UFFD_FEATURE_MISSING_SHMEM};
	struct privop_dest_uffd_reply *a = NULL;
	size_t alen = 0;
	int err, target_fd = -1;

	err = ask(grant, PRIVOP_DEST_UFFD, &r, sizeof(r), fd, (void **)&a,
		  &alen);
	if (err == 0) {
		CHECK(*fd >= 0 && alen == sizeof(*a) && a != NULL);
		CHECK(a != NULL && a->sole == 0 && a->target_fd >= 0);
		CHECK(tracer_of(pid) == getpid());
		if (a != NULL)
			target_fd = a->target_fd;
		CHECK(has_fd(pid, target_fd));
	}
	free(a);
	return err ? -err : target_fd;
}

static void
test_dest(pid_t pid, uint64_t shm)
{
	struct grant *at = grant_of(pid, FRAME_CTL_ATTACH);
	struct privop_dest_uffd bad = {.features = 1ULL << 62};
	char c = 0;
	int fd = -1, mem, tfd;

	/* The page holds 'x' (test_open()), until the discard. */
	CHECK(ask(at->id, PRIVOP_DEST_UFFD, &bad, sizeof(bad), &fd, NULL,
		  NULL) == EINVAL);
	CHECK(discard(at->id, shm, 4096, 1) == EPROTO); /* no setup yet */
	CHECK((tfd = dest_setup(at->id, pid, &fd)) >= 0);
	CHECK(dest_setup(at->id, pid, &mem) == -EALREADY); /* once */
	CHECK(discard(at->id, shm + 1, 4096, 1) == EINVAL);
	CHECK(discard(at->id, shm, 0, 1) == EINVAL);
	CHECK(discard(at->id, shm, 4096, 2) == EINVAL);
	CHECK(discard(at->id, ~0ULL << 12, 8192, 0) == EINVAL);
	CHECK(discard(at->id, shm, 4096, 1) == 0);
	CHECK(uffd_register(fd, shm, 4096, UFFDIO_REGISTER_MODE_MISSING,
			    NULL) == 0);
	CHECK(dest_end(at->id, PRIVOP_DEST_GO, 1) == EINVAL);
	CHECK(dest_end(at->id, PRIVOP_DEST_RELEASE, 0) == EPROTO);
	CHECK(dest_end(at->id, 9, 0) == EINVAL);
	CHECK(ask(at->id, PRIVOP_DEST_CLOSE, NULL, 0, NULL, NULL, NULL) ==
	      EPROTO); /* not while it is set up */
	CHECK(dest_end(at->id, PRIVOP_DEST_GO, 0) == 0);
	CHECK(tracer_of(pid) == 0);
	CHECK(discard(at->id, shm, 4096, 1) == EPROTO);
	CHECK(dest_end(at->id, PRIVOP_DEST_GO, 0) == EPROTO);
	/* Emptied and registered: a read would wait; the mem file sees 0. */
	CHECK(uffd_unregister(fd, shm, 4096) == 0);
	mem = open_file(at->id, PRIVOP_FILE_MEM_RW, 0, 0, &mem) == 0 ? mem : -1;
	CHECK(mem >= 0 && pread(mem, &c, 1, (off_t)shm) == 1 && c == 0);
	if (mem >= 0)
		close(mem);
	CHECK(ask(at->id, PRIVOP_DEST_CLOSE, "x", 1, NULL, NULL, NULL) ==
	      EBADMSG);
	CHECK(ask(at->id, PRIVOP_DEST_CLOSE, NULL, 0, NULL, NULL, NULL) == 0);
	CHECK(!has_fd(pid, tfd));
	CHECK(ask(at->id, PRIVOP_DEST_CLOSE, NULL, 0, NULL, NULL, NULL) ==
	      EPROTO);
	if (fd >= 0)
		close(fd);
}

/*
 * A held target stays stopped (its copy closed through the hold) until
 * let go; one undone loses its copy; a setup whose grant is dropped is
 * let go; an engine gone kills a pre-copy's held target.
 */
static void
test_dest_hold(int pfd[2])
{
	struct grant *g[4];
	pid_t pid[4], gk;
	void *p;
	int fd[4], tfd[4], st;

	for (int i = 0; i < 4; i++) {
		pid[i] = sleeper(pfd[1]);
		CHECK(read(pfd[0], &p, sizeof(p)) == sizeof(p));
		CHECK(read(pfd[0], &gk, sizeof(gk)) == sizeof(gk));
		kill(gk, SIGKILL);
		g[i] = grant_of(pid[i], FRAME_CTL_ATTACH);
		tfd[i] = dest_setup(g[i]->id, pid[i], &fd[i]);
		CHECK(tfd[i] >= 0);
	}
	CHECK(dest_end(g[0]->id, PRIVOP_DEST_HOLD, 0) == 0);
	CHECK(dest_end(g[0]->id, PRIVOP_DEST_HOLD, 0) == EPROTO);
	CHECK(tracer_of(pid[0]) == getpid());
	CHECK(ask(g[0]->id, PRIVOP_DEST_CLOSE, NULL, 0, NULL, NULL, NULL) == 0);
	CHECK(!has_fd(pid[0], tfd[0]) && tracer_of(pid[0]) == getpid());
	CHECK(dest_end(g[0]->id, PRIVOP_DEST_GO, 0) == 0);
	CHECK(tracer_of(pid[0]) == 0);

	CHECK(dest_end(g[1]->id, PRIVOP_DEST_UNDO, 0) == 0);
	CHECK(!has_fd(pid[1], tfd[1]) && tracer_of(pid[1]) == 0);

	grant_drop(g[2]);
	CHECK(ask(g[0]->id, PRIVOP_DEST_CLOSE, NULL, 0, NULL, NULL, NULL) ==
	      EPROTO); /* any request sweeps */
	CHECK(tracer_of(pid[2]) == 0);

	CHECK(dest_end(g[3]->id, PRIVOP_DEST_HOLD, 1) == 0);
	dsetup_engine_gone();
	/* Killed; its exit collected here, or by the injection's reaper. */
	for (int i = 0; i < 200 && kill(pid[3], 0) == 0; i++) {
		waitpid(pid[3], &st, WNOHANG);
		inject_reap();
		usleep(10000);
	}
	CHECK(kill(pid[3], 0) < 0 && errno == ESRCH);
	for (int i = 0; i < 4; i++) {
		if (fd[i] >= 0)
			close(fd[i]);
		if (i < 3) {
			kill(pid[i], SIGKILL);
			waitpid(pid[i], &st, 0);
		}
	}
}

/* Destination requests refused: another role's grant, a dead process. */
static void
test_dest_refused(struct grant *ex, int pfd[2])
{
	struct privop_dest_uffd r = {.features = 0};
	struct grant *g;
	pid_t pid, gk;
	void *p;
	int fd = -1, st;

	CHECK(ask(ex->id, PRIVOP_DEST_UFFD, &r, sizeof(r), &fd, NULL, NULL) ==
	      EPERM);
	CHECK(ask(ex->id, PRIVOP_DEST_UFFD, &r, sizeof(r) - 1, &fd, NULL,
		  NULL) == EBADMSG);
	CHECK(ask(12345, PRIVOP_DEST_UFFD, &r, sizeof(r), &fd, NULL, NULL) ==
	      ESRCH);
	CHECK(dest_end(ex->id, PRIVOP_DEST_GO, 0) == EPROTO);
	CHECK(fd < 0);
	pid = sleeper(pfd[1]);
	CHECK(read(pfd[0], &p, sizeof(p)) == sizeof(p));
	CHECK(read(pfd[0], &gk, sizeof(gk)) == sizeof(gk));
	g = grant_of(pid, FRAME_CTL_ATTACH);
	kill(gk, SIGKILL);
	kill(pid, SIGKILL);
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(ask(g->id, PRIVOP_DEST_UFFD, &r, sizeof(r), &fd, NULL, NULL) ==
	      ESRCH);
	CHECK(fd < 0);
}

/* A child grant of grant parent's process's child pid (PRIVOP_CHILD). */
static uint64_t
child_grant(uint64_t parent, pid_t pid)
{
	struct privop_child r = {.pid = pid};
	struct privop_child_reply *a = NULL;
	size_t alen = 0;
	uint64_t g = 0;
	int fd = -1;

	if (ask(parent, PRIVOP_CHILD, &r, sizeof(r), &fd, (void **)&a, &alen) ==
		    0 &&
	    a != NULL && alen == sizeof(*a))
		g = a->grant;
	if (fd >= 0)
		close(fd);
	free(a);
	CHECK(g != 0);
	return g;
}

/*
 * A forked child's grant: it gets a copy of a uffd (no other kind of
 * descriptor), once, closed on request; or, held instead, it stays
 * seized by us until released. Not for a grant that is no child's.
 */
static void
test_child_uffd(uint64_t kg, struct grant *at, pid_t grandkid, int pfd[2])
{
	struct privop_dest_uffd_reply *a = NULL;
	int ufd = (int)syscall(SYS_userfaultfd, O_CLOEXEC), pp[2], st;
	size_t alen = 0;
	pid_t pid, gk;
	uint64_t hg;
	void *p;

	CHECK(ufd >= 0 && pipe(pp) == 0);
	send_fd = ufd;
	CHECK(ask(at->id, PRIVOP_CHILD_UFFD, NULL, 0, NULL, NULL, NULL) ==
	      EPERM);
	CHECK(ask(kg, PRIVOP_CHILD_UFFD, NULL, 0, NULL, NULL, NULL) == EBADMSG);
	send_fd = pp[0];
	CHECK(ask(kg, PRIVOP_CHILD_UFFD, NULL, 0, NULL, NULL, NULL) == EBADF);
	send_fd = ufd;
	CHECK(ask(kg, PRIVOP_CHILD_UFFD, NULL, 0, NULL, (void **)&a, &alen) ==
	      0);
	CHECK(a != NULL && alen == sizeof(*a) && a->sole == 0);
	CHECK(a != NULL && a->target_fd >= 0 && has_fd(grandkid, a->target_fd));
	CHECK(tracer_of(grandkid) == 0);
	send_fd = ufd;
	CHECK(ask(kg, PRIVOP_CHILD_UFFD, NULL, 0, NULL, NULL, NULL) ==
	      EALREADY);
	CHECK(ask(kg, PRIVOP_CHILD_HOLD, NULL, 0, NULL, NULL, NULL) ==
	      EALREADY);
	CHECK(ask(kg, PRIVOP_DEST_CLOSE, NULL, 0, NULL, NULL, NULL) == 0);
	CHECK(a != NULL && !has_fd(grandkid, a->target_fd));
	free(a);
	close(ufd);
	close(pp[0]);
	close(pp[1]);

	CHECK(ask(at->id, PRIVOP_CHILD_HOLD, NULL, 0, NULL, NULL, NULL) ==
	      EPERM);
	pid = sleeper(pfd[1]);
	CHECK(read(pfd[0], &p, sizeof(p)) == sizeof(p));
	CHECK(read(pfd[0], &gk, sizeof(gk)) == sizeof(gk));
	hg = child_grant(grant_of(pid, FRAME_CTL_ATTACH)->id, gk);
	CHECK(ask(hg, PRIVOP_CHILD_HOLD, "x", 1, NULL, NULL, NULL) == EBADMSG);
	CHECK(ask(hg, PRIVOP_CHILD_HOLD, NULL, 0, NULL, NULL, NULL) == 0);
	CHECK(tracer_of(gk) == getpid());
	CHECK(dest_end(hg, PRIVOP_DEST_RELEASE, 0) == 0);
	for (int i = 0; i < 100 && tracer_of(gk) != 0; i++) {
		tracee_reap();
		usleep(10000);
	}
	CHECK(tracer_of(gk) == 0);
	CHECK(dest_end(hg, PRIVOP_DEST_RELEASE, 0) == EPROTO);
	kill(gk, SIGKILL);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
}

/* Requests that do not hold together, or name no live grant. */
static void
test_refused(struct grant *ex, struct grant *at)
{
	struct privop_open r = {.file = PRIVOP_FILE_MAPS};
	struct privop_sharers s = {.want = 0};
	struct privop_signal sig = {.sig = SIGTERM};
	struct privop_wp_uffd w = {.sync = 0};
	int fd;

	CHECK(ask(ex->id, PRIVOP_OPEN, &r, sizeof(r) - 1, &fd, NULL, NULL) ==
	      EBADMSG);
	CHECK(ask(12345, PRIVOP_OPEN, &r, sizeof(r), &fd, NULL, NULL) == ESRCH);
	CHECK(ask(ex->id, 77, &r, sizeof(r), &fd, NULL, NULL) == EOPNOTSUPP);
	CHECK(ask(ex->id, PRIVOP_SHARERS, &s, sizeof(s), NULL, NULL, NULL) ==
	      EINVAL);
	s.want = 4;
	CHECK(ask(ex->id, PRIVOP_SHARERS, &s, sizeof(s), NULL, NULL, NULL) ==
	      EINVAL);
	CHECK(ask(ex->id, PRIVOP_SIGNAL, &sig, sizeof(sig), NULL, NULL, NULL) ==
	      EPERM);
	CHECK(ask(at->id, PRIVOP_OFF_CPU, NULL, 0, NULL, NULL, NULL) == EPERM);
	CHECK(ask(ex->id, PRIVOP_OFF_CPU, "x", 1, NULL, NULL, NULL) == EBADMSG);
	CHECK(ask(at->id, PRIVOP_WP_UFFD, &w, sizeof(w), &fd, NULL, NULL) ==
	      EPERM);
	w.sync = 2;
	CHECK(ask(ex->id, PRIVOP_WP_UFFD, &w, sizeof(w), &fd, NULL, NULL) ==
	      EBADMSG);
}

static int
claim(uint32_t role, const char *id, pid_t pid, uint64_t start, int *fd,
      struct privop_child_reply *a)
{
	struct privop_claim r = {.role = role, .pid = pid, .start = start};
	void *data = NULL;
	size_t dlen = 0;
	int err;

	snprintf(r.id, sizeof(r.id), "%s", id);
	err = ask(0, PRIVOP_CLAIM, &r, sizeof(r), fd, &data, &dlen);
	if (err == 0) {
		CHECK(dlen == sizeof(*a) && data != NULL);
		if (data != NULL && dlen == sizeof(*a))
			memcpy(a, data, sizeof(*a));
	}
	free(data);
	return err;
}

static int
retake(uint64_t grant, int target_fd, int *fd)
{
	struct privop_dest_retake r = {.target_fd = target_fd};

	return ask(grant, PRIVOP_DEST_RETAKE, &r, sizeof(r), fd, NULL, NULL);
}

#define ID_A "0123456789abcdef0123456789abcdef"
#define ID_B "fedcba9876543210fedcba9876543210"
#define ID_C "c0ffeec0ffeec0ffeec0ffeec0ffee00"

/*
 * A new engine takes back a grant by the migration bound to it, once its
 * engine died: only the role's, only at the pid and start the engine
 * names, only for a caller who may still ptrace the process; then the
 * target's copy of its uffd again, once, only a userfaultfd. A grant not
 * claimed when the engine is ready is dropped.
 */
static void
test_claim(pid_t pid, struct grant *ex)
{
	struct grant *at = grant_of(pid, FRAME_CTL_ATTACH), *lost;
	struct grant *nobody = grant_by(pid, FRAME_CTL_ATTACH, 65534);
	struct privop_child_reply a;
	struct privop_claim r = {.role = ROLE_DEST, .pid = pid};
	int fd = -1, ufd = -1, tfd;

	CHECK((tfd = dest_setup(at->id, pid, &ufd)) >= 0);
	CHECK(dest_end(at->id, PRIVOP_DEST_GO, 0) == 0);
	grant_bind(at, ROLE_DEST, ID_A);
	grant_bind(ex, ROLE_SOURCE, ID_B);
	grant_bind(nobody, ROLE_DEST, ID_B);
	/* The engine dies: its setups end, its grants wait. */
	dsetup_engine_gone();
	grant_engine_gone();
	CHECK(at->unclaimed && ex->unclaimed);

	snprintf(r.id, sizeof(r.id), "%s", ID_A);
	r.start = at->t.start;
	CHECK(ask(0, PRIVOP_CLAIM, &r, sizeof(r) - 1, &fd, NULL, NULL) ==
	      EBADMSG);
	CHECK(ask(at->id, PRIVOP_CLAIM, &r, sizeof(r), &fd, NULL, NULL) ==
	      EBADMSG);			 /* it names a migration, not a grant */
	memset(r.id, 'a', sizeof(r.id)); /* no nul */
	CHECK(ask(0, PRIVOP_CLAIM, &r, sizeof(r), &fd, NULL, NULL) == EINVAL);
	CHECK(claim(2, ID_A, pid, at->t.start, &fd, &a) == EINVAL);
	/* Unknown migration; the wrong role's; not the process named. */
	CHECK(claim(ROLE_SOURCE, ID_A, pid, at->t.start, &fd, &a) == ENOENT);
	CHECK(claim(ROLE_DEST, "00000000000000000000000000000000", pid,
		    at->t.start, &fd, &a) == ENOENT);
	grant_bind(at, ROLE_SOURCE, ID_A); /* an attach's, not an export's */
	CHECK(claim(ROLE_SOURCE, ID_A, pid, at->t.start, &fd, &a) == EPERM);
	CHECK(claim(ROLE_DEST, ID_A, pid, at->t.start + 1, &fd, &a) == EINVAL);
	CHECK(claim(ROLE_DEST, ID_A, pid + 1, at->t.start, &fd, &a) == EINVAL);
	CHECK(fd < 0);
	/* A caller who may not ptrace the process any more (or never). */
	CHECK(claim(ROLE_DEST, ID_B, pid, at->t.start, &fd, &a) == EPERM);
	CHECK(nobody->unclaimed);

	CHECK(claim(ROLE_DEST, ID_A, pid, at->t.start, &fd, &a) == 0);
	CHECK(fd >= 0 && a.grant == at->id && a.start == at->t.start &&
	      a.probe == at->t.probe && !at->unclaimed);
	if (fd >= 0)
		close(fd);
	CHECK(claim(ROLE_SOURCE, ID_B, pid, ex->t.start, &fd, &a) == 0);
	CHECK(a.grant == ex->id && !ex->unclaimed);
	if (fd >= 0)
		close(fd);

	/* The target's uffd again: an attach's, a userfaultfd, once. */
	CHECK(retake(ex->id, tfd, &fd) == EPERM);
	CHECK(retake(at->id, -1, &fd) == EINVAL);
	CHECK(retake(at->id, 0, &fd) == EBADF); /* its stdin */
	CHECK(retake(at->id, 999, &fd) == EBADF);
	CHECK(fd < 0);
	CHECK(retake(at->id, tfd, &fd) == 0);
	CHECK(fd >= 0 && uffd_register(fd, 0, 0, 0, NULL) < 0 &&
	      errno == EINVAL); /* a uffd: the ioctl is known */
	if (fd >= 0)
		close(fd);
	CHECK(retake(at->id, tfd, &fd) == EALREADY);
	/* Closed as a setup's copy. */
	CHECK(ask(at->id, PRIVOP_DEST_CLOSE, NULL, 0, NULL, NULL, NULL) == 0);
	CHECK(!has_fd(pid, tfd));

	/* The new engine is ready: the unclaimed grant goes, not the rest. */
	lost = nobody;
	grant_drop_unclaimed(record_remove);
	CHECK(lost->dropped && !at->dropped && !ex->dropped);
	CHECK(claim(ROLE_DEST, ID_B, pid, at->t.start, &fd, &a) == ENOENT);
	if (ufd >= 0)
		close(ufd);
}

/* Writes text into the records directory as name, with mode and owner. */
static void
put_record(const char *dir, const char *name, const char *text, mode_t mode,
	   uid_t uid)
{
	char path[512];
	int fd;

	snprintf(path, sizeof(path), "%s/grants/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0 &&
	      write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	CHECK(fchmod(fd, mode) == 0 && fchown(fd, uid, uid) == 0);
	close(fd);
}

static int
exists(const char *dir, const char *name)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/grants/%s", dir, name);
	return access(path, F_OK) == 0;
}

/*
 * Grant records: a bound grant is written; a restarted privileged part
 * opens it again if its process is the one recorded and its caller may
 * ptrace it, and removes a record of a process gone or changed; a record
 * that is not its own (owner, mode) or does not parse is ignored. Drops
 * keep their records while the daemon stops.
 */
static void
test_records(pid_t pid)
{
	char dir[] = "/tmp/test_privop_records.XXXXXX", text[700], path[600];
	struct grant *g, *again = NULL, *o;
	unsigned long long start;
	struct stat st;
	int n;

	CHECK(mkdtemp(dir) != NULL);
	g = grant_of(pid, FRAME_CTL_ATTACH);
	start = g->t.start;
	CHECK(record_dir_open(dir) == 0);
	grant_bind(g, ROLE_DEST, ID_C);
	record_write(g);
	CHECK(exists(dir, ID_C ".destination.grant"));
	snprintf(path, sizeof(path), "%s/grants/%s", dir,
		 ID_C ".destination.grant");
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
	/* The daemon dies: its grants go, the record stays. */
	grant_free(g);
	CHECK(exists(dir, ID_C ".destination.grant"));

	/* Not ours, another process, no right, not parsing: not granted. */
	snprintf(text, sizeof(text),
		 "uffdd-grant 1\nrequest %u\ncaller 0 0 1 1\n"
		 "process %d %llu\nbind 1 " ID_B "\n",
		 (unsigned)FRAME_CTL_ATTACH, (int)pid, start);
	put_record(dir, "b.grant", text, 0600, 65534); /* another's */
	put_record(dir, "c.grant", text, 0644, 0);     /* others read it */
	put_record(dir, "d.grant", "uffdd-grant 1\nrequest 1\n", 0600, 0);
	put_record(dir, "e.grant", "bind 1 xyz\n", 0600, 0);
	put_record(dir, "f.grant.tmp", text, 0600, 0); /* a write cut */
	snprintf(text, sizeof(text),
		 "uffdd-grant 1\nrequest %u\ncaller 0 0 1 1\n"
		 "process %d %llu\nbind 1 " ID_B "\n",
		 (unsigned)FRAME_CTL_ATTACH, (int)pid, start + 1);
	put_record(dir, "g.grant", text, 0600, 0); /* started otherwise */
	snprintf(text, sizeof(text),
		 "uffdd-grant 1\nrequest %u\ncaller 65534 65534 1 0\n"
		 "process %d %llu\nbind 1 " ID_B "\n",
		 (unsigned)FRAME_CTL_ATTACH, (int)pid, start);
	put_record(dir, "h.grant", text, 0600, 0); /* may not ptrace it */

	record_dir_close();
	CHECK(record_dir_open(dir) == 0);
	n = record_restore_all();
	CHECK(n == 2); /* ID_C's, and g.grant's with no process (below) */
	for (uint64_t id = 1; id < 1000; id++)
		if ((o = grant_find(id)) != NULL && !o->dropped &&
		    o->nbinds == 1 && strcmp(o->binds[0].id, ID_C) == 0)
			again = o;
	CHECK(again != NULL && again->unclaimed && again->t.pid == pid &&
	      again->t.start == start &&
	      again->frame_type == FRAME_CTL_ATTACH &&
	      again->binds[0].role == ROLE_DEST && again->who.privileged);
	/*
	 * A destination's process gone (g.grant): kept with no process, for
	 * the processes it forked, until the engine leaves it unclaimed.
	 */
	o = grant_bound(ROLE_DEST, ID_B);
	CHECK(o != NULL && o->unclaimed && o->t.pidfd < 0 &&
	      o->t.start == start + 1);
	CHECK(exists(dir, "b.grant") && exists(dir, "c.grant") &&
	      exists(dir, "d.grant") && exists(dir, "e.grant") &&
	      exists(dir, "g.grant"));
	CHECK(!exists(dir, "f.grant.tmp") && !exists(dir, "h.grant"));
	if (o != NULL) {
		record_remove(o);
		grant_drop(o);
	}
	CHECK(!exists(dir, "g.grant"));

	/* Stopping: a drop keeps the record; else it goes with the grant. */
	if (again != NULL) {
		record_keep_all();
		record_remove(again);
		grant_drop(again);
		CHECK(exists(dir, ID_C ".destination.grant"));
		record_dir_close();
		CHECK(record_dir_open(dir) == 0);
		CHECK(record_restore_all() == 1);
		again = grant_bound(ROLE_DEST, ID_C);
		CHECK(again != NULL);
		if (again != NULL) {
			record_remove(again);
			grant_drop(again);
		}
		CHECK(!exists(dir, ID_C ".destination.grant"));
	}
	record_dir_close();
	/* A directory others may enter is not used. */
	snprintf(path, sizeof(path), "%s/grants", dir);
	CHECK(chmod(path, 0755) == 0);
	CHECK(record_dir_open(dir) == -1);
	/* Nor one in a state directory others may write: none made there. */
	snprintf(text, sizeof(text), "rm -rf '%s'", path);
	CHECK(system(text) == 0 && chmod(dir, 01777) == 0);
	CHECK(record_dir_open(dir) == -1);
	CHECK(access(path, F_OK) < 0);
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	CHECK(system(path) == 0);
}

/* Whether the privileged part's end has a request waiting. */
static int
request_waiting(void)
{
	struct pollfd p = {.fd = sv[1], .events = POLLIN};

	return poll(&p, 1, 0) > 0;
}

/*
 * The engine's side of the rule: a process it holds no grant for is
 * acted on by no step at all, not by pid in its stead (a pid may name
 * another process by now). Each step that would take a file, a tracker,
 * the sharers or the threads of a process refuses, and asks the
 * privileged part nothing. Its own files still open (the probe's).
 */
static void
test_engine_no_grant(pid_t kid, uint64_t shm)
{
	struct procref t = PROCREF_NONE;
	struct range r = {.start = shm, .end = shm + 4096};
	struct wptrack w;
	char list[64], why[256];
	int fd;

	privop_init(sv[0]);
	CHECK(privop_route(0) == -1 && errno == EPERM);
	CHECK(procfile_grant(kid) == 0);
	errno = 0;
	CHECK(procfile_maps(kid) == -1 && errno == EPERM);
	errno = 0;
	CHECK(procfile_pagemap(kid) == -1 && errno == EPERM);
	errno = 0;
	CHECK(procfile_map_file(kid, shm, shm + 4096) == -1 && errno == EPERM);
	errno = 0;
	CHECK(procfile_mem_rw(kid) == -1 && errno == EPERM);
	errno = 0;
	CHECK(proc_sharers(kid, PROC_SHARE_VM, list, sizeof(list)) == -1 &&
	      errno == EPERM);
	proc_off_cpu(kid);
	t.pid = kid;
	CHECK(wptrack_start(&w, &t, &r, 1, WPTRACK_ASYNC, why, sizeof(why)) <
	      0);
	CHECK(strstr(why, "Operation not permitted") != NULL);
	CHECK(!request_waiting());
	/* The engine's own files: its own. */
	CHECK((fd = procfile_maps(getpid())) >= 0);
	close(fd);
	/* No engine (the privileged part itself): opened here. */
	privop_init(-1);
	CHECK(privop_route(0) == 0);
	CHECK((fd = procfile_maps(kid)) >= 0);
	close(fd);
}

int
main(void)
{
	struct privop_sharers s = {.want = PROC_SHARE_VM | PROC_SHARE_FILES};
	struct privop_sharers_reply *a;
	struct grant *ex, *at, *gone;
	int pfd[2], fd, st;
	size_t alen;
	pid_t kid, kid2, grandkid, grandkid2;
	void *shm;

	if (geteuid() != 0) {
		printf("SKIP: needs root (opens another process's /proc files "
		       "as the privileged part does)\n");
		return 77;
	}
	signal(SIGPIPE, SIG_IGN);
	base = event_base_new();
	/* The privileged part's end is non-blocking, as in the daemon. */
	CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
	CHECK(fcntl(sv[1], F_SETFL, O_NONBLOCK) == 0);
	CHECK(pipe(pfd) == 0);
	kid = sleeper(pfd[1]);
	CHECK(read(pfd[0], &shm, sizeof(shm)) == sizeof(shm));
	CHECK(read(pfd[0], &grandkid, sizeof(grandkid)) == sizeof(grandkid));
	ex = grant_of(kid, FRAME_CTL_EXPORT);
	at = grant_of(kid, FRAME_CTL_ATTACH);
	test_open(ex, at, (uint64_t)(uintptr_t)shm);
	test_dest(kid, (uint64_t)(uintptr_t)shm);
	test_dest_hold(pfd);
	test_dest_refused(ex, pfd);
	test_refused(ex, at);
	test_child(ex, at, grandkid);
	test_orphan(ex, at, pfd);
	test_child_uffd(child_grant(at->id, grandkid), at, grandkid, pfd);
	test_claim(kid, ex);
	test_records(kid);
	test_engine_no_grant(kid, (uint64_t)(uintptr_t)shm);

	/* Sharers: none for a plain child; the answer is well formed. */
	CHECK(ask(ex->id, PRIVOP_SHARERS, &s, sizeof(s), NULL, (void **)&a,
		  &alen) == 0);
	CHECK(alen == sizeof(*a) && a != NULL && a->n == 0);
	free(a);
	/* A stopped process's threads: off the CPU, and answered. */
	kill(kid, SIGSTOP);
	CHECK(ask(ex->id, PRIVOP_OFF_CPU, NULL, 0, NULL, NULL, NULL) == 0);
	kill(kid, SIGCONT);

	/* A dropped grant, and a grant whose process exited: nothing. */
	grant_drop(at);
	CHECK(open_file(at->id, PRIVOP_FILE_MAPS, 0, 0, &fd) == ESRCH);
	kid2 = sleeper(pfd[1]);
	CHECK(read(pfd[0], &shm, sizeof(shm)) == sizeof(shm));
	CHECK(read(pfd[0], &grandkid2, sizeof(grandkid2)) == sizeof(grandkid2));
	gone = grant_of(kid2, FRAME_CTL_EXPORT);
	kill(grandkid2, SIGKILL);
	kill(kid2, SIGKILL);
	CHECK(waitpid(kid2, &st, 0) == kid2);
	CHECK(open_file(gone->id, PRIVOP_FILE_MAPS, 0, 0, &fd) == ESRCH);
	CHECK(fd < 0);

	kill(grandkid, SIGKILL);
	kill(kid, SIGKILL);
	waitpid(kid, &st, 0);
	grant_free_all();
	close(sv[0]);
	close(sv[1]);
	close(pfd[0]);
	close(pfd[1]);
	event_base_free(base);
	return UNIT_DONE();
}

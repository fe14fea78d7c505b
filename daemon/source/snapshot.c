/*
 * A snapshot: a process frozen as an export freezes it, its pages
 * classified as an export classifies them, and written to an image file
 * (proto/image.h, docs/image-format.md) instead of served to a peer.
 *
 * The daemon never opens a path for it. The client makes the file, new
 * and nameless (O_TMPFILE), in a directory of its choosing with its own
 * credentials and in its own mount namespace, and hands the descriptor
 * over the control socket (SCM_RIGHTS); once the image is written and on
 * disk it gives the file its name (linkat, which never replaces a file)
 * and says so; only then is the process killed (or, kept, let go). So a
 * caller can make the daemon write nowhere it could not write itself, a
 * failed snapshot leaves no file behind, and a process is never killed
 * for an image that did not reach its place.
 *
 * The exchange, on the control connection (its frames paused meanwhile,
 * the socket read here):
 *   client SNAPSHOT -> daemon SNAPSHOT_READY -> client one byte with the
 *   descriptor -> daemon (writes) SNAPSHOT_WRITTEN -> client one byte,
 *   'C' (named: commit) or anything else (give up) -> daemon SNAPSHOT_DONE.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/authz.h"
#include "daemon/conn.h"
#include "daemon/control.h"
#include "daemon/fdpass.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/pagemap.h"
#include "daemon/procref.h"
#include "daemon/role.h"
#include "daemon/source/internal.h"
#include "daemon/source/snapshot.h"
#include "proto/image.h"

/*
 * How long the client has to hand its file over, and to name it: it
 * reads the whole image back first, so a second more each 32 MiB.
 */
#define FD_WAIT_SECS 10
#define COMMIT_WAIT_SECS 120
#define COMMIT_WAIT_BYTES_A_SEC (32u << 20)
/* Bytes of pages one turn of the loop writes: other work goes between. */
#define ROUND_BYTES (16u << 20)

static TAILQ_HEAD(, snap) snaps = TAILQ_HEAD_INITIALIZER(snaps);

/* Frees a snapshot: the process thawed unless done, the client resumed. */
static void
snap_free(struct snap *s)
{
	TAILQ_REMOVE(&snaps, s, link);
	if (s->frozen)
		source_thaw(&s->t, s->was_stopped);
	if (s->asking)
		control_ask_cancel(s->serial);
	if (s->round_ev)
		event_free(s->round_ev);
	if (s->fd >= 0)
		close(s->fd);
	image_writer_free(&s->w);
	wptrack_stop(&s->wp);
	for (size_t i = 0; i < s->nregs; i++) {
		free(s->regs[i].data);
		free(s->regs[i].sent);
		if (s->regs[i].cache_fd >= 0)
			close(s->regs[i].cache_fd);
	}
	free(s->regs);
	free(s->ranges);
	free(s->buf);
	procref_close(&s->t);
	free(s);
}

/* Fails the snapshot: the client told why, the process left running. */
static void snap_fail(struct snap *s, uint32_t code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void
snap_fail(struct snap *s, uint32_t code, const char *fmt, ...)
{
	char msg[384];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_warnx("snapshot of process %d failed: %s%s", (int)s->t.pid, msg,
		  s->frozen ? "; process thawed" : "");
	control_reply_error(
		s->serial, code, "snapshot: %s%s", msg,
		s->frozen && !s->was_stopped ? "; process left running" : "");
	snap_free(s);
}

/*
 * The process ran since the freeze: the image may hold pages of two
 * moments and is not kept; the process, which holds the newest bytes,
 * is left stopped, never thawed nor killed.
 */
static void
snap_ran(struct snap *s, const char *why)
{
	procref_signal(&s->t, SIGSTOP);
	s->frozen = 0;
	snap_fail(s, ERR_SOURCE_RAN,
		  "%s: the image is not kept; process %d left stopped", why,
		  (int)s->t.pid);
}

/*
 * The freeze check, timed: 1 (why filled) if the process ran, -1 if it
 * is dying, else 0.
 */
static int
snap_check(struct snap *s, char *why, size_t len)
{
	struct timespec a, b;
	int ran;

	clock_gettime(CLOCK_MONOTONIC, &a);
	ran = source_ran(s->t.pid, &s->wp, s->switches, why, len);
	clock_gettime(CLOCK_MONOTONIC, &b);
	s->check_ns = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000ull +
		      (uint64_t)b.tv_nsec - (uint64_t)a.tv_nsec;
	s->t_check = (uint64_t)b.tv_sec * 1000000000ull + (uint64_t)b.tv_nsec;
	return ran;
}

/*
 * While writing, the check runs as an export's timer does (commit.c):
 * every CHECK_MS, or CHECK_SHARE times its cost when that is longer.
 * 0, or -1: the process ran, the snapshot failed and is freed.
 */
static int
snap_check_due(struct snap *s)
{
	uint64_t gap = s->check_ns * CHECK_SHARE, now;
	struct timespec ts;
	char why[384];
	int ran;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	if (gap < CHECK_MS * 1000000ull)
		gap = CHECK_MS * 1000000ull;
	if (now - s->t_check < gap ||
	    (ran = snap_check(s, why, sizeof(why))) == 0)
		return 0;
	if (ran < 0)
		snap_fail(s, ERR_NO_PROCESS, "process %d exited",
			  (int)s->t.pid);
	else
		snap_ran(s, why);
	return -1;
}

/* A reply with the snapshot's totals. */
static void
snap_totals(struct snap *s, Uffdd__SnapshotReply *rep, int killed)
{
	struct timespec now;
	struct stat st;

	uffdd__snapshot_reply__init(rep);
	clock_gettime(CLOCK_MONOTONIC, &now);
	rep->regions = (uint32_t)s->nregs;
	rep->data_pages = s->pages[IMAGE_DATA];
	rep->zero_pages = s->pages[IMAGE_ZERO];
	rep->hole_pages = s->pages[IMAGE_HOLE];
	rep->bytes =
		s->fd >= 0 && fstat(s->fd, &st) == 0 ? (uint64_t)st.st_size : 0;
	rep->elapsed_s = (double)(now.tv_sec - s->t0.tv_sec) +
			 (double)(now.tv_nsec - s->t0.tv_nsec) / 1e9;
	rep->killed = killed;
}

static void
snap_reply(struct snap *s, uint16_t type, int killed)
{
	Uffdd__SnapshotReply rep;

	snap_totals(s, &rep, killed);
	control_reply(s->serial, type, &rep.base);
}

/*
 * The file handed over must be one the daemon may write without harm:
 * a new regular file no one can have named yet (O_TMPFILE: no link), open
 * for writing by the client itself, not appending, and not on FUSE
 * (fdpass_file()).
 */
static int
check_file(int fd, char *err, size_t errlen)
{
	struct stat st;
	int fl;

	if (fdpass_file(fd, "file", &st, &fl, err, errlen) < 0)
		return -1;
	if (!S_ISREG(st.st_mode) || st.st_nlink != 0 || st.st_size != 0)
		snprintf(err, errlen,
			 "the file handed over is not a new, empty and "
			 "unnamed regular file (O_TMPFILE)");
	else if ((fl & O_ACCMODE) == O_RDONLY || (fl & O_APPEND))
		snprintf(err, errlen,
			 "the file handed over is not open for "
			 "writing (or appends)");
	else
		return 0;
	return -1;
}

static void round_cb(evutil_socket_t, short, void *);
static void client_byte(void *, int, uint8_t, int, const char *);

/* The client's time for its next byte, in this phase. */
static int
commit_wait(const struct snap *s)
{
	if (s->phase == SNAP_WAIT_FD)
		return FD_WAIT_SECS;
	return COMMIT_WAIT_SECS +
	       (int)(s->w.data_end / COMMIT_WAIT_BYTES_A_SEC);
}

/*
 * Sends the client reply rep of type and waits for its next byte, at most
 * secs seconds.
 */
static void
wait_client(struct snap *s, enum snap_phase phase, int secs, uint16_t type,
	    const Uffdd__SnapshotReply *rep)
{
	s->phase = phase;
	s->asking = 1;
	control_ask(s->serial, type, &rep->base, phase == SNAP_WAIT_FD,
		    (unsigned)secs, client_byte, s);
}

/*
 * Freezes the process, with the caller's right checked again, and
 * classifies the regions in the ranges asked for, as an export does.
 */
static int
freeze_and_classify(struct snap *s)
{
	struct region *regs = NULL;
	uint32_t code;
	char err[256];
	int n;

	if (source_freeze_checked(&s->t, &s->who, NULL, &s->was_stopped, &code,
				  err, sizeof(err)) < 0) {
		snap_fail(s, code, "%s", err);
		return -1;
	}
	s->frozen = 1;
	n = source_build_regions(s->t.pid, s->ranges, s->nranges, &regs, &code,
				 err, sizeof(err));
	if (n <= 0) {
		snap_fail(s, code, "%s", err);
		return -1;
	}
	s->nregs = (size_t)n;
	s->regs = xcalloc(s->nregs, sizeof(*s->regs));
	for (size_t i = 0; i < s->nregs; i++) {
		s->regs[i].cache_fd = -1;
		s->regs[i].file_fd = -2; /* snapshot_write.c reads */
	}
	for (size_t i = 0; i < s->nregs; i++) {
		struct src_region *sr = &s->regs[i];

		sr->r = regs[i];
		sr->npages = sr->r.length / sr->r.page_size;
		sr->data = xcalloc(bit_words(sr->npages), sizeof(uint64_t));
		if (source_classify(s->t.pid, sr) < 0) {
			free(regs);
			snap_fail(s, ERR_KERNEL, "classifying 0x%llx: %s",
				  (unsigned long long)sr->r.start,
				  strerror(errno));
			return -1;
		}
	}
	free(regs);
	return 0;
}

/* The image's region table, from the regions classified. */
static int
begin_image(struct snap *s)
{
	struct image_region *ir = xcalloc(s->nregs, sizeof(*ir));
	int rc;

	for (size_t i = 0; i < s->nregs; i++) {
		const struct region *r = &s->regs[i].r;

		ir[i].start = r->start;
		ir[i].length = r->length;
		ir[i].file_off = r->file_off;
		ir[i].page_size = r->page_size;
		ir[i].kind = (uint32_t)r->kind;
		ir[i].shared = r->shared ? 1 : 0;
		snprintf(ir[i].name, sizeof(ir[i].name), "%s", r->name);
	}
	rc = image_writer_begin(&s->w, s->fd, ir, (uint32_t)s->nregs,
				(int32_t)s->t.pid);
	free(ir);
	return rc;
}

/* The client's file arrived: check it, freeze, and start writing. */
static void
got_file(struct snap *s, int fd)
{
	char err[256];

	s->fd = fd;
	if (check_file(fd, err, sizeof(err)) < 0) {
		snap_fail(s, ERR_INVALID, "%s", err);
		return;
	}
	if (freeze_and_classify(s) < 0)
		return;
	if (begin_image(s) < 0) {
		snap_fail(s, ERR_INVALID, "image: %s", strerror(errno));
		return;
	}
	snprintf(err, sizeof(err), "snapshot of process %d", (int)s->t.pid);
	s->switches = source_watch(&s->t, s->regs, s->nregs, &s->wp, err);
	snap_check(s, err, sizeof(err)); /* the timer's start */
	s->buf = xmalloc(IMAGE_RUN_BYTES);
	s->phase = SNAP_WRITING;
	event_active(s->round_ev, EV_TIMEOUT, 0);
}

/*
 * The client named the image (or gave up): end the process or let it go.
 * A run since WRITTEN did not tear the image (every page was read before
 * the check that allowed it), but the process holds newer bytes: it is
 * left stopped, not killed.
 */
static void
got_commit(struct snap *s, char b)
{
	char why[384];

	if (b != 'C') {
		snap_fail(s, ERR_INVALID, "the client did not keep the image");
		return;
	}
	if (snap_check(s, why, sizeof(why)) > 0) {
		procref_signal(&s->t, SIGSTOP);
		s->frozen = 0;
		log_warnx("snapshot of process %d done; %s after the image was "
			  "written: process left stopped, not killed",
			  (int)s->t.pid, why);
		snap_reply(s, FRAME_CTL_SNAPSHOT_DONE, 0);
	} else if (s->keep) {
		log_info("snapshot of process %d done; process left %s",
			 (int)s->t.pid, s->was_stopped ? "stopped" : "running");
		snap_reply(s, FRAME_CTL_SNAPSHOT_DONE, 0);
	} else {
		log_info("snapshot of process %d done; killing it",
			 (int)s->t.pid);
		procref_signal(&s->t, SIGKILL);
		s->frozen = 0;
		snap_reply(s, FRAME_CTL_SNAPSHOT_DONE, 1);
	}
	snap_free(s);
}

/* The client's byte: its file, or its commit. */
static void
client_byte(void *arg, int fd, uint8_t b, int status, const char *why)
{
	struct snap *s = arg;

	s->asking = 0;
	if (status == CONTROL_ASK_TIMEOUT)
		snap_fail(s, ERR_INVALID, "the client did not %s in time",
			  s->phase == SNAP_WAIT_FD ? "hand its file over"
						   : "name the image");
	else if (status != 0)
		snap_fail(s, ERR_INVALID, "%s", why);
	else if (s->phase == SNAP_WAIT_COMMIT)
		got_commit(s, (char)b);
	else
		got_file(s, fd);
}

/*
 * Every page written: the tables, the header, fsync; then the check that
 * covers every page read, and only then the client (WRITTEN is the
 * snapshot's COMMIT).
 */
static void
finish(struct snap *s)
{
	Uffdd__SnapshotReply rep;
	char why[384];
	int ran;

	if (image_writer_end(&s->w) < 0) {
		snap_fail(s, ERR_INVALID, "writing the image: %s",
			  strerror(errno));
		return;
	}
	if ((ran = snap_check(s, why, sizeof(why))) != 0) {
		if (ran < 0)
			snap_fail(s, ERR_NO_PROCESS, "process %d exited",
				  (int)s->t.pid);
		else
			snap_ran(s, why);
		return;
	}
	log_info("snapshot of process %d written: %zu regions, %llu data, "
		 "%llu zero, %llu hole pages",
		 (int)s->t.pid, s->nregs,
		 (unsigned long long)s->pages[IMAGE_DATA],
		 (unsigned long long)s->pages[IMAGE_ZERO],
		 (unsigned long long)s->pages[IMAGE_HOLE]);
	snap_totals(s, &rep, 0);
	s->phase = SNAP_WAIT_COMMIT;
	wait_client(s, SNAP_WAIT_COMMIT, commit_wait(s),
		    FRAME_CTL_SNAPSHOT_WRITTEN, &rep);
}

/*
 * One turn of writing, ROUND_BYTES of pages read at most: a large
 * process is written over many turns of the loop, with faults and other
 * migrations served between them.
 */
static void
round_cb(evutil_socket_t fd, short what, void *arg)
{
	struct snap *s = arg;
	uint64_t done = 0;
	uint32_t code;
	char err[384];

	if (snap_check_due(s) < 0)
		return;
	while (done < ROUND_BYTES && s->cur_reg < s->nregs) {
		int64_t got;

		if (s->cur_page == s->regs[s->cur_reg].npages) {
			s->cur_reg++;
			s->cur_page = 0;
			continue;
		}
		if ((got = snap_write_next(s, &code, err, sizeof(err))) < 0) {
			snap_fail(s, code, "%s", err);
			return;
		}
		done += (uint64_t)got;
	}
	/*
	 * Writeback of this turn's pages starts now, so that the fsync at
	 * the end, which blocks the loop, finds little left to write.
	 */
	if (s->w.data_end > s->synced &&
	    sync_file_range(s->fd, (off_t)s->synced,
			    (off_t)(s->w.data_end - s->synced),
			    SYNC_FILE_RANGE_WRITE) == 0)
		s->synced = s->w.data_end;
	if (s->cur_reg < s->nregs)
		event_active(s->round_ev, EV_TIMEOUT, 0);
	else
		finish(s);
}

/*
 * The control request, for a caller checked to be allowed to export the
 * process t (control.c): checks the ranges and the regions without
 * touching the process, then asks the client for its file.
 */
static void
snapshot_request(uint64_t serial, const struct authz_caller *who,
		 struct procref *t, const ProtobufCMessage *msg)
{
	const Uffdd__SnapshotRequest *req = (const void *)msg;
	Uffdd__SnapshotReply rep = UFFDD__SNAPSHOT_REPLY__INIT;
	struct region *regs = NULL;
	struct snap *s;
	uint32_t code;
	char err[256];

	s = xcalloc(1, sizeof(*s));
	TAILQ_INSERT_TAIL(&snaps, s, link);
	s->serial = serial;
	s->who = *who;
	s->fd = -1;
	s->wp = (struct wptrack)WPTRACK_NONE;
	s->switches = -1;
	procref_move(&s->t, t);
	clock_gettime(CLOCK_MONOTONIC, &s->t0);
	s->keep = req->keep_source;
	s->nranges = req->n_ranges;
	s->ranges =
		xcalloc(req->n_ranges ? req->n_ranges : 1, sizeof(*s->ranges));
	for (size_t i = 0; i < req->n_ranges; i++) {
		s->ranges[i].start = req->ranges[i]->start;
		s->ranges[i].end = req->ranges[i]->end;
		if (s->ranges[i].end <= s->ranges[i].start) {
			snap_fail(s, ERR_INVALID, "empty range");
			return;
		}
	}
	/* A bad request must leave the process be: checked unfrozen. */
	if (source_build_regions(s->t.pid, s->ranges, s->nranges, &regs, &code,
				 err, sizeof(err)) <= 0) {
		snap_fail(s, code, "%s", err);
		return;
	}
	free(regs);
	s->round_ev = event_new(base, -1, 0, round_cb, s);
	if (s->round_ev == NULL)
		fatalx("event_new");
	event_priority_set(s->round_ev, PRIO_BULK);
	wait_client(s, SNAP_WAIT_FD, FD_WAIT_SECS, FRAME_CTL_SNAPSHOT_READY,
		    &rep);
}

static int
snapshot_pid(const ProtobufCMessage *msg)
{
	return ((const Uffdd__SnapshotRequest *)msg)->pid;
}

static const struct role_request snapshot_ops = {
	.type = FRAME_CTL_SNAPSHOT,
	.verb = "snapshot",
	.request_pid = snapshot_pid,
	.request = snapshot_request,
};

void
source_snapshot_register(void)
{
	role_register_request(&snapshot_ops);
}

void
source_snapshot_close_all(void)
{
	struct snap *s;

	while ((s = TAILQ_FIRST(&snaps)) != NULL) {
		log_warnx("snapshot of process %d given up: the daemon stops",
			  (int)s->t.pid);
		snap_free(s);
	}
}
